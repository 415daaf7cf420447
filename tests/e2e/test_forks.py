"""Fork mode through real processes: Baton pushes the agent's branch to a fork and opens
its pull request from there, so the repository's CI runs the agent's code as an outside
contributor's, with none of its secrets.

The sandbox GitHub keeps the fork's branches in the fork and runs the base repository's
CI on a fork's pull request without secrets, as GitHub Actions does ("Using secrets in
GitHub Actions": "secrets are not passed to workflows that are triggered by a pull request
from a fork").
"""

from __future__ import annotations

import pytest
from gidgethub import BadRequest

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.model import RunState
from bot.edges.store import Store
from tests.e2e.test_loop import (
    CHECKED_PROJECT,
    DEPLOY_TOKEN,
    LEAKED,
    LEAKING_FIX,
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
STACK = StackSpec(database=22, env={"BATON_PUSH_TO": f"fork:{FORKS}"})


async def forked_repo(maintainer: Maintainer, stack: LocalBaton) -> str:
    """Make a repository with a secret, and its fork under the account Baton pushes to."""
    repo = await new_repo(maintainer, stack, CHECKED_PROJECT)
    await maintainer.set_secret(repo, "DEPLOY_TOKEN", DEPLOY_TOKEN)
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
