"""The sandbox GitHub at github.com's limits: token lifetime, ETags, text sizes, secondary
rate limits, update-branch answering before it merges.

Each test names the page of GitHub's documentation whose behaviour it pins.
"""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import aiohttp

from bench.soak import Limits as SoakLimits
from bench.soak import read_limits
from bot.sandbox import server
from bot.sandbox.hub import HUB
from bot.sandbox.rest import ApiError
from bot.sandbox.secondary import SecondaryLimits
from bot.sandbox.state import parse_iso
from tests.sandbox.test_checks import MARK_READY, open_pull
from tests.sandbox.test_git_backend import (
    EVERY_ROUTE_MANIFEST,
    REPO,
    Receiver,
    Reply,
    Sandbox,
    receiver,
    running_sandbox,
    sandbox,
)

__all__ = ["receiver", "sandbox"]  # the fixtures these tests use


async def test_installation_tokens_live_as_long_as_the_sandbox_is_told(
    tmp_path: Path, receiver: Receiver
) -> None:
    """Mirrors https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-an-installation-access-token-for-a-github-app:
    "The installation access token will expire after 1 hour." `baton sandbox
    --token-lifetime` shortens that, so long runs can be tried in minutes.
    """
    async with running_sandbox(tmp_path / "default", receiver, tmp_path) as default:
        await default.new_repo()
        hour = await _lifetime_of_a_new_token(default)
    assert datetime.timedelta(minutes=59) < hour <= datetime.timedelta(hours=1)

    short = server.running(
        tmp_path / "short", receiver.url, manifest=EVERY_ROUTE_MANIFEST, token_lifetime_s=330
    )
    async with short as app, aiohttp.ClientSession() as session:
        sandbox = Sandbox(app, session, receiver, tmp_path)
        receiver.secret = app[HUB].state.secrets.webhook_secret.encode()
        await sandbox.new_repo()
        lifetime = await _lifetime_of_a_new_token(sandbox)
    assert datetime.timedelta(seconds=320) < lifetime <= datetime.timedelta(seconds=330)


async def _lifetime_of_a_new_token(sandbox: Sandbox) -> datetime.timedelta:
    bearer = {"Authorization": f"Bearer {sandbox.jwt()}"}
    inst = await sandbox.ok("GET", f"{REPO}/installation", auth=None, headers=bearer)
    path = f"/app/installations/{inst['id']}/access_tokens"
    made = await sandbox.ok("POST", path, {}, status=201, auth=None, headers=bearer)
    now = datetime.datetime.now(datetime.UTC)
    return parse_iso(made["expires_at"]) - now


async def test_an_etag_answers_304_only_to_the_token_that_read_it(sandbox: Sandbox) -> None:
    """Mirrors https://docs.github.com/en/rest/using-the-rest-api/best-practices-for-using-the-rest-api
    ("Use conditional requests if appropriate"): GitHub's ETag covers the request's
    authorization, so a tag read with one token is no tag for another; a new token
    (every hour) reads in full and gets a tag of its own.
    """
    await sandbox.new_repo()
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "first"}, status=201)
    path = f"{REPO}/issues/1"
    old, new = await sandbox.installation_token(), await sandbox.installation_token()
    first = await sandbox.call("GET", path, auth=old)
    held = {"If-None-Match": first.headers["ETag"]}
    same = await sandbox.call("GET", path, auth=old, headers=held)
    assert same.status == 304
    other = await sandbox.call("GET", path, auth=new, headers=held)
    assert (other.status, other.json["title"]) == (200, "first")
    assert other.headers["ETag"] != first.headers["ETag"]
    again = {"If-None-Match": other.headers["ETag"]}
    assert (await sandbox.call("GET", path, auth=new, headers=again)).status == 304


async def test_check_run_text_is_limited_in_bytes_not_characters(sandbox: Sandbox) -> None:
    """Mirrors https://docs.github.com/en/rest/checks/runs#create-a-check-run: output
    `summary` and `text` have a "Maximum length: 65535 characters"; github.com counts
    the UTF-8 bytes, so 65535 two-byte characters are refused with 422.
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    head = await sandbox.tip("main")

    def run(summary: str, text: str = "") -> dict[str, object]:
        output = {"title": "t", "summary": summary, "text": text}
        return {"name": "Baton", "head_sha": head, "conclusion": "neutral", "output": output}

    for too_long in (run("é" * 32768), run("ok", "€" * 21846)):
        reply = await sandbox.call("POST", f"{REPO}/check-runs", too_long, auth=token)
        assert reply.status == 422, reply.json
    fits = run("é" * 32767 + "x", "€" * 21845)
    await sandbox.ok("POST", f"{REPO}/check-runs", fits, status=201, auth=token)


# ---------------------------------------------------------------- secondary rate limits

SECONDARY_DOCS = (
    "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"
)
SECONDARY_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try "
    "again. If you reach out to GitHub Support for help, please include the request ID "
)


def assert_secondary_limit(reply: Reply, longest: int) -> int:
    """Check GitHub's 403 for a secondary limit; return its retry-after (1..longest s)."""
    assert reply.status == 403, (reply.status, reply.raw[:300])
    request_id = reply.headers["x-github-request-id"]
    assert reply.json == {
        "message": f"{SECONDARY_MESSAGE}{request_id}.",
        "documentation_url": SECONDARY_DOCS,
    }
    wait = int(reply.headers["retry-after"])
    assert 1 <= wait <= longest
    return wait


async def only_installations_figures(sandbox: Sandbox) -> dict[str, int]:
    """Return GET /_sandbox/limits's figures of the one installation that made calls."""
    [figures] = (await sandbox.ok("GET", "/_sandbox/limits"))["installations"].values()
    return dict(figures)


async def test_the_81st_content_write_in_a_minute_is_refused_and_reads_go_on(
    sandbox: Sandbox,
) -> None:
    """Mirrors https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits:
    "In general, no more than 80 content-generating requests per minute and no more than
    500 content-generating requests per hour are allowed." Over a limit GitHub answers
    403 with its message and, there, "If the retry-after response header is present, you
    should not retry your request until after that many seconds has elapsed." The
    refused write is not made; reads are no content and go on; `GET /_sandbox/limits`
    counts what the installation did.
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    for n in range(80):
        await sandbox.ok("POST", f"{REPO}/issues", {"title": f"issue {n}"}, status=201, auth=token)
    refused = await sandbox.call("POST", f"{REPO}/issues", {"title": "one too many"}, auth=token)
    assert_secondary_limit(refused, 60)
    assert "x-ratelimit-remaining" in refused.headers  # the primary figures come along
    for _ in range(3):
        read = await sandbox.call("GET", f"{REPO}/issues/80", auth=token)
        assert (read.status, read.json["title"]) == (200, "issue 79")
    listed = await sandbox.ok("GET", f"{REPO}/issues?per_page=100&state=all", auth=token)
    assert "one too many" not in [issue["title"] for issue in listed]
    assert len(listed) == 80

    figures = await only_installations_figures(sandbox)
    assert figures == {
        "secondary_limit_answers": 1,
        "peak_per_minute": 80,
        "peak_per_hour": 80,
        "content_writes": 80,
        "concurrent_peak": 1,
    }
    assert read_limits(await sandbox.ok("GET", "/_sandbox/limits")) == SoakLimits(1, 80, 80, 80)

    # The maintainer's DELETE /_sandbox/rate-limits empties the windows, not the figures.
    await sandbox.ok("DELETE", "/_sandbox/rate-limits", status=204)
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "let in"}, status=201, auth=token)
    after = await only_installations_figures(sandbox)
    assert (after["content_writes"], after["peak_per_minute"]) == (81, 80)


async def test_the_hourly_content_limit_and_its_configuration(sandbox: Sandbox) -> None:
    """Mirrors https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits
    ("no more than 500 content-generating requests per hour"): the hour slides as the
    minute does, and its retry-after is the wait until the hour's oldest write leaves.
    `PATCH /_sandbox/config` sets the three limits (positive numbers only), so a test
    reaches the hour's limit in three writes.
    """
    config = await sandbox.ok("GET", "/_sandbox/config")
    assert (
        config["secondary_per_minute"],
        config["secondary_per_hour"],
        config["secondary_concurrent"],
    ) == (80, 500, 100)
    for wrong in ({"secondary_per_hour": 0}, {"secondary_concurrent": -1}):
        assert (await sandbox.call("PATCH", "/_sandbox/config", wrong)).status == 422
    changed = await sandbox.ok("PATCH", "/_sandbox/config", {"secondary_per_hour": 3})
    assert (changed["secondary_per_minute"], changed["secondary_per_hour"]) == (80, 3)

    await sandbox.new_repo()
    token = await sandbox.installation_token()
    for n in range(3):
        await sandbox.ok("POST", f"{REPO}/issues", {"title": f"issue {n}"}, status=201, auth=token)
    edit = await sandbox.call("PATCH", f"{REPO}/issues/1", {"title": "renamed"}, auth=token)
    assert assert_secondary_limit(edit, 3600) > 3500
    assert (await sandbox.ok("GET", f"{REPO}/issues/1", auth=token))["title"] == "issue 0"


async def test_more_concurrent_requests_than_allowed_are_refused(sandbox: Sandbox) -> None:
    """Mirrors https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits:
    "No more than 100 concurrent requests are allowed. This limit is shared across the
    REST API and GraphQL API." It counts reads too. With the limit set to 2 and reads
    slowed by a fault, the third read at once is refused; once they end, reads go on.
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    await sandbox.ok("PATCH", "/_sandbox/config", {"secondary_concurrent": 2})
    slow = {"method": "GET", "path": "/issues$", "delay_ms": 1500}
    await sandbox.ok("POST", "/_sandbox/faults", slow)

    async def read(after: float) -> Reply:
        await asyncio.sleep(after)
        return await sandbox.call("GET", f"{REPO}/issues", auth=token)

    first, second, third = await asyncio.gather(read(0), read(0), read(0.5))
    assert (first.status, second.status) == (200, 200)
    assert_secondary_limit(third, 1)
    await sandbox.ok("DELETE", "/_sandbox/faults", status=204)
    assert (await read(0)).status == 200
    figures = await only_installations_figures(sandbox)
    assert (figures["concurrent_peak"], figures["secondary_limit_answers"]) == (2, 1)
    assert figures["content_writes"] == 0


async def test_a_graphql_mutation_is_a_content_write_and_a_query_is_not(
    sandbox: Sandbox,
) -> None:
    """Mirrors https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits:
    "Content creation limits include actions taken on the GitHub web interface as well
    as via the REST API and GraphQL API." A mutation counts as a write and is refused
    over the limit with the same 403; a query is sent with POST but creates nothing.
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    await sandbox.push_branch("baton/issue-1", {"a.txt": "a\n"}, auth=token)
    body = {"title": "Fix", "head": "baton/issue-1", "base": "main", "draft": True}
    opened = await sandbox.ok("POST", f"{REPO}/pulls", body, status=201, auth=token)
    await sandbox.ok("PATCH", "/_sandbox/config", {"secondary_per_minute": 2})
    mutation = {"query": MARK_READY, "variables": {"id": opened["node_id"]}}
    ready = await sandbox.ok("POST", "/graphql", mutation, auth=token)
    assert ready == {"data": {"markPullRequestReadyForReview": {"pullRequest": {"isDraft": False}}}}
    query = {"query": "query { __typename }"}
    for _ in range(3):
        assert (await sandbox.call("POST", "/graphql", query, auth=token)).status == 200
    assert_secondary_limit(await sandbox.call("POST", "/graphql", mutation, auth=token), 60)
    figures = await only_installations_figures(sandbox)
    assert (figures["content_writes"], figures["secondary_limit_answers"]) == (2, 1)


def test_the_windows_slide_and_the_peaks_are_of_any_minute() -> None:
    """Mirrors https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api#about-secondary-rate-limits
    ("per minute", "per hour"), counted over the last 60 s and 3600 s rather than by
    the clock's minutes: 40 writes late in one minute and 40 early in the next fill a
    minute, and the next write waits until the first of them is 60 s old.
    """
    limits = SecondaryLimits()
    for k in range(40):
        limits.admit(7, True, "id", now=50 + k * 0.2)
        limits.admit(7, True, "id", now=61 + k * 0.2)
    assert limits.usage[7].peak_per_minute == 80
    try:
        limits.admit(7, True, "id", now=75.0)
    except ApiError as refused:
        assert refused.headers["Retry-After"] == "35"  # the write at 50 s leaves at 110 s
    else:
        raise AssertionError("the 81st write of a sliding minute was let in")
    assert limits.usage[7].answers == 1
    limits.admit(7, False, "id", now=75.0)  # a read is no write
    limits.admit(7, True, "id", now=110.1)
    assert limits.snapshot()["installations"]["7"] == {
        "secondary_limit_answers": 1,
        "peak_per_minute": 80,
        "peak_per_hour": 81,
        "content_writes": 81,
        "concurrent_peak": 82,  # nothing was released here
    }


async def test_update_branch_answers_before_it_merges(sandbox: Sandbox) -> None:
    """Mirrors https://docs.github.com/en/rest/pulls/pulls#update-a-pull-request-branch:
    GitHub answers 202 Accepted, "Updating pull request branch.", and merges the base
    into the head in the background; the head moves, and `push` is sent, after the
    answer. A client learns of the merge from the push (or a later read), not the 202.
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    _, head = await sandbox.push_branch("behind", {"mine.txt": "mine\n"}, auth=token)
    pull = await open_pull(sandbox, "behind")
    main = await sandbox.clone()
    await sandbox.commit(main, {"README.md": "moved on\n"}, "base moves")
    await sandbox.push(main, "main")

    update = f"{REPO}/pulls/{pull['number']}/update-branch"
    accepted = await sandbox.ok("PUT", update, {"expected_head_sha": head}, status=202, auth=token)
    assert accepted["message"] == "Updating pull request branch."
    now = await sandbox.ok("GET", f"{REPO}/pulls/{pull['number']}", auth=token)
    assert now["head"]["sha"] == head
    pushed = await sandbox.receiver.wait_for(
        "push", where=lambda p: p["ref"] == "refs/heads/behind" and p["before"] == head
    )
    merged = await sandbox.ok("GET", f"{REPO}/pulls/{pull['number']}", auth=token)
    assert merged["head"]["sha"] == pushed.payload["after"] != head
