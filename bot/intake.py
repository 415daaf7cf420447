"""Accepting deliveries in batches: one dedupe round trip and one enqueue round trip per batch.

Under load many deliveries arrive within one turn of the event loop. Their
delivery ids are recorded and their jobs enqueued together, so the cost of a
Redis round trip (and of RQ's own bookkeeping) is shared, and each delivery is
answered only once its jobs are durably queued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from bot.dispatch import Dispatcher, JobSpec
from bot.store import Store

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    delivery_id: str
    jobs: Sequence[JobSpec]
    answer: asyncio.Future[bool]


class Intake:
    """Record deliveries and enqueue their jobs, coalescing concurrent callers."""

    def __init__(self, store: Store, dispatch: Dispatcher) -> None:
        self.store = store
        self.dispatch = dispatch
        self._pending: list[_Pending] = []

    async def submit(self, delivery_id: str, jobs: Sequence[JobSpec]) -> bool:
        """Enqueue the delivery's jobs unless it was seen before; return whether it was new."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[bool] = loop.create_future()
        if not self._pending:
            # Run after the callbacks already ready: every delivery parsed in this
            # turn of the loop joins the same batch.
            loop.call_soon(self._flush)
        self._pending.append(_Pending(delivery_id, jobs, answer))
        return await answer

    def _flush(self) -> None:
        batch, self._pending = self._pending, []
        try:
            fresh = self.store.first_deliveries([p.delivery_id for p in batch])
            accepted = [p for p, new in zip(batch, fresh, strict=True) if new]
            try:
                self.dispatch.enqueue([job for p in accepted for job in p.jobs])
            except Exception:
                # Nothing was queued for them: let GitHub's redelivery try again.
                self.store.forget_deliveries([p.delivery_id for p in accepted])
                raise
        except Exception as exc:
            for pending in batch:
                pending.answer.set_exception(exc)
            return
        if len(batch) > 1:
            log.debug("accepted a batch of %d deliveries", len(batch))
        for pending, new in zip(batch, fresh, strict=True):
            pending.answer.set_result(new)
