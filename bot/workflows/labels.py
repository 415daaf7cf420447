"""The label outbox: the Baton label an issue should carry is recorded first, then applied.

A 502 or a secondary rate limit from GitHub delays a label change, never loses
it: what failed to apply is applied again by a job with retries, from the
recorded desired state and the labels still to take off. The issue is not read
for a change: Baton adds its new label and takes off only the one it put on.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import aiohttp
from gidgethub import HTTPException

from bot.domain.model import IssueRef, Labels
from bot.edges.api import add_label, remove_label
from bot.edges.github import GitHubClient
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from bot.ops.settings import Settings
from bot.workflows.services import Services

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LabelPlan:
    """A change of an issue's Baton label: what to add, and what to take off."""

    add: str | None
    remove: frozenset[str]


def plan_state_label(
    label: str | None,
    before: str | None,
    applied: bool,
    removals: frozenset[str],
    live: set[str] | None,
    states: frozenset[str],
) -> LabelPlan:
    """Return how to make label the issue's one Baton label, without reading the issue.

    before is the label Baton last wanted on (applied: whether it went on), removals
    the labels it still has to take off. Only what Baton put on comes off, so a label a
    human adds or removes meanwhile is neither lost nor restored. live is what the
    issue carries, when the caller has just read it: then exactly the Baton labels on
    it that are not label come off (the queue label, when a run starts from it).
    """
    if live is not None:
        add = label if label is not None and label not in live else None
        return LabelPlan(add, frozenset(live & states) - {label})
    on_already = label is None or (label == before and applied)
    taken_off = removals | ({before} if before is not None else set())
    return LabelPlan(None if on_already else label, frozenset(taken_off - {label}))


async def set_state_label(
    gh: GitHubClient,
    store: Store,
    dispatch: Dispatcher,
    labels: Labels,
    issue: IssueRef,
    label: str | None,
    live: set[str] | None = None,
) -> None:
    """Make label the issue's one Baton state label (None: none), now or by a retried job.

    live is what the issue carries, where the caller has just read it; it is never
    read for this: Baton adds label with one call and takes off only what it recorded.
    """

    def plan(
        before: str | None, applied: bool, removals: frozenset[str]
    ) -> tuple[bool, frozenset[str]]:
        planned = plan_state_label(label, before, applied, removals, live, labels.states)
        return planned.add is None, planned.remove

    store.record_state_label(issue, label, labels, plan)
    try:
        await sync_labels(gh, store, labels, issue)
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
    """Bring the issue's Baton labels to the recorded desired state: add first, then remove.

    Without live, what was recorded is applied: the desired label if it is not on yet,
    then each label still to come off, each taken by one job only. With live (what the
    issue carries, as the sweep read it), drift is corrected from it.
    """
    desired = store.desired_label(issue)
    applied, recorded = store.label_progress(issue)
    if live is None:
        add = None if applied or desired is None else desired
        remove = recorded
    else:
        add = desired if desired is not None and desired not in live else None
        remove = frozenset(live & labels.states) - {desired}
        for name in recorded - remove:
            store.take_label_removal(issue, name)  # not on the issue: off already
    carried = live
    if add is not None:
        carried = await add_label(gh, issue, add)
        store.label_added(issue, add)
    for name in sorted(remove):
        if not store.take_label_removal(issue, name) and live is None:
            continue  # another job is taking it off
        if carried is not None and name not in carried:
            continue  # not on the issue: nothing to take off
        try:
            await remove_label(gh, issue, name)
        except BaseException:
            store.return_label_removal(issue, name)  # the retried job takes it off
            raise
