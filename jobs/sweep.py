"""The sweep job: one pass of reconciliation, then the next pass scheduled."""

from __future__ import annotations

import asyncio

from bot import sweep as reconcile
from jobs import job, services


@job
def sweep() -> str:
    """Run one pass of the reconcile sweep; return whether it ran (what it did is in the log)."""
    report = asyncio.run(reconcile.sweep(services()))
    services().dispatch.schedule_sweep()
    return "skipped" if report is None else "swept"
