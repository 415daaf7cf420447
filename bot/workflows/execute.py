"""The one executor: perform a plan's effects, in order, against GitHub, Redis and the queues.

Concluding a run is itself an effect: bot/workflows/conclude.py classifies the run
and plans its recovery, and the plan is performed here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager

from gidgethub import GraphQLException, HTTPException

from bot.domain import issue_text as snapshot
from bot.domain.classify import RunFacts
from bot.domain.effects import (
    Conclude,
    Count,
    Effect,
    Enqueue,
    Escalate,
    HaltRun,
    HoldForAudit,
    HoldStart,
    MarkEscalated,
    MarkReady,
    PauseRepo,
    Plan,
    PostComment,
    PostStatus,
    React,
    RecordWait,
    RefuseQueueLabel,
    Relabel,
    Report,
    ReportConfigError,
    SetLabel,
    SettleHead,
    SettleHeadAt,
    StopRun,
)
from bot.domain.model import Run, RunState, utcnow
from bot.domain.render import CheckSummary
from bot.edges.api import create_reaction, mark_ready_for_review, post_comment
from bot.edges.github import GitHubClient
from bot.edges.store import MutexBusy
from bot.ops.metrics import Tally
from bot.workflows import conclude as concluding
from bot.workflows.labels import set_state_label, sync_labels
from bot.workflows.services import Services
from bot.workflows.standing import refuse_queue_label

log = logging.getLogger(__name__)


async def execute(services: Services, gh: GitHubClient, plan: Iterable[Effect]) -> None:
    """Perform each effect of plan in turn; one that fails stops the rest (the job retries)."""
    for effect in plan:
        await perform(services, gh, effect)


def record(services: Services, plan: Iterable[Effect]) -> None:
    """Perform a plan made before any GitHub client is open: only Redis and queue effects."""
    for effect in plan:
        if not _recorded(services, effect):
            raise TypeError(f"{type(effect).__name__} needs a GitHub client")


@contextmanager
def forgotten_on_failure(forget: Callable[[], None]) -> Iterator[None]:
    """Forget that a thing was done once (a comment handled, a refusal said) when doing it
    fails, so the job's next run does it (marked first, a duplicate meanwhile does nothing)."""
    try:
        yield
    except BaseException:
        forget()
        raise


async def perform(services: Services, gh: GitHubClient, effect: Effect) -> None:
    """Perform one effect."""
    if _recorded(services, effect):
        return
    match effect:
        case SetLabel() | Relabel():
            await _label(services, gh, effect)
        case Report() | MarkReady():
            await _show(services, gh, effect)
        case PostStatus(issue=issue, body=body):
            await concluding.post_status(services, gh, issue, body)
        case Conclude() | HoldForAudit():
            await _end_run(services, gh, effect)
        case RefuseQueueLabel(issue=issue, label=label, standing=standing):
            await refuse_queue_label(gh, services.store, issue, label, standing)
        case ReportConfigError():
            await _report_config_error(services, gh, effect)
        case Escalate():
            await _escalate(services, gh, effect)
        case React() | PostComment():
            await _comment(gh, effect)


async def _label(services: Services, gh: GitHubClient, effect: SetLabel | Relabel) -> None:
    """Make a label the issue's Baton state label, or apply the one recorded for it."""
    if isinstance(effect, Relabel):
        await sync_labels(gh, services.store, effect.labels, effect.issue, set(effect.live))
        return
    live = set(effect.live) if effect.live is not None else None
    await set_state_label(
        gh, services.store, services.dispatch, effect.labels, effect.issue, effect.label, live
    )


async def _comment(gh: GitHubClient, effect: React | PostComment) -> None:
    """React to a comment, or post a new one."""
    if isinstance(effect, React):
        await create_reaction(gh, effect.repo, effect.comment_id, effect.content)
    else:
        await post_comment(gh, effect.issue, effect.body)


async def _show(services: Services, gh: GitHubClient, effect: Report | MarkReady) -> None:
    """Show where the run stands: its status comments, or its pull request's readiness."""
    if isinstance(effect, Report):
        await _report(services, gh, effect)
    else:
        await _mark_ready(services, gh, effect)


async def _mark_ready(services: Services, gh: GitHubClient, effect: MarkReady) -> None:
    """Take the pull request out of draft, if Baton opened it so and left it a draft.

    The draft is remembered until GitHub says it is ready: a refusal or an error here
    (a transient one, or the PR closed meanwhile) is logged, and the sweep asks again
    while the run awaits review.
    """
    store, repo = services.store, effect.issue.repo
    node_id = store.draft_node(repo, effect.pull)
    if node_id is None:
        return
    try:
        still_draft = await mark_ready_for_review(gh, node_id)
    except (GraphQLException, HTTPException) as exc:
        log.warning(
            "%s: PR #%d was not marked ready for review (the sweep asks again): %s",
            effect.issue,
            effect.pull,
            exc,
        )
        return
    if still_draft:
        log.warning("%s: PR #%d is a draft still; the sweep asks again", effect.issue, effect.pull)
        return
    log.info("%s: PR #%d is ready for review", effect.issue, effect.pull)
    store.forget_draft(repo, effect.pull)


async def _report(services: Services, gh: GitHubClient, effect: Report) -> None:
    """Report the stored run; one forgotten meanwhile is left."""
    run = services.store.run(effect.issue, effect.attempt)
    if run is not None:
        await concluding.report(services, gh, run, effect.next_step, effect.checks)


async def _report_config_error(
    services: Services, gh: GitHubClient, effect: ReportConfigError
) -> None:
    """Say what is wrong with a version of the repository's file, unless it was said.

    Not said after all (the job put back, a failed call), it is said by the job's next run.
    """
    store = services.store
    if not store.first_config_error(effect.issue, effect.blob_sha):
        return
    with forgotten_on_failure(lambda: store.forget_config_error(effect.issue, effect.blob_sha)):
        await concluding.post_status(services, gh, effect.issue, effect.body)


def _recorded(services: Services, effect: Effect) -> bool:
    """Perform effect if it touches only Redis and the queues; return whether it did."""
    return _queued(services, effect) or _stored(services, effect)


def _queued(services: Services, effect: Effect) -> bool:
    """Perform effect if it enqueues a job; return whether it did."""
    dispatch = services.dispatch
    match effect:
        case Enqueue(job=job, at=at) if at is not None:
            dispatch.enqueue_at(job, at)
        case Enqueue(job=job, delay_s=delay_s) if delay_s > 0:
            dispatch.enqueue_later(job, delay_s)
        case Enqueue(job=job):
            dispatch.enqueue([job])
        case SettleHeadAt(installation_id=installation_id, repo=repo, head_sha=head_sha, at=at):
            dispatch.settle_head_at(installation_id, repo, head_sha, at)
        case SettleHead(installation_id=installation_id, repo=repo, head_sha=head_sha):
            dispatch.settle_head(installation_id, repo, head_sha)
        case _:
            return False
    return True


def _stored(services: Services, effect: Effect) -> bool:
    """Perform effect if it writes Baton's own state in Redis; return whether it did."""
    store = services.store
    match effect:
        case HoldStart():
            _hold(services, effect)
        case RecordWait(issue=issue, until=until):
            store.record_wait(issue, until)
        case Count(metric=metric, values=values):
            store.add_metrics(Tally().count(metric, *values))
        case HaltRun():
            _halt(services, effect)
        case MarkEscalated(issue=issue, attempt=attempt):
            store.update_run(
                issue, attempt, lambda current: current.model_copy(update={"escalated": True})
            )
        case StopRun(issue=issue):
            store.request_stop(issue)
        case PauseRepo(repo=repo, at=at):
            store.pause(repo, at)
        case _:
            return False
    return True


def _hold(services: Services, effect: HoldStart) -> None:
    """Hold the start, with the text it carries, for when its repository resumes."""
    services.store.hold(effect.issue, effect.mode.value, effect.after, effect.agent)
    text = effect.text
    if text is not None:
        services.store.update_queued_text(
            effect.issue, lambda current: snapshot.hold(current, text)
        )


def _halt(services: Services, effect: HaltRun) -> None:
    """Halt the run, close its account's window and index the halt, all until resume_at."""
    store, resume_at = services.store, effect.resume_at
    halted = store.update_run(
        effect.issue,
        effect.attempt,
        lambda current: current.moved(RunState.HALTED, utcnow(), note="usage window").model_copy(
            update={"resume_at": resume_at}
        ),
    )
    assert halted is not None
    # The window is the account's, but the run's word for it is its agent's: the account
    # waits only once a run of another issue says the same (then no run starts on it).
    shut = store.claim_window(effect.account, effect.issue, resume_at, utcnow())
    if shut is not None:
        log.warning(
            "%s's usage window is confirmed: nothing starts on it until %s", effect.account, shut
        )
    store.record_halt(effect.issue, resume_at)


async def _escalate(services: Services, gh: GitHubClient, effect: Escalate) -> None:
    """Post the escalation comment unless it was posted already; then perform what follows it.

    Baton's check run shows the escalation first, linked to the comment.
    """
    store, issue, attempt = services.store, effect.issue, effect.attempt
    if not store.first_escalation(issue, effect.key, attempt):
        log.info("%s: escalation for attempt %d was posted already", issue, attempt)
        return
    try:
        posted = await post_comment(gh, issue, effect.body)
    except HTTPException:
        store.forget_escalation(issue, effect.key, attempt)  # a retry posts it
        raise
    log.warning("%s: escalated after attempt %d: %s", issue, attempt, effect.reason)
    await concluding.show_escalation(services, gh, issue, attempt, effect.reason, posted.html_url)
    await execute(services, gh, effect.then)


async def _end_run(services: Services, gh: GitHubClient, effect: Conclude | HoldForAudit) -> None:
    """Conclude the stored run, or hold it for its audit; one forgotten meanwhile is left."""
    run = services.store.run(effect.issue, effect.attempt)
    if run is None:
        return
    if isinstance(effect, Conclude):
        await conclude(services, gh, run, effect.facts, effect.checks)
    else:
        await hold_for_audit(services, gh, run)


async def conclude(
    services: Services,
    gh: GitHubClient,
    run: Run,
    facts: RunFacts,
    checks: Sequence[CheckSummary] = (),
) -> Run | None:
    """Classify a run that ended without a green PR and perform its recovery, once.

    Returns the classified run, or None when it had been classified and recovered
    already (a repeated job or webhook), in which case nothing is done again.
    """
    return await _recover(
        services, gh, await concluding.conclusion(services, gh, run, facts, checks)
    )


async def hold_for_audit(services: Services, gh: GitHubClient, run: Run) -> Run | None:
    """Keep a green PR its settlement audit flagged from review, and escalate it once.

    Returns the held run, or None when it had been held already.
    """
    return await _recover(services, gh, await concluding.audit_hold(services, gh, run))


async def recover_owed(services: Services, gh: GitHubClient, run: Run) -> Run | None:
    """Perform the recovery a classified run still owes; None when it owes none."""
    return await _recover(services, gh, await concluding.owed(services, gh, run.issue, run.attempt))


async def _recover(
    services: Services, gh: GitHubClient, planned: tuple[Run, Plan] | None
) -> Run | None:
    """Perform a planned recovery; then, and only then, nothing is owed.

    Cut short (a failed call, a dead worker), the recovery stays owed: a retry of the
    job, the clock's takeover check or the sweep performs it (bot/workflows/sweep.py).
    One process performs it at a time, and only while it is still owed: the sweep may
    plan a replay while the first performance, slowed by the write pace, goes on.
    """
    if planned is None:
        return None
    done, plan = planned
    try:
        async with services.store.recovery_turn(done.issue, done.attempt):
            current = services.store.run(done.issue, done.attempt)
            if current is None or not current.recovery_owed:
                return None  # performed meanwhile by whoever had the turn
            await execute(services, gh, plan)
            concluding.mark_recovered(services, done)
    except MutexBusy:
        log.info("%s: attempt %d's recovery is being performed", done.issue, done.attempt)
        return None
    return done
