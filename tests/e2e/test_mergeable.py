"""Open pull requests kept mergeable through real processes, as a maintainer moves main.

A conflicting push sends the pull request back to its agent as a `merge-conflict`
continuation; a pull request only behind is left alone, unless the repository's file
sets `update_branch: true`, and then GitHub merges main into it and Baton settles the
new head.
"""

from __future__ import annotations

import base64
from typing import Any

import redis
from rq import Queue
from rq.job import Job
from rq.registry import FinishedJobRegistry

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.jobs import EVENTS
from bot.domain.model import IssueRef, Run, RunState
from bot.edges.store import Store
from tests.e2e.test_loop import (
    attempt_state,
    new_repo,
    queued_issue,
    run_state,
)
from tests.support import StackSpec

STACK = StackSpec(database=10)

# CI fails on a file left with conflict markers; every other head passes.
CI = "#!/bin/sh\n! grep -rq '^<<<<<<<' --exclude-dir=.git --exclude-dir=.sandbox .\n"
FILES = {"README.md": "# kept mergeable\n", ".sandbox/ci": CI}
UPDATED_FILES = {**FILES, ".github/baton.yml": "update_branch: true\n"}
KEEP_MERGEABLE = "jobs.mergeable.keep_mergeable"


async def green(store: Store, repo: str, number: int) -> Run:
    return await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), f"#{number} green", 60
    )


async def file_on(maintainer: Maintainer, repo: str, path: str, ref: str) -> str:
    found = await maintainer.gh.getitem(
        "/repos/{+repo}/contents/{+path}{?ref}", {"repo": repo, "path": path, "ref": ref}
    )
    return base64.b64decode(found["content"]).decode()


async def mergeable(maintainer: Maintainer, repo: str, number: int) -> dict[str, Any] | None:
    """Return the pull request once GitHub says it merges (a read starts its computation)."""
    pull = await maintainer.pull(repo, number)
    return pull if pull["mergeable"] is True else None


async def looked(stack: LocalBaton, repo: str) -> bool:
    """Return whether a look at a push to the repository's main decided every PR it saw."""
    connection = redis.Redis.from_url(stack.redis_url)
    registry = FinishedJobRegistry(queue=Queue(EVENTS, connection=connection))
    jobs = Job.fetch_many(registry.get_job_ids(), connection=connection)
    return any(
        job is not None
        and job.func_name == KEEP_MERGEABLE
        and job.args[1] == repo
        and job.return_value() == "looked"
        for job in jobs
    )


async def test_a_push_that_conflicts_sends_the_pull_request_back_to_its_agent(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack, FILES)
    number = await queued_issue(
        maintainer,
        repo,
        "Share a line",
        "agent@1: write shared.txt from the agent\n"
        "agent@2: merge origin/main\nagent@2: write shared.txt from both\n"
        "agent@2: commit Merge main",
    )
    first = await green(store, repo, number)
    assert first.pr_number is not None
    # Meanwhile a maintainer changes the same file on main.
    await maintainer.push_to_main(
        repo, {"shared.txt": "from a maintainer\n"}, stack.workdir, "Shared by hand"
    )
    resolved = await eventually(
        lambda: attempt_state(store, repo, number, 2, RunState.PUSHED_GREEN),
        "the merge-conflict continuation going green",
        90,
    )
    conflicted = store.run(IssueRef(installation_id=1, repo=repo, number=number), 1)
    assert conflicted is not None and conflicted.failure_class == "merge-conflict"
    assert conflicted.reason == (f"merging `main` into `{first.branch}` conflicts in `shared.txt`")
    assert resolved.continuation_of == 1 and resolved.pr_number == first.pr_number
    pull = await eventually(
        lambda: mergeable(maintainer, repo, first.pr_number or 0), "the PR merging again", 30
    )
    assert pull["head"]["sha"] == resolved.head_sha
    assert await file_on(maintainer, repo, "shared.txt", resolved.branch) == "from both"


async def test_a_pull_request_only_behind_is_left_alone(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack, FILES)
    number = await queued_issue(maintainer, repo, "Add a file", "agent: write a.txt from the agent")
    first = await green(store, repo, number)
    await maintainer.push_to_main(repo, {"b.txt": "by hand\n"}, stack.workdir, "Another file")
    await eventually(lambda: looked(stack, repo), "Baton looking at the push", 60)
    run = store.latest_run(first.issue)
    assert run is not None and (run.attempt, run.state) == (1, RunState.PUSHED_GREEN)
    assert run.head_sha == first.head_sha
    pull = await maintainer.pull(repo, first.pr_number or 0)
    assert pull["head"]["sha"] == first.head_sha


async def test_with_update_branch_a_pull_request_behind_is_updated_and_settled_again(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack, UPDATED_FILES)
    number = await queued_issue(maintainer, repo, "Add a file", "agent: write a.txt from the agent")
    first = await green(store, repo, number)
    await maintainer.push_to_main(repo, {"b.txt": "by hand\n"}, stack.workdir, "Another file")

    async def settled_on_the_update() -> Run | None:
        run = store.latest_run(first.issue)
        if run is None or run.state is not RunState.PUSHED_GREEN or run.head_sha == first.head_sha:
            return None
        return run

    updated = await eventually(settled_on_the_update, "the updated branch settling green", 90)
    assert updated.attempt == 1 and updated.pr_number == first.pr_number
    assert "`main` merged in" in [change.note for change in updated.history]
    pull = await maintainer.pull(repo, first.pr_number or 0)
    assert pull["head"]["sha"] == updated.head_sha
    compared = await maintainer.gh.getitem(
        "/repos/{+repo}/compare/{basehead}",
        {"repo": repo, "basehead": f"{first.head_sha}...{updated.head_sha}"},
    )
    [merge] = [c for c in compared["commits"] if c["sha"] == updated.head_sha]
    assert merge["commit"]["message"].startswith(f"Merge branch 'main' into {first.branch}")
    assert merge["parents"][0]["sha"] == first.head_sha
    assert await file_on(maintainer, repo, "b.txt", first.branch) == "by hand\n"
