"""Nothing stuck: a recovery cut short is performed later, and no issue says in progress idly.

A run's conclusion is recorded before its recovery is performed, and the recovery
calls GitHub: an installation suspended for a moment, a token refused or a run of
server errors can cut it short after the conclusion is kept. The recovery is then
owed, and the sweep performs it; an issue that carries Baton's in-progress label
with nothing working on it is set right by the sweep too.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.model import IssueRef, Run, RunState
from bot.edges.store import Store, keys
from tests.e2e.test_loop import (
    GREETING_FIX,
    PROJECT,
    baton_comments,
    comment_saying,
    labels_are,
    new_repo,
    queued_issue,
    run_state,
)
from tests.e2e.test_observability import OPERATOR_TOKEN, scrape, value
from tests.support import StackSpec, sweep

# The sweep is put off for a day: each test runs it when it means to, as `baton sweep`.
STACK = StackSpec(
    database=21,
    env={"BATON_SWEEP_INTERVAL_SECONDS": "86400", "BATON_OPERATOR_TOKEN": OPERATOR_TOKEN},
)
FAILS_ONCE = "agent@1: sleep 3\nagent@1: exit 1\nagent@2: write greeting.txt hello"


def owed(store: Store, issue: IssueRef) -> Run | None:
    run = store.run(issue, 1)
    return run if run is not None and run.recovery_owed else None


async def test_a_recovery_cut_short_by_a_suspension_is_performed_by_the_sweep(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack, PROJECT)
    number = await queued_issue(maintainer, repo, "Fails once, then works", FAILS_ONCE)
    issue = IssueRef(installation_id=1, repo=repo, number=number)
    await eventually(lambda: run_state(store, repo, number, RunState.RUNNING), "the agent running")
    # The installation's owner suspends it while the agent works, as in the field report.
    await maintainer.suspend_installation(1)
    try:
        ended = await eventually(
            lambda: asyncio.to_thread(owed, store, issue), "attempt 1 ended, its recovery owed"
        )
        assert ended.state is RunState.FAILED and ended.failure_class == "agent-error"
        await asyncio.sleep(2)  # the job has failed: nothing else performs the recovery
        assert store.run(issue, 2) is None
    finally:
        await maintainer.suspend_installation(1, suspended=False)
    said = await asyncio.to_thread(sweep, stack)
    assert f"recovered {issue}" in said, said
    await eventually(
        lambda: asyncio.to_thread(lambda: _attempt_green(store, issue)), "attempt 2 green", 60
    )
    first = store.run(issue, 1)
    assert first is not None and not first.recovery_owed
    assert [run.attempt for run in store.runs(issue)] == [1, 2]
    again = await asyncio.to_thread(sweep, stack)
    assert str(issue) not in again, again  # performed once, never again


def _attempt_green(store: Store, issue: IssueRef) -> bool:
    second = store.run(issue, 2)
    return second is not None and second.state is RunState.PUSHED_GREEN


async def test_an_issue_shown_in_progress_with_no_run_is_handed_back_by_the_sweep(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack, PROJECT)
    opened = await maintainer.open_issue(repo, "Said to be in progress", "Nothing runs it.")
    number = int(opened["number"])
    # Baton's records of it are gone (expired, or a Redis that was lost): only the label says.
    await maintainer.add_label(repo, number, "baton:in-progress")
    issue = IssueRef(installation_id=1, repo=repo, number=number)
    before = value(await scrape(stack), "baton_sweep_findings_total", outcome="stuck")
    said = await asyncio.to_thread(sweep, stack)
    assert f"stuck {issue}" in said, said
    found = value(await scrape(stack), "baton_sweep_findings_total", outcome="stuck")
    assert found == before + 1, "an operator's dashboard counts it"
    await eventually(lambda: labels_are(maintainer, repo, number, set()), "the label off")
    comments = await maintainer.gh.getitem(
        "/repos/{+repo}/issues/{number}/comments", {"repo": repo, "number": number}
    )
    assert any("holds no record of a run" in c["body"] for c in comments)
    assert store.latest_run(issue) is None, "nothing was started unasked"
    assert str(issue) not in await asyncio.to_thread(sweep, stack)


async def test_a_start_whose_writes_must_wait_long_is_put_back_whole_and_costs_no_attempt(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """Under GitHub's hourly write limit a start's first write may be far off (pacing.py).

    The job goes back to the queue for that moment; the attempt it had claimed must go
    with it, not stay behind as a run nobody works on, later found dead and charged.
    """
    repo = await new_repo(maintainer, stack, PROJECT)
    opened = await maintainer.open_issue(repo, "Waits for a write slot", GREETING_FIX)
    number = int(opened["number"])
    issue = IssueRef(installation_id=1, repo=repo, number=number)
    # Another worker's writes hold the installation's slots for the next 40 seconds.
    identity = f"{stack.sandbox_env['GITHUB_APP_ID']}@{stack.sandbox_url}"
    seconds, micros = store.redis.time()
    held_until = seconds + micros / 1e6 + 40
    store.redis.zadd(keys.write_slots(identity, 1), {"another-worker": held_until})
    await maintainer.add_label(repo, number, "baton:queue")
    await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the run green", 150
    )
    runs = store.runs(issue)
    assert [(run.attempt, run.failure_class) for run in runs] == [(1, None)]
    [first, *_] = await baton_comments(maintainer, repo, number)
    posted = datetime.fromisoformat(first["created_at"]).timestamp()
    assert posted >= held_until - 1, "Baton's first write kept the pace"


async def test_a_job_that_finds_the_issues_comments_held_is_put_back_and_says_its_piece_once(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """Another job's report can hold the issue's comment mutex for long while its paced
    writes wait: a job that would write beside it goes back in the queue, whole."""
    repo = await new_repo(maintainer, stack, {**PROJECT, ".github/baton.yml": "max_atempts: 2\n"})
    opened = await maintainer.open_issue(repo, "Never starts", GREETING_FIX)
    number = int(opened["number"])
    issue = IssueRef(installation_id=1, repo=repo, number=number)
    store.redis.set(keys.comment_lock(issue), "another job's report", px=35_000)
    await maintainer.add_label(repo, number, "baton:queue")
    comment = await eventually(
        lambda: comment_saying(maintainer, repo, number, "is not valid"), "the config comment", 120
    )
    assert "`max_atempts`" in comment["body"]
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:escalated"}), "the escalated label"
    )
    assert len(await baton_comments(maintainer, repo, number)) == 1
