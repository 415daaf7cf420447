"""Settling a pushed run: what its head's checks, a review, or its pull request's end do to it.

Pure. Each decision takes the run as recorded and the facts bot/workflows/settle.py
read, and returns the run's new state with the effects that follow it; an event that
is not for the run (an older head, a repeated delivery, a run that moved on) finds
nothing to change and so does nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bot.domain.checks import Verdict, no_ci_due
from bot.domain.classify import RunFacts
from bot.domain.effects import (
    Conclude,
    Enqueue,
    HoldForAudit,
    MarkReady,
    Plan,
    Report,
    SetLabel,
    SettleHeadAt,
)
from bot.domain.jobs import advance_chain_job
from bot.domain.model import AuditFinding, Chain, Labels, Policy, Run, RunState
from bot.domain.plans.restack import Moved
from bot.domain.render import CheckSummary


class HeadFacts(BaseModel):
    """What a head's CI has said by now (read at now)."""

    model_config = ConfigDict(frozen=True)

    installation_id: int
    repo: str
    sha: str
    verdict: Verdict  # the checks' verdict so far (bot/domain/checks.py)
    checks: tuple[CheckSummary, ...] = ()  # what passed, or, for a red head, what failed
    silent: bool = False  # no check suite and no commit status reported at all
    now: datetime


class Audit(BaseModel):
    """What the settlement audit of a green head flagged, and what the repository does then."""

    model_config = ConfigDict(frozen=True)

    findings: tuple[AuditFinding, ...] = ()
    mode: Literal["advisory", "hold"] = "advisory"  # the repository file's `audit`

    @property
    def holds(self) -> bool:
        """Tell whether the findings keep the pull request from review."""
        return bool(self.findings) and self.mode == "hold"


class Reading(BaseModel):
    """A head's verdict as settlement takes it: the no-CI rule applied."""

    model_config = ConfigDict(frozen=True)

    verdict: Verdict
    next_step: str | None = None  # the status comments' next step, where the rule decided
    look_again_at: datetime | None = None  # a silent head's verdict is due then


class Settlement(BaseModel):
    """What an event does to a run: its new state (None: nothing), then what follows.

    restack names what the links stacked on the run follow (bot/workflows/chain.py),
    after the effects.
    """

    model_config = ConfigDict(frozen=True)

    run: Run | None = None
    effects: Plan = ()
    restack: Moved | None = None


def waits_on(run: Run, head_sha: str) -> bool:
    """Tell whether the run is pushed and waits on this very head's checks.

    A head whose pull request is still to open waits on nothing yet: it is looked at
    once its pull request opens.
    """
    return (
        run.state is RunState.PUSHED_PENDING
        and run.head_sha == head_sha
        and run.pull_pending is None
    )


def pushed_at(run: Run) -> datetime:
    """Return when the run's head was pushed (its latest move to waiting for checks)."""
    pushes = [change.at for change in run.history if change.state is RunState.PUSHED_PENDING]
    return pushes[-1] if pushes else run.started_at


def read_head(run: Run, head: HeadFacts, policy: Policy) -> Reading:
    """Return what the head's checks say of the run that pushed it, the no-CI rule applied.

    Without required checks, a head no CI has reported on by the policy's wait is
    green ("no CI reported"); until then its verdict is due at that moment.
    """
    if head.verdict is not Verdict.PENDING or not head.silent or policy.required_checks:
        return Reading(verdict=head.verdict)
    due = no_ci_due(pushed_at(run), head.now, policy.no_checks_after_s)
    if due is not None:
        return Reading(verdict=Verdict.PENDING, look_again_at=due)
    return Reading(verdict=Verdict.GREEN, next_step=_no_ci_reported(policy.no_checks_after_s))


def _no_ci_reported(wait_s: float) -> str:
    return (
        f"No CI reported on this head within {wait_s:g} s of its push, and no checks are "
        "required: it counts as green and awaits a maintainer's review."
    )


def settle_checks(
    run: Run,
    head_sha: str,
    verdict: Verdict,
    at: datetime,
    audit: tuple[AuditFinding, ...] = (),
) -> Run | None:
    """Return the run settled by its head's check verdict, or None if the verdict is not for it.

    Only a pushed run still waiting on this very head moves: a verdict for an
    older head, a repeated verdict, or one that is still pending changes nothing.
    A green run records what its settlement audit flagged.
    """
    if not waits_on(run, head_sha):
        return None
    if verdict is Verdict.GREEN:
        green = run.moved(RunState.PUSHED_GREEN, at)
        return green.model_copy(update={"audit": list(audit)}) if audit else green
    if verdict is Verdict.RED:
        failed = run.moved(RunState.FAILED, at, note="checks failed")
        return failed.model_copy(
            update={"failure_class": "checks-failed", "reason": "the pull request's checks failed"}
        )
    return None


def head_settlement(run: Run, head: HeadFacts, policy: Policy, audit: Audit) -> Settlement:
    """Return what the head's checks do to the run that pushed it.

    Green: the issue awaits review, its pull request is ready for review where Baton
    opened it as a draft, and the links stacked on it follow its tip, unless its audit
    flags keep it from review (`audit: hold`); flags that do not hold are shown on its
    status comments (bot/domain/render.py). Red: a `checks-failed`
    continuation, briefed with what failed. Pending: nothing, or, for a silent head, a
    look again when its silence counts as no CI.
    """
    if not waits_on(run, head.sha):
        return Settlement()  # an older head, or a run that moved on
    reading = read_head(run, head, policy)
    if reading.look_again_at is not None:
        look = SettleHeadAt(
            installation_id=head.installation_id,
            repo=head.repo,
            head_sha=head.sha,
            at=reading.look_again_at,
        )
        return Settlement(effects=(look,))
    settled = settle_checks(run, head.sha, reading.verdict, head.now, audit.findings)
    if settled is None:
        return Settlement()
    issue, attempt = run.issue, run.attempt
    if reading.verdict is Verdict.RED:
        names = ", ".join(check.name for check in head.checks) or "a check"
        facts = RunFacts(ending="checks-failed", detail=f"failing: {names}")
        concluded = Conclude(issue=issue, attempt=attempt, facts=facts, checks=head.checks)
        return Settlement(run=settled, effects=(concluded,))
    if audit.holds:
        return Settlement(run=settled, effects=(HoldForAudit(issue=issue, attempt=attempt),))
    labels = policy.labels
    effects: Plan = (
        SetLabel(issue=issue, labels=labels, label=labels.review),
        Report(issue=issue, attempt=attempt, next_step=reading.next_step, checks=head.checks),
    )
    if run.pr_number is not None:  # a draft is ready for review now (`draft_until_green`)
        effects += (MarkReady(issue=issue, pull=run.pr_number),)
    return Settlement(run=settled, effects=effects, restack=Moved.TIP)


def request_changes(
    run: Run, review_id: int, author: str, submitted_at: datetime | None, at: datetime
) -> Run | None:
    """Return the run failed by a review that requested changes, or None if it does not apply.

    Only a pushed run still awaiting its verdict or review moves; the same review
    delivered twice, or one for a run that already moved on, changes nothing. Nor does
    a review submitted before the run started (GitHub gives whole seconds): it was
    about an earlier attempt.
    """
    if run.state not in (RunState.PUSHED_PENDING, RunState.PUSHED_GREEN):
        return None
    if submitted_at is not None and submitted_at < run.started_at.replace(microsecond=0):
        return None
    failed = run.moved(RunState.FAILED, at, note=f"changes requested by @{author}")
    return failed.model_copy(
        update={
            "failure_class": "changes-requested",
            "reason": f"@{author} requested changes",
            "review_id": review_id,
        }
    )


def review_settlement(
    run: Run, review_id: int, author: str, submitted_at: datetime | None, at: datetime
) -> Settlement:
    """Return what a steerer's review that requested changes does to the attempt it reviewed.

    It goes back to the agent as a `changes-requested` continuation.
    """
    changed = request_changes(run, review_id, author, submitted_at, at)
    if changed is None:
        return Settlement()
    facts = RunFacts(ending="changes-requested", detail=f"review {review_id} by @{author}")
    return Settlement(
        run=changed, effects=(Conclude(issue=run.issue, attempt=run.attempt, facts=facts),)
    )


def close_pull(run: Run, merged: bool, at: datetime) -> Run | None:
    """Return the run ended by its pull request being merged or closed, or None if it had been."""
    if run.state in (RunState.MERGED, RunState.CLOSED):
        return None
    return run.moved(RunState.MERGED if merged else RunState.CLOSED, at)


def closing_settlement(
    run: Run, pull: int, merged: bool, labels: Labels, chain: Chain | None, at: datetime
) -> Settlement:
    """Return what the end of the run's pull request does: the run ends, and is not requeued.

    Baton's labels come off (labels: the names the issue was given) and the status
    comments say how it ended. The links stacked on a merged one follow it onto what
    it merged into; a closed one holds its successors, so its chain takes another look.
    """
    closed = close_pull(run, merged, at)
    if closed is None:
        return Settlement()
    ended: Plan = (
        SetLabel(issue=run.issue, labels=labels, label=None),
        Report(issue=run.issue, attempt=run.attempt),
    )
    if merged:
        return Settlement(run=closed, effects=ended, restack=Moved.MERGED)
    if chain is not None:
        ended += (Enqueue(job=advance_chain_job(chain, f"closed-{pull}")),)
    return Settlement(run=closed, effects=ended)


def end_gone(run: Run, reason: str, at: datetime) -> Run | None:
    """Return the run closed because its issue is gone from GitHub, or None if it had ended."""
    if run.state.is_terminal:
        return None
    return run.moved(RunState.CLOSED, at, note="gone").model_copy(update={"reason": reason})
