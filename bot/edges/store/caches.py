"""What Baton learnt from GitHub and keeps a while: tokens, roles, ETags, repository facts."""

from __future__ import annotations

import json
import uuid
from typing import NamedTuple

from bot.domain.pacing import RateBudget, WritePace
from bot.edges.store import keys
from bot.edges.store.base import RUN_TTL_S, StoreBase, text

ROLE_TTL_S = 60
NOTICE_TTL_S = 24 * 3600
CONFIG_RECHECK_S = 3600  # a repository's file is read this often at a branch, at once on a push
RATE_LIMITS_TTL_S = 7 * 24 * 3600  # an installation silent for a week is shown no more
CONDITIONAL_TTL_S = 24 * 3600  # an ETag older than a day is rarely still current


# Set the stop unless a longer one stands, in one step: two workers told to wait
# different lengths at once keep the longer.
_LONGER_STOP = """
local current = redis.call('GET', KEYS[1])
if not current or tonumber(current) < tonumber(ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[1], 'PXAT', ARGV[2])
  redis.call('PEXPIREAT', KEYS[2], ARGV[3])
end
"""
# Count a secondary-limit answer in a row: one that comes while a stop is on is of the
# same burst (writes already on their way), and counts nothing more. The count lasts an
# hour past the stop that follows it, over put-back jobs and processes.
_LIMITS_IN_A_ROW = """
if redis.call('EXISTS', KEYS[2]) == 1 then
  return tonumber(redis.call('GET', KEYS[1]) or '1')
end
local count = redis.call('INCR', KEYS[1])
redis.call('EXPIRE', KEYS[1], ARGV[1])
return count
"""
CALM_S = 3600  # an hour with no secondary limit starts the count again


# Take the earliest time a write may go that keeps the installation's pace: a gap
# after the last write taken, and room in the minute and the hour before it. The
# time is taken only if it is at most ARGV[4] seconds away, so a worker that will
# not wait that long leaves no phantom write behind. Redis's clock is the one clock
# every worker shares. Numbers go back as strings: Redis truncates Lua's to integers.
_TAKE_WRITE_SLOT = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) + tonumber(now_parts[2]) / 1e6
local interval, per_minute, per_hour = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - 3600)
local at = now
local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
if last[2] then at = math.max(at, tonumber(last[2]) + interval) end
local minute = redis.call('ZRANGE', KEYS[1], -per_minute, -per_minute, 'WITHSCORES')
if minute[2] then at = math.max(at, tonumber(minute[2]) + 60) end
local hour = redis.call('ZRANGE', KEYS[1], -per_hour, -per_hour, 'WITHSCORES')
if hour[2] then at = math.max(at, tonumber(hour[2]) + 3600) end
if at - now > tonumber(ARGV[4]) then
  return {0, tostring(at), tostring(now)}
end
redis.call('ZADD', KEYS[1], at, ARGV[5])
redis.call('EXPIRE', KEYS[1], 3660)
return {1, tostring(at), tostring(now)}
"""


class WriteSlot(NamedTuple):
    """A time an installation's next write may go (epoch s, Redis's clock): taken, or not."""

    taken: bool
    at: float
    now: float  # Redis's clock as it decided

    @property
    def wait_s(self) -> float:
        """Return how long the write waits for its slot."""
        return max(self.at - self.now, 0.0)


class CachedToken(NamedTuple):
    """An installation token as cached, and when it was minted (epoch seconds)."""

    token: str
    minted_at: float


class CacheStore(StoreBase):
    """The App's identity, installation tokens and budgets, ETags, roles, repository facts."""

    # The App's identity --------------------------------------------------

    def bot_login(self) -> str | None:
        """Return the App's bot login as learnt by a worker, if known."""
        value = self.redis.get(keys.BOT_LOGIN)
        return str(value) if value is not None else None

    def set_bot_login(self, login: str) -> None:
        """Remember the App's bot login so the web process can ignore its own events."""
        self.redis.set(keys.BOT_LOGIN, login)

    def bot_user_id(self) -> int | None:
        """Return the App's bot account id as learnt by a worker, if known."""
        value = self.redis.get(keys.BOT_USER_ID)
        return int(value) if value is not None else None

    def set_bot_user_id(self, user_id: int) -> None:
        """Remember the App's bot account id, which its noreply commit address carries."""
        self.redis.set(keys.BOT_USER_ID, user_id)

    def app_id(self, app: str) -> int | None:
        """Return the numeric id of the App (app: its identity), as GET /app said it."""
        value = self.redis.get(keys.app_id(app))
        return int(value) if value is not None else None

    def set_app_id(self, app: str, app_id: int) -> None:
        """Remember the App's numeric id, which names its own check suites and runs."""
        self.redis.set(keys.app_id(app), app_id)

    # Installations: tokens and request budgets ---------------------------

    def installation_token(self, app: str, installation_id: int) -> CachedToken | None:
        """Return a cached token of the app's installation that is still comfortably valid.

        app names the App and the GitHub it lives on: installation ids are only
        unique within one.
        """
        value = self.redis.get(keys.installation_token(app, installation_id))
        if value is None:
            return None
        token, _, minted_at = str(value).partition(" ")
        return CachedToken(token, float(minted_at or 0))

    def cache_installation_token(
        self, app: str, installation_id: int, token: str, ttl_s: int, minted_at: float
    ) -> None:
        """Cache an installation token for ttl_s seconds (shorter than its life)."""
        if ttl_s > 0:
            key = keys.installation_token(app, installation_id)
            self.redis.set(key, f"{token} {minted_at}", ex=ttl_s)

    def forget_installation_token(self, app: str, installation_id: int) -> None:
        """Drop the cached token of the app's installation (GitHub refused it: revoked)."""
        self.redis.delete(keys.installation_token(app, installation_id))

    def stop_installation(self, app: str, installation_id: int, until: float) -> None:
        """Record that GitHub asked every request of the installation to wait until `until`.

        A later, longer stop replaces a shorter one; a shorter one never cuts a longer.
        """
        self.redis.eval(
            _LONGER_STOP,
            2,
            keys.secondary_stop(app, installation_id),
            keys.secondary_limits(app, installation_id),
            repr(until),
            int(until * 1000) + 1,
            int((until + CALM_S) * 1000),
        )

    def secondary_limits_in_a_row(self, app: str, installation_id: int) -> int:
        """Count one more secondary-limit answer to the installation; return how many in a row.

        An answer while a stop is on belongs to the burst that stop answered, and adds none.
        """
        limits, stop = (
            keys.secondary_limits(app, installation_id),
            keys.secondary_stop(app, installation_id),
        )
        return int(self.redis.eval(_LIMITS_IN_A_ROW, 2, limits, stop, CALM_S))

    def installation_stopped_until(self, app: str, installation_id: int) -> float | None:
        """Return until when the installation's requests wait for a secondary limit, if they do."""
        value = self.redis.get(keys.secondary_stop(app, installation_id))
        return float(value) if value is not None else None

    def take_write_slot(
        self, app: str, installation_id: int, pace: WritePace, hold_s: float
    ) -> WriteSlot:
        """Take the installation's next write slot if it is at most hold_s away; else name it.

        One step for every worker: two writes at once never take the same slot.
        """
        taken, at, now = self.redis.eval(
            _TAKE_WRITE_SLOT,
            1,
            keys.write_slots(app, installation_id),
            repr(pace.interval_s),
            pace.per_minute,
            pace.per_hour,
            repr(hold_s),
            uuid.uuid4().hex,
        )
        return WriteSlot(bool(int(taken)), float(at), float(now))

    def record_rate_limit(self, app: str, installation_id: int, budget: RateBudget) -> None:
        """Remember what GitHub last said of an installation's hourly request budget."""
        key = keys.rate_limits(app)  # one field per installation: a bounded set
        with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(key, str(installation_id), budget.model_dump_json())
            pipe.expire(key, RATE_LIMITS_TTL_S)
            pipe.execute()

    def rate_limit(self, app: str, installation_id: int) -> RateBudget | None:
        """Return an installation's last known request budget, if a response told it."""
        raw = self.redis.hget(keys.rate_limits(app), str(installation_id))
        return RateBudget.model_validate_json(raw) if raw is not None else None

    def rate_limits(self, app: str) -> dict[int, RateBudget]:
        """Return the last known request budget of every installation that has one."""
        found = self.redis.hgetall(keys.rate_limits(app))
        return {
            int(text(installation)): RateBudget.model_validate_json(raw)
            for installation, raw in sorted(found.items())
        }

    # Conditional reads ----------------------------------------------------

    def conditional_read(self, scope: str, url: str) -> str | None:
        """Return what a GET of url answered last, with its ETag (JSON), for a conditional read."""
        value = self.redis.get(keys.conditional_read(scope, url))
        return text(value) if value is not None else None

    def remember_conditional_read(self, scope: str, url: str, entry: str) -> None:
        """Keep what a GET of url answered, for its next read to be conditional."""
        self.redis.set(keys.conditional_read(scope, url), entry, ex=CONDITIONAL_TTL_S)

    def forget_conditional_read(self, scope: str, url: str) -> None:
        """Drop a conditional read's entry."""
        self.redis.delete(keys.conditional_read(scope, url))

    # Collaborators' roles ---------------------------------------------------

    def cached_role(self, repo: str, login: str) -> str | None:
        """Return a collaborator's role on the repository, if it was looked up lately."""
        value = self.redis.get(keys.role(repo, login))
        return None if value is None else text(value)

    def cache_role(self, repo: str, login: str, role: str) -> None:
        """Keep a collaborator's role briefly: a revoked permission must take effect soon."""
        self.redis.set(keys.role(repo, login), role, ex=ROLE_TTL_S)

    # Repository configuration ------------------------------------------

    def record_queue_label(self, repo: str, label: str | None) -> None:
        """Remember the repository's own queue label (None: it uses the deployment's)."""
        if label is None:
            self.redis.hdel(keys.QUEUE_LABELS, repo)
        else:
            self.redis.hset(keys.QUEUE_LABELS, repo, label)

    def queue_labels(self) -> dict[str, str]:
        """Return every repository's own queue label, where it has one."""
        found = self.redis.hgetall(keys.QUEUE_LABELS)
        return {text(repo): text(label) for repo, label in found.items()}

    def see_repo_file(self, repo: str, ref: str, blob_sha: str, text: str) -> None:
        """Remember the repository's file as read at ref ("" blob: none), for an hour."""
        key = keys.config_seen(repo)
        self.redis.set(key, json.dumps([ref, blob_sha, text]), ex=CONFIG_RECHECK_S)

    def seen_repo_file(self, repo: str, ref: str) -> tuple[str, str] | None:
        """Return the file's blob and text as last read at ref within the hour, if it was."""
        raw = self.redis.get(keys.config_seen(repo))
        if raw is None:
            return None
        seen_at, blob_sha, file_text = json.loads(raw)
        return (str(blob_sha), str(file_text)) if seen_at == ref else None

    def see_repository(self, repo: str, facts: dict[str, str]) -> None:
        """Remember what Baton needs of a repository (default branch, clone URL), for an hour."""
        self.redis.set(keys.repo_seen(repo), json.dumps(facts), ex=CONFIG_RECHECK_S)

    def seen_repository(self, repo: str) -> dict[str, str] | None:
        """Return what Baton read of the repository within the hour, if it did."""
        raw = self.redis.get(keys.repo_seen(repo))
        return {str(k): str(v) for k, v in json.loads(raw).items()} if raw is not None else None

    def forget_repo_file(self, repo: str) -> None:
        """Forget the file as last read: a push changed it."""
        self.redis.delete(keys.config_seen(repo))

    def cached_repo_config(self, repo: str, blob_sha: str) -> str | None:
        """Return the validated config (JSON) of a version of a repository's file, if cached."""
        value = self.redis.get(keys.repo_config(repo, blob_sha))
        return None if value is None else text(value)

    def cache_repo_config(self, repo: str, blob_sha: str, config_json: str) -> None:
        """Keep a version's validated config: a blob's content never changes."""
        self.redis.set(keys.repo_config(repo, blob_sha), config_json, ex=RUN_TTL_S)

    # Notices --------------------------------------------------------------

    def first_notice(self, what: str) -> bool:
        """Return True the first time in a day that what is noticed (to log it once)."""
        return bool(self.redis.set(keys.notice(what), "1", nx=True, ex=NOTICE_TTL_S))
