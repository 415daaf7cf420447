"""Baton's state in Redis, one module per concept, every key built in `keys`.

`Store` is the one object every process hands around: it is each concept's store
at once, on one shared client and one claim TTL.
"""

from __future__ import annotations

import redis

from bot.edges.store.base import LOCK_TTL_MS, MutexBusy, StoreError
from bot.edges.store.caches import CachedToken, CacheStore, WriteSlot
from bot.edges.store.chains import ChainStore
from bot.edges.store.gates import GateStore
from bot.edges.store.intake import IntakeEntry, IntakeLog, IntakeStore
from bot.edges.store.issue_state import IssueStateStore
from bot.edges.store.keys import INTAKE_STREAM
from bot.edges.store.metrics import MetricStore
from bot.edges.store.runs import Claim, KeptSalvage, LapsedClaim, LockLost, RunStore
from bot.edges.store.spend import SpendStore
from bot.edges.store.transcripts import TranscriptStore

__all__ = [
    "INTAKE_STREAM",
    "CachedToken",
    "Claim",
    "IntakeEntry",
    "IntakeLog",
    "KeptSalvage",
    "LapsedClaim",
    "LockLost",
    "MutexBusy",
    "Store",
    "StoreError",
    "WriteSlot",
]


class Store(
    RunStore,
    IssueStateStore,
    ChainStore,
    GateStore,
    CacheStore,
    IntakeStore,
    MetricStore,
    SpendStore,
    TranscriptStore,
):
    """Typed access to Baton's Redis state."""

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
