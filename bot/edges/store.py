"""Baton's state in Redis: every key and every transition lives here."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import NamedTuple, cast

import redis
import redis.asyncio
from redis.exceptions import NoScriptError, WatchError

from bot.domain.issue_text import IssueText
from bot.domain.model import Chain, IssueRef, Labels, Run, RunState
from bot.domain.pacing import RateBudget
from bot.ops.metrics import MetricUpdate, Tally, run_duration, run_settled

log = logging.getLogger(__name__)

_PREFIX = "baton"
DELIVERY_TTL_S = 7 * 24 * 3600  # GitHub lets a delivery be redelivered for days, not weeks
RUN_TTL_S = 90 * 24 * 3600
LOCK_TTL_MS = 60_000  # by default a claim lives this long without a heartbeat
COMMENT_LOCK_TTL_MS = 15_000
COMMENT_LOCK_WAIT_S = 20.0
CHAIN_LOCK_TTL_MS = 300_000  # restacking a chain's branches: a few fetches and pushes
RECENT_RUNS = 200
ROLE_TTL_S = 60
NOTICE_TTL_S = 24 * 3600
CONFIG_RECHECK_S = 3600  # a repository's file is read this often at a branch, at once on a push
RATE_LIMITS_TTL_S = 7 * 24 * 3600  # an installation silent for a week is shown no more
CONDITIONAL_TTL_S = 24 * 3600  # an ETag older than a day is rarely still current
INTAKE_STREAM = f"{_PREFIX}:intake"
_CHAINS = f"{_PREFIX}:chains"
INTAKE_GROUP = "forwarders"
INTAKE_MAXLEN = 1_000_000  # a bound far above any backlog a live forwarder leaves


def _delivery_key(delivery_id: str) -> str:
    return f"{_PREFIX}:delivery:{delivery_id}"


# Takeover: every claim is also a member of one sorted set, scored by the instant its
# lock lapses without a heartbeat (by Redis's own clock, so no worker's clock matters).
# claim, heartbeat and release keep it in the lock's own step. The clock asks it every
# few seconds for claims that lapsed: one command, no GitHub call, so a dead worker's
# run is taken over seconds after its lock expires, not at the next full sweep.
_CLAIMS = f"{_PREFIX}:claims"
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
# A repository's run slots: a sorted set of issue numbers scored by when each
# slot lapses without a heartbeat, so a dead worker's slot frees itself.
# ARGV: now (ms), member, limit, ttl (ms).
_TAKE_SLOT = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZSCORE', KEYS[1], ARGV[2]) or redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[4]), ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return 1
end
return 0
"""
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
# Accept a batch of deliveries: each new delivery id is recorded and its chosen
# jobs appended to the intake stream in the same step, so a delivery is either
# seen-and-queued or neither. KEYS: the stream, then one dedupe key per delivery.
_ACCEPT = """
local accepted = {}
for i = 2, #KEYS do
  if redis.call('SET', KEYS[i], '1', 'NX', 'EX', ARGV[1]) then
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], '*',
               'delivery', ARGV[2 * i - 1], 'jobs', ARGV[2 * i])
    accepted[#accepted + 1] = 1
  else
    accepted[#accepted + 1] = 0
  end
end
return accepted
"""
# Close an account's usage window until an instant; a later reset already recorded wins.
_CLOSE_WINDOW = """
local current = redis.call('GET', KEYS[1])
if current and tonumber(current) >= tonumber(ARGV[1]) then return current end
redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2])
return ARGV[1]
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# Release an issue's claim, and take it out of the takeover index in the same step.
_RELEASE_CLAIM = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('ZREM', KEYS[2], ARGV[2])
  return redis.call('DEL', KEYS[1])
end
return 0
"""
# Grant an issue more continuations, unless the grants would pass a cap: {granted, total}.
_GRANT = """
local total = tonumber(redis.call('GET', KEYS[1]) or '0')
if total + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return {0, total} end
local granted = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return {1, granted}
"""


@dataclass(frozen=True)
class LapsedClaim:
    """An issue whose claim lapsed, as Redis has it now: whether its lock is held, its run."""

    issue: IssueRef
    locked: bool
    run: Run | None


class StoreError(Exception):
    """Redis could not be reached or refused an operation."""


class LockLost(StoreError):
    """A write was fenced off: the caller no longer holds the issue's lock."""


@dataclass(frozen=True)
class IntakeEntry:
    """One accepted delivery in the intake stream, with the jobs its handlers chose."""

    entry_id: str
    delivery_id: str
    jobs: str  # JSON, as the web process wrote it


def _intake_entry(entry: tuple[object, dict[object, object]]) -> IntakeEntry:
    entry_id, fields = entry
    values = {_text(k): _text(v) for k, v in fields.items()}
    return IntakeEntry(_text(entry_id), values.get("delivery", ""), values.get("jobs", "[]"))


@dataclass(frozen=True)
class Claim:
    """A held issue lock: the fencing token proves ownership on every write."""

    issue: IssueRef
    token: str

    @property
    def fence(self) -> int:
        """Return the monotonically increasing fencing number of this claim."""
        return int(self.token.split(".", 1)[0])


# What the sweep looks at: runs a worker holds, pushes waiting for their checks, and
# green PRs waiting for a merge, a close or a review whose webhook may be lost.
_IN_FLIGHT = frozenset(
    {
        RunState.CLAIMED,
        RunState.PROVISIONING,
        RunState.RUNNING,
        RunState.PUSHED_PENDING,
        RunState.PUSHED_GREEN,
    }
)


def _issue_key(issue: IssueRef, *parts: str) -> str:
    return ":".join((_PREFIX, "issue", issue.repo, str(issue.number), *parts))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _indexed_issue(issue: IssueRef) -> str:
    return f"{issue.installation_id}:{issue.repo}:{issue.number}"


def _issue_from_index(member: object) -> IssueRef:
    installation, rest = _text(member).split(":", 1)
    repo, number = rest.rsplit(":", 1)
    return IssueRef(installation_id=int(installation), repo=repo, number=int(number))


def _run_address(repo: str, value: object) -> tuple[IssueRef, int] | None:
    if value is None:
        return None
    installation, number, attempt = (int(part) for part in _text(value).split(":"))
    return IssueRef(installation_id=installation, repo=repo, number=number), attempt


def _installation_key(app: str, installation_id: int | str, what: str) -> str:
    return f"{_PREFIX}:app:{app}:installation:{installation_id}:{what}"


def _conditional_key(scope: str, url: str) -> str:
    return f"{_PREFIX}:etag:{scope}:{hashlib.sha256(url.encode()).hexdigest()[:32]}"


class CachedToken(NamedTuple):
    """An installation token as cached, and when it was minted (epoch seconds)."""

    token: str
    minted_at: float


def _run_key(issue: IssueRef, attempt: int) -> str:
    return _issue_key(issue, "run", str(attempt))


def _metric_key(name: str) -> str:
    return f"{_PREFIX}:metrics:{name}"


def _queue_metrics(pipe: redis.client.Pipeline, updates: Sequence[MetricUpdate]) -> None:
    for update in updates:
        key = _metric_key(update.metric)
        if update.how == "set":
            pipe.hset(key, update.field, update.value)
        elif update.how == "add_float":
            pipe.hincrbyfloat(key, update.field, update.value)
        else:
            pipe.hincrby(key, update.field, int(update.value))


class Store:
    """Typed access to Baton's Redis state."""

    def __init__(self, client: redis.Redis, lock_ttl_ms: int = LOCK_TTL_MS) -> None:
        self.redis = client
        self.lock_ttl_ms = lock_ttl_ms
        self._claim = client.register_script(_CLAIM)
        self._heartbeat = client.register_script(_HEARTBEAT)
        self._release = client.register_script(_RELEASE)
        self._release_claim = client.register_script(_RELEASE_CLAIM)
        self._close_window = client.register_script(_CLOSE_WINDOW)
        self._take_slot = client.register_script(_TAKE_SLOT)
        self._grant = client.register_script(_GRANT)
        self._lapsed = client.register_script(_LAPSED)
        self._forget_lapsed = client.register_script(_FORGET_LAPSED)

    @classmethod
    def from_url(cls, url: str, lock_ttl_ms: int = LOCK_TTL_MS) -> Store:
        """Connect to the Redis at url (lazily: the first command connects)."""
        client = redis.Redis.from_url(url, decode_responses=True, health_check_interval=30)
        return cls(client, lock_ttl_ms)

    def ping(self) -> None:
        """Check Redis answers, raising one clear StoreError if it does not."""
        try:
            self.redis.ping()
        except redis.RedisError as exc:
            raise StoreError(f"Redis is unreachable: {exc}") from exc

    # The intake: accepted deliveries on their way to RQ ---------------------

    def ensure_intake_group(self) -> None:
        """Create the forwarders' consumer group on the intake stream, if it is missing."""
        try:
            self.redis.xgroup_create(INTAKE_STREAM, INTAKE_GROUP, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def read_intake(self, consumer: str, count: int, block_ms: int | None) -> list[IntakeEntry]:
        """Take up to count new intake entries for this consumer, waiting up to block_ms.

        block_ms None does not wait at all (0 would wait for ever, as in XREADGROUP).
        """
        reply = self.redis.xreadgroup(
            INTAKE_GROUP, consumer, {INTAKE_STREAM: ">"}, count=count, block=block_ms
        )
        streams = cast(list[tuple[object, list[tuple[object, dict[object, object]]]]], reply or [])
        return [_intake_entry(entry) for _stream, entries in streams for entry in entries]

    def reclaim_intake(self, consumer: str, min_idle_ms: int, count: int) -> list[IntakeEntry]:
        """Take over entries another consumer read but never acknowledged (it died)."""
        reply = self.redis.xautoclaim(
            INTAKE_STREAM, INTAKE_GROUP, consumer, min_idle_ms, start_id="0", count=count
        )
        return [_intake_entry(entry) for entry in reply[1] if entry[1]]

    def ack_intake(self, entry_ids: Sequence[str]) -> None:
        """Mark intake entries done and drop them from the stream."""
        if entry_ids:
            with self.redis.pipeline() as pipe:
                pipe.xack(INTAKE_STREAM, INTAKE_GROUP, *entry_ids)
                pipe.xdel(INTAKE_STREAM, *entry_ids)
                pipe.execute()

    def intake_backlog(self) -> int:
        """Return how many accepted deliveries wait to become jobs."""
        return int(self.redis.xlen(INTAKE_STREAM))

    # The App's identity --------------------------------------------------

    def bot_login(self) -> str | None:
        """Return the App's bot login as learnt by a worker, if known."""
        value = self.redis.get(f"{_PREFIX}:app:bot-login")
        return str(value) if value is not None else None

    def set_bot_login(self, login: str) -> None:
        """Remember the App's bot login so the web process can ignore its own events."""
        self.redis.set(f"{_PREFIX}:app:bot-login", login)

    def bot_user_id(self) -> int | None:
        """Return the App's bot account id as learnt by a worker, if known."""
        value = self.redis.get(f"{_PREFIX}:app:bot-user-id")
        return int(value) if value is not None else None

    def set_bot_user_id(self, user_id: int) -> None:
        """Remember the App's bot account id, which its noreply commit address carries."""
        self.redis.set(f"{_PREFIX}:app:bot-user-id", user_id)

    def installation_token(self, app: str, installation_id: int) -> CachedToken | None:
        """Return a cached token of the app's installation that is still comfortably valid.

        app names the App and the GitHub it lives on: installation ids are only
        unique within one.
        """
        value = self.redis.get(_installation_key(app, installation_id, "token"))
        if value is None:
            return None
        token, _, minted_at = str(value).partition(" ")
        return CachedToken(token, float(minted_at or 0))

    def cache_installation_token(
        self, app: str, installation_id: int, token: str, ttl_s: int, minted_at: float
    ) -> None:
        """Cache an installation token for ttl_s seconds (shorter than its life)."""
        if ttl_s > 0:
            key = _installation_key(app, installation_id, "token")
            self.redis.set(key, f"{token} {minted_at}", ex=ttl_s)

    def record_rate_limit(self, app: str, installation_id: int, budget: RateBudget) -> None:
        """Remember what GitHub last said of an installation's hourly request budget."""
        key = f"{_PREFIX}:app:{app}:rate-limits"  # one field per installation: a bounded set
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(key, str(installation_id), budget.model_dump_json())
            pipe.expire(key, RATE_LIMITS_TTL_S)
            pipe.execute()

    def rate_limit(self, app: str, installation_id: int) -> RateBudget | None:
        """Return an installation's last known request budget, if a response told it."""
        raw = self.redis.hget(f"{_PREFIX}:app:{app}:rate-limits", str(installation_id))
        return RateBudget.model_validate_json(raw) if raw is not None else None

    def rate_limits(self, app: str) -> dict[int, RateBudget]:
        """Return the last known request budget of every installation that has one."""
        found = self.redis.hgetall(f"{_PREFIX}:app:{app}:rate-limits")
        return {
            int(_text(installation)): RateBudget.model_validate_json(raw)
            for installation, raw in sorted(found.items())
        }

    def conditional_read(self, scope: str, url: str) -> str | None:
        """Return what a GET of url answered last, with its ETag (JSON), for a conditional read."""
        value = self.redis.get(_conditional_key(scope, url))
        return _text(value) if value is not None else None

    def remember_conditional_read(self, scope: str, url: str, entry: str) -> None:
        """Keep what a GET of url answered, for its next read to be conditional."""
        self.redis.set(_conditional_key(scope, url), entry, ex=CONDITIONAL_TTL_S)

    def forget_conditional_read(self, scope: str, url: str) -> None:
        """Drop a conditional read's entry."""
        self.redis.delete(_conditional_key(scope, url))

    # Claims --------------------------------------------------------------

    def claim(self, issue: IssueRef) -> Claim | None:
        """Take the issue's lock; None if someone else holds it."""
        token = self._claim(
            keys=[_issue_key(issue, "lock"), _issue_key(issue, "fence"), _CLAIMS],
            args=[secrets.token_hex(8), self.lock_ttl_ms, RUN_TTL_S, _indexed_issue(issue)],
        )
        return Claim(issue=issue, token=str(token)) if token else None

    def heartbeat(self, claim: Claim) -> bool:
        """Extend the claim's life; False if it was lost (expired or taken)."""
        return bool(
            self._heartbeat(
                keys=[_issue_key(claim.issue, "lock"), _CLAIMS],
                args=[claim.token, self.lock_ttl_ms, _indexed_issue(claim.issue)],
            )
        )

    def release(self, claim: Claim) -> None:
        """Give the issue's lock back, if this claim still holds it."""
        self._release_claim(
            keys=[_issue_key(claim.issue, "lock"), _CLAIMS],
            args=[claim.token, _indexed_issue(claim.issue)],
        )

    def lock_holder(self, issue: IssueRef) -> str | None:
        """Return the fencing token currently holding the issue, if any."""
        value = self.redis.get(_issue_key(issue, "lock"))
        return str(value) if value is not None else None

    # Takeover ------------------------------------------------------------

    def lapsed_claims(self) -> list[LapsedClaim]:
        """Return the claims whose lock lapsed by now, each with its lock and latest run.

        Nothing lapsed costs one command; each lapsed claim two reads more, pipelined.
        """
        issues = [_issue_from_index(member) for member in self._lapsed(keys=[_CLAIMS])]
        if not issues:
            return []
        with self.redis.pipeline(transaction=False) as pipe:
            for issue in issues:
                pipe.exists(_issue_key(issue, "lock"))
                pipe.get(_issue_key(issue, "attempts"))
            answers = pipe.execute()
        attempts = dict(zip(issues, answers[1::2], strict=True))
        numbered = [issue for issue in issues if attempts[issue] is not None]
        raws = (
            self.redis.mget([_run_key(i, int(attempts[i])) for i in numbered]) if numbered else []
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
        member = _indexed_issue(issue)
        return bool(self._forget_lapsed(keys=[_issue_key(issue, "lock"), _CLAIMS], args=[member]))

    # Runs ----------------------------------------------------------------

    def next_attempt(self, claim: Claim) -> int:
        """Return the number of the next attempt at the claimed issue."""
        key = _issue_key(claim.issue, "attempts")
        with self.redis.pipeline() as pipe:
            pipe.incr(key)
            pipe.expire(key, RUN_TTL_S)
            return int(pipe.execute()[0])

    def save_run(self, run: Run, claim: Claim) -> None:
        """Write a run as the holder of its issue's lock; raise LockLost otherwise."""
        lock_key = _issue_key(claim.issue, "lock")
        run_key = _run_key(run.issue, run.attempt)
        with self.redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(lock_key, run_key)  # type: ignore[no-untyped-call]
                    if pipe.get(lock_key) != claim.token:
                        raise LockLost(f"{run.issue}: the lock is no longer held by this run")
                    stored = pipe.get(run_key)
                    before = Run.model_validate_json(stored).state if stored is not None else None
                    pipe.multi()
                    self._queue_run_write(pipe, run, before)
                    pipe.execute()
                    return
                except WatchError:
                    continue

    def latest_run(self, issue: IssueRef) -> Run | None:
        """Return the issue's most recent run, if it has one."""
        attempts = self.redis.get(_issue_key(issue, "attempts"))
        if attempts is None:
            return None
        return self.run(issue, int(attempts))

    def run(self, issue: IssueRef, attempt: int) -> Run | None:
        """Return one run of an issue."""
        raw = self.redis.get(_run_key(issue, attempt))
        return Run.model_validate_json(raw) if raw is not None else None

    def runs(self, issue: IssueRef) -> list[Run]:
        """Return every recorded run of an issue, oldest first."""
        attempts = int(self.redis.get(_issue_key(issue, "attempts")) or 0)
        keys = [_run_key(issue, n) for n in range(1, attempts + 1)]
        raws = self.redis.mget(keys) if keys else []
        return [Run.model_validate_json(raw) for raw in raws if raw is not None]

    def update_run(
        self, issue: IssueRef, attempt: int, change: Callable[[Run], Run | None]
    ) -> Run | None:
        """Apply change to the stored run atomically; return the new run, or None if unchanged.

        change is a pure function of the current run; it returns None to leave it
        as it is (a stale or repeated event), which is how redelivered webhooks and
        retried jobs become harmless.
        """
        key = _run_key(issue, attempt)
        with self.redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)  # type: ignore[no-untyped-call]
                    raw = pipe.get(key)
                    if raw is None:
                        return None
                    current = Run.model_validate_json(raw)
                    new = change(current)
                    if new is None:
                        pipe.unwatch()
                        return None
                    pipe.multi()
                    self._queue_run_write(pipe, new, current.state)
                    pipe.execute()
                    return new
                except WatchError:
                    continue

    def run_for_head(self, repo: str, sha: str) -> tuple[IssueRef, int] | None:
        """Return the issue and attempt whose push produced this head sha."""
        return _run_address(repo, self.redis.get(f"{_PREFIX}:head:{repo}:{sha}"))

    def run_for_pull(self, repo: str, number: int) -> tuple[IssueRef, int] | None:
        """Return the issue and the newest attempt that pushed to this pull request."""
        return _run_address(repo, self.redis.get(f"{_PREFIX}:pull:{repo}:{number}"))

    def recent_runs(self, limit: int = 50) -> list[Run]:
        """Return the most recently started runs across all repositories, newest first."""
        members = self.redis.zrevrange(f"{_PREFIX}:runs:recent", 0, limit - 1)
        keys = [f"{_PREFIX}:issue:{_text(member)}" for member in members]
        raws = self.redis.mget(keys) if keys else []
        return [Run.model_validate_json(raw) for raw in raws if raw is not None]

    def _queue_run_write(
        self, pipe: redis.client.Pipeline, run: Run, before: RunState | None
    ) -> None:
        issue = run.issue
        pipe.set(_run_key(issue, run.attempt), run.model_dump_json(), ex=RUN_TTL_S)
        if run_settled(before, run):
            # In the write's own transaction: a settling is observed once, however often retried.
            _queue_metrics(pipe, run_duration(run).updates())
        member = f"{issue.repo}:{issue.number}:run:{run.attempt}"
        pipe.zadd(f"{_PREFIX}:runs:recent", {member: run.started_at.timestamp()})
        pipe.zremrangebyrank(f"{_PREFIX}:runs:recent", 0, -RECENT_RUNS - 1)
        where = f"{issue.installation_id}:{issue.number}:{run.attempt}"
        if run.head_sha is not None:
            pipe.set(f"{_PREFIX}:head:{issue.repo}:{run.head_sha}", where, ex=RUN_TTL_S)
        if run.pr_number is not None:
            # The newest attempt on a PR wins: that is the run a review or merge concerns.
            pipe.set(f"{_PREFIX}:pull:{issue.repo}:{run.pr_number}", where, ex=RUN_TTL_S)
        if run.state in _IN_FLIGHT:
            pipe.zadd(f"{_PREFIX}:in-flight", {_indexed_issue(issue): run.started_at.timestamp()})
        else:
            pipe.zrem(f"{_PREFIX}:in-flight", _indexed_issue(issue))

    def in_flight(self) -> list[IssueRef]:
        """Return the issues whose latest run is live, waiting for its checks, or green."""
        return [issue for issue, _ in self._indexed(f"{_PREFIX}:in-flight")]

    # The sweep ------------------------------------------------------------

    def first_notice(self, what: str) -> bool:
        """Return True the first time in a day that what is noticed (to log it once)."""
        key = f"{_PREFIX}:notice:{hashlib.sha256(what.encode()).hexdigest()[:32]}"
        return bool(self.redis.set(key, "1", nx=True, ex=NOTICE_TTL_S))

    def forget_issue(self, issue: IssueRef) -> None:
        """Drop what Baton keeps to work on an issue that is gone; its run records expire."""
        member = _indexed_issue(issue)
        with self.redis.pipeline() as pipe:
            for index in ("in-flight", "waiting", "halted"):
                pipe.zrem(f"{_PREFIX}:{index}", member)
            pipe.zrem(f"{_PREFIX}:slots:{issue.repo}", str(issue.number))
            pipe.delete(
                *(
                    _issue_key(issue, what)
                    for what in (
                        "status-comment",
                        "desired-label",
                        "label-set",
                        "label-applied",
                        "label-removals",
                        "queued-text",
                        "queue-refused",
                        "extra-continuations",
                        "chain",
                    )
                )
            )
            pipe.execute()

    def take_sweep_lease(self, holder: str, ttl_ms: int) -> bool:
        """Become the one sweep running now; False while another holds the lease."""
        return bool(self.redis.set(f"{_PREFIX}:sweep-lease", holder, nx=True, px=ttl_ms))

    def sweep_lease_holder(self) -> str | None:
        """Return who holds the sweep lease, if anyone."""
        value = self.redis.get(f"{_PREFIX}:sweep-lease")
        return None if value is None else _text(value)

    def release_sweep_lease(self, holder: str) -> None:
        """Give the sweep lease back, if this holder still has it."""
        self._release(keys=[f"{_PREFIX}:sweep-lease"], args=[holder])

    # Comments ------------------------------------------------------------

    def status_comment(self, issue: IssueRef) -> int | None:
        """Return the id of the issue's status comment, if one was posted."""
        value = self.redis.get(_issue_key(issue, "status-comment"))
        return int(value) if value is not None else None

    def set_status_comment(self, issue: IssueRef, comment_id: int) -> None:
        """Remember the issue's status comment so it is edited, never posted twice."""
        self.redis.set(_issue_key(issue, "status-comment"), comment_id, ex=RUN_TTL_S)

    def pull_status_comment(self, repo: str, number: int) -> int | None:
        """Return the id of a pull request's status comment, if one was posted."""
        value = self.redis.get(f"{_PREFIX}:pull:{repo}:{number}:status-comment")
        return int(value) if value is not None else None

    def set_pull_status_comment(self, repo: str, number: int, comment_id: int) -> None:
        """Remember a pull request's status comment so it is edited, never posted twice."""
        self.redis.set(f"{_PREFIX}:pull:{repo}:{number}:status-comment", comment_id, ex=RUN_TTL_S)

    def comment_lock(self, issue: IssueRef) -> AbstractAsyncContextManager[None]:
        """Hold the issue's comment mutex, so two jobs never edit its comments out of order."""
        return self._mutex(
            _issue_key(issue, "comment-lock"), COMMENT_LOCK_TTL_MS, COMMENT_LOCK_WAIT_S
        )

    def chain_lock(self, chain: Chain) -> AbstractAsyncContextManager[None]:
        """Hold the chain's mutex, so two merges never restack its branches at once."""
        key = f"{_PREFIX}:chain-lock:{chain.chain_id}"
        return self._mutex(key, CHAIN_LOCK_TTL_MS, CHAIN_LOCK_TTL_MS / 1000)

    @asynccontextmanager
    async def _mutex(self, key: str, ttl_ms: int, wait_s: float) -> AsyncIterator[None]:
        token = secrets.token_hex(8)
        deadline = time.monotonic() + wait_s
        while not self.redis.set(key, token, nx=True, px=ttl_ms):
            if time.monotonic() > deadline:
                break  # a holder that died: its lock has expired by now
            await asyncio.sleep(0.02)
        try:
            yield
        finally:
            self._release(keys=[key], args=[token])

    def first_escalation(self, issue: IssueRef, reason: str, attempt: int) -> bool:
        """Record an escalation; False if this one (issue, reason, attempt) was recorded before."""
        key = _issue_key(issue, "escalated", str(attempt), reason)
        return bool(self.redis.set(key, "1", nx=True, ex=RUN_TTL_S))

    def forget_escalation(self, issue: IssueRef, reason: str, attempt: int) -> None:
        """Forget an escalation whose comment could not be posted, so a retry posts it."""
        self.redis.delete(_issue_key(issue, "escalated", str(attempt), reason))

    # Usage windows: a gate per provider account -------------------------

    def close_window(self, account: str, reopens_at: datetime) -> datetime:
        """Close the account's usage window until reopens_at; return when it reopens.

        The key expires as the window reopens, so a gate can never stay shut.
        """
        reopens = self._close_window(
            keys=[f"{_PREFIX}:window:{account}"],
            args=[reopens_at.timestamp(), int(reopens_at.timestamp() * 1000)],
        )
        return datetime.fromtimestamp(float(_text(reopens)), UTC)

    def window_reopens_at(self, account: str, now: datetime) -> datetime | None:
        """Return when the account's usage window reopens, or None while it is open."""
        value = self.redis.get(f"{_PREFIX}:window:{account}")
        if value is None:
            return None
        reopens = datetime.fromtimestamp(float(_text(value)), UTC)
        return reopens if reopens > now else None

    def take_run_slot(self, issue: IssueRef, limit: int) -> bool:
        """Take one of the repository's run slots for the issue; False when all are taken."""
        now_ms = int(time.time() * 1000)
        key = f"{_PREFIX}:slots:{issue.repo}"
        return bool(
            self._take_slot(keys=[key], args=[now_ms, issue.number, limit, self.lock_ttl_ms])
        )

    def refresh_run_slot(self, issue: IssueRef) -> None:
        """Keep the issue's run slot while its run heartbeats (a slot it does not hold stays so)."""
        expires = int(time.time() * 1000) + self.lock_ttl_ms
        self.redis.zadd(f"{_PREFIX}:slots:{issue.repo}", {str(issue.number): expires}, xx=True)

    def release_run_slot(self, issue: IssueRef) -> None:
        """Give the issue's run slot back."""
        self.redis.zrem(f"{_PREFIX}:slots:{issue.repo}", str(issue.number))

    def is_waiting(self, issue: IssueRef) -> bool:
        """Return whether the issue waits, unstarted, for a window or a run slot."""
        return self.redis.zscore(f"{_PREFIX}:waiting", _indexed_issue(issue)) is not None

    def record_wait(self, issue: IssueRef, until: datetime) -> None:
        """Index an issue that waits, unstarted, for a window or a run slot."""
        self.redis.zadd(f"{_PREFIX}:waiting", {_indexed_issue(issue): until.timestamp()})

    def clear_wait(self, issue: IssueRef) -> None:
        """Drop the issue from the waiting index (it started, or moved on)."""
        self.redis.zrem(f"{_PREFIX}:waiting", _indexed_issue(issue))

    def waits(self) -> list[tuple[IssueRef, datetime]]:
        """Return every issue waiting for a window or a run slot, soonest first."""
        return self._indexed(f"{_PREFIX}:waiting")

    # Chains ---------------------------------------------------------------

    def save_chain(self, chain: Chain) -> Chain:
        """Record a chain as queued, one generation after any earlier queueing of it.

        Each link then belongs to this chain: an issue runs in one chain at a time.
        """
        key = f"{_PREFIX}:chain:{chain.chain_id}"
        with self.redis.pipeline() as pipe:
            pipe.incr(f"{_PREFIX}:chain-generation:{chain.chain_id}")
            pipe.expire(f"{_PREFIX}:chain-generation:{chain.chain_id}", RUN_TTL_S)
            generation = int(pipe.execute()[0])
        saved = chain.model_copy(update={"generation": generation})
        with self.redis.pipeline() as pipe:
            pipe.set(key, saved.model_dump_json(), ex=RUN_TTL_S)
            # The overview lists chains from this index, never by scanning the keyspace.
            pipe.zadd(_CHAINS, {chain.chain_id: time.time()})
            pipe.zremrangebyscore(_CHAINS, "-inf", time.time() - RUN_TTL_S)
            for number in {*chain.links, chain.head}:
                pipe.set(_issue_key(chain.issue(number), "chain"), chain.chain_id, ex=RUN_TTL_S)
            pipe.execute()
        return saved

    def chain(self, chain_id: str) -> Chain | None:
        """Return a chain by its id."""
        raw = self.redis.get(f"{_PREFIX}:chain:{chain_id}")
        return None if raw is None else Chain.model_validate_json(raw)

    def chain_of(self, issue: IssueRef) -> Chain | None:
        """Return the chain the issue is a link (or the tracking issue) of, if any."""
        chain_id = self.redis.get(_issue_key(issue, "chain"))
        return None if chain_id is None else self.chain(_text(chain_id))

    def chains(self) -> list[Chain]:
        """Return every recorded chain, newest first."""
        ids = [_text(member) for member in self.redis.zrevrange(_CHAINS, 0, -1)]
        raws = self.redis.mget([f"{_PREFIX}:chain:{chain_id}" for chain_id in ids]) if ids else []
        return [Chain.model_validate_json(raw) for raw in raws if raw is not None]

    def record_checkpoint(self, issue: IssueRef, attempt: int, sha: str) -> None:
        """Record the agent's work an attempt pushed while it ran."""
        self.redis.set(_issue_key(issue, "checkpoint", str(attempt)), sha, ex=RUN_TTL_S)

    def checkpoint(self, issue: IssueRef, attempt: int) -> str | None:
        """Return the last checkpoint an attempt pushed, if any."""
        value = self.redis.get(_issue_key(issue, "checkpoint", str(attempt)))
        return None if value is None else _text(value)

    # The issue's text as queued (bot/domain/issue_text.py) --------------------------

    def queued_text(self, issue: IssueRef) -> IssueText | None:
        """Return the issue's text as queued, with the edits made since, if recorded."""
        raw = self.redis.get(_issue_key(issue, "queued-text"))
        return None if raw is None else IssueText.model_validate_json(raw)

    def update_queued_text(
        self, issue: IssueRef, change: Callable[[IssueText | None], IssueText | None]
    ) -> IssueText | None:
        """Apply change to the issue's text record atomically; return it, or None if unchanged.

        change is a pure function of the record as stored (None when there is none);
        it returns None to leave it as it is. The record lives until the issue is
        queued again, or closed (or for RUN_TTL_S untouched).
        """
        key = _issue_key(issue, "queued-text")
        with self.redis.pipeline() as pipe:
            while True:
                try:
                    pipe.watch(key)  # type: ignore[no-untyped-call]
                    raw = pipe.get(key)
                    current = None if raw is None else IssueText.model_validate_json(raw)
                    new = change(current)
                    if new is None:
                        pipe.unwatch()
                        return None
                    pipe.multi()
                    pipe.set(key, new.model_dump_json(), ex=RUN_TTL_S)
                    pipe.execute()
                    return new
                except WatchError:
                    continue

    def forget_queued_text(self, issue: IssueRef) -> None:
        """Drop the issue's text record (the issue was closed)."""
        self.redis.delete(_issue_key(issue, "queued-text"))

    # Comment commands -----------------------------------------------------

    def first_command(self, repo: str, comment_id: int) -> bool:
        """Record that a command comment was handled; False if it was before (a redelivery)."""
        key = f"{_PREFIX}:command:{repo}:{comment_id}"
        return bool(self.redis.set(key, "1", nx=True, ex=RUN_TTL_S))

    def first_review(self, repo: str, review_id: int) -> bool:
        """Record that a review acted on a run; False if one did before (a redelivery)."""
        key = f"{_PREFIX}:review:{repo}:{review_id}"
        return bool(self.redis.set(key, "1", nx=True, ex=RUN_TTL_S))

    def first_queue_refusal(self, issue: IssueRef) -> bool:
        """Record that the issue was told who may queue it; False if it was already."""
        return bool(self.redis.set(_issue_key(issue, "queue-refused"), "1", nx=True, ex=RUN_TTL_S))

    def forget_queue_refusal(self, issue: IssueRef) -> None:
        """Forget that the issue was told who may queue it (the comment was not posted)."""
        self.redis.delete(_issue_key(issue, "queue-refused"))

    def cached_role(self, repo: str, login: str) -> str | None:
        """Return a collaborator's role on the repository, if it was looked up lately."""
        value = self.redis.get(f"{_PREFIX}:role:{repo}:{login}")
        return None if value is None else _text(value)

    def cache_role(self, repo: str, login: str, role: str) -> None:
        """Keep a collaborator's role briefly: a revoked permission must take effect soon."""
        self.redis.set(f"{_PREFIX}:role:{repo}:{login}", role, ex=ROLE_TTL_S)

    def grant_budget(self, issue: IssueRef, continuations: int, cap: int) -> tuple[bool, int]:
        """Give the issue more continuations than its policy, unless all grants would pass cap.

        Returns whether they were granted and how many extra the issue has in all.
        """
        granted, total = cast(
            list[int],
            self._grant(
                keys=[_issue_key(issue, "extra-continuations")],
                args=[continuations, cap, RUN_TTL_S],
            ),
        )
        return bool(granted), int(total)

    def extra_continuations(self, issue: IssueRef) -> int:
        """Return the continuations maintainers added to the issue's budget."""
        value = self.redis.get(_issue_key(issue, "extra-continuations"))
        return int(value) if value is not None else 0

    # Pausing a repository -------------------------------------------------

    def pause(self, repo: str, at: datetime) -> None:
        """Hold every new claim in the repository until it is resumed."""
        self.redis.hsetnx(f"{_PREFIX}:paused", repo, at.isoformat())

    def resume_repo(self, repo: str) -> list[tuple[int, str, int]]:
        """Lift the pause; return the held starts (issue number, run mode, attempt after)."""
        key = f"{_PREFIX}:held:{repo}"
        with self.redis.pipeline() as pipe:
            pipe.hdel(f"{_PREFIX}:paused", repo)
            pipe.hgetall(key)
            pipe.delete(key, f"{_PREFIX}:held-settled:{repo}")
            _, held, _ = pipe.execute()
        starts = []
        for number, start in cast(dict[str, str], held).items():
            mode, after = start.split(":")
            starts.append((int(number), mode, int(after)))
        return sorted(starts)

    def paused_since(self, repo: str) -> datetime | None:
        """Return when the repository was paused, or None if it is not."""
        value = self.redis.hget(f"{_PREFIX}:paused", repo)
        return None if value is None else datetime.fromisoformat(_text(value))

    def hold(self, issue: IssueRef, mode: str, after: int) -> None:
        """Record a start a pause held, to be made when the repository is resumed."""
        self.redis.hset(f"{_PREFIX}:held:{issue.repo}", str(issue.number), f"{mode}:{after}")

    def held_issues(self, repo: str) -> list[int]:
        """Return the numbers of the repository's issues whose starts a pause holds."""
        return sorted(int(number) for number in self.redis.hkeys(f"{_PREFIX}:held:{repo}"))

    def count_paused_settlement(self, repo: str) -> None:
        """Count a settlement made while the repository is paused (it still settles)."""
        self.redis.incr(f"{_PREFIX}:held-settled:{repo}")

    def pauses(self) -> list[tuple[str, datetime, int, int]]:
        """Return each paused repository: since when, held starts, settlements made since."""
        found = []
        for repo, since in cast(dict[str, str], self.redis.hgetall(f"{_PREFIX}:paused")).items():
            held = int(self.redis.hlen(f"{_PREFIX}:held:{repo}"))
            settled = int(self.redis.get(f"{_PREFIX}:held-settled:{repo}") or 0)
            found.append((repo, datetime.fromisoformat(since), held, settled))
        return sorted(found)

    # Repository configuration ------------------------------------------

    def record_queue_label(self, repo: str, label: str | None) -> None:
        """Remember the repository's own queue label (None: it uses the deployment's)."""
        if label is None:
            self.redis.hdel(f"{_PREFIX}:queue-labels", repo)
        else:
            self.redis.hset(f"{_PREFIX}:queue-labels", repo, label)

    def queue_labels(self) -> dict[str, str]:
        """Return every repository's own queue label, where it has one."""
        found = self.redis.hgetall(f"{_PREFIX}:queue-labels")
        return {_text(repo): _text(label) for repo, label in found.items()}

    def see_repo_file(self, repo: str, ref: str, blob_sha: str, text: str) -> None:
        """Remember the repository's file as read at ref ("" blob: none), for an hour."""
        key = f"{_PREFIX}:config-seen:{repo}"
        self.redis.set(key, json.dumps([ref, blob_sha, text]), ex=CONFIG_RECHECK_S)

    def seen_repo_file(self, repo: str, ref: str) -> tuple[str, str] | None:
        """Return the file's blob and text as last read at ref within the hour, if it was."""
        raw = self.redis.get(f"{_PREFIX}:config-seen:{repo}")
        if raw is None:
            return None
        seen_at, blob_sha, text = json.loads(raw)
        return (str(blob_sha), str(text)) if seen_at == ref else None

    def see_repository(self, repo: str, facts: dict[str, str]) -> None:
        """Remember what Baton needs of a repository (default branch, clone URL), for an hour."""
        self.redis.set(f"{_PREFIX}:repo-seen:{repo}", json.dumps(facts), ex=CONFIG_RECHECK_S)

    def seen_repository(self, repo: str) -> dict[str, str] | None:
        """Return what Baton read of the repository within the hour, if it did."""
        raw = self.redis.get(f"{_PREFIX}:repo-seen:{repo}")
        return {str(k): str(v) for k, v in json.loads(raw).items()} if raw is not None else None

    def forget_repo_file(self, repo: str) -> None:
        """Forget the file as last read: a push changed it."""
        self.redis.delete(f"{_PREFIX}:config-seen:{repo}")

    def cached_repo_config(self, repo: str, blob_sha: str) -> str | None:
        """Return the validated config (JSON) of a version of a repository's file, if cached."""
        value = self.redis.get(f"{_PREFIX}:config:{repo}:{blob_sha}")
        return None if value is None else _text(value)

    def cache_repo_config(self, repo: str, blob_sha: str, config_json: str) -> None:
        """Keep a version's validated config: a blob's content never changes."""
        self.redis.set(f"{_PREFIX}:config:{repo}:{blob_sha}", config_json, ex=RUN_TTL_S)

    def first_config_error(self, issue: IssueRef, blob_sha: str) -> bool:
        """Record that the issue was told of an invalid file version; False if it was already."""
        key = _issue_key(issue, "config-error", blob_sha)
        return bool(self.redis.set(key, "1", nx=True, ex=RUN_TTL_S))

    # Labels: the outbox -------------------------------------------------

    def label_set(self, issue: IssueRef) -> Labels | None:
        """Return the Baton labels recorded for the issue's repository with its desired label."""
        value = self.redis.get(_issue_key(issue, "label-set"))
        return None if value is None else Labels.model_validate_json(_text(value))

    def desired_label(self, issue: IssueRef) -> str | None:
        """Return the Baton state label the issue should carry, if one was recorded."""
        value = self.redis.get(_issue_key(issue, "desired-label"))
        return (_text(value) or None) if value is not None else None

    # Halts: issues waiting for a provider's usage window ---------------

    def record_halt(self, issue: IssueRef, resume_at: datetime) -> None:
        """Index a halted issue by when it may resume, so a lost re-entry is found again."""
        self.redis.zadd(f"{_PREFIX}:halted", {_indexed_issue(issue): resume_at.timestamp()})

    def clear_halt(self, issue: IssueRef) -> None:
        """Drop the issue from the halt index (it resumed, or moved on)."""
        self.redis.zrem(f"{_PREFIX}:halted", _indexed_issue(issue))

    def halts(self) -> list[tuple[IssueRef, datetime]]:
        """Return every halted issue with when it may resume, soonest first."""
        return self._indexed(f"{_PREFIX}:halted")

    def _indexed(self, key: str) -> list[tuple[IssueRef, datetime]]:
        entries = cast(list[tuple[object, float]], self.redis.zrange(key, 0, -1, withscores=True))
        indexed = []
        for member, score in entries:
            indexed.append((_issue_from_index(member), datetime.fromtimestamp(float(score), UTC)))
        return indexed

    # Stop requests ------------------------------------------------------

    def record_withdrawal(self, issue: IssueRef, at: datetime) -> None:
        """Record that a maintainer withdrew the issue at an instant (took its label off)."""
        self.redis.set(_issue_key(issue, "withdrawn"), at.isoformat(), ex=RUN_TTL_S)

    def withdrawn_since(self, issue: IssueRef, since: datetime) -> bool:
        """Return whether a maintainer withdrew the issue after since."""
        value = self.redis.get(_issue_key(issue, "withdrawn"))
        return value is not None and datetime.fromisoformat(_text(value)) > since

    def request_stop(self, issue: IssueRef) -> None:
        """Ask whoever runs the issue to stop (an operator closed the issue)."""
        self.redis.set(_issue_key(issue, "stop"), "1", ex=3600)

    def stop_requested(self, issue: IssueRef) -> bool:
        """Return whether an operator asked the issue's run to stop."""
        return bool(self.redis.exists(_issue_key(issue, "stop")))

    def clear_stop(self, issue: IssueRef) -> None:
        """Forget a stop request once it was honoured (or a new run begins)."""
        self.redis.delete(_issue_key(issue, "stop"))

    # Observability -------------------------------------------------------

    def mark(self, what: str, at: datetime) -> None:
        """Record when something last happened (a dispatch, a sweep)."""
        self.redis.hset(f"{_PREFIX}:last", what, at.isoformat())

    def marks(self) -> dict[str, str]:
        """Return when each recorded thing last happened."""
        return {str(k): str(v) for k, v in self.redis.hgetall(f"{_PREFIX}:last").items()}

    # Metrics: counts every process adds to (bot/ops/metrics.py) ----------------

    def add_metrics(self, tally: Tally) -> bool:
        """Add a tally to the stored metrics in one round trip; False (logged) if Redis failed.

        Metrics are best effort: a lost batch must never fail the work it counted.
        """
        if not tally:
            return True
        try:
            with self.redis.pipeline(transaction=False) as pipe:
                _queue_metrics(pipe, tally.updates())
                pipe.execute()
        except redis.RedisError as exc:
            log.warning("metrics not recorded: %s", exc)
            return False
        return True

    def read_metrics(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        """Return each named metric's stored fields, in one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(_metric_key(name))
            found = pipe.execute()
        return {
            name: {_text(k): _text(v) for k, v in fields.items()}
            for name, fields in zip(names, found, strict=True)
        }

    def live_runs(self) -> int:
        """Return how many runs a worker is on now (claimed, provisioning or running)."""
        issues = self.in_flight()
        if not issues:
            return 0
        attempts = self.redis.mget([_issue_key(issue, "attempts") for issue in issues])
        keys = [
            _run_key(issue, int(attempt))
            for issue, attempt in zip(issues, attempts, strict=True)
            if attempt is not None
        ]
        raws = self.redis.mget(keys) if keys else []
        return sum(
            1 for raw in raws if raw is not None and Run.model_validate_json(raw).state.is_live
        )

    # Calls per issue ----------------------------------------------------

    def record_state_label(
        self,
        issue: IssueRef,
        label: str | None,
        labels: Labels,
        plan: Callable[[str | None, bool, frozenset[str]], tuple[bool, frozenset[str]]],
    ) -> tuple[bool, frozenset[str]]:
        """Record label as the issue's desired Baton label, planned from what was recorded.

        plan takes the label desired so far, whether it was applied, and the labels
        still to take off; it returns whether label is on already and what is to come
        off now. The whole change is one transaction; its outcome is returned.
        """
        desired_key = _issue_key(issue, "desired-label")
        applied_key = _issue_key(issue, "label-applied")
        removals_key = _issue_key(issue, "label-removals")
        outcome: list[tuple[bool, frozenset[str]]] = []

        def change(pipe: redis.client.Pipeline) -> None:
            before = pipe.get(desired_key)
            applied = pipe.get(applied_key) != "0"  # unrecorded: applied by an older Baton
            removals = frozenset(_text(name) for name in pipe.smembers(removals_key))
            planned = plan(_text(before) or None if before is not None else None, applied, removals)
            outcome[:] = [planned]
            pipe.multi()
            pipe.set(desired_key, label or "", ex=RUN_TTL_S)
            pipe.set(_issue_key(issue, "label-set"), labels.model_dump_json(), ex=RUN_TTL_S)
            pipe.set(applied_key, "1" if planned[0] else "0", ex=RUN_TTL_S)
            pipe.delete(removals_key)
            if planned[1]:
                pipe.sadd(removals_key, *sorted(planned[1]))
                pipe.expire(removals_key, RUN_TTL_S)

        self.redis.transaction(change, desired_key, applied_key, removals_key)
        return outcome[0]

    def label_progress(self, issue: IssueRef) -> tuple[bool, frozenset[str]]:
        """Return whether the desired Baton label is on, and which labels are still to come off."""
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(_issue_key(issue, "label-applied"))
            pipe.smembers(_issue_key(issue, "label-removals"))
            applied, removals = pipe.execute()
        return applied != "0", frozenset(_text(name) for name in removals)

    def label_added(self, issue: IssueRef, label: str) -> None:
        """Record that label, if still the desired one, is on the issue."""
        if self.desired_label(issue) == label:
            self.redis.set(_issue_key(issue, "label-applied"), "1", ex=RUN_TTL_S)

    def take_label_removal(self, issue: IssueRef, name: str) -> bool:
        """Take name off the labels still to come off; False if another job took it first."""
        return bool(self.redis.srem(_issue_key(issue, "label-removals"), name))

    def return_label_removal(self, issue: IssueRef, name: str) -> None:
        """Put name back among the labels to come off (taking it off failed)."""
        key = _issue_key(issue, "label-removals")
        with self.redis.pipeline() as pipe:
            pipe.sadd(key, name)
            pipe.expire(key, RUN_TTL_S)
            pipe.execute()

    def status_written(self, repo: str, comment_id: int) -> str | None:
        """Return the key of what a status comment last said, if Baton recorded it."""
        value = self.redis.get(f"{_PREFIX}:comment:{repo}:{comment_id}:said")
        return None if value is None else _text(value)

    def record_status_written(self, repo: str, comment_id: int, key: str) -> None:
        """Record the key of what a status comment says now."""
        self.redis.set(f"{_PREFIX}:comment:{repo}:{comment_id}:said", key, ex=RUN_TTL_S)

    def note_check_result(self, repo: str, sha: str) -> None:
        """Record that a check result for a head came in (it may precede the head's PR)."""
        self.redis.set(f"{_PREFIX}:checked:{repo}:{sha}", "1", ex=RUN_TTL_S)

    def take_check_result(self, repo: str, sha: str) -> bool:
        """Return whether a check result for the head came in, forgetting it."""
        return bool(self.redis.delete(f"{_PREFIX}:checked:{repo}:{sha}"))

    def settle_lock(self, repo: str, sha: str) -> AbstractAsyncContextManager[None]:
        """Hold the head's settle mutex, so two settlements of one head never run at once."""
        # Held at most a settle job's timeout (120 s); a waiter gives up after half of it.
        return self._mutex(f"{_PREFIX}:settling:{repo}:{sha}", 120_000, 60.0)


class IntakeLog:
    """The web process's one write per batch of deliveries, without blocking its event loop.

    It keeps one connection of its own and makes one call at a time (the web
    process's `Intake` never has two writes in flight), so the path GitHub waits
    on skips the pool and the client's per-command machinery.
    """

    def __init__(self, connection: redis.asyncio.connection.AbstractConnection) -> None:
        self._connection = connection
        self._sha = hashlib.sha1(_ACCEPT.encode()).hexdigest()  # noqa: S324 - Redis names scripts by SHA-1

    @classmethod
    def from_url(cls, url: str) -> IntakeLog:
        """Connect to Redis at url (lazily, on the first write)."""
        # The pool only parses the URL (TLS, password, database): no connection is pooled.
        pool = redis.asyncio.ConnectionPool.from_url(
            url, decode_responses=True, client_name="baton-intake"
        )
        return cls(pool.connection_class(**pool.connection_kwargs))

    async def accept(self, deliveries: Sequence[tuple[str, str]]) -> list[bool]:
        """Record (delivery id, jobs JSON) pairs; False for each delivery seen before."""
        keys = [INTAKE_STREAM, *(_delivery_key(delivery_id) for delivery_id, _ in deliveries)]
        args: list[str | int] = [DELIVERY_TTL_S, INTAKE_MAXLEN]
        for delivery_id, jobs in deliveries:
            args += [delivery_id, jobs]
        try:
            flags = await self._call("EVALSHA", self._sha, len(keys), *keys, *args)
        except NoScriptError:
            flags = await self._call("EVAL", _ACCEPT, len(keys), *keys, *args)
        return [bool(flag) for flag in cast(list[int], flags)]

    async def _call(self, *command: str | int) -> object:
        # A connection that went away (Redis restarted, an idle timeout upstream)
        # gets one fresh try. Repeating the script is safe: a delivery it already
        # recorded is answered as seen before, still acknowledged, never doubled.
        for attempt in (1, 2):
            try:
                await self._connection.send_command(*command)
                return await self._connection.read_response()
            except (redis.ConnectionError, redis.TimeoutError):
                await self._connection.disconnect()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    async def close(self) -> None:
        """Close the connection."""
        await self._connection.disconnect()
