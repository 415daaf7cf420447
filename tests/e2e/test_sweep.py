"""The reconcile sweep through real processes: lost webhooks, a killed worker, two sweeps.

Every worker here stands for a machine of its own: it keeps its mirrors and worktrees
in a data directory no other worker shares, so a run a dead worker started is
continued from GitHub and Redis alone, never from the dead machine's disk.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import aiohttp
import redis
from rq.job import Job, JobStatus

from bot.devkit.devstack import LocalBaton, Process, descendants, worker_running
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.jobs import AGENTS, EVENTS, orphan_job
from bot.domain.model import IssueRef, Run, RunState, utcnow
from bot.edges.github import github_app
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from bot.ops.settings import Settings
from tests.conftest import RedisServer
from tests.e2e.test_loop import (
    GREETING_FIX,
    PROJECT,
    attempt_state,
    labels_are,
    latest_run,
    new_repo,
    queued_issue,
    run_state,
    webhooks_lost,
)
from tests.support import SCRIPTED_AGENT, StackSpec, disk, start_machine, started, sweep

# What a stack of machines runs with: a short lease and checkpoint, so deaths show quickly.
ON_MACHINES = {
    "BATON_LOCK_TTL_SECONDS": "2",
    "BATON_MAX_CONTINUATIONS": "3",
    "BATON_CHECKPOINT_SECONDS": "1",
}
STACK = StackSpec(database=2, env=ON_MACHINES, machines=True)


def made_on(stack: LocalBaton, name: str, repo: str, sha: str) -> bool:
    """Return whether the commit sha is in the mirror on the disk of the worker called name."""
    mirror = disk(stack, name) / "mirrors" / f"{repo}.git"
    found = subprocess.run(
        ["git", "--git-dir", str(mirror), "cat-file", "-e", f"{sha}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    return found.returncode == 0


async def sweep_until(stack: LocalBaton, words: str) -> str:
    async def swept() -> str | None:
        printed = await asyncio.to_thread(sweep, stack)
        return printed if words in printed else None

    return await eventually(swept, f"a sweep reporting {words!r}", 30)


async def test_two_sweeps_never_run_at_once(stack: LocalBaton, store: Store) -> None:
    # The workers' own start-up sweeps may be running: wait for the lease, as a sweep would.
    await eventually(
        lambda: asyncio.to_thread(store.take_sweep_lease, "another-worker-1234", 60_000),
        "the sweep lease",
    )
    try:
        assert "skipped: another-worker-1234 is sweeping now" in sweep(stack)
    finally:
        store.release_sweep_lease("another-worker-1234")
    assert "swept:" in sweep(stack)


async def test_a_missed_labeled_webhook_is_picked_up_by_the_sweep(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    async with webhooks_lost(maintainer, stack):  # GitHub cannot reach Baton for a while
        number = await queued_issue(maintainer, repo, "Labelled in an outage", GREETING_FIX)
        await asyncio.to_thread(sweep, stack)
        await eventually(
            lambda: asyncio.to_thread(latest_run, store, repo, number), "the sweep picking it up"
        )
    await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the picked-up run", 60
    )


async def test_an_issue_whose_wait_lost_its_job_is_picked_up_once_the_wait_is_long_past(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    async with webhooks_lost(maintainer, stack):
        number = await queued_issue(maintainer, repo, "Waited, then forgotten", GREETING_FIX)
        issue = IssueRef(installation_id=1, repo=repo, number=number)
        # Waiting for a window that reopens later: the sweep leaves it to its own job.
        store.record_wait(issue, utcnow() + timedelta(minutes=5))
        assert str(issue) not in await asyncio.to_thread(sweep, stack)
        assert latest_run(store, repo, number) is None
        # The wait ended long ago and no job came: the sweep starts it.
        store.record_wait(issue, utcnow() - timedelta(minutes=5))
        await sweep_until(stack, f"picked_up {issue}")
    await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the picked-up run", 60
    )


async def test_a_repository_whose_file_cannot_be_read_is_swept_by_its_last_known_label(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    files = {**PROJECT, ".github/baton.yml": "labels:\n  queue: agent:go\n"}
    repo = await new_repo(maintainer, stack, files)
    await eventually(
        lambda: asyncio.to_thread(lambda: store.queue_labels().get(repo) == "agent:go"),
        "the repository's queue label read from its push",
    )
    contents = f"^/repos/{repo}/contents/"
    async with webhooks_lost(maintainer, stack):
        await maintainer.gh.post("/_sandbox/faults", data={"path": contents, "status": 422})
        try:
            issue = await maintainer.open_issue(repo, "Labelled in an outage", GREETING_FIX)
            number = int(issue["number"])
            await maintainer.add_label(repo, number, "agent:go")
            await sweep_until(stack, f"picked_up {repo}#{number}")
        finally:
            await maintainer.gh.delete("/_sandbox/faults")


SLOW_CI = {
    "README.md": "# slow\n",
    "greeting.txt": "hi\n",
    ".sandbox/ci": "#!/bin/sh\nsleep 2\ngrep -q hello greeting.txt\n",
}


async def test_a_missed_check_suite_is_settled_by_the_sweep(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack, SLOW_CI)
    number = await queued_issue(maintainer, repo, "Checks in an outage", GREETING_FIX)
    await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_PENDING), "the push", 60
    )
    async with webhooks_lost(maintainer, stack):
        await eventually(
            lambda: _check_suite_lost(maintainer, repo), "the check_suite webhook lost", 30
        )
        assert await run_state(store, repo, number, RunState.PUSHED_PENDING) is not None
        await sweep_until(stack, "settled")
        await eventually(
            lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the sweep settling"
        )


async def _check_suite_lost(maintainer: Maintainer, repo: str) -> bool:
    repository = await maintainer.gh.getitem("/repos/{+repo}", {"repo": repo})
    url = "/_sandbox/deliveries?event=check_suite&action=completed"
    return any(
        d["repository_id"] == repository["id"] and str(d["status"]).startswith("not delivered")
        for d in await maintainer.gh.getitem(url)
    )


async def killed_mid_run(
    stack: LocalBaton, store: Store, repo: str, number: int, attempt: int
) -> Process:
    """SIGKILL the worker (and its work horse) while the given attempt's agent runs."""
    issue = IssueRef(installation_id=1, repo=repo, number=number)
    await eventually(
        lambda: attempt_state(store, issue.repo, issue.number, attempt, RunState.RUNNING),
        f"attempt {attempt} running",
        60,
    )
    process = await eventually(
        lambda: asyncio.to_thread(worker_running, stack, issue), "the worker running it"
    )
    # As if the machine died: the worker, its work horse (a session of its own) and the agent.
    doomed = descendants(process.popen.pid)
    process.stop(signal.SIGKILL)
    for pid in doomed:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return process


async def continued_after_a_death(
    stack: LocalBaton, store: Store, issue: IssueRef, attempt: int
) -> Run:
    """Kill the worker running the attempt, sweep, and return the continuation once green.

    The continuation is made on the other worker's disk: nothing of the dead one's is used.
    """
    killed = await killed_mid_run(stack, store, issue.repo, issue.number, attempt)
    try:
        await sweep_until(stack, "orphaned")
        done = await eventually(
            lambda: attempt_state(
                store, issue.repo, issue.number, attempt + 1, RunState.PUSHED_GREEN
            ),
            "the continuation",
            60,
        )
        survivor = next(
            name for name, p in stack.processes.items() if name.startswith("worker-") and p.alive()
        )
        assert done.head_sha is not None
        assert made_on(stack, survivor, issue.repo, done.head_sha)
        assert not made_on(stack, killed.name, issue.repo, done.head_sha)
        return done
    finally:
        start_machine(stack, killed.name)  # the module's other tests keep two workers


async def test_a_killed_workers_run_is_continued_on_another_worker_with_the_same_pr(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    number = await queued_issue(
        maintainer,
        repo,
        "Outlive a dead worker",
        "agent@1: write greeting.txt goodbye\nagent@2: sleep 60\nagent@3: write greeting.txt hello",
    )
    issue = IssueRef(installation_id=1, repo=repo, number=number)
    done = await continued_after_a_death(stack, store, issue, 2)
    first, orphaned = store.run(issue, 1), store.run(issue, 2)
    assert first is not None and orphaned is not None
    assert orphaned.failure_class == "orphan-clean" and orphaned.state is RunState.FAILED
    assert done.continuation_of == 2 and done.pr_number == first.pr_number


async def test_an_orphan_a_maintainer_withdrew_is_not_requeued(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    number = await queued_issue(maintainer, repo, "Withdrawn while dying", "agent: sleep 60")
    killed = await killed_mid_run(stack, store, repo, number, 1)
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:in-progress"}), "in progress"
    )
    try:
        for label in await maintainer.labels(repo, number):
            await maintainer.remove_label(repo, number, label)
        await sweep_until(stack, "orphaned")
    finally:
        start_machine(stack, killed.name)
    await eventually(lambda: labels_are(maintainer, repo, number, set()), "labels released")
    await asyncio.sleep(1)
    runs = store.runs(IssueRef(installation_id=1, repo=repo, number=number))
    assert [run.attempt for run in runs] == [1]


async def test_work_committed_before_a_worker_died_survives_as_a_checkpoint(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    number = await queued_issue(
        maintainer,
        repo,
        "Keep what was done",
        "agent@1: write greeting.txt hello\nagent@1: commit Greet\nagent@1: sleep 60\n"
        "agent@2: write notes.txt picked up where attempt 1 died",
    )
    issue = IssueRef(installation_id=1, repo=repo, number=number)
    await eventually(lambda: asyncio.to_thread(store.checkpoint, issue, 1), "a checkpoint", 30)
    done = await continued_after_a_death(stack, store, issue, 1)
    orphaned = store.run(issue, 1)
    assert orphaned is not None and orphaned.failure_class == "orphan-progress"
    assert sorted(done.changed_files) == ["greeting.txt", "notes.txt"]


async def test_a_lost_merge_webhook_for_a_green_pr_is_settled_by_the_sweep(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    number = await queued_issue(maintainer, repo, "Merged in an outage", GREETING_FIX)
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "green", 60
    )
    assert run.pr_number is not None
    async with webhooks_lost(maintainer, stack):
        await maintainer.merge(repo, run.pr_number)
        assert await run_state(store, repo, number, RunState.PUSHED_GREEN) is not None
        await sweep_until(stack, f"settled {repo}#{number}")
        await eventually(lambda: run_state(store, repo, number, RunState.MERGED), "merged")
        await eventually(lambda: labels_are(maintainer, repo, number, set()), "labels off")


@contextlib.contextmanager
def agents_held(stack: LocalBaton) -> Iterator[None]:
    """Inside the block deliveries become jobs, but no worker takes an agent run."""
    agent_workers = [name for name in stack.processes if name.startswith("worker-")]
    for name in agent_workers:
        stack.processes[name].stop()
    start_machine(stack, "events-only", (EVENTS,))
    try:
        yield
    finally:
        stack.processes.pop("events-only").stop()
        for name in agent_workers:
            start_machine(stack, name)


async def run_job_queued(stack: LocalBaton, repo: str, number: int) -> Job:
    """Return the issue's run job once it waits on the agents' queue."""
    dispatch = Dispatcher.from_url(stack.redis_url, Settings(REDIS_URL=stack.redis_url))

    async def queued() -> Job | None:
        jobs = Job.fetch_many(dispatch.queues[AGENTS].get_job_ids(), dispatch.connection)
        return next((j for j in jobs if j is not None and j.args[1:3] == (repo, number)), None)

    return await eventually(queued, "its run job queued")


async def finished(job: Job) -> None:
    await eventually(
        lambda: asyncio.to_thread(lambda: job.get_status(refresh=True) is JobStatus.FINISHED),
        "the run job ending",
    )


async def test_an_issue_deleted_before_its_run_ends_the_job_in_one_line(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """GitHub answers 410 Gone for a deleted issue: nothing to retry, nothing left to do."""
    repo = await new_repo(maintainer, stack)
    with agents_held(stack):
        number = await queued_issue(maintainer, repo, "Deleted while queued", GREETING_FIX)
        job = await run_job_queued(stack, repo, number)
        since = utcnow()
        await maintainer.delete_issue(repo, number)
        issue = IssueRef(installation_id=1, repo=repo, number=number)
        await eventually(  # its issues.deleted webhook ended the work, the run still queued
            lambda: asyncio.to_thread(store.withdrawn_since, issue, since - timedelta(seconds=5)),
            "the deletion handled",
        )
    await finished(job)
    assert job.return_value() == "gone"
    assert latest_run(store, repo, number) is None, "deleted: its webhook ended the work"


async def test_an_issue_withdrawn_before_its_run_starts_is_not_run(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """A start that trusts its label event's view of the issue still sees a withdrawal."""
    repo = await new_repo(maintainer, stack)
    with agents_held(stack):
        number = await queued_issue(maintainer, repo, "Queued by mistake", GREETING_FIX)
        job = await run_job_queued(stack, repo, number)
        await maintainer.remove_label(repo, number, "baton:queue")
        issue = IssueRef(installation_id=1, repo=repo, number=number)
        await eventually(
            lambda: asyncio.to_thread(
                store.withdrawn_since, issue, utcnow() - timedelta(minutes=1)
            ),
            "the withdrawal recorded",
        )
    await finished(job)
    assert latest_run(store, repo, number) is None


async def test_a_sweep_during_a_backlog_queues_no_second_run(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """Fifty queued issues whose run jobs wait for a worker are not taken for lost webhooks."""
    repo = await new_repo(maintainer, stack)
    dispatch = Dispatcher.from_url(stack.redis_url, Settings(REDIS_URL=stack.redis_url))
    numbers: list[int] = []
    with agents_held(stack):
        for start in range(0, 50, 10):
            numbers += await asyncio.gather(
                *(
                    queued_issue(maintainer, repo, f"Backlog {n}", GREETING_FIX)
                    for n in range(start, start + 10)
                )
            )

        async def all_queued() -> bool:
            pending = await asyncio.to_thread(dispatch.pending_runs)
            return {issue.number for issue in pending if issue.repo == repo} == set(numbers)

        await eventually(all_queued, "a run job queued for each of the 50 issues", 60)
        jobs_before = dispatch.queues[AGENTS].count
        printed = await asyncio.to_thread(sweep, stack)
        assert repo not in printed, printed
        assert dispatch.queues[AGENTS].count == jobs_before, "no second run job"
    await backlog_done(stack, store, repo, numbers)


async def backlog_done(stack: LocalBaton, store: Store, repo: str, numbers: list[int]) -> None:
    """Wait for every issue of a backlog to be pushed green at its first attempt; on a
    timeout, say where each of the others stands, its run and its run job."""

    async def all_green() -> list[Run] | None:
        runs = [await run_state(store, repo, n, RunState.PUSHED_GREEN) for n in numbers]
        return [run for run in runs if run is not None] if all(runs) else None

    try:
        runs = await eventually(all_green, "all green", 60 + 6 * len(numbers))
    except TimeoutError as timeout:
        raise AssertionError(backlog_standing(stack, store, repo, numbers)) from timeout
    assert [run.attempt for run in runs] == [1] * len(numbers)


def backlog_standing(stack: LocalBaton, store: Store, repo: str, numbers: list[int]) -> str:
    """Say, for each issue not yet green, its latest run's state and its run jobs' status."""
    dispatch = Dispatcher.from_url(stack.redis_url, Settings(REDIS_URL=stack.redis_url))
    registries = {
        "queued": dispatch.queues[AGENTS].get_job_ids(),
        "started": dispatch.queues[AGENTS].started_job_registry.get_job_ids(),
        "scheduled": dispatch.queues[AGENTS].scheduled_job_registry.get_job_ids(),
        "failed": dispatch.queues[AGENTS].failed_job_registry.get_job_ids(),
        "finished": dispatch.queues[AGENTS].finished_job_registry.get_job_ids(),
    }
    lines = []
    for number in numbers:
        run = latest_run(store, repo, number)
        if run is not None and run.state is RunState.PUSHED_GREEN:
            continue
        jobs = [
            f"{where}:{job.id}"
            for where, ids in registries.items()
            for job in Job.fetch_many(ids, dispatch.connection)
            if job is not None and job.args[1:3] == (repo, number)
        ]
        state = "no run" if run is None else f"{run.state.value} attempt {run.attempt}"
        lines.append(f"#{number}: {state}; jobs {jobs or 'none'}")
        lines += [f"    {line}" for line in logged(stack, f"{repo}#{number}")[-8:]]
    return "not green:\n" + "\n".join(lines)


def logged(stack: LocalBaton, mark: str) -> list[str]:
    """Return the lines of the stack's process logs that mention mark, log by log."""
    mentions = re.compile(re.escape(mark) + r"(?!\d)")
    return [
        f"{log.stem}: {line}"
        for log in sorted(stack.log_dir.glob("*.log"))
        for line in log.read_text(errors="replace").splitlines()
        if mentions.search(line)
    ]


async def test_a_deleted_issue_and_a_suspended_installation_leave_the_rest_swept(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """GitHub answers 410 for a deleted issue and 403 for a suspended installation's token."""
    deleted_repo = await new_repo(maintainer, stack)
    deleted = await queued_issue(maintainer, deleted_repo, "Deleted later", GREETING_FIX)
    await eventually(
        lambda: run_state(store, deleted_repo, deleted, RunState.PUSHED_GREEN), "green", 60
    )
    alice = maintainer.as_user("alice")
    other = await alice.create_repo(f"elsewhere-{os.getpid()}", PROJECT, stack.workdir)
    others_repo = str(other["full_name"])
    async with webhooks_lost(maintainer, stack):  # only the sweep can find out
        await maintainer.delete_issue(deleted_repo, deleted)
        missed = int((await alice.open_issue(others_repo, "Missed", GREETING_FIX))["number"])
        await alice.add_label(others_repo, missed, "baton:queue")
    await maintainer.suspend_installation(1)
    try:
        printed = await asyncio.to_thread(sweep, stack)
        assert f"picked_up {others_repo}#{missed}" in printed, printed
        assert "the installation is suspended" in printed, printed
    finally:
        await maintainer.suspend_installation(1, suspended=False)
    printed = await sweep_until(stack, f"ended {deleted_repo}#{deleted}")
    run = latest_run(store, deleted_repo, deleted)
    assert run is not None and run.state is RunState.CLOSED
    assert run.reason == "the issue was deleted"
    issue = IssueRef(installation_id=1, repo=deleted_repo, number=deleted)
    assert issue not in store.in_flight() and store.status_comment(issue) is None
    assert f"{deleted_repo}#{deleted}" not in await asyncio.to_thread(sweep, stack)
    others = await eventually(
        lambda: asyncio.to_thread(
            store.latest_run, IssueRef(installation_id=2, repo=others_repo, number=missed)
        ),
        "the other installation's issue picked up",
    )
    assert others.attempt == 1


async def test_an_installation_near_its_rate_limit_pauses_its_sweeps_while_a_run_completes(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """GitHub's x-ratelimit-remaining says what is left; the last 20% is left to runs."""
    settings = Settings(**{k: v for k, v in stack.baton_env().items() if k.isupper()})
    repo = await new_repo(maintainer, stack)
    async with github_app(settings, store) as app:
        gh = await app.for_installation(1)
        used = int((await gh.getitem("/rate_limit"))["resources"]["core"]["used"])
        limit = max(used + 60, 300)
        # Spend the hour down to 60 requests left, with a read Baton does not keep an ETag
        # of: an unchanged conditional read (304) costs nothing, as on GitHub.
        for _ in range(limit - 60 - used):
            await gh.getitem("/repos/{+repo}/labels", {"repo": repo})
    await maintainer.set_rate_limit(limit)
    try:
        number = await queued_issue(maintainer, repo, "On a thin budget", GREETING_FIX)
        await eventually(lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "green")
        printed = await asyncio.to_thread(sweep, stack)
        assert "paused installation 1" in printed, printed
        await eventually(
            lambda: labels_are(maintainer, repo, number, {"baton:review"}), "the run's labels"
        )
    finally:
        await maintainer.set_rate_limit(5000)
        async with github_app(settings, store) as app:  # the next answer says so
            await (await app.for_installation(1)).getitem("/repos/{+repo}", {"repo": repo})
    assert "paused" not in await asyncio.to_thread(sweep, stack)


def agents_among(pids: list[int]) -> list[int]:
    """Return those of pids that are live agent processes, from /proc."""
    found = []
    for pid in pids:
        proc = Path("/proc") / str(pid)
        with contextlib.suppress(OSError):
            agent = SCRIPTED_AGENT.name.encode() in (proc / "cmdline").read_bytes()
            if agent and (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(pid)
    return found


def _with_its_agent(worker: Process) -> list[int] | None:
    """Return the worker's pid and every process below it, once its agent is among them."""
    below = descendants(worker.popen.pid)
    return [worker.popen.pid, *below] if agents_among(below) else None


async def test_a_dead_machines_issue_is_taken_over_by_the_clock_and_no_agent_of_it_lives_on(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    """With the default claim lifetime, the clock's check (not the sweep) takes the run over."""
    url = redis_server.url.rsplit("/", 1)[0] + "/3"
    redis.Redis.from_url(url).flushdb()
    machines = started(url, tmp_path)  # the default BATON_LOCK_TTL_SECONDS, 60
    try:
        for name in ("worker-1", "worker-2"):
            machines.processes[name].stop()
            start_machine(machines, name)
        clock = machines.start_clock()
        store = Store.from_url(url)
        async with aiohttp.ClientSession() as session:
            maintainer = Maintainer(session, machines.sandbox_url, machines.admin_token)
            repo = await new_repo(maintainer, machines)
            number = await queued_issue(
                maintainer,
                repo,
                "Outlive a dead machine",
                "agent@1: sleep 600\nagent@2: write greeting.txt hello",
            )
            issue = IssueRef(installation_id=1, repo=repo, number=number)
            await eventually(
                lambda: attempt_state(store, repo, number, 1, RunState.RUNNING), "running", 60
            )
            dead = await eventually(
                lambda: asyncio.to_thread(worker_running, machines, issue), "its worker"
            )
            # The machine dies: every process of it at once, the agent among them.
            doomed = await eventually(
                lambda: asyncio.to_thread(_with_its_agent, dead), "its agent started"
            )
            for pid in doomed:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            dead.popen.wait()
            done = await eventually(
                lambda: attempt_state(store, repo, number, 2, RunState.PUSHED_GREEN),
                "the continuation on the other machine",
                240,
            )
        orphaned = store.run(issue, 1)
        assert orphaned is not None and orphaned.failure_class == "orphan-clean"
        assert done.continuation_of == 1 and done.head_sha is not None
        survivor = "worker-2" if dead.name == "worker-1" else "worker-1"
        assert made_on(machines, survivor, repo, done.head_sha)
        # Taken over by the clock's check of lapsed claims: a sweep would have left its job
        # nothing to conclude.
        takeover = Job.fetch(orphan_job(issue, 1).job_id, connection=redis.Redis.from_url(url))
        assert takeover.get_status() is JobStatus.FINISHED and takeover.return_value() == "orphaned"
        assert f"takeover: {issue} attempt 1's claim lapsed" in clock.log_path.read_text()
        assert agents_among(doomed) == [], "no agent of the dead machine lives on"
    finally:
        machines.stop()
