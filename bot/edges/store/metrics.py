"""Metrics every process adds to (bot/ops/metrics.py), when things last happened, and
which workers run their agents uncontained."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from datetime import datetime

import redis

from bot.edges.store import keys
from bot.edges.store.base import StoreBase, text
from bot.ops.metrics import MetricUpdate, Tally

log = logging.getLogger(__name__)


def queue_metrics(pipe: redis.client.Pipeline, updates: Sequence[MetricUpdate]) -> None:
    """Queue metric updates on a pipeline, to be written with whatever else it carries."""
    for update in updates:
        key = keys.metric(update.metric)
        if update.how == "set":
            pipe.hset(key, update.field, update.value)
        elif update.how == "add_float":
            pipe.hincrbyfloat(key, update.field, update.value)
        else:
            pipe.hincrby(key, update.field, int(update.value))


class MetricStore(StoreBase):
    """Stored metrics, and the marks of when a dispatch or a sweep last happened."""

    def mark(self, what: str, at: datetime) -> None:
        """Record when something last happened (a dispatch, a sweep)."""
        self.redis.hset(keys.LAST, what, at.isoformat())

    def marks(self) -> dict[str, str]:
        """Return when each recorded thing last happened."""
        return {str(k): str(v) for k, v in self.redis.hgetall(keys.LAST).items()}

    def report_uncontained(self, worker: str, for_s: float) -> None:
        """Record that worker runs agents with the sandbox off, for the next for_s seconds."""
        self.redis.zadd(keys.UNCONTAINED, {worker: time.time() + for_s})

    def uncontained_workers(self) -> list[str]:
        """Return the workers whose report that they run agents uncontained has not lapsed."""
        self.redis.zremrangebyscore(keys.UNCONTAINED, "-inf", time.time())
        return sorted(text(name) for name in self.redis.zrange(keys.UNCONTAINED, 0, -1))

    def add_metrics(self, tally: Tally) -> bool:
        """Add a tally to the stored metrics in one round trip; False (logged) if Redis failed.

        Metrics are best effort: a lost batch must never fail the work it counted.
        """
        if not tally:
            return True
        try:
            with self.redis.pipeline(transaction=False) as pipe:
                queue_metrics(pipe, tally.updates())
                pipe.execute()
        except redis.RedisError as exc:
            log.warning("metrics not recorded: %s", exc)
            return False
        return True

    def read_metrics(self, names: Sequence[str]) -> dict[str, dict[str, str]]:
        """Return each named metric's stored fields, in one round trip."""
        with self.redis.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.hgetall(keys.metric(name))
            found = pipe.execute()
        return {
            name: {text(k): text(v) for k, v in fields.items()}
            for name, fields in zip(names, found, strict=True)
        }
