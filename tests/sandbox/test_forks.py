"""The sandbox GitHub's forks and the pull requests opened from them: what fork mode
relies on to keep the agent's code away from the repository's secrets.

Each test names the GitHub behaviour it mirrors.
"""

from __future__ import annotations

import base64
from collections.abc import Callable

from tests.sandbox.test_git_backend import (
    CI_PASS,
    REPO,
    Payload,
    Sandbox,
    receiver,
    sandbox,
    suite_of,
)

__all__ = ["receiver", "sandbox"]  # the fixtures these tests share with test_git_backend.py

FORKS = "baton-forks"
FORK = f"/repos/{FORKS}/demo"
SECRET = "tok-5f1e"
# Prints the secret as Actions would mask it, then encoded, which no masking hides.
LEAKY_CI = '#!/bin/sh\necho "plain [$DEPLOY_TOKEN]"\nprintf %s "$DEPLOY_TOKEN" | base64\n'


async def forked(sandbox: Sandbox) -> Payload:
    """Make maintainer/demo, with a secret, and its fork under the forks account."""
    await sandbox.new_repo()
    secret = "/_sandbox/repos/maintainer/demo/secrets/DEPLOY_TOKEN"
    await sandbox.ok("PUT", secret, {"value": SECRET}, status=201)
    await sandbox.ok("POST", "/_sandbox/installations", {"account": FORKS}, status=201)
    fork: Payload = await sandbox.ok(
        "POST", f"{REPO}/forks", {"organization": FORKS, "default_branch_only": True}, status=202
    )
    return fork


def ran(head: str) -> Callable[[Payload], bool]:
    """Match the completed suite of CI that ran on head (not one awaiting approval)."""
    return lambda p: suite_of(head)(p) and p["check_suite"]["conclusion"] != "action_required"


async def approve(sandbox: Sandbox, number: int) -> None:
    """Press "Approve and run workflows" on the base repository's pull request."""
    path = f"/_sandbox/repos/maintainer/demo/pulls/{number}/approve-workflows"
    await sandbox.ok("POST", path, {}, status=204)


async def ci_text(sandbox: Sandbox, head: str) -> str:
    """Wait for the base repository's CI on head; return its log."""
    await sandbox.receiver.wait_for("check_suite", "completed", where=ran(head))
    runs = (await sandbox.ok("GET", f"{REPO}/commits/{head}/check-runs"))["check_runs"]
    return str(runs[0]["output"]["text"])


async def test_a_fork_is_made_once_and_names_its_parent_and_source(sandbox: Sandbox) -> None:
    """GitHub ("Create a fork") answers 202 with the fork, and with the same fork when the
    account already has one; a fork's full repository names its `parent` and `source`.
    An installation forks only to the account it is installed on, holding Administration
    write, which Baton's App does not ask for."""
    fork = await forked(sandbox)
    assert (fork["full_name"], fork["fork"]) == (f"{FORKS}/demo", True)
    assert fork["parent"]["full_name"] == fork["source"]["full_name"] == "maintainer/demo"
    again = await sandbox.ok("POST", f"{REPO}/forks", {"organization": FORKS}, status=202)
    assert again["id"] == fork["id"]
    shown = await sandbox.ok("GET", FORK)
    assert shown["parent"]["full_name"] == "maintainer/demo"
    assert (await sandbox.ok("GET", REPO))["fork"] is False
    assert (await sandbox.ok("GET", f"{FORK}/branches/main"))["commit"]["sha"] == (
        await sandbox.tip("main")
    )
    token = await sandbox.installation_token(f"{FORKS}/demo")
    refused = await sandbox.call("POST", f"{REPO}/forks", {"organization": FORKS}, auth=token)
    assert refused.status == 403


async def test_a_forks_pull_request_runs_the_bases_ci_without_its_secrets(
    sandbox: Sandbox,
) -> None:
    """GitHub ("Using secrets in GitHub Actions"): "secrets are not passed to workflows that
    are triggered by a pull request from a fork", while a push to the repository's own
    branch runs with them. The fork's push runs no CI of its own (Actions is off in a fork),
    and the base's suite for the fork's head has no branch and lists no pull request (the
    check_suite webhook: "When the check suite's head_branch is in a forked repository it
    will be null and the pull_requests array will be empty")."""
    await forked(sandbox)
    _, own = await sandbox.push_branch("own", {".sandbox/ci": LEAKY_CI})
    assert base64.b64encode(SECRET.encode()).decode() in await ci_text(sandbox, own)

    clone, head = await sandbox.push_branch(
        "agent", {".sandbox/ci": LEAKY_CI}, repo=f"{FORKS}/demo"
    )
    in_fork = await sandbox.ok("GET", f"{FORK}/commits/{head}/check-runs")
    assert in_fork["check_runs"] == []
    body = {"title": "from a fork", "head": f"{FORKS}:agent", "base": "main"}
    pull = await sandbox.ok("POST", f"{REPO}/pulls", body, status=201)
    assert pull["head"]["label"] == f"{FORKS}:agent"
    assert pull["head"]["repo"]["full_name"] == f"{FORKS}/demo"
    await approve(sandbox, pull["number"])
    text = await ci_text(sandbox, head)
    assert "plain []" in text
    assert base64.b64encode(SECRET.encode()).decode() not in text
    suite = sandbox.receiver.matching("check_suite", "completed", where=suite_of(head))[0]
    assert suite.payload["check_suite"]["head_branch"] is None
    assert suite.payload["check_suite"]["pull_requests"] == []

    moved = await sandbox.commit(clone, {"more.txt": "more\n"}, "more")
    await sandbox.push(clone, "agent")
    synced = await sandbox.receiver.wait_for(
        "pull_request", "synchronize", where=lambda p: p["after"] == moved
    )
    assert synced.payload["pull_request"]["head"]["sha"] == moved
    refs = await sandbox.git("ls-remote", f"{sandbox.url}/maintainer/demo.git", "refs/pull/*")
    assert f"{moved}\trefs/pull/{pull['number']}/head" in refs
    await approve(sandbox, pull["number"])  # each head of a first-time contributor waits
    await ci_text(sandbox, moved)


async def test_a_forks_pull_request_merges_and_only_its_owner_moves_its_branch(
    sandbox: Sandbox,
) -> None:
    """A fork's pull request merges into the base like any other ("Merge pull request #N
    from owner/branch"), and its branch, which is the fork's, is not deleted with it.
    Maintainers cannot edit an organization's fork ("Allowing changes to a pull request
    branch created from a fork"), so "Update branch" is refused; deleting the fork's
    branch closes the pull request."""
    await forked(sandbox)
    base = sandbox.hub.repo("maintainer", "demo")
    assert base is not None
    base.delete_branch_on_merge = True
    _, head = await sandbox.push_branch("one", {"one.txt": "1\n"}, repo=f"{FORKS}/demo")
    _, other = await sandbox.push_branch("two", {".sandbox/ci": CI_PASS}, repo=f"{FORKS}/demo")
    opened = []
    for branch in ("one", "two"):
        body = {"title": branch, "head": f"{FORKS}:{branch}", "base": "main"}
        opened.append(await sandbox.ok("POST", f"{REPO}/pulls", body, status=201))
    edit = {"maintainer_can_modify": True}
    await sandbox.ok("PATCH", f"{REPO}/pulls/{opened[0]['number']}", edit, status=422)

    merged = await sandbox.ok("PUT", f"{REPO}/pulls/{opened[0]['number']}/merge", {})
    message = await sandbox.git(
        "log", "-1", "--format=%s", merged["sha"], cwd=await sandbox.clone()
    )
    assert message.strip() == f"Merge pull request #{opened[0]['number']} from {FORKS}/one"
    assert (await sandbox.ok("GET", f"{FORK}/branches/one"))["commit"]["sha"] == head

    second = f"{REPO}/pulls/{opened[1]['number']}"
    await sandbox.ok("PUT", f"{second}/update-branch", {}, status=422)
    await sandbox.ok("DELETE", f"{FORK}/git/refs/heads/two", status=204)
    await sandbox.receiver.wait_for("pull_request", "closed", count=2)
    closed = sandbox.receiver.matching("pull_request", "closed")[1]
    assert closed.payload["pull_request"]["head"]["sha"] == other
    assert (await sandbox.ok("GET", second))["state"] == "closed"


async def test_a_first_time_contributors_ci_waits_for_a_maintainers_approval(
    sandbox: Sandbox,
) -> None:
    """GitHub ("Approving workflow runs from public forks"): by default a first-time
    contributor's pull request runs no workflow until a maintainer approves it; the run
    is completed as `action_required`, with no job started. Once a pull request of theirs
    is merged they are no longer first-time; "all external contributors" always waits."""
    await forked(sandbox)
    _, head = await sandbox.push_branch("one", {".sandbox/ci": LEAKY_CI}, repo=f"{FORKS}/demo")
    body = {"title": "one", "head": f"{FORKS}:one", "base": "main"}
    pull = await sandbox.ok("POST", f"{REPO}/pulls", body, status=201)
    waiting = await sandbox.receiver.wait_for("check_suite", "completed", where=suite_of(head))
    suite = waiting.payload["check_suite"]
    assert (suite["conclusion"], suite["latest_check_runs_count"]) == ("action_required", 0)
    assert (await sandbox.ok("GET", f"{REPO}/commits/{head}/check-runs"))["total_count"] == 0
    await approve(sandbox, pull["number"])
    await ci_text(sandbox, head)
    refused = await sandbox.call(
        "POST", f"/_sandbox/repos/maintainer/demo/pulls/{pull['number']}/approve-workflows", {}
    )
    assert refused.status == 422, "nothing waits any more"
    await sandbox.ok("PUT", f"{REPO}/pulls/{pull['number']}/merge", {})

    _, second = await sandbox.push_branch("two", {".sandbox/ci": CI_PASS}, repo=f"{FORKS}/demo")
    body = {"title": "two", "head": f"{FORKS}:two", "base": "main"}
    await sandbox.ok("POST", f"{REPO}/pulls", body, status=201)
    await ci_text(sandbox, second)  # merged once: no approval asked

    policy = f"{REPO}/actions/permissions/fork-pr-contributor-approval"
    await sandbox.ok("PUT", policy, {"approval_policy": "all_external_contributors"}, status=204)
    assert (await sandbox.ok("GET", policy))["approval_policy"] == "all_external_contributors"
    await sandbox.ok("PUT", policy, {"approval_policy": "sometimes"}, status=422)
    _, third = await sandbox.push_branch("three", {".sandbox/ci": CI_PASS}, repo=f"{FORKS}/demo")
    body = {"title": "three", "head": f"{FORKS}:three", "base": "main"}
    await sandbox.ok("POST", f"{REPO}/pulls", body, status=201)
    again = await sandbox.receiver.wait_for("check_suite", "completed", where=suite_of(third))
    assert again.payload["check_suite"]["conclusion"] == "action_required"
