"""The sandbox GitHub where Baton reports on a pull request and keeps it mergeable: check
runs an App creates, "Re-run" from the pull request's page, draft pull requests marked
ready through GraphQL, mergeability computed in the background, "Update branch", and a
maintainer's pushes to the base branch.

Each test names the GitHub behaviour it mirrors.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import gidgethub.aiohttp
import pytest
from gidgethub import GraphQLException

from bot.devkit.maintainer import Maintainer
from bot.sandbox.ci import masked
from bot.sandbox.state import node_id
from tests.sandbox.test_git_backend import (
    CI_FAIL,
    CI_PASS,
    REPO,
    Payload,
    Sandbox,
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

MARK_READY = """
mutation($id: ID!) {
  markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { isDraft } }
}
"""


def assert_schema(payload: Payload, event: str, action: str | None) -> None:
    errors = [e.message for e in webhook_validator(event, action).iter_errors(payload)]
    assert not errors, (event, action, errors[:5])


def maintainer_of(sandbox: Sandbox, login: str | None = None) -> Maintainer:
    return Maintainer(sandbox.session, sandbox.url, sandbox.admin, login)


def as_app(sandbox: Sandbox, token: str) -> gidgethub.aiohttp.GitHubAPI:
    """Return a client an App holds: its installation token, the sandbox as its GitHub."""
    return gidgethub.aiohttp.GitHubAPI(
        sandbox.session, "baton-test", oauth_token=token, base_url=sandbox.url
    )


async def narrowed_token(sandbox: Sandbox, permissions: dict[str, str]) -> str:
    """Mint an installation token holding only these permissions."""
    bearer = {"Authorization": f"Bearer {sandbox.jwt()}"}
    path = "/app/installations/1/access_tokens"
    made = await sandbox.ok(
        "POST", path, {"permissions": permissions}, status=201, auth=None, headers=bearer
    )
    return str(made["token"])


async def graphql(sandbox: Sandbox, token: str | None, query: str, **variables: Any) -> Any:
    """Post a GraphQL request; GitHub answers 200 even when it has errors to report."""
    return await sandbox.ok(
        "POST", "/graphql", {"query": query, "variables": variables}, auth=token
    )


async def open_pull(sandbox: Sandbox, head: str, draft: bool = False) -> Payload:
    body = {"title": head, "head": head, "base": "main", "draft": draft}
    pull: Payload = await sandbox.ok("POST", f"{REPO}/pulls", body, status=201)
    return pull


async def computed(sandbox: Sandbox, number: int) -> Payload:
    """Read a pull request until its mergeability is known, as GitHub asks clients to."""
    for _ in range(5):
        pull: Payload = await sandbox.ok("GET", f"{REPO}/pulls/{number}")
        if pull["mergeable"] is not None:
            return pull
    raise AssertionError(f"pull request {number}: mergeable still null")


# ---------------------------------------------------------------- check runs an App creates


async def test_a_refused_check_run_update_changes_nothing(sandbox: Sandbox) -> None:
    """GitHub ("Update a check run"): conclusion is "Required if you provide
    `completed_at`"; a request it refuses (422) leaves the run as it was."""
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    _, head = await sandbox.push_branch("baton/issue-1", {".sandbox/ci": CI_PASS}, auth=token)
    body = {"name": "Baton", "head_sha": head, "conclusion": "success"}
    run = await sandbox.ok("POST", f"{REPO}/check-runs", body, status=201, auth=token)
    path = f"{REPO}/check-runs/{run['id']}"
    refused = {"status": "queued", "completed_at": "2024-05-01T10:00:00Z"}
    assert (await sandbox.call("PATCH", path, refused, auth=token)).status == 422
    kept = await sandbox.ok("GET", path, auth=token)
    assert (kept["status"], kept["conclusion"]) == ("completed", "success")
    assert kept["completed_at"] == run["completed_at"]


async def test_an_apps_check_run_goes_from_in_progress_to_completed_in_its_own_suite(
    sandbox: Sandbox,
) -> None:
    """GitHub ("Create a check run", "Update a check run"): an App creates a run on a head
    sha, with details_url, external_id, started_at and an output of title and summary;
    "Providing conclusion will automatically set the status parameter to completed". The
    run joins the App's own check suite for that commit, GET /commits/{ref}/check-runs
    lists it, and the check_run webhook says `created`, then `completed` (no event for
    the updates between).
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    _, head = await sandbox.push_branch("baton/issue-1", {".sandbox/ci": CI_PASS}, auth=token)
    await sandbox.receiver.wait_for("check_suite", "completed", where=suite_of(head))
    body = {
        "name": "Baton",
        "head_sha": head,
        "status": "in_progress",
        "started_at": "2024-05-01T10:00:00Z",
        "details_url": "https://baton.example/runs/1",
        "external_id": "octo/hello#1",
        "output": {"title": "Working", "summary": "Attempt 1 of 4: the agent is working."},
    }
    run = await sandbox.ok("POST", f"{REPO}/check-runs", body, status=201, auth=token)
    assert (run["status"], run["conclusion"], run["app"]["id"]) == ("in_progress", None, 1)
    assert (run["started_at"], run["external_id"]) == ("2024-05-01T10:00:00Z", "octo/hello#1")
    assert run["details_url"] == "https://baton.example/runs/1"
    assert run["check_suite"]["status"] == "in_progress"

    update = {"output": {"title": "Waiting on CI", "summary": "Attempt 1 of 4: CI runs."}}
    path = f"{REPO}/check-runs/{run['id']}"
    waiting = await sandbox.ok("PATCH", path, update, auth=token)
    assert (waiting["status"], waiting["output"]["title"]) == ("in_progress", "Waiting on CI")
    green = {"conclusion": "success", "output": {"title": "Green", "summary": "Settled green."}}
    done = await sandbox.ok("PATCH", path, green, auth=token)
    assert (done["status"], done["conclusion"]) == ("completed", "success")
    assert done["completed_at"] is not None

    created = await sandbox.receiver.wait_for(
        "check_run", "created", where=lambda p: p["check_run"]["id"] == run["id"]
    )
    completed = await sandbox.receiver.wait_for(
        "check_run", "completed", where=lambda p: p["check_run"]["id"] == run["id"]
    )
    assert_schema(created.payload, "check_run", "created")
    assert_schema(completed.payload, "check_run", "completed")
    assert completed.payload["check_run"]["output"]["summary"] == "Settled green."
    assert completed.payload["sender"]["login"] == "baton[bot]"
    await sandbox.hub.webhooks.idle()
    ours = sandbox.receiver.matching("check_run", where=lambda p: p["check_run"]["id"] == run["id"])
    assert [d.action for d in ours] == ["created", "completed"]

    listed = await sandbox.ok("GET", f"{REPO}/commits/{head}/check-runs")
    assert {(r["name"], r["app"]["slug"]) for r in listed["check_runs"]} == {
        ("ci", "sandbox-ci"),
        ("Baton", "baton"),
    }
    suites = await sandbox.ok("GET", f"{REPO}/commits/{head}/check-suites?app_id=1")
    assert [(s["status"], s["conclusion"]) for s in suites["check_suites"]] == [
        ("completed", "success")
    ]
    assert suites["check_suites"][0]["id"] == run["check_suite"]["id"]


async def test_check_runs_are_validated_and_owned_as_github_does(sandbox: Sandbox) -> None:
    """GitHub's rules for check runs ("Create a check run"): `name` and `head_sha` (a
    commit's sha) are required; conclusion is "Required if you provide completed_at or a
    status of completed"; "Only GitHub Actions can set a status of waiting, pending, or
    requested"; "You cannot change a check run conclusion to stale"; an output needs a
    title and a summary of at most 65535 bytes; times are ISO 8601. Only a GitHub
    App creates runs (checks: write), and only the App that created a run may update it:
    "Invalid app_id ... check run can only be modified by the GitHub App that created it".
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    head = await sandbox.tip("main")
    refused: list[dict[str, Any]] = [
        {"head_sha": head},
        {"name": "Baton"},
        {"name": "Baton", "head_sha": "main"},
        {"name": "Baton", "head_sha": head[:12]},
        {"name": "Baton", "head_sha": head, "status": "completed"},
        {"name": "Baton", "head_sha": head, "completed_at": "2024-05-01T10:00:00Z"},
        {"name": "Baton", "head_sha": head, "status": "waiting"},
        {"name": "Baton", "head_sha": head, "conclusion": "stale"},
        {"name": "Baton", "head_sha": head, "started_at": "yesterday"},
        {"name": "Baton", "head_sha": head, "output": {"summary": "no title"}},
        {"name": "Baton", "head_sha": head, "output": {"title": "t", "summary": "x" * 65536}},
    ]
    for body in refused:
        reply = await sandbox.call("POST", f"{REPO}/check-runs", body, auth=token)
        assert reply.status == 422, (body, reply.status, reply.json)
    longest = {"title": "t", "summary": "x" * 65535}
    body = {"name": "Baton", "head_sha": head, "conclusion": "neutral", "output": longest}
    run = await sandbox.ok("POST", f"{REPO}/check-runs", body, status=201, auth=token)
    assert run["status"] == "completed"

    person = await sandbox.call("POST", f"{REPO}/check-runs", body)
    assert (person.status, person.json["message"]) == (
        403,
        "You must authenticate via a GitHub App.",
    )
    reader = await narrowed_token(sandbox, {"checks": "read"})
    narrow = await sandbox.call("POST", f"{REPO}/check-runs", body, auth=reader)
    assert (narrow.status, narrow.headers["X-Accepted-GitHub-Permissions"]) == (
        403,
        "checks=write",
    )

    _, red = await sandbox.push_branch("red", {".sandbox/ci": CI_FAIL})
    ci = await sandbox.receiver.wait_for("check_run", "completed", where=run_of(red))
    ci_run = ci.payload["check_run"]
    theirs = await sandbox.call(
        "PATCH", f"{REPO}/check-runs/{ci_run['id']}", {"conclusion": "success"}, auth=token
    )
    assert theirs.status == 403
    assert theirs.json["message"] == (
        "Invalid app_id `2` - check run can only be modified by the GitHub App that created it."
    )
    unchanged = await sandbox.ok("GET", f"{REPO}/check-runs/{ci_run['id']}", auth=token)
    assert unchanged["conclusion"] == "failure"


async def test_the_pr_page_shows_an_apps_check_run_with_its_details_link(
    sandbox: Sandbox,
) -> None:
    """GitHub's pull request page lists every check of the head, an App's with the title of
    its output and a "Details" link to its details_url."""
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    _, head = await sandbox.push_branch("feature", {"a.txt": "a\n"})
    pull = await open_pull(sandbox, "feature")
    body = {
        "name": "Baton",
        "head_sha": head,
        "conclusion": "action_required",
        "details_url": "https://baton.example/issues/1#escalated",
        "output": {"title": "Needs a person", "summary": "Escalated after 4 attempts."},
    }
    await sandbox.ok("POST", f"{REPO}/check-runs", body, status=201, auth=token)
    async with sandbox.session.get(pull["html_url"]) as response:
        text = await response.text()
    assert "<strong>Baton</strong>" in text
    assert "action_required — Needs a person" in text
    assert '<a class="details" href="https://baton.example/issues/1#escalated">Details</a>' in text
    assert "Some checks were not successful" in text


# ---------------------------------------------------------------- re-run from the PR page


async def test_re_run_sends_rerequested_to_the_app_that_created_the_run(
    sandbox: Sandbox,
) -> None:
    """GitHub ("Re-run" on a check, "Rerequest a check run"): someone with write access
    re-runs a completed check run; `check_run` with action `rerequested` goes to "Only the
    GitHub App that created the check run", sent by that person. "The status of the check
    suite it belongs to is reset to queued and the conclusion is cleared. The check run
    itself is not updated." A run still in progress is not rerequestable; a reader may not
    re-run checks.
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    maintainer = maintainer_of(sandbox)
    await maintainer.grant("maintainer/demo", "alice", "write")
    await maintainer.grant("maintainer/demo", "bob", "read")
    head = await sandbox.tip("main")
    working = {"name": "Baton", "head_sha": head, "status": "in_progress"}
    run = await sandbox.ok("POST", f"{REPO}/check-runs", working, status=201, auth=token)

    with pytest.raises(gidgethub.BadRequest) as running:
        await maintainer.as_user("alice").rerequest_check_run("maintainer/demo", run["id"])
    assert running.value.status_code == 422
    escalated = {"conclusion": "action_required", "output": {"title": "Stuck", "summary": "s"}}
    path = f"{REPO}/check-runs/{run['id']}"
    await sandbox.ok("PATCH", path, escalated, auth=token)
    with pytest.raises(gidgethub.BadRequest) as reader:
        await maintainer.as_user("bob").rerequest_check_run("maintainer/demo", run["id"])
    assert reader.value.status_code == 403
    await maintainer.as_user("alice").rerequest_check_run("maintainer/demo", run["id"])

    asked = await sandbox.receiver.wait_for("check_run", "rerequested")
    assert_schema(asked.payload, "check_run", "rerequested")
    assert asked.payload["sender"]["login"] == "alice"
    assert asked.payload["installation"]["id"] == 1
    check_run = asked.payload["check_run"]
    assert (check_run["id"], check_run["status"], check_run["conclusion"]) == (
        run["id"],
        "completed",
        "action_required",
    )
    suite = await sandbox.ok("GET", f"{REPO}/check-suites/{run['check_suite']['id']}")
    assert (suite["status"], suite["conclusion"]) == ("queued", None)
    itself = await sandbox.ok("GET", path, auth=token)
    assert (itself["status"], itself["conclusion"]) == ("completed", "action_required")

    again = {"status": "in_progress", "output": {"title": "Retrying", "summary": "Attempt 2"}}
    retried = await sandbox.ok("PATCH", path, again, auth=token)
    assert (retried["status"], retried["conclusion"], retried["completed_at"]) == (
        "in_progress",
        None,
        None,
    )
    await sandbox.ok("PATCH", path, {"conclusion": "success"}, auth=token)
    suite = await sandbox.ok("GET", f"{REPO}/check-suites/{run['check_suite']['id']}")
    assert (suite["status"], suite["conclusion"]) == ("completed", "success")
    await sandbox.receiver.wait_for(
        "check_run", "completed", where=lambda p: p["check_run"]["id"] == run["id"], count=2
    )


async def test_re_running_a_ci_check_runs_it_again_and_the_new_run_decides(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """GitHub Actions answers "Re-run" by running the job again: a new run of the same name
    in the same suite, whose result the suite then reports (a suite's latest runs count,
    `latest_check_runs_count`). No `rerequested` reaches another App: only the App that
    created the run receives it.
    """
    await sandbox.new_repo()
    flag = tmp_path / "fixed"
    script = f"#!/bin/sh\ntest -e {flag}\n"
    _, head = await sandbox.push_branch("flaky", {".sandbox/ci": script})
    failed = await sandbox.receiver.wait_for("check_suite", "completed", where=suite_of(head))
    assert failed.payload["check_suite"]["conclusion"] == "failure"
    first = (await sandbox.ok("GET", f"{REPO}/commits/{head}/check-runs"))["check_runs"][0]

    flag.write_text("")
    await maintainer_of(sandbox).rerequest_check_run("maintainer/demo", first["id"])
    passed = await sandbox.receiver.wait_for(
        "check_suite", "completed", where=suite_of(head), count=2
    )
    await sandbox.hub.webhooks.idle()
    suite = sandbox.receiver.matching("check_suite", "completed", where=suite_of(head))[1]
    assert suite.payload["check_suite"]["conclusion"] == "success"
    assert suite.payload["check_suite"]["id"] == passed.payload["check_suite"]["id"]
    assert sandbox.receiver.matching("check_run", "rerequested") == []
    latest = await sandbox.ok("GET", f"{REPO}/commits/{head}/check-runs")
    assert [(r["name"], r["conclusion"]) for r in latest["check_runs"]] == [("ci", "success")]
    assert latest["check_runs"][0]["id"] != first["id"]
    every = await sandbox.ok("GET", f"{REPO}/commits/{head}/check-runs?filter=all")
    assert sorted(r["conclusion"] for r in every["check_runs"]) == ["failure", "success"]
    by_id = await sandbox.ok("GET", f"{REPO}/check-suites/{first['check_suite']['id']}")
    assert (by_id["conclusion"], by_id["latest_check_runs_count"]) == ("success", 1)


# ---------------------------------------------------------------- draft pull requests


async def test_a_draft_pull_request_is_marked_ready_for_review_through_graphql(
    sandbox: Sandbox,
) -> None:
    """GitHub ("Create a pull request": `draft`; GraphQL `markPullRequestReadyForReview`):
    a draft opens with `draft: true` and `mergeable_state: draft`; the mutation, given the
    pull request's `node_id`, takes it out of draft, answers `isDraft: false`, and sends
    `pull_request` with action `ready_for_review`, sent by the App's bot.
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    await sandbox.push_branch("baton/issue-1", {"a.txt": "a\n"}, auth=token)
    body = {"title": "Fix", "head": "baton/issue-1", "base": "main", "draft": True}
    opened = await sandbox.ok("POST", f"{REPO}/pulls", body, status=201, auth=token)
    assert opened["draft"] is True
    assert opened["node_id"] == node_id("PullRequest", opened["id"])
    announced = await sandbox.receiver.wait_for("pull_request", "opened")
    assert announced.payload["pull_request"]["draft"] is True
    draft = await computed(sandbox, opened["number"])
    assert (draft["draft"], draft["mergeable"], draft["mergeable_state"]) == (True, True, "draft")
    issue = await sandbox.ok("GET", f"{REPO}/issues/{opened['number']}")
    assert issue["draft"] is True

    gh = as_app(sandbox, token)
    answer = await gh.graphql(MARK_READY, endpoint=f"{sandbox.url}/graphql", id=opened["node_id"])
    assert answer == {"markPullRequestReadyForReview": {"pullRequest": {"isDraft": False}}}
    ready = await sandbox.receiver.wait_for("pull_request", "ready_for_review")
    assert_schema(ready.payload, "pull_request", "ready_for_review")
    assert ready.payload["sender"]["login"] == "baton[bot]"
    assert ready.payload["pull_request"]["draft"] is False
    now = await sandbox.ok("GET", f"{REPO}/pulls/{opened['number']}")
    assert (now["draft"], now["mergeable_state"]) == (False, "clean")
    events = await sandbox.ok("GET", f"{REPO}/issues/{opened['number']}/events")
    assert [e["event"] for e in events] == ["ready_for_review"]
    assert events[0]["actor"]["login"] == "baton[bot]"

    again = await gh.graphql(MARK_READY, endpoint=f"{sandbox.url}/graphql", id=opened["node_id"])
    assert again == answer  # already ready: nothing more happens
    await sandbox.hub.webhooks.idle()
    assert len(sandbox.receiver.matching("pull_request", "ready_for_review")) == 1


async def test_graphql_answers_what_it_cannot_do_as_githubs_graphql_does(
    sandbox: Sandbox,
) -> None:
    """GitHub's GraphQL API answers HTTP 200 with an `errors` array: a field its schema
    lacks ("Field 'x' doesn't exist on type 'Mutation'", code undefinedField), a parse
    error, an undeclared variable; a node id it cannot resolve (NOT_FOUND) or a caller
    without the permission (FORBIDDEN: an App needs pull_requests: write, a person write
    access) gets null for that field. Without credentials it answers 401.
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    await sandbox.push_branch("feature", {"a.txt": "a\n"})
    pull = await open_pull(sandbox, "feature", draft=True)

    close = "mutation { closePullRequest(input: {}) { clientMutationId } }"
    unknown = await graphql(sandbox, token, close)
    assert unknown == {
        "errors": [
            {
                "path": ["mutation", "closePullRequest"],
                "extensions": {
                    "code": "undefinedField",
                    "typeName": "Mutation",
                    "fieldName": "closePullRequest",
                },
                "locations": [{"line": 1, "column": 12}],
                "message": "Field 'closePullRequest' doesn't exist on type 'Mutation'",
            }
        ]
    }
    query = await graphql(sandbox, token, "query { viewer { login } }")
    assert query["errors"][0]["message"] == "Field 'viewer' doesn't exist on type 'Query'"
    assert "data" not in query
    nested = MARK_READY.replace("isDraft", "isDraft mergeable")
    wrong = await graphql(sandbox, token, nested, id=pull["node_id"])
    assert wrong["errors"][0]["path"] == [
        "mutation",
        "markPullRequestReadyForReview",
        "pullRequest",
        "mergeable",
    ]
    broken = await graphql(sandbox, token, "mutation { markPullRequestReadyForReview(")
    assert broken["errors"][0]["message"] == "Unexpected end of document"
    undeclared = (
        "mutation { markPullRequestReadyForReview(input: {pullRequestId: $id}) "
        "{ clientMutationId } }"
    )
    assert "not declared" in (await graphql(sandbox, token, undeclared))["errors"][0]["message"]

    missing = await graphql(sandbox, token, MARK_READY, id=node_id("PullRequest", 999))
    assert missing["data"] == {"markPullRequestReadyForReview": None}
    assert missing["errors"][0]["type"] == "NOT_FOUND"
    issue_node = node_id("Issue", pull["id"])
    assert (await graphql(sandbox, token, MARK_READY, id=issue_node))["errors"][0]["type"] == (
        "NOT_FOUND"
    )
    reader = await narrowed_token(sandbox, {"pull_requests": "read"})
    refused = await graphql(sandbox, reader, MARK_READY, id=pull["node_id"])
    assert refused["data"] == {"markPullRequestReadyForReview": None}
    assert (refused["errors"][0]["type"], refused["errors"][0]["message"]) == (
        "FORBIDDEN",
        "Resource not accessible by integration",
    )
    await maintainer_of(sandbox).grant("maintainer/demo", "bob", "read")
    person = await sandbox.call(
        "POST",
        "/graphql",
        {"query": MARK_READY, "variables": {"id": pull["node_id"]}},
        headers={"X-Sandbox-As": "bob"},
    )
    assert (person.status, person.json["errors"][0]["type"]) == (200, "FORBIDDEN")
    assert (await sandbox.ok("GET", f"{REPO}/pulls/{pull['number']}"))["draft"] is True

    anonymous = await sandbox.call("POST", "/graphql", {"query": MARK_READY}, auth=None)
    assert anonymous.status == 401
    with pytest.raises(GraphQLException):
        await as_app(sandbox, token).graphql(
            "query { viewer { login } }", endpoint=f"{sandbox.url}/graphql"
        )


# ---------------------------------------------------------------- mergeability and update-branch


async def test_mergeable_is_null_until_github_has_computed_it_after_each_move(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """GitHub ("Get a pull request"): "If the value is null, then GitHub has started a
    background job to compute the mergeability. After giving the job time to complete,
    resubmit the request." Opening a pull request and every move of its base or head
    starts over. `mergeable_state` is `unknown` meanwhile, then `clean`, or `dirty` for a
    conflict; a base that moved on without a conflict leaves it `clean`, since `behind`
    needs branch protection, and the comparison says how far behind it is.
    """
    await sandbox.new_repo()
    maintainer = maintainer_of(sandbox)
    clone, _ = await sandbox.push_branch("feature", {"feature.txt": "mine\n"})
    pull = await open_pull(sandbox, "feature")
    assert (pull["mergeable"], pull["mergeable_state"], pull["rebaseable"]) == (
        None,
        "unknown",
        None,
    )
    known = await sandbox.ok("GET", f"{REPO}/pulls/{pull['number']}")
    assert (known["mergeable"], known["mergeable_state"]) == (True, "clean")

    main = await sandbox.clone()
    await sandbox.commit(main, {"other.txt": "theirs\n"}, "elsewhere")
    await sandbox.push(main, "main")
    first = await sandbox.ok("GET", f"{REPO}/pulls/{pull['number']}")
    assert (first["mergeable"], first["mergeable_state"]) == (None, "unknown")
    behind = await computed(sandbox, pull["number"])
    assert (behind["mergeable"], behind["mergeable_state"]) == (True, "clean")
    compare = await sandbox.ok("GET", f"{REPO}/compare/main...feature")
    assert (compare["behind_by"], compare["ahead_by"]) == (1, 1)

    await sandbox.commit(clone, {"feature.txt": "mine, more\n"}, "more")
    await sandbox.push(clone, "feature")
    synced = await sandbox.receiver.wait_for("pull_request", "synchronize")
    assert synced.payload["pull_request"]["mergeable"] is None  # a webhook starts no job
    assert (await sandbox.ok("GET", f"{REPO}/pulls/{pull['number']}"))["mergeable"] is None

    await sandbox.commit(main, {"feature.txt": "theirs\n"}, "the same file")
    await sandbox.push(main, "main")
    conflicted = await computed(sandbox, pull["number"])
    assert (conflicted["mergeable"], conflicted["mergeable_state"]) == (False, "dirty")
    await maintainer.comment("maintainer/demo", pull["number"], "conflicts now")
    still = await sandbox.ok("GET", f"{REPO}/pulls/{pull['number']}")
    assert (still["mergeable"], still["mergeable_state"]) == (False, "dirty")


async def test_update_branch_merges_the_base_into_the_head_as_github_does(
    sandbox: Sandbox,
) -> None:
    """GitHub ("Update a pull request branch"): PUT .../update-branch merges the base into
    the head branch, answering 202 "Updating pull request branch."; the new head is a
    merge commit "Merge branch 'main' into <head>" with the old head as first parent, and
    GitHub sends `push` and `pull_request.synchronize`. It answers 422 when
    expected_head_sha is not the head, when the base has nothing new, or on a conflict.
    An App needs pull_requests: write.
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    _, head = await sandbox.push_branch("behind", {"mine.txt": "mine\n"}, auth=token)
    _, other = await sandbox.push_branch("clash", {"README.md": "clash\n"}, auth=token)
    behind = await open_pull(sandbox, "behind")
    clash = await open_pull(sandbox, "clash")
    main = await sandbox.clone()
    base = await sandbox.commit(main, {"README.md": "moved on\n"}, "base moves")
    await sandbox.push(main, "main")

    update = f"{REPO}/pulls/{behind['number']}/update-branch"
    stale = await sandbox.call("PUT", update, {"expected_head_sha": base}, auth=token)
    assert (stale.status, stale.json["message"]) == (
        422,
        "expected head sha didn't match current head ref.",
    )
    narrow = await narrowed_token(sandbox, {"pull_requests": "read", "contents": "write"})
    assert (await sandbox.call("PUT", update, {}, auth=narrow)).status == 403
    accepted = await sandbox.ok("PUT", update, {"expected_head_sha": head}, status=202, auth=token)
    assert accepted == {
        "message": "Updating pull request branch.",
        "url": f"{sandbox.url}{REPO}/pulls/{behind['number']}",
    }
    # The merge is made after the answer: its push is what says the head moved.
    pushed = await sandbox.receiver.wait_for(
        "push", where=lambda p: p["ref"] == "refs/heads/behind" and p["before"] == head
    )
    merged = await sandbox.tip("behind")
    assert pushed.payload["after"] == merged
    newest = (await sandbox.ok("GET", f"{REPO}/compare/{head}...{merged}"))["commits"][-1]
    assert newest["sha"] == merged
    assert newest["commit"]["message"].strip() == "Merge branch 'main' into behind"
    assert [p["sha"] for p in newest["parents"]] == [head, base]
    assert newest["commit"]["author"]["name"] == "baton[bot]"
    sync = await sandbox.receiver.wait_for(
        "pull_request", "synchronize", where=lambda p: p["number"] == behind["number"]
    )
    assert (sync.payload["before"], sync.payload["after"]) == (head, merged)
    assert (await computed(sandbox, behind["number"]))["mergeable_state"] == "clean"

    current = await sandbox.call("PUT", update, {}, auth=token)
    assert (current.status, current.json["message"]) == (
        422,
        "There are no new commits on the base branch.",
    )
    clash_update = f"{REPO}/pulls/{clash['number']}/update-branch"
    conflict = await sandbox.call("PUT", clash_update, {}, auth=token)
    assert (conflict.status, conflict.json["message"]) == (
        422,
        "merge conflict between base and head",
    )
    assert await sandbox.tip("clash") == other


# ---------------------------------------------------------------- a maintainer's pushes


async def test_a_maintainers_push_to_the_base_branch_sends_githubs_push_payload(
    sandbox: Sandbox,
) -> None:
    """GitHub's `push` webhook for a push to the default branch: ref `refs/heads/main`,
    before and after shas, the pushed commits (message, added/modified files), the
    repository (push's own form) and the installation, from the pusher."""
    maintainer = maintainer_of(sandbox)
    await maintainer.create_repo("demo", {"README.md": "# demo\n"}, sandbox.work)
    before = await sandbox.tip("main")
    await maintainer.push_to_main(
        "maintainer/demo", {"src/app.py": "print('moved')\n"}, sandbox.work, "Base moves"
    )
    after = await sandbox.tip("main")
    pushed = await sandbox.receiver.wait_for("push", where=lambda p: p["after"] == after)
    payload = pushed.payload
    assert_schema(payload, "push", None)
    assert (payload["ref"], payload["before"], payload["after"]) == (
        "refs/heads/main",
        before,
        after,
    )
    assert [c["message"].strip() for c in payload["commits"]] == ["Base moves"]
    assert payload["commits"][0]["added"] == ["src/app.py"]
    assert payload["head_commit"]["id"] == after
    assert payload["repository"]["full_name"] == "maintainer/demo"
    assert payload["installation"]["id"] == 1
    assert (payload["pusher"]["name"], payload["sender"]["login"]) == ("maintainer", "maintainer")


async def test_drafts_are_refused_on_a_free_plans_private_repositories(sandbox: Sandbox) -> None:
    """Mirrors https://docs.github.com/en/rest/pulls/pulls#create-a-pull-request: "Draft
    pull requests are available in public repositories with GitHub Free ..., and in public
    and private repositories with GitHub Team and GitHub Enterprise Cloud." A draft on a
    private repository of an account on GitHub Free is refused with 422, "Draft pull
    requests are not supported in this repository."; the same pull request opens when it
    is not a draft, and drafts open once the account is on GitHub Team.
    """
    body = {"name": "secret", "auto_init": True, "private": True}
    await sandbox.ok("POST", "/user/repos", body, status=201)
    token = await sandbox.installation_token("maintainer/secret")
    clone = sandbox.work / "secret"
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    header = f"http.extraheader=Authorization: Basic {basic}"
    await sandbox.git(
        "-c", header, "clone", "-q", f"{sandbox.url}/maintainer/secret.git", str(clone)
    )
    await sandbox.git("checkout", "-q", "-b", "baton/issue-1", cwd=clone)
    await sandbox.commit(clone, {"a.txt": "a\n"}, "work")
    await sandbox.push(clone, "baton/issue-1", auth=token)
    pulls = "/repos/maintainer/secret/pulls"
    draft = {"title": "Fix", "head": "baton/issue-1", "base": "main", "draft": True}

    refused = await sandbox.call("POST", pulls, draft, auth=token)
    assert refused.status == 422
    assert refused.json["errors"] == [
        {
            "resource": "PullRequest",
            "code": "custom",
            "message": "Draft pull requests are not supported in this repository.",
        }
    ]
    assert await sandbox.ok("GET", pulls, auth=token) == []
    opened = await sandbox.ok("POST", pulls, {**draft, "draft": False}, status=201, auth=token)
    assert opened["draft"] is False

    await sandbox.ok("PUT", "/_sandbox/users/maintainer/plan", {"plan": "team"}, status=204)
    await sandbox.ok("PATCH", f"{pulls}/{opened['number']}", {"state": "closed"}, auth=token)
    reopened = await sandbox.ok("POST", pulls, draft, status=201, auth=token)
    assert reopened["draft"] is True


async def test_re_run_all_checks_sends_the_suites_app_check_suite_rerequested(
    sandbox: Sandbox,
) -> None:
    """Mirrors https://docs.github.com/en/rest/checks/suites#rerequest-a-check-suite: it
    "will trigger a check_suite webhook event with the action rerequested", to the suite's
    App, sent by the person who asked; "its status is reset to queued and the conclusion
    is cleared." A suite still under way is not rerequestable; a reader may not re-run.
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    maintainer = maintainer_of(sandbox)
    await maintainer.grant("maintainer/demo", "alice", "write")
    await maintainer.grant("maintainer/demo", "bob", "read")
    _, head = await sandbox.push_branch("baton/issue-1", {"a.txt": "a\n"}, auth=token)
    working = {"name": "Baton", "head_sha": head, "status": "in_progress"}
    run = await sandbox.ok("POST", f"{REPO}/check-runs", working, status=201, auth=token)
    path = f"/_sandbox/repos/maintainer/demo/check-suites/{run['check_suite']['id']}/rerequest"
    assert (await sandbox.call("POST", path, {})).status == 422
    await sandbox.ok(
        "PATCH", f"{REPO}/check-runs/{run['id']}", {"conclusion": "success"}, auth=token
    )
    reader = await sandbox.call("POST", path, {}, headers={"X-Sandbox-As": "bob"})
    assert reader.status == 403

    await sandbox.ok("POST", path, {}, status=201, headers={"X-Sandbox-As": "alice"})
    asked = await sandbox.receiver.wait_for("check_suite", "rerequested")
    assert_schema(asked.payload, "check_suite", "rerequested")
    assert asked.payload["sender"]["login"] == "alice"
    assert (asked.payload["check_suite"]["head_sha"], asked.payload["check_suite"]["status"]) == (
        head,
        "queued",
    )
    suite = await sandbox.ok("GET", f"{REPO}/check-suites/{run['check_suite']['id']}")
    assert (suite["status"], suite["conclusion"]) == ("queued", None)


# ---------------------------------------------------------------- Actions secrets


def test_a_secret_is_masked_line_by_line_and_an_encoded_one_shows() -> None:
    """Actions masks each line of a secret's value in a job's log, and only the value as
    written: "Using secrets in GitHub Actions" warns that a transformed secret, encoded say,
    is not masked."""
    secrets = {"DEPLOY_KEY": "first-line\nsecond-line\n", "TOKEN": "s3cret"}
    log = b"key first-line / second-line, token s3cret, b64 czNjcmV0\n"
    assert masked(log, secrets) == b"key *** / ***, token ***, b64 czNjcmV0\n"


async def test_a_repositorys_secret_reaches_its_ci_masked_in_the_log(sandbox: Sandbox) -> None:
    """A repository's Actions secret is in the environment of its CI runs for its own
    branches' pushes, shown as `***` in the log unless the job prints it transformed."""
    await sandbox.new_repo()
    owner = maintainer_of(sandbox)
    await owner.set_secret("maintainer/demo", "DEPLOY_TOKEN", "tok-5f1e")
    script = '#!/bin/sh\necho "plain $DEPLOY_TOKEN"\nprintf %s "$DEPLOY_TOKEN" | base64\n'
    _, head = await sandbox.push_branch("leaky", {".sandbox/ci": script})
    await sandbox.receiver.wait_for("check_suite", "completed", where=suite_of(head))
    run = (await sandbox.ok("GET", f"{REPO}/commits/{head}/check-runs"))["check_runs"][0]
    text = run["output"]["text"]
    assert "plain ***" in text
    assert "tok-5f1e" not in text
    assert base64.b64encode(b"tok-5f1e").decode() in text


async def test_secrets_are_named_and_set_as_githubs_settings_take_them(sandbox: Sandbox) -> None:
    """Creating a secret answers 201 and updating it 204; a name must be alphanumerics or
    underscores, not start with a digit or GITHUB_ (GitHub: "Naming your secrets")."""
    await sandbox.new_repo()
    path = "/_sandbox/repos/maintainer/demo/secrets"
    await sandbox.ok("PUT", f"{path}/API_KEY", {"value": "one"}, status=201)
    await sandbox.ok("PUT", f"{path}/api_key", {"value": "two"}, status=204)
    for name in ("GITHUB_TOKEN", "1KEY", "A-B"):
        await sandbox.ok("PUT", f"{path}/{name}", {"value": "x"}, status=422)
    await sandbox.ok("PUT", f"{path}/API_KEY", {"value": ""}, status=422)
    absent = "/_sandbox/repos/maintainer/absent/secrets/K"
    await sandbox.ok("PUT", absent, {"value": "x"}, status=404)
    repo = sandbox.hub.repo("maintainer", "demo")
    assert repo is not None and repo.secrets == {"API_KEY": "two"}
