"""Runs and the claims that make them: attempts, locks and fences, takeover, indexes."""

from __future__ import annotations

import base64
import binascii
import secrets
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import cast

import redis
from redis.exceptions import WatchError

from bot.domain.model import SWEPT_STATES, IssueRef, Run, RunState
from bot.edges.store import keys
from bot.edges.store.base import LOCK_TTL_MS, RUN_TTL_S, StoreBase, StoreError, text
from bot.edges.store.metrics import queue_metrics
from bot.ops.metrics import run_duration, run_settled

RECENT_RUNS_KEPT = 200
# A salvage serves the next attempt: minutes later, or once the longest usage window a
# halted run waits for has reopened (LONGEST_WINDOW, a week and an hour).
SALVAGE_TTL_S = 8 * 24 * 3600
OWED_PAUSE_S = 60  # after the sweep's first replay of an owed recovery; doubled each time
OWED_REPLAYS_TTL_S = 7 * 24 * 3600  # the count of replays, kept past the longest pause
LONGEST_OWED_PAUSE_S = 6 * 3600
# Keep a salvage only while the claim holds the lock: KEYS lock, salvage; ARGV token,
# sha, bundle, ttl.
_KEEP_SALVAGE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[2])
redis.call('HSET', KEYS[2], 'sha', ARGV[2], 'bundle', ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return 1
"""
# Forget a kept salvage only if no later checkpoint replaced it.
_DROP_SALVAGE = """
if redis.call('HGET', KEYS[1], 'sha') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def _is_latest(pipe: redis.client.Pipeline, run: Run) -> bool:
    """Tell, in a write's watch phase, whether run is its issue's newest attempt.

    An attempt counted but never recorded (its start was refused) is none.
    """
    latest = int(pipe.get(keys.attempts(run.issue)) or 0)
    return run.attempt >= latest or not pipe.exists(keys.run(run.issue, latest))


@dataclass(frozen=True)
class KeptSalvage:
    """An attempt's uncommitted work, kept in Redis: what it commits to, and the bundle."""

    sha: str
    bundle: bytes


# Takeover: every claim is also a member of one sorted set, scored by the instant its
# lock lapses without a heartbeat (by Redis's own clock, so no worker's clock matters).
# claim, heartbeat and release keep it in the lock's own step. The clock asks it every
# few seconds for claims that lapsed: one command, no GitHub call, so a dead worker's
# run is taken over seconds after its lock expires, not at the next full sweep.
_LAPSES_AT = """
local function lapses_at(ttl_ms)
  local now = redis.call('TIME')
  return now[1] * 1000 + math.floor(now[2] / 1000) + tonumber(ttl_ms)
end
"""
_LAPSED = _LAPSES_AT + "return redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', lapses_at(0))"
# Drop a lapsed claim from the set, unless its issue was claimed again meanwhile.
_FORGET_LAPSED = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
return redis.call('ZREM', KEYS[2], ARGV[1])
"""

# Claim: mint a fencing number and take the lock in one step, so two claims of
# the same issue can never both succeed and a later holder always has a larger token.
_CLAIM = (
    _LAPSES_AT
    + """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local fence = redis.call('INCR', KEYS[2])
redis.call('EXPIRE', KEYS[2], ARGV[3])
local token = fence .. '.' .. ARGV[1]
redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
redis.call('ZADD', KEYS[3], lapses_at(ARGV[2]), ARGV[4])
return token
"""
)
_HEARTBEAT = (
    _LAPSES_AT
    + """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('ZADD', KEYS[2], lapses_at(ARGV[2]), ARGV[3])
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""
)
# Release an issue's claim, and take it out of the takeover index in the same step.
_RELEASE_CLAIM = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('ZREM', KEYS[2], ARGV[2])
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# A run in these states has seen its pull request end: it leaves the open pulls' index.
_ENDED_PULL = frozenset({RunState.MERGED, RunState.CLOSED})


class LockLost(StoreError):
    """A write was fenced off: the caller no longer holds the issue's lock."""


@dataclass(frozen=True)
class Claim:
    """A held issue lock: the fencing token proves ownership on every write."""

    issue: IssueRef
    token: str

    @property
    def fence(self) -> int:
        """Return the monotonically increasing fencing number of this claim."""
        return int(self.token.split(".", 1)[0])


@dataclass(frozen=True)
class LapsedClaim:
    """An issue whose claim lapsed, as Redis has it now: whether its lock is held, its run."""

    issue: IssueRef
    locked: bool
    run: Run | None


def _run_address(repo: str, value: object) -> tuple[IssueRef, int] | None:
    if value is None:
        return None
    installation, number, attempt = (int(part) for part in text(value).split(":"))
    return IssueRef(installation_id=installation, repo=repo, number=number), attempt


class RunStore(StoreBase):
    """Claims, attempts and run records, and the indexes that find runs again."""

    def __init__(self, client: redis.Redis, lock_ttl_ms: int = LOCK_TTL_MS) -> None:
        super().__init__(client, lock_ttl_ms)
        self._claim = client.register_script(_CLAIM)
        self._heartbeat = client.register_script(_HEARTBEAT)
        self._release_claim = client.register_script(_RELEASE_CLAIM)
        self._lapsed = client.register_script(_LAPSED)
        self._forget_lapsed = client.register_script(_FORGET_LAPSED)

    # Claims --------------------------------------------------------------

    def claim(self, issue: IssueRef) -> Claim | None:
        """Take the issue's lock; None if someone else holds it."""
        token = self._claim(
            keys=[keys.lock(issue), keys.fence(issue), keys.CLAIMS],
            args=[secrets.token_hex(8), self.lock_ttl_ms, RUN_TTL_S, keys.indexed_issue(issue)],
        )
        return Claim(issue=issue, token=str(token)) if token else None

    def heartbeat(self, claim: Claim) -> bool:
        """Extend the claim's life; False if it was lost (expired or taken)."""
        return bool(
            self._heartbeat(
                keys=[keys.lock(claim.issue), keys.CLAIMS],
                args=[claim.token, self.lock_ttl_ms, keys.indexed_issue(claim.issue)],
            )
        )

    def release(self, claim: Claim) -> None:
        """Give the issue's lock back, if this claim still holds it."""
        self._release_claim(
            keys=[keys.lock(claim.issue), keys.CLAIMS],
            args=[claim.token, keys.indexed_issue(claim.issue)],
        )

    def lock_holder(self, issue: IssueRef) -> str | None:
        """Return the fencing token currently holding the issue, if any."""
        value = self.redis.get(keys.lock(issue))
        return str(value) if value is not None else None

    # Takeover ------------------------------------------------------------

    def lapsed_claims(self) -> list[LapsedClaim]:
        """Return the claims whose lock lapsed by now, each with its lock and latest run.

        Nothing lapsed costs one command; each lapsed claim two reads more, pipelined.
        """
        lapsed = self._lapsed(keys=[keys.CLAIMS])
        issues = [keys.issue_from_index(text(member)) for member in lapsed]
        if not issues:
            return []
        with self.redis.pipeline(transaction=False) as pipe:
            for issue in issues:
                pipe.exists(keys.lock(issue))
                pipe.get(keys.attempts(issue))
            answers = pipe.execute()
        attempts = dict(zip(issues, answers[1::2], strict=True))
        numbered = [issue for issue in issues if attempts[issue] is not None]
        raws = (
            self.redis.mget([keys.run(i, int(attempts[i])) for i in numbered]) if numbered else []
        )
        runs = {
            issue: Run.model_validate_json(raw)
            for issue, raw in zip(numbered, raws, strict=True)
            if raw is not None
        }
        return [
            LapsedClaim(issue, bool(locked), runs.get(issue))
            for issue, locked in zip(issues, answers[0::2], strict=True)
        ]

    def forget_lapsed_claim(self, issue: IssueRef) -> bool:
        """Drop a lapsed claim from the takeover index; False if the issue is claimed again."""
        member = keys.indexed_issue(issue)
        return bool(self._forget_lapsed(keys=[keys.lock(issue), keys.CLAIMS], args=[member]))

    # Runs ----------------------------------------------------------------

    def next_attempt(self, claim: Claim) -> int:
        """Return the number of the next attempt at the claimed issue."""
        key = keys.attempts(claim.issue)
        with self.redis.pipeline() as pipe:
            pipe.incr(key)
            pipe.expire(key, RUN_TTL_S)
            return int(pipe.execute()[0])

    def save_run(self, run: Run, claim: Claim) -> None:
        """Write a run as the holder of its issue's lock; raise LockLost otherwise."""
        lock_key = keys.lock(claim.issue)
        run_key = keys.run(run.issue, run.attempt)
        with self.redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(lock_key, run_key, keys.attempts(run.issue))  # type: ignore[no-untyped-call]
                    if pipe.get(lock_key) != claim.token:
                        raise LockLost(f"{run.issue}: the lock is no longer held by this run")
                    stored = pipe.get(run_key)
                    before = Run.model_validate_json(stored).state if stored is not None else None
                    latest = _is_latest(pipe, run)
                    pipe.multi()
                    self._queue_run_write(pipe, run, before, latest)
                    pipe.execute()
                    return
                except WatchError:
                    continue

    def latest_run(self, issue: IssueRef) -> Run | None:
        """Return the issue's most recent run, if it has one."""
        attempts = self.redis.get(keys.attempts(issue))
        if attempts is None:
            return None
        return self.run(issue, int(attempts))

    def run(self, issue: IssueRef, attempt: int) -> Run | None:
        """Return one run of an issue."""
        raw = self.redis.get(keys.run(issue, attempt))
        return Run.model_validate_json(raw) if raw is not None else None

    def runs(self, issue: IssueRef) -> list[Run]:
        """Return every recorded run of an issue, oldest first."""
        attempts = int(self.redis.get(keys.attempts(issue)) or 0)
        run_keys = [keys.run(issue, n) for n in range(1, attempts + 1)]
        raws = self.redis.mget(run_keys) if run_keys else []
        return [Run.model_validate_json(raw) for raw in raws if raw is not None]

    def update_run(
        self, issue: IssueRef, attempt: int, change: Callable[[Run], Run | None]
    ) -> Run | None:
        """Apply change to the stored run atomically; return the new run, or None if unchanged.

        change is a pure function of the current run; it returns None to leave it
        as it is (a stale or repeated event), which is how redelivered webhooks and
        retried jobs become harmless.
        """
        key = keys.run(issue, attempt)
        with self.redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key, keys.attempts(issue))  # type: ignore[no-untyped-call]
                    raw = pipe.get(key)
                    if raw is None:
                        return None
                    current = Run.model_validate_json(raw)
                    new = change(current)
                    if new is None:
                        pipe.unwatch()
                        return None
                    latest = _is_latest(pipe, new)
                    pipe.multi()
                    self._queue_run_write(pipe, new, current.state, latest)
                    pipe.execute()
                    return new
                except WatchError:
                    continue

    def runs_for_head(self, repo: str, sha: str) -> list[tuple[IssueRef, int]]:
        """Return each issue, with its attempt, whose push produced this head sha.

        Mostly one; two issues whose agents pushed byte-identical commits share it.
        """
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(keys.head_runs(repo, sha))
            pipe.get(keys.head(repo, sha))
            runs, legacy = pipe.execute()
        addresses = [f"{text(issue)}:{text(attempt)}" for issue, attempt in runs.items()]
        found = dict(a for a in (_run_address(repo, value) for value in addresses) if a is not None)
        if (old := _run_address(repo, legacy)) is not None:
            found.setdefault(*old)
        return sorted(found.items(), key=lambda item: item[0].number)

    def run_for_pull(self, repo: str, number: int) -> tuple[IssueRef, int] | None:
        """Return the issue and the newest attempt that pushed to this pull request."""
        return _run_address(repo, self.redis.get(keys.pull(repo, number)))

    def recent_runs(self, limit: int = 50) -> list[Run]:
        """Return the most recently started runs across all repositories, newest first."""
        members = self.redis.zrevrange(keys.RECENT_RUNS, 0, limit - 1)
        run_keys = [keys.recent_run(text(member)) for member in members]
        raws = self.redis.mget(run_keys) if run_keys else []
        return [Run.model_validate_json(raw) for raw in raws if raw is not None]

    def _queue_run_write(
        self, pipe: redis.client.Pipeline, run: Run, before: RunState | None, latest: bool
    ) -> None:
        issue = run.issue
        pipe.set(keys.run(issue, run.attempt), run.model_dump_json(), ex=RUN_TTL_S)
        if run_settled(before, run):
            # In the write's own transaction: a settling is observed once, however often retried.
            queue_metrics(pipe, run_duration(run).updates())
        member = keys.recent_member(issue, run.attempt)
        pipe.zadd(keys.RECENT_RUNS, {member: run.started_at.timestamp()})
        pipe.zremrangebyrank(keys.RECENT_RUNS, 0, -RECENT_RUNS_KEPT - 1)
        where = f"{issue.installation_id}:{issue.number}:{run.attempt}"
        if run.head_sha is not None:
            head = keys.head_runs(issue.repo, run.head_sha)
            pipe.hset(head, f"{issue.installation_id}:{issue.number}", run.attempt)
            pipe.expire(head, RUN_TTL_S)
        if run.pr_number is not None:
            # The newest attempt on a PR wins: that is the run a review or merge concerns.
            pipe.set(keys.pull(issue.repo, run.pr_number), where, ex=RUN_TTL_S)
            self._queue_open_pull(pipe, run)
        if run.state in SWEPT_STATES or run.recovery_owed:
            pipe.zadd(keys.IN_FLIGHT, {keys.indexed_issue(issue): run.started_at.timestamp()})
        elif latest:  # an older attempt's write never takes a live one out of the sweep's view
            pipe.zrem(keys.IN_FLIGHT, keys.indexed_issue(issue))

    @staticmethod
    def _queue_open_pull(pipe: redis.client.Pipeline, run: Run) -> None:
        """Index the run's pull request by its base branch while it is open, for base pushes."""
        assert run.pr_number is not None
        key, field = keys.open_pulls(run.issue.repo), str(run.pr_number)
        if run.state in _ENDED_PULL:
            pipe.hdel(key, field)
        elif run.base_branch is not None:
            pipe.hset(key, field, run.base_branch)
            pipe.expire(key, RUN_TTL_S)

    def open_pulls(self, repo: str, base: str) -> list[int]:
        """Return Baton's pull requests of the repository that target base, as last recorded.

        A pull request is listed from its run's first write with it until a run of it
        merges or closes: one closed while its webhook was lost stays until forgotten.
        """
        bases = cast(dict[str, str], self.redis.hgetall(keys.open_pulls(repo)))
        return sorted(int(number) for number, branch in bases.items() if text(branch) == base)

    def forget_open_pull(self, repo: str, number: int) -> None:
        """Drop a pull request GitHub says is closed from the index of open ones."""
        self.redis.hdel(keys.open_pulls(repo), str(number))

    def in_flight(self) -> list[IssueRef]:
        """Return the issues whose latest run is live, waiting for its checks, green, or owed
        its recovery."""
        return [issue for issue, _ in self._indexed(keys.IN_FLIGHT)]

    def live_runs(self) -> int:
        """Return how many runs a worker is on now (claimed, provisioning or running)."""
        issues = self.in_flight()
        if not issues:
            return 0
        attempts = self.redis.mget([keys.attempts(issue) for issue in issues])
        run_keys = [
            keys.run(issue, int(attempt))
            for issue, attempt in zip(issues, attempts, strict=True)
            if attempt is not None
        ]
        raws = self.redis.mget(run_keys) if run_keys else []
        return sum(
            1 for raw in raws if raw is not None and Run.model_validate_json(raw).state.is_live
        )

    # What an attempt pushed, and the checks on its heads ------------------

    def record_checkpoint(self, issue: IssueRef, attempt: int, sha: str) -> None:
        """Record the agent's work an attempt pushed while it ran."""
        self.redis.set(keys.checkpoint(issue, attempt), sha, ex=RUN_TTL_S)

    def checkpoint(self, issue: IssueRef, attempt: int) -> str | None:
        """Return the last checkpoint an attempt pushed, if any."""
        value = self.redis.get(keys.checkpoint(issue, attempt))
        return None if value is None else text(value)

    def keep_salvage(self, claim: Claim, salvage: KeptSalvage) -> None:
        """Keep the issue's salvage, in place of any kept before, for any machine to read.

        Only while claim holds the issue's lock, in one step: a worker whose claim lapsed
        never replaces what the issue's new holder kept. Raise LockLost otherwise.
        """
        bundle = base64.b64encode(salvage.bundle).decode()  # the client speaks text
        kept = self.redis.eval(
            _KEEP_SALVAGE,
            2,
            keys.lock(claim.issue),
            keys.salvage(claim.issue),
            claim.token,
            salvage.sha,
            bundle,
            SALVAGE_TTL_S,
        )
        if not kept:
            raise LockLost(f"{claim.issue}: the lock is no longer held; the salvage is not kept")

    def kept_salvage(self, issue: IssueRef) -> KeptSalvage | None:
        """Return the issue's kept salvage, if there is one."""
        kept = cast(dict[str, str], self.redis.hgetall(keys.salvage(issue)))
        if "sha" not in kept or "bundle" not in kept:
            return None
        try:
            bundle = base64.b64decode(kept["bundle"], validate=True)
        except binascii.Error:
            return None
        return KeptSalvage(sha=kept["sha"], bundle=bundle)

    def drop_salvage(self, issue: IssueRef, sha: str) -> None:
        """Forget the issue's kept salvage if it is still the one at sha."""
        self.redis.eval(_DROP_SALVAGE, 1, keys.salvage(issue), sha)

    def recovery_turn(self, issue: IssueRef, attempt: int) -> AbstractAsyncContextManager[None]:
        """Hold the turn to perform an attempt's recovery; MutexBusy at once if another has it.

        Kept for as long as its holder lives (its writes may wait for the pace).
        """
        return self._kept_mutex(keys.recovering(issue, attempt), LOCK_TTL_MS, 0.0)

    def owed_replay_due(self, issue: IssueRef, attempt: int) -> bool:
        """Tell whether the sweep may replay an attempt's owed recovery now, and if so count it.

        A recovery that fails every time (a comment GitHub refuses for good, say) is not
        replayed at every pass: the pause after each replay doubles, from a minute to six
        hours, and the first replay is at once.
        """
        if self.redis.exists(keys.owed_pause(issue, attempt)):
            return False
        with self.redis.pipeline() as pipe:
            pipe.incr(keys.owed_replays(issue, attempt))
            pipe.expire(keys.owed_replays(issue, attempt), OWED_REPLAYS_TTL_S)
            replays = int(pipe.execute()[0])
        pause = min(OWED_PAUSE_S * 2 ** (replays - 1), LONGEST_OWED_PAUSE_S)
        return bool(self.redis.set(keys.owed_pause(issue, attempt), "1", nx=True, ex=pause))

    def note_check_result(self, repo: str, sha: str) -> None:
        """Record that a check result for a head came in (it may precede the head's PR)."""
        self.redis.set(keys.checked(repo, sha), "1", ex=RUN_TTL_S)

    def take_check_result(self, repo: str, sha: str) -> bool:
        """Return whether a check result for the head came in, forgetting it."""
        return bool(self.redis.delete(keys.checked(repo, sha)))

    def settle_lock(self, repo: str, sha: str) -> AbstractAsyncContextManager[None]:
        """Hold the head's settle mutex, so two settlements of one head never run at once."""
        # Held at most a settle job's timeout (120 s); a waiter gives up after half of it.
        return self._mutex(keys.settling(repo, sha), 120_000, 60.0)
