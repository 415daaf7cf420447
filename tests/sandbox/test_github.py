"""The sandbox GitHub where Baton leans on GitHub's finer behaviour: CI that reports nothing
or a matrix, pagination everywhere, per-installation rate limits and conditional requests,
deleted and transferred issues, renamed and deleted repositories, suspended and removed
installations, and tokens that do not work at once.

Each test names the GitHub behaviour it mirrors.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from bot.devkit.maintainer import Maintainer
from tests.sandbox.test_git_backend import (
    CI_PASS,
    REPO,
    Payload,
    Reply,
    Sandbox,
    eventually,
    receiver,
    run_of,
    sandbox,
    suite_of,
    webhook_validator,
)

__all__ = [
    "receiver",
    "sandbox",
]  # the fixtures these tests share with tests/sandbox/test_git_backend.py

AS_ALICE = {"X-Sandbox-As": "alice"}
MATRIX = [f"check-{n:02d}" for n in range(38)]
MATRIX_CI = '#!/bin/sh\necho "checking $SANDBOX_CHECK"\n[ "$SANDBOX_CHECK" != check-07 ]\n'


def links(reply: Reply) -> dict[str, str]:
    """Parse a Link header into {rel: url}."""
    found = re.findall(r'<([^>]+)>; rel="(\w+)"', reply.headers.get("Link", ""))
    return {rel: url for url, rel in found}


def maintainer_of(sandbox: Sandbox) -> Maintainer:
    return Maintainer(sandbox.session, sandbox.url, sandbox.admin)


def bearer(sandbox: Sandbox) -> dict[str, str]:
    return {"Authorization": f"Bearer {sandbox.jwt()}"}


def assert_schema(payload: Payload, event: str, action: str) -> None:
    errors = [e.message for e in webhook_validator(event, action).iter_errors(payload)]
    assert not errors, (event, action, errors[:5])


async def deliveries_of(sandbox: Sandbox, event: str, where: Callable[[Payload], bool]) -> int:
    await sandbox.hub.webhooks.idle()
    return len(sandbox.receiver.matching(event, where=where))


# ---------------------------------------------------------------- CI: none, one, a matrix


async def test_a_head_without_ci_has_only_queued_suites_with_no_runs(sandbox: Sandbox) -> None:
    """Mirrors https://docs.github.com/en/rest/guides/using-the-rest-api-to-interact-with-checks
    ("About check suites"): on every push "GitHub creates a check suite automatically" and
    "sends the check_suite event (with requested action) to all GitHub App's that have the
    checks:write permission". An App that starts no run leaves its suite queued with no
    runs: here Baton's, and the linter's once it is installed; no CI checks the commit.

    "The combined state is pending if there are no statuses" (total_count 0).
    """
    await sandbox.new_repo()
    _, plain = await sandbox.push_branch("plain", {"a.txt": "a\n"})
    await sandbox.ok("PUT", "/_sandbox/apps/sandbox-lint/installations/maintainer", status=201)
    _, linted = await sandbox.push_branch("linted", {"b.txt": "b\n"})
    _, checked = await sandbox.push_branch("checked", {".sandbox/ci": CI_PASS})
    await sandbox.receiver.wait_for("check_suite", "completed", where=suite_of(checked))
    requested = await sandbox.receiver.wait_for("check_suite", "requested", where=suite_of(plain))
    assert_schema(requested.payload, "check_suite", "requested")
    assert requested.payload["check_suite"]["app"]["id"] == 1
    assert await deliveries_of(sandbox, "check_suite", suite_of(plain)) == 1  # Baton's only
    assert await deliveries_of(sandbox, "check_suite", suite_of(linted)) == 1
    assert await deliveries_of(sandbox, "check_run", run_of(plain)) == 0

    def shown(listing: Payload) -> list[tuple[str, str, str | None, int]]:
        return sorted(
            (s["app"]["slug"], s["status"], s["conclusion"], s["latest_check_runs_count"])
            for s in listing["check_suites"]
        )

    only_baton = await sandbox.ok("GET", f"{REPO}/commits/{plain}/check-suites")
    assert shown(only_baton) == [("baton", "queued", None, 0)]
    both = await sandbox.ok("GET", f"{REPO}/commits/{linted}/check-suites")
    assert shown(both) == [("baton", "queued", None, 0), ("sandbox-lint", "queued", None, 0)]
    runs = await sandbox.ok("GET", f"{REPO}/commits/linted/check-runs")
    assert runs == {"total_count": 0, "check_runs": []}
    status = await sandbox.ok("GET", f"{REPO}/commits/{plain}/status")
    assert (status["state"], status["total_count"], status["statuses"]) == ("pending", 0, [])


async def test_an_apps_first_check_run_joins_the_suite_its_push_queued(sandbox: Sandbox) -> None:
    """Mirrors https://docs.github.com/en/rest/guides/using-the-rest-api-to-interact-with-checks
    ("About check suites"): "GitHub automatically adds new check runs to the correct check
    suite based on the check run's repository and SHA", one suite per App and commit.
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    _, head = await sandbox.push_branch("baton/issue-1", {"a.txt": "a\n"}, auth=token)
    queued = await sandbox.ok("GET", f"{REPO}/commits/{head}/check-suites")
    body = {"name": "Baton", "head_sha": head, "status": "in_progress"}
    run = await sandbox.ok("POST", f"{REPO}/check-runs", body, status=201, auth=token)
    assert run["check_suite"]["id"] == queued["check_suites"][0]["id"]
    suites = await sandbox.ok("GET", f"{REPO}/commits/{head}/check-suites")
    assert [(s["status"], s["latest_check_runs_count"]) for s in suites["check_suites"]] == [
        ("in_progress", 1)
    ]


async def test_a_matrix_reports_one_check_run_per_name_and_paginates(sandbox: Sandbox) -> None:
    """One App's suite holds many check runs, one per job of a matrix, each with its own output.

    GitHub completes a suite when all its runs have, concluding failure if one failed, and
    pages the runs of a ref ("per_page ... Default: 30", max 100) with `total_count` of all
    and a Link header naming the next and last pages.
    """
    await sandbox.new_repo()
    listing = "# the matrix\n\n" + "\n".join(MATRIX) + "\n   \n"
    files = {".sandbox/ci": MATRIX_CI, ".sandbox/checks": listing}
    _, head = await sandbox.push_branch("matrix", files)
    done = await sandbox.receiver.wait_for("check_suite", "completed", where=suite_of(head))
    assert done.payload["check_suite"]["conclusion"] == "failure"
    # Requested for Baton's suite and the CI's, and the CI's completed.
    assert await deliveries_of(sandbox, "check_suite", suite_of(head)) == 3
    completed = [
        d.payload["check_run"] for d in sandbox.receiver.matching("check_run", "completed")
    ]
    assert sorted(run["name"] for run in completed) == MATRIX
    for run in completed:
        expected = "failure" if run["name"] == "check-07" else "success"
        assert run["conclusion"] == expected
        assert run["output"]["text"] == f"checking {run['name']}\n"
        assert f"SANDBOX_CHECK={run['name']}" in run["output"]["summary"]
    assert len({run["check_suite"]["id"] for run in completed}) == 1

    first = await sandbox.call("GET", f"{REPO}/commits/{head}/check-runs")
    assert (first.json["total_count"], len(first.json["check_runs"])) == (38, 30)
    pages = links(first)
    assert pages["last"] == pages["next"] == f"{sandbox.url}{REPO}/commits/{head}/check-runs?page=2"
    rest = await sandbox.call("GET", pages["next"].removeprefix(sandbox.url))
    assert (rest.json["total_count"], len(rest.json["check_runs"])) == (38, 8)
    assert set(links(rest)) == {"prev", "first"}
    paged = {run["name"] for reply in (first, rest) for run in reply.json["check_runs"]}
    assert paged == set(MATRIX)
    whole = await sandbox.ok("GET", f"{REPO}/commits/{head}/check-runs?per_page=100")
    assert len(whole["check_runs"]) == 38


# ---------------------------------------------------------------- pagination everywhere


async def test_every_list_endpoint_pages_with_link_headers(sandbox: Sandbox) -> None:
    """GitHub pages every list: `per_page` and `page`, and a Link header with absolute URLs
    that keep the other query parameters; wrapped lists give `total_count` of every item, and
    a combined status's `state` covers every context, not only the page shown.
    """
    await sandbox.new_repo()
    await sandbox.ok("POST", "/user/repos", {"name": "second"}, status=201)
    await sandbox.ok("POST", "/user/repos", {"name": "theirs"}, status=201, headers=AS_ALICE)
    token = await sandbox.installation_token()
    issue = f"{REPO}/issues/1"
    for title in ("one", "two"):
        await sandbox.ok("POST", f"{REPO}/issues", {"title": title, "labels": ["x", "y"]}, 201)
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "unlabelled"}, status=201)
    comments = [
        await sandbox.ok("POST", f"{issue}/comments", {"body": text}, status=201)
        for text in ("first", "second")
    ]
    reactions = f"{REPO}/issues/comments/{comments[-1]['id']}/reactions"
    for content in ("+1", "heart"):
        await sandbox.ok("POST", reactions, {"content": content}, status=201)
    files = {"f1.txt": "1\n", "f2.txt": "2\n", ".sandbox/ci": CI_PASS}
    _, head = await sandbox.push_branch("feature", files)
    await sandbox.push_branch("other", {"g.txt": "g\n"})
    for branch in ("feature", "other"):
        pull = {"title": branch, "head": branch, "base": "main"}
        await sandbox.ok("POST", f"{REPO}/pulls", pull, status=201)
    lines = [{"path": p, "line": 1, "body": "why?"} for p in ("f1.txt", "f2.txt")]
    review = {"event": "COMMENT", "body": "a look", "comments": lines}
    await sandbox.ok("POST", f"{REPO}/pulls/4/reviews", review)
    await sandbox.ok("POST", f"{REPO}/pulls/4/reviews", {"event": "COMMENT", "body": "again"})
    for context, state in (("a", "failure"), ("b", "success")):
        status = {"state": state, "context": context}
        await sandbox.ok("POST", f"{REPO}/statuses/{head}", status, status=201)
    await sandbox.receiver.wait_for("check_suite", "completed", where=suite_of(head))
    run = {"name": "baton", "head_sha": head, "status": "in_progress"}
    await sandbox.ok("POST", f"{REPO}/check-runs", run, status=201, auth=token)

    lists: list[tuple[str, str | None, dict[str, str] | None]] = [
        (f"{REPO}/issues?labels=x&state=open", None, None),
        (f"{REPO}/pulls?state=all", None, None),
        (f"{REPO}/pulls/4/files", None, None),
        (f"{REPO}/pulls/4/reviews", None, None),
        (f"{REPO}/pulls/4/comments", None, None),
        (f"{issue}/comments", None, None),
        (f"{issue}/events", None, None),
        (f"{issue}/labels", None, None),
        (reactions, None, None),
        (f"{REPO}/labels", None, None),
        (f"{REPO}/commits/{head}/statuses", None, None),
        (f"{REPO}/commits/{head}/status", "statuses", None),
        (f"{REPO}/commits/{head}/check-runs", "check_runs", None),
        (f"{REPO}/commits/{head}/check-suites", "check_suites", None),
        ("/installation/repositories", "repositories", {"Authorization": f"token {token}"}),
        ("/app/installations", None, bearer(sandbox)),
    ]
    for path, key, headers in lists:
        auth = None if headers else sandbox.admin
        whole = await sandbox.call("GET", path, auth=auth, headers=headers)
        everything = whole.json[key] if key else whole.json
        assert whole.status == 200 and len(everything) >= 2, (path, whole.json)
        joiner = "&" if "?" in path else "?"
        first = await sandbox.call("GET", f"{path}{joiner}per_page=1", auth=auth, headers=headers)
        items = first.json[key] if key else first.json
        assert len(items) == 1, path
        if key:
            assert first.json["total_count"] == len(everything), path
        pages = links(first)
        assert set(pages) == {"next", "last"}, (path, first.headers.get("Link"))
        assert pages["last"].startswith(sandbox.url + path.split("?")[0]), path
        for part in path.partition("?")[2].split("&") if "?" in path else []:
            assert part in pages["next"], (path, pages["next"])
        assert f"page={len(everything)}" in pages["last"], (path, pages["last"])
        last = await sandbox.call(
            "GET", pages["last"].removeprefix(sandbox.url), auth=auth, headers=headers
        )
        assert set(links(last)) == {"prev", "first"}, path
    combined = await sandbox.ok("GET", f"{REPO}/commits/{head}/status?per_page=1")
    assert combined["state"] == "failure" and combined["total_count"] == 2


# ---------------------------------------------------------------- rate limits, conditional requests


async def test_each_installation_spends_its_own_rate_limit(sandbox: Sandbox) -> None:
    """GitHub counts an installation's requests against that installation's hourly limit
    (5,000 by default) and sends x-ratelimit-* for it; an App's JWT calls have their own.

    Past the limit: "If you exceed your primary rate limit, you will receive a 403 or 429
    response, and the x-ratelimit-remaining header will be 0", and the request is not
    served. "Accessing [GET /rate_limit] does not count against your REST API rate limit."
    """
    await sandbox.new_repo()
    await sandbox.ok("POST", "/user/repos", {"name": "theirs"}, status=201, headers=AS_ALICE)
    ours = await sandbox.installation_token()
    theirs = await sandbox.installation_token("alice/theirs")
    assert (await sandbox.ok("GET", "/_sandbox/config"))["rate_limit"] == 5000
    maintainer = maintainer_of(sandbox)
    await maintainer.set_rate_limit(3)
    await maintainer.reset_rate_limits()

    served = [await sandbox.call("GET", REPO, auth=ours) for _ in range(3)]
    assert [r.headers["X-RateLimit-Remaining"] for r in served] == ["2", "1", "0"]
    assert [r.headers["X-RateLimit-Used"] for r in served] == ["1", "2", "3"]
    assert {
        (r.headers["X-RateLimit-Limit"], r.headers["X-RateLimit-Resource"]) for r in served
    } == {("3", "core")}
    reset = served[0].headers["X-RateLimit-Reset"]
    refused = await sandbox.call("POST", f"{REPO}/issues", {"title": "not served"}, auth=ours)
    assert refused.status == 403
    assert refused.json["message"] == "API rate limit exceeded for installation ID 1."
    assert refused.json["documentation_url"].startswith("https://docs.github.com/")
    assert (refused.headers["X-RateLimit-Remaining"], refused.headers["X-RateLimit-Reset"]) == (
        "0",
        reset,
    )
    assert await sandbox.ok("GET", f"{REPO}/issues?state=all") == []  # the admin: not limited

    other = await sandbox.call("GET", "/repos/alice/theirs", auth=theirs)
    assert (other.status, other.headers["X-RateLimit-Used"]) == (200, "1")
    app = await sandbox.call("GET", "/app", auth=None, headers=bearer(sandbox))
    assert (app.headers["X-RateLimit-Limit"], app.headers["X-RateLimit-Used"]) == ("5000", "1")
    for _ in range(2):
        limits = await sandbox.ok("GET", "/rate_limit", auth=ours)
        core = {"limit": 3, "remaining": 0, "used": 3, "reset": int(reset)}
        assert limits["resources"]["core"] == limits["rate"] == core

    await maintainer.reset_rate_limits()
    again = await sandbox.call("GET", REPO, auth=ours)
    assert (again.status, again.headers["X-RateLimit-Remaining"]) == (200, "2")


async def test_conditional_requests_answer_304_without_spending_the_limit(
    sandbox: Sandbox,
) -> None:
    """GitHub answers reads with an ETag; "If-None-Match" holding it gets 304 Not Modified
    with no body, and "making a conditional request does not count against your primary
    rate limit if a 304 response is returned".
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "first"}, status=201)
    await sandbox.ok("DELETE", "/_sandbox/calls", status=204)
    path = f"{REPO}/issues/1"
    first = await sandbox.call("GET", path, auth=token)
    etag = first.headers["ETag"]
    assert re.fullmatch(r'W/"[0-9a-f]+"', etag)
    held = {"If-None-Match": etag}
    same = await sandbox.call("GET", path, auth=token, headers=held)
    assert (same.status, same.raw, same.headers["ETag"]) == (304, b"", etag)
    assert same.headers["X-RateLimit-Remaining"] == first.headers["X-RateLimit-Remaining"]
    await sandbox.ok("PATCH", path, {"title": "second"})
    changed = await sandbox.call("GET", path, auth=token, headers=held)
    assert (changed.status, changed.json["title"]) == (200, "second")
    assert changed.headers["ETag"] != etag

    calls = await sandbox.ok("GET", "/_sandbox/calls")
    read = {"GET /repos/{owner}/{repo}/issues/{issue_number}": 2}
    assert calls["installation"]["installations"] == {
        "1": {"total": 2, "calls": read, "not_modified": 1}
    }


async def test_a_fresh_token_is_refused_for_its_first_seconds(sandbox: Sandbox) -> None:
    """A token GitHub has just minted may not have replicated yet: it answers 401 Bad
    credentials for a moment (octokit retries such a 401 for a few seconds). The minting
    call itself succeeds.
    """
    await sandbox.new_repo()
    maintainer = maintainer_of(sandbox)
    await maintainer.delay_fresh_tokens(3)
    assert (await sandbox.ok("GET", "/_sandbox/faults"))["fresh_token_seconds"] == 3
    token = await sandbox.installation_token()  # minted: 201
    refused = await sandbox.call("GET", REPO, auth=token)
    assert (refused.status, refused.json["message"]) == (401, "Bad credentials")

    async def works() -> bool:
        return (await sandbox.call("GET", REPO, auth=token)).status == 200

    await eventually(works, lambda: "the fresh token never started working")
    await sandbox.ok("DELETE", "/_sandbox/faults", status=204)
    fresh = await sandbox.installation_token()
    assert (await sandbox.call("GET", REPO, auth=fresh)).status == 200


# ---------------------------------------------------------------- issues deleted and transferred


async def test_a_deleted_issue_answers_410_gone(sandbox: Sandbox) -> None:
    """On GitHub a deleted issue's URLs answer "410 Gone" ("This issue was deleted"), its
    number is never given again, and the App gets `issues.deleted`.
    """
    await sandbox.new_repo()
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "doomed", "labels": ["bug"]}, 201)
    await sandbox.ok("POST", f"{REPO}/issues/1/comments", {"body": "soon gone"}, status=201)
    await maintainer_of(sandbox).delete_issue("maintainer/demo", 1)
    for tail in ("", "/comments", "/labels", "/events"):
        gone = await sandbox.call("GET", f"{REPO}/issues/1{tail}")
        assert (gone.status, gone.json["message"]) == (410, "This issue was deleted"), tail
    deleted = await sandbox.receiver.wait_for("issues", "deleted")
    assert_schema(deleted.payload, "issues", "deleted")
    assert deleted.payload["issue"]["number"] == 1
    after = await sandbox.ok("POST", f"{REPO}/issues", {"title": "next"}, status=201)
    assert after["number"] == 2


async def test_a_transferred_issue_redirects_to_its_new_home(sandbox: Sandbox) -> None:
    """GitHub moves a transferred issue under a new number in the target repository, with its
    comments and the labels the target has. "If the issue was transferred to a repository
    where the authenticated user has read access, a 301 Moved Permanently status is
    returned"; a caller who cannot read the target gets 404. The source repository gets
    `issues.transferred`, the target `issues.opened`.
    """
    await sandbox.new_repo()
    await sandbox.ok("POST", "/user/repos", {"name": "other", "private": True}, status=201)
    await sandbox.ok("POST", "/repos/maintainer/other/issues", {"title": "already here"}, 201)
    moving = {"title": "moving", "labels": ["bug", "only-in-demo"]}
    await sandbox.ok("POST", f"{REPO}/issues", moving, status=201)
    await sandbox.ok("POST", f"{REPO}/issues/1/comments", {"body": "context"}, status=201)
    moved = await maintainer_of(sandbox).transfer_issue("maintainer/demo", 1, "other")
    assert (moved["number"], [label["name"] for label in moved["labels"]]) == (2, ["bug"])

    new_url = f"{sandbox.url}/repos/maintainer/other/issues/2"
    old = await sandbox.call("GET", f"{REPO}/issues/1", follow=False)
    assert (old.status, old.headers["Location"]) == (301, new_url)
    comments = await sandbox.ok("GET", f"{REPO}/issues/1/comments")
    assert [c["body"] for c in comments] == ["context"]
    made = await sandbox.ok(
        "POST",
        "/app/installations/1/access_tokens",
        {"repositories": ["demo"]},
        status=201,
        auth=None,
        headers=bearer(sandbox),
    )
    hidden = await sandbox.call("GET", f"{REPO}/issues/1", auth=made["token"], follow=False)
    assert hidden.status == 404

    transferred = await sandbox.receiver.wait_for("issues", "transferred")
    assert_schema(transferred.payload, "issues", "transferred")
    changes = transferred.payload["changes"]
    assert (changes["new_issue"]["number"], changes["new_repository"]["name"]) == (2, "other")
    opened = await sandbox.receiver.wait_for(
        "issues", "opened", where=lambda p: p["issue"]["html_url"].endswith("/other/issues/2")
    )
    assert opened.payload["repository"]["full_name"] == "maintainer/other"


# ---------------------------------------------------------------- repositories renamed and deleted


async def test_a_renamed_repository_redirects_and_a_deleted_one_is_gone(sandbox: Sandbox) -> None:
    """GitHub redirects a renamed repository's REST URLs (301 for reads, 307 keeping a
    write's method and body) and keeps its git URL working; a deleted repository answers 404
    and leaves the installation's repository list.
    """
    await sandbox.new_repo()
    await sandbox.ok("POST", "/user/repos", {"name": "kept"}, status=201)
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "t"}, status=201)
    token = await sandbox.installation_token()
    maintainer = maintainer_of(sandbox)
    renamed = await maintainer.rename_repo("maintainer/demo", "renamed")
    assert renamed["full_name"] == "maintainer/renamed"

    new = f"{sandbox.url}/repos/maintainer/renamed"
    read = await sandbox.call("GET", f"{REPO}/issues?state=all", auth=token, follow=False)
    assert (read.status, read.headers["Location"]) == (301, f"{new}/issues?state=all")
    write = await sandbox.call("POST", f"{REPO}/issues", {"title": "x"}, auth=token, follow=False)
    assert (write.status, write.headers["Location"]) == (307, f"{new}/issues")
    created = await sandbox.ok("POST", f"{REPO}/issues", {"title": "x"}, status=201, auth=token)
    assert created["repository_url"] == new
    clone = await sandbox.clone("maintainer/demo")
    assert (clone / "README.md").read_text() == "# demo\n"

    await maintainer.delete_repo("maintainer/renamed")
    for name in ("renamed", "demo"):
        assert (await sandbox.call("GET", f"/repos/maintainer/{name}")).status == 404
    listed = await sandbox.ok("GET", "/installation/repositories", auth=token)
    assert [r["name"] for r in listed["repositories"]] == ["kept"]


# ---------------------------------------------------------------- installations: suspended, removed


async def test_a_suspended_installation_is_refused_until_unsuspended(sandbox: Sandbox) -> None:
    """While GitHub has an installation suspended its tokens are refused and none can be
    minted ("This installation has been suspended"), it is listed with `suspended_at`, and
    "the GitHub App cannot access the GitHub API or webhook events for that installation".
    The App gets `installation.suspend` and `installation.unsuspend`.
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    maintainer = maintainer_of(sandbox)
    await maintainer.suspend_installation(1)
    suspended = "This installation has been suspended"
    refused = await sandbox.call("GET", REPO, auth=token)
    assert (refused.status, refused.json["message"]) == (403, suspended)
    mint = "/app/installations/1/access_tokens"
    minting = await sandbox.call("POST", mint, {}, auth=None, headers=bearer(sandbox))
    assert (minting.status, minting.json["message"]) == (403, suspended)
    listed = await sandbox.ok("GET", "/app/installations", auth=None, headers=bearer(sandbox))
    assert listed[0]["suspended_at"] is not None
    assert listed[0]["suspended_by"]["login"] == "maintainer"
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "unseen"}, status=201)
    suspend = await sandbox.receiver.wait_for("installation", "suspend")
    assert_schema(suspend.payload, "installation", "suspend")

    await maintainer.suspend_installation(1, suspended=False)
    unsuspended = await sandbox.receiver.wait_for("installation", "unsuspend")
    assert_schema(unsuspended.payload, "installation", "unsuspend")
    assert (await sandbox.call("GET", REPO, auth=token)).status == 200
    await sandbox.hub.webhooks.idle()
    assert sandbox.receiver.matching("issues", "opened") == []


async def test_the_app_installed_on_another_account_gets_its_own_installation(
    sandbox: Sandbox,
) -> None:
    """An account's owner installs the App (`installation.created`); GitHub then lists a
    second installation, on that account, and mints tokens for it. Installing it again
    changes nothing; an account name GitHub would refuse is refused."""
    await sandbox.new_repo()
    maintainer = maintainer_of(sandbox)
    installed = await maintainer.install("baton-forks")
    created = await sandbox.receiver.wait_for("installation", "created")
    assert_schema(created.payload, "installation", "created")
    assert created.payload["installation"]["account"]["login"] == "baton-forks"
    app = bearer(sandbox)
    listed = await sandbox.ok("GET", "/app/installations", auth=None, headers=app)
    assert [(i["id"], i["account"]["login"]) for i in listed][-1] == (installed, "baton-forks")
    mint = f"/app/installations/{installed}/access_tokens"
    assert (await sandbox.call("POST", mint, {}, auth=None, headers=app)).status == 201
    again = await sandbox.call("POST", "/_sandbox/installations", {"account": "baton-forks"})
    assert (again.status, again.json["id"]) == (200, installed)
    refused = await sandbox.call("POST", "/_sandbox/installations", {"account": "-bad name"})
    assert refused.status == 422
    await sandbox.hub.webhooks.idle()
    assert len(sandbox.receiver.matching("installation", "created")) == 1


async def test_an_uninstalled_app_loses_the_installation(sandbox: Sandbox) -> None:
    """Once the App is uninstalled GitHub no longer lists the installation, minting a token
    for it answers 404, its tokens answer 401, and the App gets `installation.deleted`.
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    await maintainer_of(sandbox).uninstall(1)
    deleted = await sandbox.receiver.wait_for("installation", "deleted")
    assert_schema(deleted.payload, "installation", "deleted")
    assert deleted.payload["installation"]["id"] == 1
    app = bearer(sandbox)
    assert await sandbox.ok("GET", "/app/installations", auth=None, headers=app) == []
    mint = await sandbox.call("POST", "/app/installations/1/access_tokens", {}, None, app)
    assert mint.status == 404
    assert (await sandbox.call("GET", REPO, auth=token)).status == 401
    assert (await sandbox.call("GET", f"{REPO}/installation", auth=None, headers=app)).status == 404
