"""The sandbox GitHub's forks and the pull requests opened from them: what fork mode
relies on to keep the agent's code away from the repository's secrets.

Each test names the GitHub behaviour it mirrors.
"""

from __future__ import annotations

import base64

from tests.sandbox.test_git_backend import (
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


async def ci_text(sandbox: Sandbox, head: str) -> str:
    """Wait for the base repository's CI on head; return its log."""
    await sandbox.receiver.wait_for("check_suite", "completed", where=suite_of(head))
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
    _, other = await sandbox.push_branch("two", {"two.txt": "2\n"}, repo=f"{FORKS}/demo")
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
