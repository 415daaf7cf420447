"""Workers that stop or die mid-run, through real processes: salvage, graceful stop, no strays.

Every worker stands for a machine of its own (its own data directory), so what a
continuation starts from came through GitHub and Redis, never the other machine's disk.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
from pathlib import Path

import pytest

from bot.devkit.devstack import LocalBaton, Process, descendants, worker_running
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.model import Budget, IssueRef, Run, RunState
from bot.edges.store import KeptSalvage, Store
from bot.workflows.attempt import INTERRUPTED
from tests.e2e.test_loop import (
    attempt_state,
    labels_are,
    new_repo,
    queued_issue,
)
from tests.e2e.test_sweep import ON_MACHINES, continued_after_a_death, made_on
from tests.support import StackSpec, start_machine

GRACE_S = 25  # BATON_SHUTDOWN_GRACE_SECONDS's default, which this stack keeps
HEROKU_KILL_S = 30  # Heroku: "the process has 30 seconds to shut down cleanly" after SIGTERM


STACK = StackSpec(database=13, env=ON_MACHINES, machines=True)


async def refs_on_github(stack: LocalBaton, repo: str) -> set[str]:
    """Return every ref GitHub's git server advertises for repo."""
    done = await asyncio.to_thread(
        subprocess.run,
        ["git", "ls-remote", f"{stack.sandbox_url}/{repo}.git"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {line.split("\t")[1] for line in done.stdout.splitlines()}


async def salvage_kept(store: Store, issue: IssueRef) -> KeptSalvage | None:
    return store.kept_salvage(issue)


def brief_of(stack: LocalBaton, issue: IssueRef, attempt: int) -> tuple[str, str]:
    """Return the worker that ran an attempt, and the brief its agent read there."""
    for machine in (stack.workdir / "machines").iterdir():
        brief = machine / "runs" / issue.repo / str(issue.number) / str(attempt) / "brief.md"
        if brief.exists():
            return machine.name, brief.read_text()
    raise AssertionError(f"no machine ran attempt {attempt} of {issue}")


async def said_in_a_comment(maintainer: Maintainer, repo: str, text: str) -> bool:
    """Return whether a comment GitHub's webhooks reported created or edited in repo said text.

    GitHub delivers `issue_comment` (created, edited) with the comment's body: its
    deliveries are the record of what a status comment said on its way.
    """
    repository = await maintainer.gh.getitem("/repos/{+repo}", {"repo": repo})
    for delivery in await maintainer.gh.getitem("/_sandbox/deliveries?event=issue_comment"):
        if delivery["repository_id"] != repository["id"]:
            continue
        full = await maintainer.gh.getitem(f"/_sandbox/deliveries/{delivery['id']}")
        if text in json.loads(full["request"]["payload"])["comment"]["body"]:
            return True
    return False


async def test_uncommitted_edits_survive_a_killed_worker_on_another_machine(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    number = await queued_issue(
        maintainer,
        repo,
        "Keep what was not committed",
        "agent@1: write greeting.txt hello\nagent@1: sleep 60\n"
        "agent@2: write notes.txt picked up where attempt 1 died",
    )
    issue = IssueRef(installation_id=1, repo=repo, number=number)
    # Attempt 1 never commits: only a checkpoint's salvage can carry greeting.txt over.
    await eventually(lambda: salvage_kept(store, issue), "the edits salvaged", 60)
    # Off GitHub: any ref pushed there may start a workflow that runs the agent's files.
    assert await refs_on_github(stack, repo) == {"HEAD", "refs/heads/main"}
    done = await continued_after_a_death(stack, store, issue, 1)
    assert sorted(done.changed_files) == ["greeting.txt", "notes.txt"]
    _, brief = brief_of(stack, issue, 2)  # on the other machine: continued_after_a_death says
    assert "## Uncommitted work salvaged" in brief and "`greeting.txt`" in brief
    [pull] = await maintainer.pulls(repo)
    assert pull["head"]["ref"] == done.branch
    branches = {ref for ref in await refs_on_github(stack, repo) if ref.startswith("refs/heads/")}
    assert branches == {"refs/heads/main", f"refs/heads/{done.branch}"}
    assert store.kept_salvage(issue) is None, "dropped once its work is pushed"


async def test_a_worker_told_to_stop_hands_its_run_to_another_at_once_for_free(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    number = await queued_issue(
        maintainer,
        repo,
        "Survive a restart",
        "agent@1: write greeting.txt hello\nagent@1: sleep 60\n"
        "agent@2: write notes.txt continued after the restart",
    )
    issue = IssueRef(installation_id=1, repo=repo, number=number)
    await eventually(
        lambda: attempt_state(store, repo, number, 1, RunState.RUNNING), "attempt 1 running", 60
    )
    worker = await eventually(
        lambda: asyncio.to_thread(worker_running, stack, issue), "the worker running it"
    )
    try:
        os.killpg(worker.popen.pid, signal.SIGTERM)  # as a platform's restart does
        # It exits by itself, before the platform's SIGKILL would come.
        try:
            code = await asyncio.to_thread(worker.popen.wait, HEROKU_KILL_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {HEROKU_KILL_S} s after SIGTERM:\n{worker.log_tail(80)}")
        assert code == 0, worker.log_tail()
        done = await eventually(
            lambda: attempt_state(store, repo, number, 2, RunState.PUSHED_GREEN),
            "the continuation",
            60,
        )
    finally:
        start_machine(stack, worker.name)
    interrupted = store.run(issue, 1)
    assert interrupted is not None and interrupted.classification is not None
    assert interrupted.failure_class == "interrupted" and interrupted.reason == INTERRUPTED
    assert interrupted.classification.charged_to is Budget.NOTHING
    assert done.continuation_of == 1
    machine, brief = brief_of(stack, issue, 2)
    assert machine != worker.name and done.head_sha is not None
    assert made_on(stack, machine, repo, done.head_sha)
    assert "`greeting.txt`" in brief  # salvaged in the grace period, never committed
    assert sorted(done.changed_files) == ["greeting.txt", "notes.txt"]
    assert await said_in_a_comment(maintainer, repo, INTERRUPTED)
    assert not await orphaned(store, issue), "handed over, not found dead"


async def orphaned(store: Store, issue: IssueRef) -> list[Run]:
    return [run for run in store.runs(issue) if (run.failure_class or "").startswith("orphan-")]


def cmdline(pid: int) -> str | None:
    """Return a running process's command line; None once it is gone (or a zombie)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        argv = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
    return None if state in ("Z", "X") else argv.replace(b"\0", b" ").decode(errors="replace")


async def test_no_agent_outlives_a_worker_whose_processes_all_die_at_once(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    number = await queued_issue(maintainer, repo, "Die with the machine", "agent: sleep 60")
    issue = IssueRef(installation_id=1, repo=repo, number=number)
    await eventually(
        lambda: attempt_state(store, repo, number, 1, RunState.RUNNING), "attempt 1 running", 60
    )
    worker: Process = await eventually(
        lambda: asyncio.to_thread(worker_running, stack, issue), "the worker running it"
    )

    async def agent_started() -> dict[int, str] | None:
        below = {pid: cmdline(pid) for pid in descendants(worker.popen.pid)}
        found = {pid: line for pid, line in below.items() if line is not None}
        return found if any("scripted_agent.py" in line for line in found.values()) else None

    doomed = await eventually(agent_started, "the agent process started")
    try:
        # SIGKILL to the worker's process group: the work horse and the agent are in
        # groups of their own, so only dying with their parents takes them down.
        os.killpg(worker.popen.pid, signal.SIGKILL)
        worker.popen.wait()

        async def none_left() -> bool:
            return all(cmdline(pid) != line for pid, line in doomed.items())

        await eventually(none_left, "every process of the dead worker gone", 30)
    finally:
        for label in await maintainer.labels(repo, number):  # withdrawn: nothing continues it
            await maintainer.remove_label(repo, number, label)
        start_machine(stack, worker.name)
    await eventually(lambda: labels_are(maintainer, repo, number, set()), "labels off")
