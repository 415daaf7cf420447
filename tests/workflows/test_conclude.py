"""`baton resume`: cron-friendly, idempotent, and clear about what is due and when."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import pytest
from rq import Queue

from bot.domain.jobs import AGENTS
from bot.domain.model import IssueRef, Run, RunState
from bot.domain.resume import Halt, plan_resumes
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from bot.ops.settings import Settings

RESUME_AT = datetime(2026, 12, 1, 7, 2, tzinfo=UTC)
ISSUE = IssueRef(installation_id=1, repo="octo/widgets", number=4)


def halted_run(issue: IssueRef = ISSUE, state: RunState = RunState.HALTED) -> Run:
    run = Run.claimed(issue, 1, "baton/issue-4", RESUME_AT - timedelta(hours=2))
    return run.moved(state, RESUME_AT - timedelta(hours=1)).model_copy(
        update={"resume_at": RESUME_AT}
    )


def test_plan_splits_due_waiting_and_stale() -> None:
    later = IssueRef(installation_id=1, repo="octo/widgets", number=5)
    gone = IssueRef(installation_id=1, repo="octo/widgets", number=6)
    halts = [
        Halt(issue=later, resume_at=RESUME_AT + timedelta(hours=1), run=halted_run(later)),
        Halt(issue=ISSUE, resume_at=RESUME_AT, run=halted_run()),
        Halt(issue=gone, resume_at=RESUME_AT, run=halted_run(gone, RunState.PUSHED_GREEN)),
    ]
    before = plan_resumes(halts, RESUME_AT - timedelta(seconds=1))
    assert [h.issue for h in before.waiting] == [ISSUE, later] and before.due == ()
    at = plan_resumes(halts, RESUME_AT)
    assert [h.issue for h in at.due] == [ISSUE] and [h.issue for h in at.stale] == [gone]
    named = plan_resumes(halts, RESUME_AT - timedelta(days=1), [str(later)])
    assert [h.issue for h in named.due] == [later] and named.waiting == ()


def baton(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "BATON_"))}
    return subprocess.run(
        [sys.executable, "-m", "bot", "resume", *args],
        env={**env, "REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def halted(store: Store) -> Run:
    claim = store.claim(ISSUE)
    assert claim is not None
    run = halted_run()
    store.next_attempt(claim)
    store.save_run(run, claim)
    store.release(claim)
    store.record_halt(ISSUE, RESUME_AT)
    return run


def queued(redis_url: str, settings: Settings) -> list[str]:
    queue: Queue = Dispatcher.from_url(redis_url, settings).queues[AGENTS]
    return list(queue.job_ids)


def test_before_the_reset_nothing_is_resumed_and_the_time_is_named(
    redis_url: str, halted: Run, settings: Settings
) -> None:
    result = baton(redis_url, "--now", "2026-12-01T07:01:59+00:00")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "nothing is due: next is octo/widgets#4 at 2026-12-01 07:02 UTC"
    assert queued(redis_url, settings) == []


def test_at_and_after_the_reset_the_issue_resumes_once_per_schedule(
    redis_url: str, halted: Run, settings: Settings
) -> None:
    dry = baton(redis_url, "--dry-run", "--now", "2026-12-01T07:02:00+00:00")
    assert dry.returncode == 0 and dry.stdout.startswith("would resume octo/widgets#4")
    assert queued(redis_url, settings) == []
    result = baton(redis_url, "--now", "2026-12-01T07:02:00+00:00")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("resumed octo/widgets#4 (halted attempt 1")
    again = baton(redis_url, "--now", "2026-12-01T09:00:00+00:00")
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith("already resuming octo/widgets#4")
    # The same re-entry, however often it is asked for: one job id.
    assert queued(redis_url, settings) == ["run-octo_widgets-4-continue-after-1"]


def test_with_no_halted_issue_it_says_so(redis_url: str) -> None:
    result = baton(redis_url)
    assert (result.returncode, result.stdout.strip()) == (0, "nothing is due: no issue is halted")


def test_an_explicit_issue_resumes_now_and_an_unknown_one_is_an_error(
    redis_url: str, halted: Run, settings: Settings
) -> None:
    result = baton(
        redis_url, "--now", "2026-11-30T00:00:00+00:00", "octo/widgets#4", "octo/widgets#9"
    )
    assert result.returncode == 2
    assert result.stdout.startswith("resumed octo/widgets#4")
    assert result.stderr.strip() == "octo/widgets#9 is not halted"
    assert queued(redis_url, settings) == ["run-octo_widgets-4-continue-after-1"]


def test_an_index_entry_for_an_issue_no_longer_halted_is_dropped(
    redis_url: str, store: Store
) -> None:
    claim = store.claim(ISSUE)
    assert claim is not None
    store.next_attempt(claim)
    store.save_run(halted_run(state=RunState.PUSHED_GREEN), claim)
    store.record_halt(ISSUE, RESUME_AT)
    result = baton(redis_url, "--now", "2026-12-01T08:00:00+00:00")
    assert result.stdout.strip() == "nothing is due: no issue is halted"
    assert store.halts() == []
