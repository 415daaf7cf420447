"""After a run: report it, classify how it ended, and carry out the recovery its class names.

Every path that ends a run comes here, so a run is classified once and its
recovery performed once, however often the job or the webhook behind it repeats.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

from gidgethub import HTTPException

from bot.domain import issue_text as snapshot
from bot.domain import render
from bot.domain.budget import Decision, decide, spend
from bot.domain.classify import RunFacts, classify
from bot.domain.jobs import JobSpec, RunMode, run_issue_job
from bot.domain.model import IssueRef, Limits, Policy, Recovery, Run, RunState, utcnow
from bot.domain.render import CheckSummary
from bot.domain.resume import Halt, ResumePlan, plan_resumes
from bot.edges.api import label_names, post_comment, read_issue, upsert_comment
from bot.edges.github import GitHubClient
from bot.edges.store import Store
from bot.ops.metrics import ESCALATIONS, HALTS, Tally
from bot.ops.settings import Settings
from bot.workflows.labels import set_state_label
from bot.workflows.services import Services

log = logging.getLogger(__name__)

MAX_BACKOFF_S = 3600.0


async def report(
    services: Services,
    gh: GitHubClient,
    run: Run,
    next_step: str | None = None,
    checks: Sequence[CheckSummary] = (),
) -> None:
    """Make the issue's status comment, and the PR's where it has one, say where the run is.

    Edits are serialised per issue and rendered from the stored run, so a slower
    job never writes an older state over a newer one; a comment is written once per
    phase of the run (render.status_key), not at every step.
    """
    store, issue = services.store, run.issue
    async with store.comment_lock(issue):
        stored = store.run(issue, run.attempt)
        if stored is not None and len(stored.history) > len(run.history):
            run, next_step, checks = stored, None, ()  # a later step of this run reported since
        now = utcnow()
        pull_comment_url = None
        if run.pr_number is not None:
            on_this_pull = [r for r in store.runs(issue) if r.pr_number in (None, run.pr_number)]
            runs = sorted(
                [r for r in on_this_pull if r.attempt != run.attempt] + [run],
                key=lambda r: r.attempt,
            )
            pull_comment = store.pull_status_comment(issue.repo, run.pr_number)
            if render.pull_comment_due(runs, pull_comment is not None, next_step is not None):
                pull_next = next_step or _NEXT[run.state]
                pull_comment = await _write_status(
                    gh,
                    store,
                    issue.repo,
                    run.pr_number,
                    pull_comment,
                    render.pull_status_comment(runs, list(checks), pull_next, now),
                    render.pull_status_key(runs, checks, pull_next),
                )
                store.set_pull_status_comment(issue.repo, run.pr_number, pull_comment)
            if pull_comment is not None:
                pull_comment_url = f"{run.pr_url}#issuecomment-{pull_comment}"
        notes = snapshot.notes(store.queued_text(issue), policy_of(services, run).labels.queue)
        comment = await _write_status(
            gh,
            store,
            issue.repo,
            issue.number,
            store.status_comment(issue),
            render.status_comment(run, now, next_step, pull_comment_url, notes),
            render.status_key(run, next_step, pull_comment_url, notes),
        )
        store.set_status_comment(issue, comment)


async def post_status(services: Services, gh: GitHubClient, issue: IssueRef, body: str) -> None:
    """Put body in the issue's status comment (for a state that is not a run's)."""
    store = services.store
    async with store.comment_lock(issue):
        comment = await _write_status(
            gh,
            store,
            issue.repo,
            issue.number,
            store.status_comment(issue),
            body,
            render.body_key(body),
        )
        store.set_status_comment(issue, comment)


async def _write_status(
    gh: GitHubClient,
    store: Store,
    repo: str,
    number: int,
    comment_id: int | None,
    body: str,
    key: str,
) -> int:
    """Write a status comment unless it says this already (key); return its id."""
    if comment_id is not None and store.status_written(repo, comment_id) == key:
        return comment_id
    written = await upsert_comment(gh, repo, number, comment_id, body)
    store.record_status_written(repo, written, key)
    return written


_NEXT: dict[str, str] = {
    "pushed-pending": "waiting for the pull request's checks",
    "pushed-green": "a maintainer's review; requested changes come back to the agent",
    "merged": "nothing: the work is merged",
    "closed": "nothing: the pull request was closed",
    "halted": "resuming when the usage window reopens",
}
_NEXT.update({state: "deciding what comes next" for state in ("failed", "no-change", "killed")})
_NEXT.update({state: "the agent's work" for state in ("claimed", "provisioning", "running")})


async def conclude(
    services: Services,
    gh: GitHubClient,
    run: Run,
    facts: RunFacts,
    checks: Sequence[CheckSummary] = (),
) -> Run | None:
    """Classify a run that ended without a green PR and perform its recovery, once.

    Returns the classified run, or None when it had been classified already
    (a repeated job or webhook), in which case nothing is done again.
    """
    done = _classified_once(services, run, facts)
    if done is None:
        return None
    assert done.classification is not None
    decision = decide(
        done.classification, spend(services.store.runs(run.issue)), limits_of(services, done)
    )
    log.info(
        "%s: attempt %d is %s → %s (%s)",
        run.issue,
        run.attempt,
        done.classification.failure_class.value,
        decision.action.value,
        decision.reason,
    )
    await _perform(services, gh, done, decision, checks)
    return done


def _classified_once(services: Services, run: Run, facts: RunFacts) -> Run | None:
    """Record the run's class; None when it was classified already."""
    classification = classify(facts)

    def classified(current: Run) -> Run | None:
        if current.classification is not None:
            return None
        return current.model_copy(
            update={
                "classification": classification,
                "failure_class": classification.failure_class.value,
            }
        )

    done = services.store.update_run(run.issue, run.attempt, classified)
    if done is None:
        log.info("%s: attempt %d was classified already", run.issue, run.attempt)
    return done


async def hold_for_audit(services: Services, gh: GitHubClient, run: Run) -> Run | None:
    """Keep a green PR its settlement audit flagged from review, and escalate it once.

    The repository asked for it (`audit: hold`); the flags are the reason. Returns the
    held run, or None when it had been held already.
    """
    reason = render.audit_reason(run.audit)

    def held(current: Run) -> Run | None:
        if current.state is not RunState.PUSHED_GREEN:
            return None
        moved = current.moved(RunState.FAILED, utcnow(), note="held by the settlement audit")
        return moved.model_copy(update={"reason": "held from review by its settlement audit"})

    moved = services.store.update_run(run.issue, run.attempt, held)
    if moved is None:
        return None
    facts = RunFacts(ending="audit-flagged", detail=f"{len(run.audit)} flags")
    done = _classified_once(services, moved, facts)
    if done is None:
        return None
    log.warning("%s: attempt %d held by its settlement audit: %s", run.issue, run.attempt, reason)
    await escalate(services, gh, done, reason)
    return done


async def _perform(
    services: Services,
    gh: GitHubClient,
    run: Run,
    decision: Decision,
    checks: Sequence[CheckSummary],
) -> None:
    issue, labels = run.issue, policy_of(services, run).labels
    action = decision.action
    if action in (Recovery.CONTINUE, Recovery.REQUEUE, Recovery.RETRY, Recovery.BACKOFF):
        live = label_names(await read_issue(gh, issue))
        if not live & labels.active:
            # A human took Baton's labels off: the issue was withdrawn. Never put it back.
            log.info("%s: withdrawn by a maintainer; not starting another attempt", issue)
            await set_state_label(gh, services.store, services.dispatch, labels, issue, None, live)
            await report(services, gh, run, "nothing: a maintainer withdrew the issue", checks)
            return
        await set_state_label(
            gh, services.store, services.dispatch, labels, issue, labels.in_progress, live
        )
        next_step = _dispatch_next(services, run, action)
        await report(services, gh, run, next_step, checks)
    elif action is Recovery.NONE:
        await set_state_label(gh, services.store, services.dispatch, labels, issue, None)
        await report(services, gh, run, "nothing: the run was stopped", checks)
    elif action is Recovery.HALT:
        await _halt(services, gh, run)
    else:
        await escalate(services, gh, run, decision.reason, checks)


def limits_of(services: Services, run: Run) -> Limits:
    """Return the issue's budgets: the run's policy, with what maintainers added since."""
    limits = policy_of(services, run).limits
    extra = services.store.extra_continuations(run.issue)
    if not extra:
        return limits
    return limits.model_copy(update={"max_continuations": limits.max_continuations + extra})


def policy_of(services: Services, run: Run) -> Policy:
    """Return what applied to the run: as recorded when it was claimed, else the defaults."""
    return run.policy or services.settings.policy


def resume_job(settings: Settings, issue: IssueRef, halted_attempt: int) -> JobSpec:
    """Return the re-entry of an issue halted at an attempt (scheduling it twice is harmless)."""
    return run_issue_job(
        settings, issue, f"after-{halted_attempt}", RunMode.CONTINUE, halted_attempt
    )


def halted_plan(store: Store, now: datetime, only: Sequence[str] = ()) -> ResumePlan:
    """Return which halted issues are due at now (or only those named).

    A halt whose issue moved on since is dropped from the index.
    """
    halts = [
        Halt(issue=issue, resume_at=resume_at, run=store.latest_run(issue))
        for issue, resume_at in store.halts()
    ]
    plan = plan_resumes(halts, now, only)
    for halt in plan.stale:
        store.clear_halt(halt.issue)
    return plan


def resume(services: Services, halt: Halt) -> bool:
    """Enqueue a due halt's re-entry; False when it is already queued or running."""
    assert halt.run is not None
    job = resume_job(services.settings, halt.issue, halt.run.attempt)
    return services.dispatch.enqueue_unless_pending(job)


async def _halt(services: Services, gh: GitHubClient, run: Run) -> None:
    """Wait out a usage window: no lock or worker held, the re-entry scheduled at its reset."""
    settings, issue = services.settings, run.issue
    resets_at = run.agent_result.resets_at if run.agent_result else None
    assert resets_at is not None  # classify only names HALT for a window with a reset time
    resume_at = resets_at + timedelta(seconds=settings.resume_buffer_seconds)
    halted = services.store.update_run(
        issue,
        run.attempt,
        lambda current: current.moved(RunState.HALTED, utcnow(), note="usage window").model_copy(
            update={"resume_at": resume_at}
        ),
    )
    assert halted is not None
    services.store.add_metrics(Tally().count(HALTS))
    reentry = spend(services.store.runs(issue)).reentries
    policy = policy_of(services, run)
    # The window is the account's: no other run that would spend it starts before it reopens.
    services.store.close_window(policy.account, resume_at)
    services.store.record_halt(issue, resume_at)
    services.dispatch.enqueue_at(resume_job(settings, issue, run.attempt), resume_at)
    await set_state_label(
        gh, services.store, services.dispatch, policy.labels, issue, policy.labels.halted
    )
    await report(
        services,
        gh,
        halted,
        f"halted by a usage window: resumable at {render.instant(resume_at, utcnow())} "
        f"(re-entry {reentry}/{policy.limits.max_reentries})",
    )


def _dispatch_next(services: Services, run: Run, action: Recovery) -> str:
    settings, issue = services.settings, run.issue
    limits = limits_of(services, run)
    if action in (Recovery.CONTINUE, Recovery.REQUEUE):
        job = run_issue_job(settings, issue, f"after-{run.attempt}", RunMode.CONTINUE, run.attempt)
        services.dispatch.enqueue([job])
        return f"a continuation on `{run.branch}` (attempt {run.attempt + 1} of {limits.max_runs})"
    mode = RunMode.CONTINUE if run.continuation_of is not None else RunMode.RETRY
    job = run_issue_job(settings, issue, f"after-{run.attempt}", mode, run.attempt)
    if action is Recovery.RETRY:
        services.dispatch.enqueue([job])
        return "a new attempt from the base branch"
    backoffs = spend(services.store.runs(issue)).backoffs_in_a_row
    delay = min(settings.backoff_base_seconds * 2 ** max(backoffs - 1, 0), MAX_BACKOFF_S)
    services.dispatch.enqueue_later(job, delay)
    return f"trying again in {render.duration(timedelta(seconds=delay))}"


async def escalate(
    services: Services,
    gh: GitHubClient,
    run: Run,
    reason: str,
    checks: Sequence[CheckSummary] = (),
) -> None:
    """Hand the issue to a human: Baton's labels off, `escalated` on, one comment, once."""
    store, issue = services.store, run.issue
    store.update_run(
        issue, run.attempt, lambda current: current.model_copy(update={"escalated": True})
    )
    labels = policy_of(services, run).labels
    await set_state_label(gh, store, services.dispatch, labels, issue, labels.escalated)
    await report(services, gh, run, f"a maintainer: {reason}", checks)
    reason_key = run.failure_class or "escalated"
    if not store.first_escalation(issue, reason_key, run.attempt):
        log.info("%s: escalation for attempt %d was posted already", issue, run.attempt)
        return
    runs = store.runs(issue)
    work = next((r for r in reversed(runs) if r.head_sha is not None), None)
    mentions = list(policy_of(services, run).escalation_mentions)
    body = render.escalation_comment(reason, spend(runs), limits_of(services, run), work, mentions)
    try:
        await post_comment(gh, issue, body)
    except HTTPException:
        store.forget_escalation(issue, reason_key, run.attempt)  # a retry posts it
        raise
    log.warning("%s: escalated after attempt %d: %s", issue, run.attempt, reason)
    store.add_metrics(Tally().count(ESCALATIONS, reason_key))
    chain = store.chain_of(issue)
    if chain is not None:
        services.dispatch.advance_chain(chain, f"escalated-{issue.number}-{run.attempt}")
