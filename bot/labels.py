"""The label outbox: the Baton label an issue should carry is recorded first, then applied.

A 502 or a secondary rate limit from GitHub delays a label change, never loses
it: what failed to apply is applied again by a job with retries, from the
recorded desired state rather than from a replay of operations.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import aiohttp
from gidgethub import HTTPException

from bot.dispatch import Dispatcher
from bot.github import GitHubClient
from bot.model import IssueRef, Labels
from bot.settings import Settings
from bot.store import Store
from bot.tracker import label_names, read_issue, swap_labels

if TYPE_CHECKING:
    from bot.recovery import Services  # which needs this module first

log = logging.getLogger(__name__)


async def set_state_label(
    gh: GitHubClient,
    store: Store,
    dispatch: Dispatcher,
    labels: Labels,
    issue: IssueRef,
    label: str | None,
    live: set[str] | None = None,
) -> None:
    """Make label the issue's one Baton state label (None: none), now or by a retried job."""
    store.set_desired_label(issue, label, labels)
    try:
        await sync_labels(gh, store, labels, issue, live)
    except (HTTPException, aiohttp.ClientError, TimeoutError) as exc:
        log.warning("%s: labels not applied yet (%s); a job will retry", issue, exc)
        dispatch.sync_labels(issue)


async def take_state_labels_off(gh: GitHubClient, services: Services, issue: IssueRef) -> None:
    """Take Baton's state labels off an issue whose work ended, by the names it was given."""
    labels = recorded_labels(services.store, services.settings, issue)
    await set_state_label(gh, services.store, services.dispatch, labels, issue, None)


def recorded_labels(store: Store, settings: Settings, issue: IssueRef) -> Labels:
    """Return the Baton labels last recorded for the issue, or the deployment's."""
    return store.label_set(issue) or settings.labels


async def sync_labels(
    gh: GitHubClient,
    store: Store,
    labels: Labels,
    issue: IssueRef,
    live: set[str] | None = None,
) -> None:
    """Bring the issue's Baton labels to the recorded desired state: add first, then remove."""
    desired = store.desired_label(issue)
    if live is None:
        live = label_names(await read_issue(gh, issue))
    stale = (live & labels.states) - {desired}
    add = desired if desired is not None and desired not in live else None
    if add is not None or stale:
        await swap_labels(gh, issue, add=add, remove=stale)
