"""The clock: its sweeps, its scheduled jobs, and its takeover of lapsed claims.

`baton clock` runs as a real process; which lapsed claims it takes over is a pure choice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from bot.devkit.maintainer import eventually
from bot.domain.jobs import sync_labels_job
from bot.domain.model import IssueRef, Run, RunState, utcnow
from bot.edges.queue import Dispatcher
from bot.edges.store import LapsedClaim, Store
from bot.ops.clock import takeovers
from bot.ops.settings import Settings

ISSUES = [IssueRef(installation_id=1, repo="octo/clockwork", number=n) for n in range(1, 6)]


@pytest.fixture
def clock(
    sandbox: dict[str, str], redis_url: str, tmp_path: Path
) -> Iterator[subprocess.Popen[str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "BATON_"))}
    env.update({k: v for k, v in sandbox.items() if k != "SANDBOX_ADMIN_TOKEN"})
    env.update(
        REDIS_URL=redis_url, BATON_DATA_DIR=str(tmp_path / "data"), BATON_SWEEP_INTERVAL_SECONDS="1"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "bot", "clock"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    yield process
    if process.poll() is None:
        process.kill()
        process.wait()


async def test_the_clock_sweeps_and_enqueues_due_jobs_without_any_worker(
    clock: subprocess.Popen[str], redis_url: str, sandbox: dict[str, str]
) -> None:
    store = Store.from_url(redis_url)
    dispatch = Dispatcher.from_url(redis_url, Settings(REDIS_URL=redis_url))
    issue = IssueRef(installation_id=1, repo="octo/clockwork", number=7)
    due = utcnow() + timedelta(seconds=1)
    dispatch.enqueue_at(sync_labels_job(issue), due)

    async def swept_twice() -> bool:
        first = store.marks().get("sweep")
        return first is not None and await eventually(
            lambda: _later_mark(store, first), "a second sweep", within=30
        )

    await eventually(swept_twice, "the clock sweeping every second", within=30)

    async def queued() -> int | None:
        return dispatch.depths()["baton-events"] or None

    assert await eventually(queued, "the scheduled job reaching its queue", within=30) == 1
    assert utcnow() >= due

    clock.send_signal(signal.SIGTERM)
    output, _ = clock.communicate(timeout=20)
    assert clock.returncode == 0, output
    assert "baton clock stopping (SIGTERM)" in output


async def _later_mark(store: Store, first: str) -> bool:
    return store.marks().get("sweep", first) > first


def _run(issue: IssueRef, state: RunState) -> Run:
    run = Run.claimed(issue, 1, f"baton/issue-{issue.number}", utcnow())
    return run if state is RunState.CLAIMED else run.moved(state, utcnow())


def test_a_live_run_whose_lock_lapsed_is_taken_over_and_the_rest_only_forgotten() -> None:
    live, pushed, ended, unstarted, held = ISSUES
    running = _run(live, RunState.RUNNING)
    lapsed = [
        LapsedClaim(live, locked=False, run=running),
        # Its worker died after the push but before releasing: the settlement has it.
        LapsedClaim(pushed, locked=False, run=_run(pushed, RunState.PUSHED_PENDING)),
        LapsedClaim(ended, locked=False, run=_run(ended, RunState.FAILED)),
        LapsedClaim(unstarted, locked=False, run=None),  # claimed, died before its first write
        # Claimed again since: a heartbeat that made it, or a successor's claim.
        LapsedClaim(held, locked=True, run=_run(held, RunState.RUNNING)),
    ]
    orphans, forget = takeovers(lapsed)
    assert orphans == [running]
    assert forget == [live, pushed, ended, unstarted]


@pytest.mark.parametrize("state", [RunState.CLAIMED, RunState.PROVISIONING, RunState.RUNNING])
def test_every_live_state_is_taken_over(state: RunState) -> None:
    run = _run(ISSUES[0], state)
    assert takeovers([LapsedClaim(ISSUES[0], locked=False, run=run)]) == ([run], [ISSUES[0]])


def test_nothing_lapsed_takes_nothing_over() -> None:
    assert takeovers([]) == ([], [])
