"""Which of the App's failed webhook deliveries to ask GitHub for again.

Pure. GitHub does not redeliver a failed delivery by itself: its guide for Apps
("Automatically redelivering failed deliveries for a GitHub App webhook") lists the
App's deliveries (`GET /app/hook/deliveries`, newest first), finds each event (a
`guid`) none of whose deliveries succeeded, and asks for it again (`POST
/app/hook/deliveries/{id}/attempts`). The copy carries the same guid, which Baton's
intake has recorded only for a delivery it accepted, so a copy of one that was
accepted after all is dropped there.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta

from pydantic import AwareDatetime, BaseModel, ConfigDict


class HookDelivery(BaseModel):
    """One delivery of the App's webhook, as GitHub lists it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: int
    guid: str
    delivered_at: AwareDatetime
    redelivery: bool = False
    status: str = ""
    status_code: int = 0  # GitHub's 0: no answer came
    event: str = ""
    action: str | None = None

    @property
    def succeeded(self) -> bool:
        """Tell whether Baton answered this delivery with a 2xx."""
        return 200 <= self.status_code < 300


class RedeliveryPass(BaseModel):
    """What one pass found and did: shown on the status page and counted in /metrics."""

    model_config = ConfigDict(frozen=True)

    at: AwareDatetime
    listed: int = 0  # deliveries of the window read
    failed: int = 0  # events none of whose deliveries succeeded
    asked: int = 0  # redeliveries GitHub was asked for in this pass
    refused: int = 0  # asked, and GitHub refused
    left: int = 0  # failed events left for the next pass (over its bound, or unanswered)


def within(delivery: HookDelivery, now: datetime, window: timedelta) -> bool:
    """Tell whether a delivery is recent enough for a pass to look at."""
    return delivery.delivered_at >= now - window


def failed_events(deliveries: Iterable[HookDelivery]) -> list[HookDelivery]:
    """Return, oldest first, the first delivery of each event none of whose deliveries succeeded.

    The first delivery is the one asked for again: GitHub redelivers an event from any
    of its deliveries, and the original is the one it names as such.
    """
    succeeded: set[str] = set()
    first: dict[str, HookDelivery] = {}
    for delivery in deliveries:
        if delivery.succeeded:
            succeeded.add(delivery.guid)
        known = first.get(delivery.guid)
        if known is None or delivery.id < known.id:
            first[delivery.guid] = delivery
    lost = [d for guid, d in first.items() if guid not in succeeded]
    return sorted(lost, key=lambda d: d.id)


def to_redeliver(
    lost: Iterable[HookDelivery], asked: set[str], per_pass: int
) -> tuple[list[HookDelivery], int]:
    """Return the failed events to ask for now, oldest first, and how many are left for later.

    An event asked for once is never asked for again (asked names their guids): a copy
    that fails as well is for a maintainer to see, not for Baton to loop on.
    """
    due = [d for d in lost if d.guid not in asked]
    return due[:per_pass], max(len(due) - per_pass, 0)
