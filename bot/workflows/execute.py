"""The one executor: perform a plan's effects, in order, against GitHub, Redis and the queues."""

from __future__ import annotations

from collections.abc import Iterable

from bot.domain.effects import Effect, Enqueue, PostStatus, Report, SetLabel
from bot.edges.github import GitHubClient
from bot.workflows.conclude import post_status, report
from bot.workflows.labels import set_state_label
from bot.workflows.services import Services


async def execute(services: Services, gh: GitHubClient, plan: Iterable[Effect]) -> None:
    """Perform each effect of plan in turn; one that fails stops the rest (the job retries)."""
    for effect in plan:
        await perform(services, gh, effect)


async def perform(services: Services, gh: GitHubClient, effect: Effect) -> None:
    """Perform one effect."""
    store, dispatch = services.store, services.dispatch
    match effect:
        case SetLabel(issue=issue, labels=labels, label=label, live=live):
            await set_state_label(
                gh, store, dispatch, labels, issue, label, set(live) if live is not None else None
            )
        case Report(issue=issue, attempt=attempt, next_step=next_step, checks=checks):
            run = store.run(issue, attempt)
            if run is not None:
                await report(services, gh, run, next_step, checks)
        case PostStatus(issue=issue, body=body):
            await post_status(services, gh, issue, body)
        case Enqueue(job=job, at=at) if at is not None:
            dispatch.enqueue_at(job, at)
        case Enqueue(job=job, delay_s=delay_s) if delay_s > 0:
            dispatch.enqueue_later(job, delay_s)
        case Enqueue(job=job):
            dispatch.enqueue([job])
