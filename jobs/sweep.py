"""The sweep job: one pass of reconciliation, then the next pass scheduled."""

from __future__ import annotations

import asyncio

from bot import sweep as reconcile
from jobs import services


def sweep() -> str:
    """Run one pass of the reconcile sweep; return what it did."""
    report = asyncio.run(reconcile.sweep(services()))
    services().dispatch.schedule_sweep()
    return "skipped: another sweep holds the lease" if report is None else report.summary()
