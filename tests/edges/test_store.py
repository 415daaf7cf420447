"""Claims, fencing and run records in a real Redis."""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

import pytest

from bot.domain.model import LONGEST_WINDOW, Chain, IssueRef, Labels, Run, RunState, utcnow
from bot.edges.store import KeptSalvage, LapsedClaim, LockLost, MutexBusy, Store, issue_state, keys

ISSUE = IssueRef(installation_id=1, repo="octo/widgets", number=12)


def _claim_in_process(url: str, barrier: Any, results: Any) -> None:
    store = Store.from_url(url)
    barrier.wait()
    results.put(store.claim(ISSUE) is not None)


def test_concurrent_claims_from_many_processes_let_exactly_one_win(redis_url: str) -> None:
    contenders = 8
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(contenders), ctx.Queue()
    processes = [
        ctx.Process(target=_claim_in_process, args=(redis_url, barrier, results))
        for _ in range(contenders)
    ]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=30) for _ in processes]
    for process in processes:
        process.join()
    assert outcomes.count(True) == 1


def test_concurrent_claims_from_threads_let_exactly_one_win(store: Store) -> None:
    with ThreadPoolExecutor(16) as pool:
        claims = list(pool.map(lambda _: store.claim(ISSUE), range(64)))
    assert len([c for c in claims if c is not None]) == 1


def test_release_lets_the_next_claim_in_with_a_larger_fence(store: Store) -> None:
    first = store.claim(ISSUE)
    assert first is not None
    assert store.claim(ISSUE) is None
    store.release(first)
    second = store.claim(ISSUE)
    assert second is not None and second.fence > first.fence


def test_a_stale_claim_cannot_release_or_write_over_its_successor(store: Store) -> None:
    store.lock_ttl_ms = 100
    stale = store.claim(ISSUE)
    assert stale is not None
    time.sleep(0.2)  # the stalled holder's lock expires
    fresh = store.claim(ISSUE)
    assert fresh is not None
    assert store.heartbeat(stale) is False
    store.release(stale)
    assert store.lock_holder(ISSUE) == fresh.token
    run = Run.claimed(ISSUE, 1, "baton/issue-12", utcnow())
    with pytest.raises(LockLost):
        store.save_run(run, stale)
    store.save_run(run, fresh)
    assert store.run(ISSUE, 1) == run


def test_update_run_applies_a_change_once_and_skips_a_refusal(store: Store) -> None:
    claim = store.claim(ISSUE)
    assert claim is not None
    run = Run.claimed(ISSUE, store.next_attempt(claim), "baton/issue-12", utcnow())
    store.save_run(run, claim)

    def to_running(current: Run) -> Run | None:
        return (
            None if current.state is RunState.RUNNING else current.moved(RunState.RUNNING, utcnow())
        )

    assert store.update_run(ISSUE, 1, to_running) is not None
    assert store.update_run(ISSUE, 1, to_running) is None
    stored = store.run(ISSUE, 1)
    assert stored is not None
    assert [step.state for step in stored.history] == [RunState.CLAIMED, RunState.RUNNING]


def test_head_sha_finds_its_run_and_recent_runs_lists_it(store: Store) -> None:
    claim = store.claim(ISSUE)
    assert claim is not None
    run = Run.claimed(ISSUE, store.next_attempt(claim), "b", utcnow())
    store.save_run(run.model_copy(update={"head_sha": "a" * 40}), claim)
    assert store.runs_for_head("octo/widgets", "a" * 40) == [(ISSUE, 1)]
    assert store.runs_for_head("octo/widgets", "b" * 40) == []
    assert [r.run_id for r in store.recent_runs()] == ["octo/widgets#12/1"]


def test_two_issues_whose_agents_pushed_the_same_commit_share_its_head(store: Store) -> None:
    """The same fix on the same parent by the same identity in the same second: one SHA."""
    other = ISSUE.model_copy(update={"number": 13})
    for issue in (ISSUE, other):
        claim = store.claim(issue)
        assert claim is not None
        run = Run.claimed(issue, store.next_attempt(claim), "b", utcnow())
        store.save_run(run.model_copy(update={"head_sha": "a" * 40}), claim)
    assert store.runs_for_head("octo/widgets", "a" * 40) == [(ISSUE, 1), (other, 1)]


def test_a_head_recorded_before_heads_could_be_shared_is_still_found(store: Store) -> None:
    store.redis.set(keys.head("octo/widgets", "c" * 40), "1:12:2")
    assert store.runs_for_head("octo/widgets", "c" * 40) == [(ISSUE, 2)]


def test_a_usage_window_shuts_its_account_once_a_second_issue_claims_it(store: Store) -> None:
    """An agent's word that its account is shut holds back its own issue; two issues' agree."""
    now, other = utcnow(), ISSUE.model_copy(update={"number": 13})
    soon, later = now + timedelta(minutes=5), now + timedelta(hours=5)
    assert store.claim_window("claude", ISSUE, later, now) is None
    assert store.claim_window("claude", ISSUE, later, now) is None  # its own word, again
    assert store.window_reopens_at("claude", now) is None
    shut = store.claim_window("claude", other, soon, now)
    assert shut is not None and shut.timestamp() == pytest.approx(soon.timestamp())
    reopens = store.window_reopens_at("claude", now)
    assert reopens is not None and reopens.timestamp() == pytest.approx(soon.timestamp())
    # A shorter claim reported by a slower run never reopens the gate early.
    third = ISSUE.model_copy(update={"number": 14})
    assert store.claim_window("claude", third, now + timedelta(minutes=1), now) == shut
    assert store.window_reopens_at("codex", now) is None
    assert store.window_reopens_at("claude", soon + timedelta(seconds=1)) is None


def test_a_window_claim_that_reopened_confirms_nothing(store: Store) -> None:
    now, other = utcnow(), ISSUE.model_copy(update={"number": 13})
    assert store.claim_window("claude", ISSUE, now + timedelta(milliseconds=300), now) is None
    time.sleep(0.5)
    assert store.claim_window("claude", other, utcnow() + timedelta(hours=1), utcnow()) is None


def test_a_shut_window_expires_on_its_own_when_it_reopens(store: Store) -> None:
    now, other = utcnow(), ISSUE.model_copy(update={"number": 13})
    store.claim_window("claude", ISSUE, now + timedelta(milliseconds=300), now)
    store.claim_window("claude", other, now + timedelta(milliseconds=300), now)
    assert store.redis.keys("baton:window:*") != []
    time.sleep(0.5)
    assert store.redis.keys("baton:window:*") == []


def test_waiting_issues_are_indexed_until_they_start(store: Store) -> None:
    until = utcnow() + timedelta(hours=1)
    store.record_wait(ISSUE, until)
    assert [(issue, at.timestamp()) for issue, at in store.waits()] == [
        (ISSUE, pytest.approx(until.timestamp()))
    ]
    store.clear_wait(ISSUE)
    assert store.waits() == []


def test_every_key_an_issue_leaves_expires_or_goes_with_it(store: Store) -> None:
    """An issue's keys expire with its run records: Redis does not grow with every issue."""
    claim = store.claim(ISSUE)
    assert claim is not None
    run = Run.claimed(ISSUE, store.next_attempt(claim), "baton/issue-12", utcnow())
    store.save_run(run.model_copy(update={"head_sha": "a" * 40, "pr_number": 3}), claim)
    store.set_status_comment(ISSUE, 100)
    store.set_pull_status_comment(ISSUE.repo, 3, 101)
    store.record_state_label(
        ISSUE, "baton:review", Labels(), lambda *_: (False, frozenset({"baton:in-progress"}))
    )
    store.return_label_removal(ISSUE, "baton:queue")
    store.record_withdrawal(ISSUE, utcnow())
    store.grant_budget(ISSUE, 1, 5)
    store.record_checkpoint(ISSUE, 1, "b" * 40)
    store.keep_salvage(claim, KeptSalvage(sha="c" * 40, bundle=b"# v2 git bundle\n"))
    store.first_queue_refusal(ISSUE)
    store.save_chain(
        Chain(installation_id=1, repo=ISSUE.repo, head=12, tracking=False, links=(12,))
    )
    store.release(claim)
    keys = [str(key) for key in store.redis.keys("baton:*")]
    lasting = [key for key in keys if store.redis.ttl(key) == -1]
    indexes = {"baton:in-flight", "baton:runs:recent", "baton:chains"}  # trimmed, bounded
    assert set(lasting) <= indexes, lasting

    store.forget_issue(ISSUE)
    assert store.status_comment(ISSUE) is None
    assert store.desired_label(ISSUE) is None
    assert store.in_flight() == []


def test_chains_are_listed_from_their_index_without_scanning_the_keyspace(store: Store) -> None:
    for head in (1, 2, 3):
        store.save_chain(
            Chain(installation_id=1, repo=ISSUE.repo, head=head, tracking=True, links=(head + 10,))
        )
    store.redis.set("baton:chain:unrelated-garbage", "not a chain")  # never read
    store.redis.config_resetstat()
    assert sorted(chain.head for chain in store.chains()) == [1, 2, 3]
    assert "cmdstat_scan" not in store.redis.info("commandstats")


def test_a_claim_that_lapses_without_a_heartbeat_is_listed_with_its_run_until_forgotten(
    store: Store,
) -> None:
    store.lock_ttl_ms = 300
    claim = store.claim(ISSUE)
    assert claim is not None
    run = Run.claimed(ISSUE, store.next_attempt(claim), "baton/issue-12", utcnow())
    store.save_run(run, claim)
    for _ in range(3):  # heartbeats keep it from lapsing
        time.sleep(0.15)
        assert store.heartbeat(claim)
        assert store.lapsed_claims() == []
    time.sleep(0.4)  # its worker died: no heartbeat comes
    assert store.lapsed_claims() == [LapsedClaim(ISSUE, locked=False, run=run)]
    assert store.forget_lapsed_claim(ISSUE)
    assert store.lapsed_claims() == []


def test_a_released_claim_never_lapses(store: Store) -> None:
    store.lock_ttl_ms = 100
    claim = store.claim(ISSUE)
    assert claim is not None
    store.release(claim)
    time.sleep(0.2)
    assert store.lapsed_claims() == []
    assert store.redis.exists("baton:claims") == 0, "nothing is left behind"


def test_a_lapsed_claim_taken_again_is_no_longer_lapsed_nor_forgotten(store: Store) -> None:
    store.lock_ttl_ms = 100
    assert store.claim(ISSUE) is not None
    time.sleep(0.2)
    assert [claim.issue for claim in store.lapsed_claims()] == [ISSUE]
    store.lock_ttl_ms = 60_000
    successor = store.claim(ISSUE)
    assert successor is not None
    assert store.lapsed_claims() == []
    assert not store.forget_lapsed_claim(ISSUE), "the successor's claim stays indexed"
    store.lock_ttl_ms = 100
    assert store.heartbeat(successor)  # a heartbeat moves the lapse to its new lease
    time.sleep(0.2)
    assert store.lapsed_claims() == [LapsedClaim(ISSUE, locked=False, run=None)]


def test_a_paused_repositorys_held_starts_come_back_with_their_agent(store: Store) -> None:
    store.pause(ISSUE.repo, utcnow())
    other = ISSUE.model_copy(update={"number": 13})
    store.hold(ISSUE, "fresh", 0, "codex")
    store.hold(other, "continue", 2)
    # A start held before agents were kept reads back with none.
    store.redis.hset(keys.held(ISSUE.repo), "14", "retry:1")
    assert store.held_issues(ISSUE.repo) == [12, 13, 14]
    assert store.resume_repo(ISSUE.repo) == [
        (12, "fresh", 0, "codex"),
        (13, "continue", 2, None),
        (14, "retry", 1, None),
    ]
    assert store.paused_since(ISSUE.repo) is None and store.held_issues(ISSUE.repo) == []


def test_a_kept_salvage_comes_back_byte_for_byte_and_only_its_own_drop_forgets_it(
    store: Store,
) -> None:
    claim = store.claim(ISSUE)
    assert claim is not None
    bundle = bytes(range(256)) * 64  # a bundle's pack is binary: every byte value survives
    store.keep_salvage(claim, KeptSalvage(sha="a" * 40, bundle=bundle))
    assert store.kept_salvage(ISSUE) == KeptSalvage(sha="a" * 40, bundle=bundle)
    # Kept past the longest usage window a halted run waits for, weekly ones included.
    ttl = store.redis.ttl(keys.salvage(ISSUE))
    assert LONGEST_WINDOW.total_seconds() < ttl <= LONGEST_WINDOW.total_seconds() + 86400

    store.keep_salvage(claim, KeptSalvage(sha="b" * 40, bundle=b"later"))
    store.drop_salvage(ISSUE, "a" * 40)  # an older attempt's drop leaves the newer salvage
    assert store.kept_salvage(ISSUE) == KeptSalvage(sha="b" * 40, bundle=b"later")
    store.drop_salvage(ISSUE, "b" * 40)
    assert store.kept_salvage(ISSUE) is None


def test_a_worker_whose_claim_lapsed_never_replaces_the_new_holders_salvage(
    store: Store,
) -> None:
    lapsed = store.claim(ISSUE)
    assert lapsed is not None
    store.release(lapsed)  # as a lock that expired: another worker takes the issue
    holder = store.claim(ISSUE)
    assert holder is not None
    store.keep_salvage(holder, KeptSalvage(sha="b" * 40, bundle=b"the holder's"))
    with pytest.raises(LockLost):
        store.keep_salvage(lapsed, KeptSalvage(sha="a" * 40, bundle=b"stale"))
    assert store.kept_salvage(ISSUE) == KeptSalvage(sha="b" * 40, bundle=b"the holder's")


def test_an_older_attempts_late_write_leaves_the_live_attempt_in_the_sweeps_view(
    store: Store,
) -> None:
    """The sweep finds a live run through the in-flight index: a late write of the attempt
    before it (a recovery recorded after the next attempt started) must not drop it."""
    claim = store.claim(ISSUE)
    assert claim is not None
    first = Run.claimed(ISSUE, store.next_attempt(claim), "baton/issue-12", utcnow())
    store.save_run(
        first.moved(RunState.FAILED, utcnow()).model_copy(update={"recovery_owed": True}), claim
    )
    second = Run.claimed(ISSUE, store.next_attempt(claim), "baton/issue-12", utcnow())
    store.save_run(second.moved(RunState.RUNNING, utcnow()), claim)

    store.update_run(ISSUE, 1, lambda run: run.model_copy(update={"recovery_owed": False}))
    assert store.in_flight() == [ISSUE], "attempt 2 still runs"
    store.next_attempt(claim)  # attempt 3 counted, its start refused: never recorded
    store.update_run(ISSUE, 2, lambda run: run.moved(RunState.FAILED, utcnow()))
    assert store.in_flight() == [], "no attempt is live"


async def test_the_comment_mutex_outlives_its_ttl_while_held_and_a_waiter_never_writes_beside(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A status report's writes may wait tens of seconds for their slots: its mutex stays
    its own for that long, and a second report gives up (MutexBusy) rather than write
    beside it; a dead holder's lock still lapses within the TTL."""
    monkeypatch.setattr(issue_state, "COMMENT_LOCK_TTL_MS", 300)
    monkeypatch.setattr(issue_state, "COMMENT_LOCK_WAIT_S", 0.6)
    released = asyncio.Event()

    async def hold() -> None:
        async with store.comment_lock(ISSUE):
            await asyncio.sleep(1.5)  # five TTLs
        released.set()

    holder = asyncio.create_task(hold())
    await asyncio.sleep(0.1)
    with pytest.raises(MutexBusy):
        async with store.comment_lock(ISSUE):
            pytest.fail("entered beside a live holder")
    await holder
    async with store.comment_lock(ISSUE):
        assert released.is_set()

    store.redis.set(keys.comment_lock(ISSUE), "a worker that died", px=300)
    async with store.comment_lock(ISSUE):  # waits out its TTL, and no longer
        pass


def test_the_sweep_replays_an_owed_recovery_at_once_then_less_and_less_often(
    store: Store,
) -> None:
    assert store.owed_replay_due(ISSUE, 1), "the first replay is at once"
    assert not store.owed_replay_due(ISSUE, 1), "not again at the next pass"
    pauses = []
    for _ in range(10):
        pauses.append(store.redis.ttl(keys.owed_pause(ISSUE, 1)))
        store.redis.delete(keys.owed_pause(ISSUE, 1))  # the pause is over
        assert store.owed_replay_due(ISSUE, 1)
    assert pauses[:4] == [60, 120, 240, 480] and max(pauses) == 6 * 3600
    assert store.owed_replay_due(ISSUE, 2), "each attempt has its own"


async def test_one_process_at_a_time_performs_an_attempts_recovery(store: Store) -> None:
    """The sweep may plan a replay while the first performance still writes: it stands back."""
    async with store.recovery_turn(ISSUE, 1):
        with pytest.raises(MutexBusy):
            async with store.recovery_turn(ISSUE, 1):
                pytest.fail("two performances of one recovery")
        async with store.recovery_turn(ISSUE, 2):
            pass  # another attempt's is its own
    async with store.recovery_turn(ISSUE, 1):
        pass  # free again once performed
