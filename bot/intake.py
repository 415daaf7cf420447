"""Accepting deliveries in batches: one dedupe round trip and one enqueue round trip per batch.

Under load many deliveries arrive while the previous batch is being written.
They wait together and are written as the next batch (a group commit), so the
cost of a Redis round trip, and of RQ's own bookkeeping, is shared; the writes
run in a thread so the event loop keeps reading requests meanwhile. Each
delivery is answered only once its jobs are durably queued.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
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
    """Record deliveries and enqueue their jobs, one batch in flight at a time."""

    def __init__(self, store: Store, dispatch: Dispatcher) -> None:
        self.store = store
        self.dispatch = dispatch
        self._pending: list[_Pending] = []
        self._writing = False
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="intake")

    async def submit(self, delivery_id: str, jobs: Sequence[JobSpec]) -> bool:
        """Enqueue the delivery's jobs unless it was seen before; return whether it was new."""
        answer: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(delivery_id, jobs, answer))
        if not self._writing:
            self._writing = True
            asyncio.create_task(self._write_batches())  # noqa: RUF006 - it ends when the queue empties
        return await answer

    async def _write_batches(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                batch, self._pending = self._pending, []
                try:
                    fresh = await loop.run_in_executor(self._writer, self._write, batch)
                except Exception as exc:
                    for pending in batch:
                        pending.answer.set_exception(exc)
                    continue
                for pending, new in zip(batch, fresh, strict=True):
                    pending.answer.set_result(new)
        finally:
            self._writing = False

    def _write(self, batch: list[_Pending]) -> list[bool]:
        fresh = self.store.first_deliveries([p.delivery_id for p in batch])
        accepted = [p for p, new in zip(batch, fresh, strict=True) if new]
        try:
            self.dispatch.enqueue([job for p in accepted for job in p.jobs])
        except Exception:
            # Nothing was queued for them: let GitHub's redelivery try again.
            self.store.forget_deliveries([p.delivery_id for p in accepted])
            raise
        if accepted:
            # One line per batch: under load, a line per delivery costs more than the rest.
            log.info(
                "accepted %d deliveries: queued %s",
                len(accepted),
                ", ".join(job.job_id for p in accepted for job in p.jobs),
            )
        return fresh
