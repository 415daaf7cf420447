"""GitHub App access on the sandbox: tokens minted once, retries on 5xx and secondary limits."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from gidgethub import BadRequest, GitHubBroken

from bot.devkit.maintainer import Maintainer
from bot.edges.github import (
    MAX_ATTEMPTS,
    GitHubApp,
    GitHubClient,
    InstallationSuspended,
    WritesPaused,
    github_app,
)
from bot.edges.store import Store, keys
from bot.ops.settings import Settings

REPO_PATH = "/repos/{+repo}"


async def calls(maintainer: Maintainer) -> dict[str, Any]:
    data: dict[str, Any] = await maintainer.gh.getitem("/_sandbox/calls")
    return data


async def fault(maintainer: Maintainer, **rule: object) -> None:
    await maintainer.gh.post("/_sandbox/faults", data=rule)


async def test_installation_token_is_minted_once_and_reused(
    app: GitHubApp, maintainer: Maintainer, store: Store
) -> None:
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    await maintainer.gh.delete("/_sandbox/calls")
    first = await app.installation_token(1)
    assert await app.installation_token(1) == first
    gh = await app.for_installation(1)
    repo = await gh.getitem(REPO_PATH, {"repo": "maintainer/widgets"})
    assert repo["full_name"] == "maintainer/widgets"
    counted = await calls(maintainer)
    minted = [
        n
        for kind in counted.values()
        for call, n in kind["calls"].items()
        if "access_tokens" in call
    ]
    assert minted == [1]
    cached = store.installation_token(app.identity, 1)
    assert cached is not None and cached.token == first


async def test_bot_login_is_learnt_from_the_app(app: GitHubApp, store: Store) -> None:
    assert await app.learn_bot_login() == "baton[bot]"
    assert store.bot_login() == "baton[bot]"


async def test_server_errors_are_retried_until_they_pass(
    app: GitHubApp, maintainer: Maintainer
) -> None:
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    gh = await app.for_installation(1)
    await fault(maintainer, method="GET", path="^/repos/maintainer/widgets$", status=502, count=2)
    repo = await gh.getitem(REPO_PATH, {"repo": "maintainer/widgets"})
    assert repo["name"] == "widgets"


async def test_secondary_rate_limit_waits_for_retry_after(
    app: GitHubApp, maintainer: Maintainer
) -> None:
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    gh = await app.for_installation(1)
    await fault(
        maintainer,
        method="GET",
        path="^/repos/maintainer/widgets$",
        status=403,
        retry_after=0,
        count=1,
    )
    await fault(
        maintainer,
        method="GET",
        path="^/repos/maintainer/widgets$",
        status=429,
        retry_after=0,
        count=1,
    )
    repo = await gh.getitem(REPO_PATH, {"repo": "maintainer/widgets"})
    assert repo["name"] == "widgets"


async def test_a_persistent_outage_gives_up_after_the_attempt_budget(
    app: GitHubApp, maintainer: Maintainer
) -> None:
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    gh = await app.for_installation(1)
    await fault(maintainer, method="GET", path="^/repos/maintainer/widgets$", status=503)
    await maintainer.gh.delete("/_sandbox/calls")
    with pytest.raises(GitHubBroken):
        await gh.getitem(REPO_PATH, {"repo": "maintainer/widgets"})
    counted = await calls(maintainer)
    assert (
        sum(kind["calls"].get("GET /repos/{owner}/{repo}", 0) for kind in counted.values())
        == MAX_ATTEMPTS
    )


async def test_client_errors_are_not_retried(app: GitHubApp, maintainer: Maintainer) -> None:
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    gh = await app.for_installation(1)
    await maintainer.gh.delete("/_sandbox/calls")
    with pytest.raises(BadRequest) as failure:
        await gh.getitem(
            "/repos/{+repo}/issues/{number}", {"repo": "maintainer/widgets", "number": 99}
        )
    assert failure.value.status_code == 404
    counted = await calls(maintainer)
    assert sum(kind["total"] for kind in counted.values()) == 1


async def test_a_token_refused_in_its_first_seconds_is_retried_until_it_works(
    app: GitHubApp, maintainer: Maintainer
) -> None:
    """GitHub may refuse a token minted a moment ago (401) until every server knows it."""
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    await maintainer.delay_fresh_tokens(1.5)
    gh = await app.for_installation(1)  # mints the token now
    await maintainer.gh.delete("/_sandbox/calls")
    repo = await gh.getitem(REPO_PATH, {"repo": "maintainer/widgets"})
    assert repo["name"] == "widgets"
    counted = await calls(maintainer)
    tries = sum(kind["calls"].get("GET /repos/{owner}/{repo}", 0) for kind in counted.values())
    assert tries > 1, "the first answer was the refusal"


async def test_lists_are_read_whole_and_repeated_reads_are_free(
    app: GitHubApp, maintainer: Maintainer, store: Store
) -> None:
    """Baton asks for 100 a page and follows Link; an unchanged answer is a free 304."""
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    for n in range(130):
        await maintainer.open_issue("maintainer/widgets", f"Issue {n}", "")
    gh = await app.for_installation(1)
    url = "/repos/{+repo}/issues?state=open"
    await maintainer.gh.delete("/_sandbox/calls")
    first = [issue["number"] async for issue in gh.getiter(url, {"repo": "maintainer/widgets"})]
    assert sorted(first) == list(range(1, 131))
    counted = await calls(maintainer)
    assert counted["installation"]["total"] == 2  # 100, then 30

    again = await app.for_installation(1)  # another job, the ETags still in Redis
    await maintainer.gh.delete("/_sandbox/calls")
    second = [n["number"] async for n in again.getiter(url, {"repo": "maintainer/widgets"})]
    assert second == first
    counted = await calls(maintainer)
    assert counted["installation"]["total"] == 0
    assert counted["installation"]["not_modified"] == 2
    budget = store.rate_limit(app.identity, 1)
    assert budget is not None and 0 < budget.remaining < budget.limit


async def test_a_token_github_refuses_is_dropped_and_the_call_made_again_with_a_fresh_one(
    app: GitHubApp, maintainer: Maintainer, store: Store
) -> None:
    """GitHub answers 401 Bad credentials for a revoked or expired token, however long it
    was cached (mirrors https://docs.github.com/en/rest/authentication/authenticating-to-the-rest-api).
    """
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    gh = await app.for_installation(1)  # a client made long before its next call
    store.cache_installation_token(app.identity, 1, "ghs_revoked", 3000, 0.0)  # minted long ago
    repo = await gh.getitem(REPO_PATH, {"repo": "maintainer/widgets"})
    assert repo["name"] == "widgets"
    cached = store.installation_token(app.identity, 1)
    assert cached is not None and cached.token != "ghs_revoked", "a fresh token was minted"


async def test_a_suspended_installation_is_refused_with_a_clear_error_not_retried_for_ever(
    app: GitHubApp, maintainer: Maintainer
) -> None:
    """A suspended installation's tokens are refused and none can be minted (mirrors
    https://docs.github.com/en/apps/maintaining-github-apps/suspending-a-github-app-installation).
    """
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    gh = await app.for_installation(1)
    await maintainer.suspend_installation(1)
    with pytest.raises(InstallationSuspended, match="installation 1 is suspended"):
        await gh.getitem(REPO_PATH, {"repo": "maintainer/widgets"})


async def once_limited(
    app: GitHubApp, maintainer: Maintainer, method: str, below: str, status: int, retry_after: int
) -> GitHubClient:
    """Make maintainer/widgets, whose next `method` at `below` the repository is refused
    once as a secondary limit; return an installation client of it."""
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    gh = await app.for_installation(1)
    await fault(
        maintainer,
        method=method,
        path=f"^/repos/maintainer/widgets{below}$",
        status=status,
        retry_after=retry_after,
        count=1,
    )
    return gh


async def test_a_secondary_limit_of_hours_is_honoured_in_full_by_every_process(
    app: GitHubApp, maintainer: Maintainer, store: Store, sandbox: dict[str, str], redis_url: str
) -> None:
    """Mirrors https://docs.github.com/en/rest/using-the-rest-api/best-practices-for-using-the-rest-api:
    "If you receive a rate limit error, you should stop making requests temporarily
    ... If the retry-after response header is present, you should not retry your
    request until after that many seconds has elapsed." Continuing early "may result
    in the banning of your integration", so two hours are waited, not cut, and not
    slept in a worker: the job is put back, and another process's call waits too.
    """
    gh = await once_limited(app, maintainer, "POST", "/issues", 403, retry_after=7200)
    before = time.time()
    with pytest.raises(WritesPaused) as paused:
        await gh.post(REPO_PATH + "/issues", {"repo": "maintainer/widgets"}, data={"title": "t"})
    assert before + 7200 <= paused.value.until <= time.time() + 7200
    stopped = store.installation_stopped_until(app.identity, 1)
    assert stopped is not None and stopped >= before + 7200

    await maintainer.gh.delete("/_sandbox/calls")
    env = {k: v for k, v in sandbox.items() if k != "SANDBOX_ADMIN_TOKEN"}
    async with github_app(Settings(**env, REDIS_URL=redis_url), store) as other_process:
        other = await other_process.for_installation(1)
        with pytest.raises(WritesPaused):
            await other.getitem(REPO_PATH, {"repo": "maintainer/widgets"})
    counted = await calls(maintainer)
    sent = [call for kind in counted.values() for call in kind["calls"] if "/widgets" in call]
    assert sent == []  # nothing reached GitHub while it asked for quiet
    issues = await maintainer.gh.getitem(REPO_PATH + "/issues", {"repo": "maintainer/widgets"})
    assert issues == []  # and the refused write was not made twice


async def test_secondary_limits_in_a_row_without_retry_after_double_the_stop_over_jobs(
    app: GitHubApp, maintainer: Maintainer, store: Store
) -> None:
    """Mirrors the same page: with no retry-after, "wait for at least one minute before
    retrying", and "if your request continues to fail due to a secondary rate limit,
    wait for an exponentially increasing amount of time between retries". Each answer
    here comes to a job of its own, as a job put back starts its request afresh."""
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    stops = []
    for _ in range(3):
        await fault(
            maintainer,
            method="POST",
            path="^/repos/maintainer/widgets/issues$",
            status=403,
            count=1,
        )
        store.redis.delete(keys.secondary_stop(app.identity, 1))  # the last stop is over
        gh = await app.for_installation(1)
        before = time.time()
        with pytest.raises(WritesPaused) as paused:
            await gh.post(
                REPO_PATH + "/issues", {"repo": "maintainer/widgets"}, data={"title": "t"}
            )
        stops.append(round(paused.value.until - before, -1))
    assert stops == [60, 120, 240]


async def test_a_short_secondary_limit_is_waited_out_by_every_process(
    app: GitHubApp, maintainer: Maintainer, store: Store
) -> None:
    """Mirrors the same page: a wait of seconds is slept, and shared with other clients."""
    gh = await once_limited(app, maintainer, "GET", "", 429, retry_after=2)
    before = time.time()
    first = asyncio.create_task(gh.getitem(REPO_PATH, {"repo": "maintainer/widgets"}))
    await asyncio.sleep(0.5)  # the first call has been told to wait
    other = await app.for_installation(1)
    await maintainer.gh.delete("/_sandbox/calls")
    repo = await other.getitem(REPO_PATH, {"repo": "maintainer/widgets"})
    assert repo["name"] == "widgets"
    assert time.time() - before >= 2  # the other client waited out the same stop
    assert (await first)["name"] == "widgets"
