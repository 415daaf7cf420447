"""What follows a classified run: the recovery its budgets allow, as a plan.

Pure. From the classified run, the decision bot/domain/budget.py made of it with
what the issue's runs have spent and its limits (reckoned once, and carried here
into the plan), the labels the issue carries now and the policy that applied to it:
the issue's state label, what its status comment says comes next, the jobs to
enqueue (a continuation, a new attempt, a backoff with its delay, the re-entry at a
usage window's reset) and the escalation, where there is one.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from bot.domain import render
from bot.domain.budget import Decision, Spend
from bot.domain.effects import (
    Count,
    Enqueue,
    Escalate,
    HaltRun,
    MarkEscalated,
    Plan,
    Report,
    SetLabel,
)
from bot.domain.jobs import JobSpec, RunMode, advance_chain_job, run_issue_job
from bot.domain.model import (
    Chain,
    FailureClass,
    IssueRef,
    Labels,
    Limits,
    Policy,
    Recovery,
    Run,
)
from bot.domain.render import CheckSummary
from bot.ops.metrics import ESCALATIONS, HALTS
from bot.ops.settings import Settings

MAX_BACKOFF_S = 3600.0

# The recoveries that hand the issue straight back to the agent: an issue whose Baton
# labels a human took off meanwhile was withdrawn, and is never put back.
HANDS_BACK = frozenset({Recovery.CONTINUE, Recovery.REQUEUE, Recovery.RETRY, Recovery.BACKOFF})


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class Outcome(_Model):
    """What a classified run's recovery is planned from."""

    run: Run
    runs: tuple[Run, ...]  # the issue's runs, oldest first
    decision: Decision
    spent: Spend  # what runs have spent, as decision was made from it
    limits: Limits  # the issue's budgets
    policy: Policy  # what applied to the run
    live: frozenset[str] | None = None  # the labels the issue carries now, read to hand it back
    chain: Chain | None = None  # the chain the issue is a link of
    checks: tuple[CheckSummary, ...] = ()  # what failed, for its report


class Escalation(_Model):
    """The issue handed to a maintainer: why, and what its one comment is made of."""

    reason: str
    key: str  # what the comment is posted once for: the run's failure class
    work: Run | None  # the latest run that pushed: the work there is to continue from
    mentions: tuple[str, ...]
    chain: Chain | None = None  # told that the link escalated


class RecoveryPlan(_Model):
    """A classified run's recovery, and the effects that carry it out."""

    issue: IssueRef
    attempt: int
    decision: Decision
    spent: Spend
    limits: Limits
    labels: Labels
    live: frozenset[str] | None = None
    withdrawn: bool = False  # a maintainer took Baton's labels off: nothing comes next
    label: str | None  # the issue's Baton state label from now on; None: none
    next_step: str  # what its status comment says comes next
    jobs: tuple[Enqueue, ...] = ()
    halt: HaltRun | None = None
    escalation: Escalation | None = None
    checks: tuple[CheckSummary, ...] = ()

    @property
    def effects(self) -> Plan:
        """Return the effects of the plan, in the order they are performed."""
        report = Report(
            issue=self.issue, attempt=self.attempt, next_step=self.next_step, checks=self.checks
        )
        label = SetLabel(issue=self.issue, labels=self.labels, label=self.label, live=self.live)
        if self.escalation is not None:
            marked = MarkEscalated(issue=self.issue, attempt=self.attempt)
            return (marked, label, report, self._escalate(self.escalation))
        if self.halt is not None:
            return (self.halt, Count(metric=HALTS), *self.jobs, label, report)
        return (label, *self.jobs, report)

    def _escalate(self, escalation: Escalation) -> Escalate:
        body = render.escalation_comment(
            escalation.reason, self.spent, self.limits, escalation.work, list(escalation.mentions)
        )
        then: Plan = (Count(metric=ESCALATIONS, values=(escalation.key,)),)
        if escalation.chain is not None:
            because = f"escalated-{self.issue.number}-{self.attempt}"
            then = (*then, Enqueue(job=advance_chain_job(escalation.chain, because)))
        return Escalate(
            issue=self.issue,
            attempt=self.attempt,
            key=escalation.key,
            reason=escalation.reason,
            body=body,
            then=then,
        )


def follow_up_job(
    settings: Settings, issue: IssueRef, attempt: int, mode: RunMode = RunMode.CONTINUE
) -> JobSpec:
    """Return the attempt after attempt (its id names attempt: scheduling it twice is harmless)."""
    return run_issue_job(settings, issue, f"after-{attempt}", mode, attempt)


def backoff_delay_s(settings: Settings, backoffs_in_a_row: int) -> float:
    """Return how long to wait before the next try, after this many backoffs in a row."""
    delay = settings.backoff_base_seconds * 2 ** max(backoffs_in_a_row - 1, 0)
    return float(min(delay, MAX_BACKOFF_S))


def plan(settings: Settings, outcome: Outcome, now: datetime) -> RecoveryPlan:
    """Return the recovery of the classified run, as its decision names it, at now."""
    run, decision, labels = outcome.run, outcome.decision, outcome.policy.labels
    planned = RecoveryPlan(
        issue=run.issue,
        attempt=run.attempt,
        decision=decision,
        spent=outcome.spent,
        limits=outcome.limits,
        labels=labels,
        checks=outcome.checks,
        label=None,
        next_step="nothing: the run was stopped",
    )
    action = decision.action
    if action in HANDS_BACK:
        return _hand_back(settings, outcome, planned)
    if action is Recovery.HALT:
        return _halt(settings, outcome, planned, now)
    if action is Recovery.ESCALATE:
        reason = decision.reason
        if run.failure_class == FailureClass.CREDENTIAL_FOUND and run.reason:
            reason = f"{run.failure_class}: {run.reason}"  # it names where each credential is
        escalation = Escalation(
            reason=reason,
            key=run.failure_class or "escalated",
            work=_work(outcome.runs),
            mentions=outcome.policy.escalation_mentions,
            chain=outcome.chain,
        )
        return planned.model_copy(
            update={
                "label": labels.escalated,
                "next_step": f"a maintainer: {decision.reason}",
                "escalation": escalation,
            }
        )
    return planned  # Recovery.NONE: an operator stopped it


def _hand_back(settings: Settings, outcome: Outcome, planned: RecoveryPlan) -> RecoveryPlan:
    """Plan the next attempt of a run its recovery hands back to the agent, unless withdrawn."""
    run, live, labels = outcome.run, outcome.live, outcome.policy.labels
    if live is not None and not live & labels.active:
        return planned.model_copy(
            update={
                "live": live,
                "withdrawn": True,
                "next_step": "nothing: a maintainer withdrew the issue",
            }
        )
    action = outcome.decision.action
    if action in (Recovery.CONTINUE, Recovery.REQUEUE):
        job = Enqueue(job=follow_up_job(settings, run.issue, run.attempt))
        next_step = (
            f"a continuation on `{run.branch}` "
            f"(attempt {run.attempt + 1} of {outcome.limits.max_runs})"
        )
    else:
        mode = RunMode.CONTINUE if run.continuation_of is not None else RunMode.RETRY
        job = Enqueue(job=follow_up_job(settings, run.issue, run.attempt, mode))
        next_step = "a new attempt from the base branch"
        if action is Recovery.BACKOFF:
            delay = backoff_delay_s(settings, outcome.spent.backoffs_in_a_row)
            job = job.model_copy(update={"delay_s": delay})
            next_step = f"trying again in {render.duration(timedelta(seconds=delay))}"
    return planned.model_copy(
        update={"live": live, "label": labels.in_progress, "next_step": next_step, "jobs": (job,)}
    )


def _halt(
    settings: Settings, outcome: Outcome, planned: RecoveryPlan, now: datetime
) -> RecoveryPlan:
    """Plan waiting out a usage window: the re-entry scheduled at its reset, plus a buffer."""
    run = outcome.run
    resets_at = run.agent_result.resets_at if run.agent_result else None
    assert resets_at is not None  # classify only names HALT for a window with a reset time
    resume_at = resets_at + timedelta(seconds=settings.resume_buffer_seconds)
    halt = HaltRun(
        issue=run.issue, attempt=run.attempt, account=outcome.policy.account, resume_at=resume_at
    )
    reentry = f"re-entry {outcome.spent.reentries}/{outcome.limits.max_reentries}"
    return planned.model_copy(
        update={
            "label": outcome.policy.labels.halted,
            "next_step": "halted by a usage window: resumable at "
            f"{render.instant(resume_at, now)} ({reentry})",
            "jobs": (Enqueue(job=follow_up_job(settings, run.issue, run.attempt), at=resume_at),),
            "halt": halt,
            "checks": (),
        }
    )


def _work(runs: Sequence[Run]) -> Run | None:
    """Return the latest run that pushed: the work an escalation says to continue from."""
    return next((run for run in reversed(runs) if run.head_sha is not None), None)
