"""The intake: accepted deliveries on their way to RQ, each delivery accepted once."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import redis
import redis.asyncio
from redis.exceptions import NoScriptError

from bot.domain.plans.redelivery import RedeliveryPass
from bot.edges.store import keys
from bot.edges.store.base import StoreBase, text

DELIVERY_TTL_S = 7 * 24 * 3600  # GitHub lets a delivery be redelivered for days, not weeks
INTAKE_GROUP = "forwarders"
INTAKE_MAXLEN = 1_000_000  # a bound far above any backlog a live forwarder leaves

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


@dataclass(frozen=True)
class IntakeEntry:
    """One accepted delivery in the intake stream, with the jobs its handlers chose."""

    entry_id: str
    delivery_id: str
    jobs: str  # JSON, as the web process wrote it


def _intake_entry(entry: tuple[object, dict[object, object]]) -> IntakeEntry:
    entry_id, fields = entry
    values = {text(k): text(v) for k, v in fields.items()}
    return IntakeEntry(text(entry_id), values.get("delivery", ""), values.get("jobs", "[]"))


class IntakeStore(StoreBase):
    """The forwarders' side of the intake stream: read, reclaim, acknowledge, measure."""

    def ensure_intake_group(self) -> None:
        """Create the forwarders' consumer group on the intake stream, if it is missing."""
        try:
            self.redis.xgroup_create(keys.INTAKE_STREAM, INTAKE_GROUP, id="0", mkstream=True)
        except redis.ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise

    def read_intake(self, consumer: str, count: int, block_ms: int | None) -> list[IntakeEntry]:
        """Take up to count new intake entries for this consumer, waiting up to block_ms.

        block_ms None does not wait at all (0 would wait for ever, as in XREADGROUP).
        """
        reply = self.redis.xreadgroup(
            INTAKE_GROUP, consumer, {keys.INTAKE_STREAM: ">"}, count=count, block=block_ms
        )
        streams = cast(list[tuple[object, list[tuple[object, dict[object, object]]]]], reply or [])
        return [_intake_entry(entry) for _stream, entries in streams for entry in entries]

    def reclaim_intake(self, consumer: str, min_idle_ms: int, count: int) -> list[IntakeEntry]:
        """Take over entries another consumer read but never acknowledged (it died)."""
        reply = self.redis.xautoclaim(
            keys.INTAKE_STREAM, INTAKE_GROUP, consumer, min_idle_ms, start_id="0", count=count
        )
        return [_intake_entry(entry) for entry in reply[1] if entry[1]]

    def ack_intake(self, entry_ids: Sequence[str]) -> None:
        """Mark intake entries done and drop them from the stream."""
        if entry_ids:
            with self.redis.pipeline() as pipe:
                pipe.xack(keys.INTAKE_STREAM, INTAKE_GROUP, *entry_ids)
                pipe.xdel(keys.INTAKE_STREAM, *entry_ids)
                pipe.execute()

    def intake_backlog(self) -> int:
        """Return how many accepted deliveries wait to become jobs."""
        return int(self.redis.xlen(keys.INTAKE_STREAM))

    def redeliveries_asked(self, guids: Sequence[str]) -> set[str]:
        """Return which of these events GitHub was asked to deliver again already."""
        if not guids:
            return set()
        with self.redis.pipeline(transaction=False) as pipe:
            for guid in guids:
                pipe.exists(keys.redelivery_asked(guid))
            found = pipe.execute()
        return {guid for guid, exists in zip(guids, found, strict=True) if exists}

    def ask_redelivery(self, guid: str) -> bool:
        """Record that an event is asked for again; False when some process asked first.

        Recorded before GitHub is asked, so two clocks, or a pass that dies half way,
        never ask twice (kept as long as a delivery's own record).
        """
        return bool(self.redis.set(keys.redelivery_asked(guid), "1", nx=True, ex=DELIVERY_TTL_S))

    def forget_redelivery_ask(self, guid: str) -> None:
        """Forget that an event was asked for again: GitHub never answered the asking."""
        self.redis.delete(keys.redelivery_asked(guid))

    def record_redelivery_pass(self, summary: RedeliveryPass) -> None:
        """Keep what the last redelivery pass found and did, for the status page."""
        self.redis.set(keys.REDELIVERY_PASS, summary.model_dump_json())

    def last_redelivery_pass(self) -> RedeliveryPass | None:
        """Return what the last redelivery pass found and did, if one has run."""
        raw = self.redis.get(keys.REDELIVERY_PASS)
        return RedeliveryPass.model_validate_json(text(raw)) if raw is not None else None


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
        delivery_keys = [keys.delivery(delivery_id) for delivery_id, _ in deliveries]
        script_keys = [keys.INTAKE_STREAM, *delivery_keys]
        args: list[str | int] = [DELIVERY_TTL_S, INTAKE_MAXLEN]
        for delivery_id, jobs in deliveries:
            args += [delivery_id, jobs]
        try:
            flags = await self._call("EVALSHA", self._sha, len(script_keys), *script_keys, *args)
        except NoScriptError:
            flags = await self._call("EVAL", _ACCEPT, len(script_keys), *script_keys, *args)
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
