"""The redelivery pass: ask GitHub once for each webhook event Baton never got.

GitHub does not redeliver a failed delivery by itself (Baton answering 503, or down
during a deploy): the clock runs this pass every BATON_REDELIVERY_INTERVAL_SECONDS.
It reads the App's deliveries of the last BATON_REDELIVERY_WINDOW_HOURS, and asks for
each lost event again, once, at most BATON_REDELIVERY_PER_PASS of them a pass, a
second apart. Deduplication by guid makes a copy of an event Baton had after all
harmless.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta

import aiohttp
from gidgethub import GitHubBroken, HTTPException

from bot.domain.model import utcnow
from bot.domain.plans.redelivery import RedeliveryPass, failed_events, to_redeliver
from bot.edges.api import recent_deliveries, redeliver
from bot.edges.github import GitHubClient, github_app
from bot.ops.metrics import REDELIVERIES, Tally
from bot.workflows.services import Services

log = logging.getLogger(__name__)

ASK_GAP_S = 1.0  # GitHub's pace for writes: one at a time, a second apart


async def redeliver_lost(services: Services, now: datetime | None = None) -> RedeliveryPass:
    """Ask GitHub to deliver again every recent event none of whose deliveries succeeded."""
    settings, store = services.settings, services.store
    now = now or utcnow()
    window = timedelta(hours=settings.redelivery_window_hours)
    async with github_app(settings, store) as app:
        gh = app.app_client()
        listed = await recent_deliveries(gh, now, window)
        lost = failed_events(listed)
        before = store.redeliveries_asked([delivery.guid for delivery in lost])
        due, left = to_redeliver(lost, before, settings.redelivery_per_pass)
        asked, refused, unanswered = await _ask(
            services, gh, [d.id for d in due], [d.guid for d in due]
        )
        left += unanswered
    summary = RedeliveryPass(
        at=now, listed=len(listed), failed=len(lost), asked=asked, refused=refused, left=left
    )
    store.record_redelivery_pass(summary)
    tally = Tally()
    for outcome, count in (("asked", asked), ("refused", refused), ("left", left)):
        if count:
            tally.count(REDELIVERIES, outcome, by=count)
    store.add_metrics(tally)
    if lost:
        log.info(
            "redelivery: %d lost events in the last %s; asked for %d, refused %d, left %d",
            len(lost),
            window,
            asked,
            refused,
            left,
        )
    return summary


async def _ask(
    services: Services, gh: GitHubClient, ids: list[int], guids: list[str]
) -> tuple[int, int, int]:
    """Ask for each delivery again, once across every process; return asked, refused and
    unanswered (GitHub failed to answer: the next pass asks for those again)."""
    asked = refused = unanswered = 0
    for delivery_id, guid in zip(ids, guids, strict=True):
        if not services.store.ask_redelivery(guid):
            continue  # another clock asked first
        if asked or refused or unanswered:
            await asyncio.sleep(ASK_GAP_S)
        try:
            await redeliver(gh, delivery_id)
        except (GitHubBroken, aiohttp.ClientError, TimeoutError) as exc:
            services.store.forget_redelivery_ask(guid)
            unanswered += 1
            log.warning("redelivery: no answer for delivery %d (%s): %s", delivery_id, guid, exc)
            continue
        except HTTPException as exc:
            refused += 1
            log.warning("redelivery: GitHub refused delivery %d (%s): %s", delivery_id, guid, exc)
            continue
        asked += 1
    return asked, refused, unanswered
