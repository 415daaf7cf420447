"""What may start now: usage windows, run slots, waits, halts, pauses, grants, the sweep."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import cast

import redis

from bot.domain.model import LONGEST_WINDOW, IssueRef
from bot.edges.store import keys
from bot.edges.store.base import LOCK_TTL_MS, RUN_TTL_S, StoreBase, text

# Record one issue's claim that an account's window is shut until ARGV[2]; close the
# gate (as _CLOSE_WINDOW does) once a claim of another issue stands with it, until the
# earlier of the two. Claims that reopened are dropped. Returns the gate's reopening, or
# false while the claim stands alone. ARGV: issue, reopens (s), now (s), keep (s).
_CLAIM_WINDOW = """
local now, mine = tonumber(ARGV[3]), tonumber(ARGV[2])
local claims = redis.call('HGETALL', KEYS[1])
local confirmed = nil
for i = 1, #claims, 2 do
  local theirs = tonumber(claims[i + 1])
  if theirs <= now then
    redis.call('HDEL', KEYS[1], claims[i])
  elseif claims[i] ~= ARGV[1] then
    local shared = math.min(theirs, mine)
    if not confirmed or shared > confirmed then confirmed = shared end
  end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
if not confirmed then return false end
local current = redis.call('GET', KEYS[2])
if current and tonumber(current) >= confirmed then return current end
redis.call('SET', KEYS[2], tostring(confirmed), 'PXAT', math.floor(confirmed * 1000))
return tostring(confirmed)
"""
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
# Grant an issue more continuations, unless the grants would pass a cap: {granted, total}.
_GRANT = """
local total = tonumber(redis.call('GET', KEYS[1]) or '0')
if total + tonumber(ARGV[1]) > tonumber(ARGV[2]) then return {0, total} end
local granted = redis.call('INCRBY', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[3])
return {1, granted}
"""


class GateStore(StoreBase):
    """The gates a start passes (windows, slots, pauses, grants), who waits, the sweep lease."""

    def __init__(self, client: redis.Redis, lock_ttl_ms: int = LOCK_TTL_MS) -> None:
        super().__init__(client, lock_ttl_ms)
        self._claim_window = client.register_script(_CLAIM_WINDOW)
        self._take_slot = client.register_script(_TAKE_SLOT)
        self._grant = client.register_script(_GRANT)

    # Usage windows: a gate per provider account -------------------------

    def claim_window(
        self, account: str, issue: IssueRef, reopens_at: datetime, now: datetime
    ) -> datetime | None:
        """Record a run's claim that the account's window is shut until reopens_at.

        The claim is its agent's word, so alone it holds back only its own issue (whose
        re-entry waits for it). Once a run of another issue claims the same while it
        stands, the account's gate closes until the earlier of the two; returns when the
        gate reopens then, else None. An honest window costs at most one doomed start.
        """
        reopens = self._claim_window(
            keys=[keys.window_claims(account), keys.window(account)],
            args=[
                keys.indexed_issue(issue),
                reopens_at.timestamp(),
                now.timestamp(),
                int(LONGEST_WINDOW.total_seconds()),
            ],
        )
        return datetime.fromtimestamp(float(text(reopens)), UTC) if reopens else None

    def window_reopens_at(self, account: str, now: datetime) -> datetime | None:
        """Return when the account's usage window reopens, or None while it is open."""
        value = self.redis.get(keys.window(account))
        if value is None:
            return None
        reopens = datetime.fromtimestamp(float(text(value)), UTC)
        return reopens if reopens > now else None

    # Run slots, and the issues waiting for a window or a slot -------------

    def take_run_slot(self, issue: IssueRef, limit: int) -> bool:
        """Take one of the repository's run slots for the issue; False when all are taken."""
        now_ms = int(time.time() * 1000)
        key = keys.slots(issue.repo)
        return bool(
            self._take_slot(keys=[key], args=[now_ms, issue.number, limit, self.lock_ttl_ms])
        )

    def refresh_run_slot(self, issue: IssueRef) -> None:
        """Keep the issue's run slot while its run heartbeats (a slot it does not hold stays so)."""
        expires = int(time.time() * 1000) + self.lock_ttl_ms
        self.redis.zadd(keys.slots(issue.repo), {str(issue.number): expires}, xx=True)

    def release_run_slot(self, issue: IssueRef) -> None:
        """Give the issue's run slot back."""
        self.redis.zrem(keys.slots(issue.repo), str(issue.number))

    def is_waiting(self, issue: IssueRef) -> bool:
        """Return whether the issue waits, unstarted, for a window or a run slot."""
        return self.redis.zscore(keys.WAITING, keys.indexed_issue(issue)) is not None

    def record_wait(self, issue: IssueRef, until: datetime) -> None:
        """Index an issue that waits, unstarted, for a window or a run slot."""
        self.redis.zadd(keys.WAITING, {keys.indexed_issue(issue): until.timestamp()})

    def clear_wait(self, issue: IssueRef) -> None:
        """Drop the issue from the waiting index (it started, or moved on)."""
        self.redis.zrem(keys.WAITING, keys.indexed_issue(issue))

    def waits(self) -> list[tuple[IssueRef, datetime]]:
        """Return every issue waiting for a window or a run slot, soonest first."""
        return self._indexed(keys.WAITING)

    # Halts: issues waiting for a provider's usage window ---------------

    def record_halt(self, issue: IssueRef, resume_at: datetime) -> None:
        """Index a halted issue by when it may resume, so a lost re-entry is found again."""
        self.redis.zadd(keys.HALTED, {keys.indexed_issue(issue): resume_at.timestamp()})

    def clear_halt(self, issue: IssueRef) -> None:
        """Drop the issue from the halt index (it resumed, or moved on)."""
        self.redis.zrem(keys.HALTED, keys.indexed_issue(issue))

    def halts(self) -> list[tuple[IssueRef, datetime]]:
        """Return every halted issue with when it may resume, soonest first."""
        return self._indexed(keys.HALTED)

    # Budget grants --------------------------------------------------------

    def grant_budget(self, issue: IssueRef, continuations: int, cap: int) -> tuple[bool, int]:
        """Give the issue more continuations than its policy, unless all grants would pass cap.

        Returns whether they were granted and how many extra the issue has in all.
        """
        granted, total = cast(
            list[int],
            self._grant(
                keys=[keys.extra_continuations(issue)],
                args=[continuations, cap, RUN_TTL_S],
            ),
        )
        return bool(granted), int(total)

    def extra_continuations(self, issue: IssueRef) -> int:
        """Return the continuations maintainers added to the issue's budget."""
        value = self.redis.get(keys.extra_continuations(issue))
        return int(value) if value is not None else 0

    # Pausing a repository -------------------------------------------------

    def pause(self, repo: str, at: datetime) -> None:
        """Hold every new claim in the repository until it is resumed."""
        self.redis.hsetnx(keys.PAUSED, repo, at.isoformat())

    def resume_repo(self, repo: str) -> list[tuple[int, str, int, str | None]]:
        """Lift the pause; return the held starts (issue, run mode, attempt after, agent)."""
        key = keys.held(repo)
        with self.redis.pipeline() as pipe:
            pipe.hdel(keys.PAUSED, repo)
            pipe.hgetall(key)
            pipe.delete(key, keys.held_settled(repo))
            _, held, _ = pipe.execute()
        starts = []
        for number, start in cast(dict[str, str], held).items():
            mode, after, *agent = start.split(":", 2)  # held before agents were kept: no agent
            starts.append((int(number), mode, int(after), agent[0] if agent else None))
        return sorted(starts)

    def paused_since(self, repo: str) -> datetime | None:
        """Return when the repository was paused, or None if it is not."""
        value = self.redis.hget(keys.PAUSED, repo)
        return None if value is None else datetime.fromisoformat(text(value))

    def hold(self, issue: IssueRef, mode: str, after: int, agent: str | None = None) -> None:
        """Record a start a pause held, to be made when the repository is resumed."""
        start = f"{mode}:{after}" if agent is None else f"{mode}:{after}:{agent}"
        self.redis.hset(keys.held(issue.repo), str(issue.number), start)

    def held_issues(self, repo: str) -> list[int]:
        """Return the numbers of the repository's issues whose starts a pause holds."""
        return sorted(int(number) for number in self.redis.hkeys(keys.held(repo)))

    def count_paused_settlement(self, repo: str) -> None:
        """Count a settlement made while the repository is paused (it still settles)."""
        self.redis.incr(keys.held_settled(repo))

    def pauses(self) -> list[tuple[str, datetime, int, int]]:
        """Return each paused repository: since when, held starts, settlements made since."""
        found = []
        for repo, since in cast(dict[str, str], self.redis.hgetall(keys.PAUSED)).items():
            held = int(self.redis.hlen(keys.held(repo)))
            settled = int(self.redis.get(keys.held_settled(repo)) or 0)
            found.append((repo, datetime.fromisoformat(since), held, settled))
        return sorted(found)

    # The sweep: one at a time ---------------------------------------------

    def take_sweep_lease(self, holder: str, ttl_ms: int) -> bool:
        """Become the one sweep running now; False while another holds the lease."""
        return bool(self.redis.set(keys.SWEEP_LEASE, holder, nx=True, px=ttl_ms))

    def sweep_lease_holder(self) -> str | None:
        """Return who holds the sweep lease, if anyone."""
        value = self.redis.get(keys.SWEEP_LEASE)
        return None if value is None else text(value)

    def release_sweep_lease(self, holder: str) -> None:
        """Give the sweep lease back, if this holder still has it."""
        self._release(keys=[keys.SWEEP_LEASE], args=[holder])
