"""Fork mode through real processes: Baton pushes the agent's branch to a fork and opens
its pull request from there, so the repository's CI runs the agent's code as an outside
contributor's, with none of its secrets.

The sandbox GitHub keeps the fork's branches in the fork and runs the base repository's
CI on a fork's pull request without secrets, as GitHub Actions does ("Using secrets in
GitHub Actions": "secrets are not passed to workflows that are triggered by a pull request
from a fork").
"""

from __future__ import annotations

import asyncio

import pytest
from gidgethub import BadRequest

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.model import Run, RunState
from bot.edges.store import Store
from tests.e2e.test_loop import (
    CHECKED_PROJECT,
    DEPLOY_TOKEN,
    LEAKED,
    LEAKING_FIX,
    attempt_state,
    ci_logs,
    comment_saying,
    concluded,
    labels_are,
    new_repo,
    queued_issue,
    run_state,
)
from tests.support import StackSpec

FORKS = "baton-forks"
UPDATING = "update_branch: true\n"
GREETED = {**CHECKED_PROJECT, "greeting.txt": "hello\n"}  # its CI passes as it is
STACK = StackSpec(database=22, env={"BATON_PUSH_TO": f"fork:{FORKS}"})


async def forked_repo(
    maintainer: Maintainer,
    stack: LocalBaton,
    files: dict[str, str] = CHECKED_PROJECT,
    approval: str = "first_time_contributors_new_to_github",
) -> str:
    """Make a repository with a secret, and its fork under the account Baton pushes to.

    The fork's owner is a first-time contributor, whose pull requests' CI waits for a
    maintainer's approval by GitHub's default; approval asks it of those new to GitHub
    alone here (no sandbox account is), except where a test passes `approval`.
    """
    repo = await new_repo(maintainer, stack, files)
    await maintainer.set_secret(repo, "DEPLOY_TOKEN", DEPLOY_TOKEN)
    await maintainer.set_fork_approval(repo, approval)
    await maintainer.install(FORKS)
    await maintainer.fork(repo, FORKS)
    return repo


async def test_an_agent_working_from_a_fork_never_meets_the_repositorys_secret(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """The same injected agent as in the default mode's test: its check runs in the
    repository's CI, for its pull request from the fork, and prints no secret. The branch
    is the fork's alone, and the run goes green and to review as any other."""
    repo = await forked_repo(maintainer, stack)
    fork = f"{FORKS}/{repo.split('/', 1)[1]}"
    number = await queued_issue(maintainer, repo, "Greet with hello", LEAKING_FIX)
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN, RunState.FAILED),
        "the run settling",
        90,
    )
    assert run.state is RunState.PUSHED_GREEN, run.reason
    assert run.head_sha is not None and run.head_owner == FORKS
    [pull] = await maintainer.pulls(repo)
    assert pull["head"]["label"] == f"{FORKS}:{run.branch}"
    assert pull["head"]["repo"]["full_name"] == fork
    assert pull["head"]["sha"] == run.head_sha
    logs = await ci_logs(maintainer, repo, run.head_sha)
    assert "leaked:" in logs, "the agent's check ran"
    assert LEAKED not in logs
    with pytest.raises(BadRequest) as missing:  # the branch was never pushed here
        await maintainer.gh.getitem(
            "/repos/{+repo}/branches/{+branch}", {"repo": repo, "branch": run.branch}
        )
    assert missing.value.status_code == 404
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:review"}), "labels settling"
    )

    await maintainer.merge(repo, int(pull["number"]))
    await eventually(
        lambda: run_state(store, repo, number, RunState.MERGED), "the merge ending the run"
    )
    # GitHub deletes a merged branch of the repository's own, never a fork's: Baton does.
    await eventually(
        lambda: _branch_gone(maintainer, fork, run.branch), "the fork's branch deleted", 30
    )


async def _branch_gone(maintainer: Maintainer, repo: str, branch: str) -> bool:
    try:
        await maintainer.gh.getitem(
            "/repos/{+repo}/branches/{+branch}", {"repo": repo, "branch": branch}
        )
    except BadRequest as exc:
        return exc.status_code == 404
    return False


async def test_fork_mode_without_a_fork_says_how_to_make_one(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """A repository with no fork under the account is not worked on from anywhere else:
    the run ends before any push, and the escalation names the command that makes one."""
    repo = await new_repo(maintainer, stack, CHECKED_PROJECT)
    await maintainer.install(FORKS)
    number = await queued_issue(maintainer, repo, "Greet with hello", LEAKING_FIX)
    run = await eventually(
        lambda: concluded(store, repo, number, RunState.FAILED), "the run failing", 60
    )
    assert run.head_sha is None
    said = await eventually(
        lambda: comment_saying(maintainer, repo, number, "gh repo fork"), "the escalation"
    )
    assert f"--org {FORKS}" in said["body"]
    assert await maintainer.pulls(repo) == []


async def test_red_ci_from_the_fork_comes_back_to_the_agent_on_the_same_pull_request(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """A continuation builds on the fork's branch, where the failed attempt pushed it."""
    repo = await forked_repo(maintainer, stack)
    body = "agent@1: write greeting.txt goodbye\nagent@2: write greeting.txt hello"
    number = await queued_issue(maintainer, repo, "Greet properly", body)
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the continuation", 90
    )
    assert run.attempt == 2 and run.continuation_of == 1
    [pull] = await maintainer.pulls(repo)
    assert pull["head"]["label"] == f"{FORKS}:{run.branch}"
    assert pull["head"]["sha"] == run.head_sha and pull["number"] == run.pr_number


async def test_with_update_branch_baton_merges_main_into_the_forks_branch_itself(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """GitHub's "Update branch" cannot move an organization's fork's branch; Baton makes
    the same merge ("Merge branch 'main' into …", the head its first parent), pushes it to
    the fork, and settles the new head."""
    repo = await forked_repo(maintainer, stack, {**GREETED, ".github/baton.yml": UPDATING})
    number = await queued_issue(maintainer, repo, "Add a file", "agent: write a.txt from the agent")
    first = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the run green", 90
    )
    await maintainer.push_to_main(repo, {"b.txt": "by hand\n"}, stack.workdir, "Another file")

    async def settled_on_the_update() -> Run | None:
        run = store.latest_run(first.issue)
        if run is None or run.state is not RunState.PUSHED_GREEN or run.head_sha == first.head_sha:
            return None
        return run

    updated = await eventually(settled_on_the_update, "the updated branch settling green", 90)
    assert updated.attempt == 1 and updated.pr_number == first.pr_number
    pull = await maintainer.pull(repo, first.pr_number or 0)
    assert pull["head"]["sha"] == updated.head_sha
    compared = await maintainer.gh.getitem(
        "/repos/{+repo}/compare/{basehead}",
        {"repo": repo, "basehead": f"{first.head_sha}...{updated.head_sha}"},
    )
    [merge] = [c for c in compared["commits"] if c["sha"] == updated.head_sha]
    assert merge["commit"]["message"].startswith(f"Merge branch 'main' into {first.branch}")
    assert merge["parents"][0]["sha"] == first.head_sha


async def test_a_chain_from_the_fork_stacks_its_branches_and_targets_main(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """A cross-repository pull request can only target a branch of the repository, so a
    link's targets main from the start; its branch is still built on the link before it,
    in the fork, and restacked onto main when that merges."""
    repo = await forked_repo(maintainer, stack, GREETED)
    links = [
        int((await maintainer.open_issue(repo, f"Link {n}", body))["number"])
        for n, body in enumerate(["agent: write one.txt 1", "agent: write two.txt 2"], 1)
    ]
    tasks = "".join(f"- [ ] #{n}\n" for n in links)
    await queued_issue(maintainer, repo, "A chain", tasks)
    runs = [
        await eventually(
            lambda number=number: run_state(store, repo, number, RunState.PUSHED_GREEN),
            f"#{number} green",
            90,
        )
        for number in links
    ]
    assert [run.base_branch for run in runs] == ["main", runs[0].branch]
    assert [run.pull_base for run in runs] == [None, "main"]
    pulls = {p["number"]: p for p in await maintainer.pulls(repo)}
    assert [pulls[run.pr_number or 0]["base"]["ref"] for run in runs] == ["main", "main"]
    files = await maintainer.gh.getitem(
        "/repos/{+repo}/pulls/{number}/files", {"repo": repo, "number": runs[1].pr_number}
    )
    assert sorted(f["filename"] for f in files) == ["one.txt", "two.txt"], "built on link 1"

    await maintainer.merge(repo, runs[0].pr_number or 0)

    async def restacked() -> Run | None:
        run = store.latest_run(runs[1].issue)
        if run is None or run.state is not RunState.PUSHED_GREEN or run.base_branch != "main":
            return None
        return run if run.head_sha != runs[1].head_sha else None

    second = await eventually(restacked, "link 2 restacked onto main and green", 90)
    pull = await maintainer.pull(repo, second.pr_number or 0)
    assert pull["head"]["sha"] == second.head_sha and pull["base"]["ref"] == "main"
    await maintainer.merge(repo, second.pr_number or 0)
    await eventually(
        lambda: run_state(store, repo, links[1], RunState.MERGED), "the second merge", 30
    )


async def test_ci_that_waits_for_a_maintainers_approval_holds_the_run_until_approved(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """GitHub's default holds a first-time contributor's workflows, the fork's first pull
    request's among them, until a maintainer approves them: the suite completes as
    `action_required` with no run. The run waits: the no-CI rule never calls it green,
    nor does the suite count as red; approved, the CI runs and settles it."""
    repo = await forked_repo(maintainer, stack, GREETED, approval="first_time_contributors")
    number = await queued_issue(maintainer, repo, "Add a file", "agent: write a.txt a")
    pushed = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_PENDING), "the push", 60
    )
    pr_number = await eventually(
        lambda: _opened(store, repo, number), "the pull request opening", 60
    )
    await asyncio.sleep(6)  # three times the stack's no-checks wait
    still = await run_state(store, repo, number, RunState.PUSHED_PENDING)
    assert still is not None and still.head_sha == pushed.head_sha, "held for the approval"
    await maintainer.approve_workflows(repo, pr_number)
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "green once approved", 60
    )
    assert run.head_sha == pushed.head_sha
    found = await maintainer.gh.getitem(
        "/repos/{+repo}/commits/{sha}/check-runs", {"repo": repo, "sha": run.head_sha}
    )
    ci = [(r["name"], r["conclusion"]) for r in found["check_runs"] if r["name"] == "ci"]
    assert ci == [("ci", "success")], "green on the CI that ran once approved"


async def _opened(store: Store, repo: str, number: int) -> int | None:
    run = await run_state(store, repo, number, RunState.PUSHED_PENDING)
    return run.pr_number if run is not None else None


async def test_a_push_to_main_that_conflicts_sends_the_forks_pull_request_back_to_its_agent(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """The trial merge reads the head from the fork; the continuation merges main into the
    fork's branch, and the pull request merges again."""
    repo = await forked_repo(maintainer, stack, GREETED)
    number = await queued_issue(
        maintainer,
        repo,
        "Share a line",
        "agent@1: write shared.txt from the agent\n"
        "agent@2: merge origin/main\nagent@2: write shared.txt from both\n"
        "agent@2: commit Merge main",
    )
    first = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the run green", 90
    )
    await maintainer.push_to_main(
        repo, {"shared.txt": "from a maintainer\n"}, stack.workdir, "Shared by hand"
    )
    resolved = await eventually(
        lambda: attempt_state(store, repo, number, 2, RunState.PUSHED_GREEN),
        "the merge-conflict continuation going green",
        90,
    )
    conflicted = store.run(first.issue, 1)
    assert conflicted is not None and conflicted.failure_class == "merge-conflict"
    assert resolved.pr_number == first.pr_number and resolved.head_owner == FORKS
    pull = await maintainer.pull(repo, first.pr_number or 0)
    assert pull["head"]["sha"] == resolved.head_sha
