"""After a run: report it, classify how it ended, and carry out the recovery its class names.

Every path that ends a run comes here, so a run is classified once and its
recovery performed once, however often the job or the webhook behind it repeats.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gidgethub import BadRequest

from bot.domain import check_run, render
from bot.domain import issue_text as snapshot
from bot.domain.budget import Decision, decide, spend
from bot.domain.check_run import CheckPhase, CheckRunRecord, CheckRunView
from bot.domain.classify import RunFacts, classify
from bot.domain.effects import Plan
from bot.domain.jobs import refresh_status_job
from bot.domain.model import IssueRef, Limits, Policy, Recovery, Run, RunState, utcnow
from bot.domain.pacing import HOLD_WORKER_S
from bot.domain.plans import recovery
from bot.domain.render import CheckSummary
from bot.domain.resume import Halt, ResumePlan, plan_resumes
from bot.edges.api import create_check_run, read_issue, update_check_run, upsert_comment
from bot.edges.github import GitHubClient, WriteOvertaken, WritesPaused, status_edits
from bot.edges.store import MutexBusy, Store
from bot.workflows.services import Services

log = logging.getLogger(__name__)


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
    phase of the run (render.status_key), not at every step. A report whose writes
    must wait longer than a job holds its worker never fails the work it reports:
    a job makes it when they may go (jobs/status.py), from the run as stored then.
    """
    try:
        await report_now(services, gh, run, next_step, checks)
    except WritesPaused as paused:
        log.info("%s: status report put off: %s", run.issue, paused)
        when = datetime.fromtimestamp(paused.until, UTC)
        services.dispatch.enqueue_at(refresh_status_job(run.issue), when)
    except MutexBusy as busy:  # another job's report is still writing, slowed by the pace
        log.info("%s: status report put off: %s", run.issue, busy)
        when = utcnow() + timedelta(seconds=HOLD_WORKER_S)
        services.dispatch.enqueue_at(refresh_status_job(run.issue), when)


async def report_now(
    services: Services,
    gh: GitHubClient,
    run: Run,
    next_step: str | None = None,
    checks: Sequence[CheckSummary] = (),
) -> None:
    """Report the run as report() does, but raise WritesPaused when its writes must wait."""
    store, issue = services.store, run.issue
    async with store.status_turn(issue) as current:
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
                    StatusEdit(repo=issue.repo, number=run.pr_number, comment_id=pull_comment),
                    render.pull_status_comment(runs, list(checks), pull_next, now),
                    render.pull_status_key(runs, checks, pull_next),
                    current,
                )
                if pull_comment is not None:
                    store.set_pull_status_comment(issue.repo, run.pr_number, pull_comment)
            if pull_comment is not None:
                pull_comment_url = f"{run.pr_url}#issuecomment-{pull_comment}"
        notes = snapshot.notes(store.queued_text(issue), policy_of(services, run).labels.queue)
        comment = await _write_status(
            gh,
            store,
            StatusEdit(
                repo=issue.repo, number=issue.number, comment_id=store.status_comment(issue)
            ),
            render.status_comment(run, now, next_step, pull_comment_url, notes),
            render.status_key(run, next_step, pull_comment_url, notes),
            current,
        )
        if comment is not None:
            store.set_status_comment(issue, comment)
        await _show_check_run(services, gh, run, next_step, now)


async def _show_check_run(
    services: Services, gh: GitHubClient, run: Run, next_step: str | None, now: datetime
) -> None:
    """Show the run's phase on Baton's check run, once its end is decided.

    An escalated run's is left to its escalation, which links the comment it posts.
    """
    withdrawn = services.store.withdrawn_since(run.issue, run.started_at)
    phase = check_run.phase_of(run, withdrawn)
    if phase is not None and phase is not CheckPhase.ESCALATED:
        await _show_phase(services, gh, run, phase, next_step, now)


async def show_escalation(
    services: Services,
    gh: GitHubClient,
    issue: IssueRef,
    attempt: int,
    reason: str,
    url: str | None,
) -> None:
    """Make Baton's check run show that the run escalated, linked to the escalation comment.

    The escalation comment is posted and says it all: a check run whose writes must
    wait is left as it is.
    """
    try:
        async with services.store.comment_lock(issue):
            run = services.store.run(issue, attempt)
            if run is not None and check_run.phase_of(run) is CheckPhase.ESCALATED:
                why = f"a maintainer decides: {reason}"
                await _show_phase(services, gh, run, CheckPhase.ESCALATED, why, utcnow(), url)
    except (WritesPaused, MutexBusy) as put_off:
        log.warning("%s: the escalated check run was not written: %s", issue, put_off)


async def _show_phase(
    services: Services,
    gh: GitHubClient,
    run: Run,
    phase: CheckPhase,
    next_step: str | None,
    now: datetime,
    escalation_url: str | None = None,
) -> None:
    """Show a phase on Baton's check run of the head the run's work stands on, if any.

    A new head's push closes the check run of the head it replaced (superseded). Held
    under the issue's comment mutex, like its status comments.
    """
    runs = [
        stored if stored.attempt != run.attempt else run
        for stored in services.store.runs(run.issue)
    ]
    head = check_run.head_of(runs, run)
    if head is None:
        return  # nothing pushed yet: the first push gets the first check run
    max_runs = limits_of(services, run).max_runs
    view = check_run.check_run_view(phase, run, runs, max_runs, now, next_step, escalation_url)
    await _write_check_run(services, gh, run, head, view)
    replaced = check_run.replaced_head(runs, run)
    earlier = next((r for r in reversed(runs) if r.head_sha == replaced), None)
    if replaced is None or earlier is None:
        return
    pushed = f"attempt {run.attempt} pushed `{head[:12]}`, whose own check run follows the work"
    superseded = check_run.check_run_view(
        CheckPhase.SUPERSEDED, earlier, runs, max_runs, now, pushed
    )
    await _write_check_run(services, gh, earlier, replaced, superseded)


async def _write_check_run(
    services: Services, gh: GitHubClient, run: Run, head: str, view: CheckRunView
) -> None:
    """Create or update Baton's check run on a head to show view, unless it shows it already.

    The check run shows the work; it is not the work. A write GitHub refuses (an
    installation that has not yet accepted `checks: write`, a head it does not have)
    is logged, and the work goes on.
    """
    store, repo = services.store, run.issue.repo
    record = store.check_run(repo, head)
    how = check_run.write_for(record, view)
    if how is None:
        return
    try:
        if how == "update" and record is not None:
            written = await update_check_run(gh, repo, record.id, view)
        else:
            written = await create_check_run(gh, repo, head, view, run.run_id)
    except WritesPaused:
        raise  # the report is made again when writes may go (report())
    except BadRequest as exc:
        log.warning("%s: Baton's check run on %.12s was not written: %s", run.issue, head, exc)
        return
    record = CheckRunRecord(id=written.id, conclusion=view.conclusion, said=view.key)
    store.record_check_run(repo, head, record)


async def post_status(services: Services, gh: GitHubClient, issue: IssueRef, body: str) -> None:
    """Put body in the issue's status comment (for a state that is not a run's)."""
    store = services.store
    async with store.status_turn(issue) as current:
        comment = await _write_status(
            gh,
            store,
            StatusEdit(
                repo=issue.repo, number=issue.number, comment_id=store.status_comment(issue)
            ),
            body,
            render.body_key(body),
            current,
        )
        if comment is not None:
            store.set_status_comment(issue, comment)


@dataclass(frozen=True)
class StatusEdit:
    """Which status comment an edit writes: on an issue or pull request, by id once it has one."""

    repo: str
    number: int
    comment_id: int | None


async def _write_status(
    gh: GitHubClient,
    store: Store,
    edit: StatusEdit,
    body: str,
    key: str,
    current: Callable[[], bool],
) -> int | None:
    """Write a status comment unless it says this already (key); return its id (None: none yet).

    A status edit gives way to the writes that matter more, and is dropped if a newer
    one was asked for while it waited for its turn to be sent (current).
    """
    repo, comment_id = edit.repo, edit.comment_id
    if comment_id is not None and store.status_written(repo, comment_id) == key:
        return comment_id
    try:
        with status_edits(current):
            written = await upsert_comment(gh, repo, edit.number, comment_id, body)
    except WriteOvertaken:
        log.info("%s#%d: a status edit overtaken by a newer one was dropped", repo, edit.number)
        return comment_id
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


async def conclusion(
    services: Services,
    gh: GitHubClient,
    run: Run,
    facts: RunFacts,
    checks: Sequence[CheckSummary] = (),
) -> tuple[Run, Plan] | None:
    """Classify a run that ended without a green PR, once, and plan its recovery.

    Returns the classified run and the plan that performs its recovery
    (bot/workflows/execute.py performs it, then marks it performed), or None when it
    had been classified and recovered already (a repeated job or webhook), in which
    case nothing is to be done again. A run classified whose recovery was cut short
    (a failed call, a dead worker) is planned again: the recovery is owed.
    """
    done = _classified_once(services, run, facts)
    if done is None:
        return await owed(services, gh, run.issue, run.attempt)
    outcome = _outcome(services, done, tuple(checks))
    log.info(
        "%s: attempt %d is %s → %s (%s)",
        run.issue,
        run.attempt,
        done.failure_class,
        outcome.decision.action.value,
        outcome.decision.reason,
    )
    return done, await _recovery(services, gh, outcome)


def _classified_once(services: Services, run: Run, facts: RunFacts) -> Run | None:
    """Record the run's class and that its recovery is owed; None if classified already."""
    classification = classify(facts)

    def classified(current: Run) -> Run | None:
        if current.classification is not None:
            return None
        return current.model_copy(
            update={
                "classification": classification,
                "failure_class": classification.failure_class.value,
                "recovery_owed": True,
            }
        )

    done = services.store.update_run(run.issue, run.attempt, classified)
    if done is None:
        log.info("%s: attempt %d was classified already", run.issue, run.attempt)
    return done


async def audit_hold(services: Services, gh: GitHubClient, run: Run) -> tuple[Run, Plan] | None:
    """Keep a green PR its settlement audit flagged from review, and plan its escalation.

    The repository asked for it (`audit: hold`); the flags are the reason. Returns the
    held run and the plan that escalates it, or None when it had been held already.
    """
    reason = render.audit_reason(run.audit)

    def held(current: Run) -> Run | None:
        if current.state is not RunState.PUSHED_GREEN:
            return None
        moved = current.moved(RunState.FAILED, utcnow(), note="held by the settlement audit")
        return moved.model_copy(update={"reason": "held from review by its settlement audit"})

    moved = services.store.update_run(run.issue, run.attempt, held)
    if moved is None:
        return await owed(services, gh, run.issue, run.attempt)
    facts = RunFacts(ending="audit-flagged", detail=f"{len(run.audit)} flags")
    done = _classified_once(services, moved, facts)
    if done is None:
        return await owed(services, gh, run.issue, run.attempt)
    log.warning("%s: attempt %d held by its settlement audit: %s", run.issue, run.attempt, reason)
    # Escalated whatever its budgets: the repository holds flagged pull requests from review.
    escalation = Decision(action=Recovery.ESCALATE, reason=reason)
    outcome = _outcome(services, done).model_copy(update={"decision": escalation})
    return done, await _recovery(services, gh, outcome)


async def owed(
    services: Services, gh: GitHubClient, issue: IssueRef, attempt: int
) -> tuple[Run, Plan] | None:
    """Plan again the recovery a classified run still owes; None when it owes none.

    Its class decides it as it did the first time (an audit hold escalates either
    way); the failing checks' summaries of the first plan are not kept, so a
    continuation planned again is briefed from the run's own record.
    """
    run = services.store.run(issue, attempt)
    if run is None or not run.recovery_owed or run.classification is None:
        return None
    log.warning("%s: attempt %d's recovery was cut short; performing it now", issue, attempt)
    return run, await _recovery(services, gh, _outcome(services, run))


def mark_recovered(services: Services, run: Run) -> None:
    """Record that the run's recovery was performed in full: nothing is owed any more."""

    def recovered(current: Run) -> Run | None:
        return (
            current.model_copy(update={"recovery_owed": False}) if current.recovery_owed else None
        )

    services.store.update_run(run.issue, run.attempt, recovered)


def _outcome(
    services: Services, run: Run, checks: tuple[CheckSummary, ...] = ()
) -> recovery.Outcome:
    """Return what the classified run's recovery is planned from, its budgets reckoned once."""
    assert run.classification is not None
    runs = tuple(services.store.runs(run.issue))
    spent, limits = spend(runs), limits_of(services, run)
    return recovery.Outcome(
        run=run,
        runs=runs,
        decision=decide(run.classification, spent, limits),
        spent=spent,
        limits=limits,
        policy=policy_of(services, run),
        chain=services.store.chain_of(run.issue),
        checks=checks,
    )


async def _recovery(services: Services, gh: GitHubClient, outcome: recovery.Outcome) -> Plan:
    """Plan the recovery the outcome's decision names.

    The issue's labels are read only for a recovery that hands it back to the agent:
    one a maintainer withdrew meanwhile is not handed back.
    """
    issue = outcome.run.issue
    if outcome.decision.action in recovery.HANDS_BACK:
        live = frozenset((await read_issue(gh, issue)).label_names)
        outcome = outcome.model_copy(update={"live": live})
    planned = recovery.plan(services.settings, outcome, utcnow())
    if planned.withdrawn:
        log.info("%s: withdrawn by a maintainer; not starting another attempt", issue)
    return planned.effects


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
    job = recovery.follow_up_job(services.settings, halt.issue, halt.run.attempt)
    return services.dispatch.enqueue_unless_pending(job)
