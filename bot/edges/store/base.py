"""What every concept store shares: the one Redis client, the claim TTL, mutexes, indexes."""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import cast

import redis

from bot.domain.model import IssueRef
from bot.edges.store import keys

RUN_TTL_S = 90 * 24 * 3600
LOCK_TTL_MS = 60_000  # by default a claim lives this long without a heartbeat

_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""


class StoreError(Exception):
    """Redis could not be reached or refused an operation."""


class MutexBusy(StoreError):
    """A live holder kept a mutex longer than a waiter waits: the waiter's work is put off."""


def text(value: object) -> str:
    """Return a Redis reply as text, whether the client decodes replies or not."""
    return value.decode() if isinstance(value, bytes) else str(value)


class StoreBase:
    """One concept's view of Baton's Redis state, on the client every concept shares.

    Each concept store extends __init__ cooperatively to register its own scripts,
    so `Store`, composed of them all, registers every script on the one client.
    """

    def __init__(self, client: redis.Redis, lock_ttl_ms: int = LOCK_TTL_MS) -> None:
        self.redis = client
        self.lock_ttl_ms = lock_ttl_ms
        self._release = client.register_script(_RELEASE)
        self._renew = client.register_script(_RENEW)

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

    @asynccontextmanager
    async def _kept_mutex(self, key: str, ttl_ms: int, wait_s: float) -> AsyncIterator[None]:
        """Hold a mutex renewed for as long as its holder lives; raise MutexBusy after wait_s.

        A dead holder's lock lapses within ttl_ms, so a waiter past wait_s (longer) waits
        on a live one, and goes no further than it: the two never write at once.
        """
        token = secrets.token_hex(8)
        deadline = time.monotonic() + wait_s
        while not self.redis.set(key, token, nx=True, px=ttl_ms):
            if time.monotonic() > deadline:
                raise MutexBusy(f"{key} has been held for over {wait_s:g}s")
            await asyncio.sleep(0.02)
        renewal = asyncio.create_task(self._renew_while_held(key, token, ttl_ms))
        try:
            yield
        finally:
            renewal.cancel()
            self._release(keys=[key], args=[token])

    async def _renew_while_held(self, key: str, token: str, ttl_ms: int) -> None:
        while True:
            await asyncio.sleep(ttl_ms / 1000 / 3)
            try:
                if not self._renew(keys=[key], args=[token, ttl_ms]):
                    return  # lapsed and taken: nothing of this holder's to keep
            except redis.RedisError:
                continue  # a blip: two more tries before the lock would lapse

    def _indexed(self, key: str) -> list[tuple[IssueRef, datetime]]:
        entries = cast(list[tuple[object, float]], self.redis.zrange(key, 0, -1, withscores=True))
        indexed = []
        for member, score in entries:
            issue = keys.issue_from_index(text(member))
            indexed.append((issue, datetime.fromtimestamp(float(score), UTC)))
        return indexed
