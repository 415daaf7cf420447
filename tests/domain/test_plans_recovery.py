"""Recovery: what follows a classified run, within its budgets, as a plan; pure, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.domain import render
from bot.domain.budget import Decision, Spend, decide
from bot.domain.classify import RunFacts, classify
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
from bot.domain.jobs import RunMode, advance_chain_job, run_issue_job
from bot.domain.model import AgentResult, Chain, IssueRef, Limits, Recovery, Run, RunState
from bot.domain.plans.recovery import Outcome, backoff_delay_s, plan
from bot.domain.render import CheckSummary
from bot.ops.metrics import ESCALATIONS, HALTS
from bot.ops.settings import Settings

NOW = datetime(2026, 12, 1, 6, tzinfo=UTC)
RESET = datetime(2026, 12, 1, 7, tzinfo=UTC)
ISSUE = IssueRef(installation_id=1, repo="octo/widgets", number=7)
BRANCH = "baton/issue-7-fix-it"
SETTINGS = Settings(
    BATON_AGENT="command",
    BATON_AGENT_COMMAND="true",
    BATON_BACKOFF_BASE_SECONDS=60,
    BATON_RESUME_BUFFER_SECONDS=120,
)
POLICY = SETTINGS.policy.model_copy(update={"escalation_mentions": ("@octo/oncall",)})
LABELS = POLICY.labels
LIMITS = Limits()
NOTHING = Spend(continuations=0, failed_attempts=0, reentries=0, backoffs_in_a_row=0, by_class={})
IN_PROGRESS = frozenset({LABELS.in_progress, "bug"})
CHECKS = (CheckSummary(name="tests", conclusion="failure"),)
CHAIN = Chain(installation_id=1, repo="octo/widgets", head=9, tracking=True, links=(7, 8))


def agent(stop_reason: str, resets_at: datetime | None = None) -> AgentResult:
    return AgentResult.model_validate(
        {
            "agent": "command",
            "status": "failed",
            "stop_reason": stop_reason,
            "started_at": NOW,
            "ended_at": NOW,
            "transcript_path": Path("transcript.log"),
            "stderr_path": Path("stderr.log"),
            "resets_at": resets_at,
        }
    )


def classified(facts: RunFacts, attempt: int = 1, **fields: object) -> Run:
    run = Run.claimed(ISSUE, attempt, BRANCH, NOW - timedelta(hours=1))
    classification = classify(facts)
    return run.model_copy(
        update={
            "classification": classification,
            "failure_class": classification.failure_class.value,
            **fields,
        }
    )


CHECKS_FAILED = classified(RunFacts(ending="checks-failed"), head_sha="abc123")
ORPHANED = classified(RunFacts(ending="orphaned"))
AGENT_ERROR = classified(RunFacts(ending="agent", stop_reason="cli_error"))
RETRIED_CONTINUATION = classified(
    RunFacts(ending="agent", stop_reason="cli_error"), attempt=2, continuation_of=1
)
TRANSIENT = classified(RunFacts(ending="agent", stop_reason="provider_transient"))
WINDOW = classified(
    RunFacts(ending="agent", stop_reason="provider_window", resets_at=RESET),
    agent_result=agent("provider_window", RESET),
)
STOPPED = classified(RunFacts(ending="stopped", stop_reason="cancelled"))
NO_CHANGE = classified(RunFacts(ending="agent", stop_reason="completed"))


def outcome(
    run: Run,
    spent: Spend = NOTHING,
    limits: Limits = LIMITS,
    live: frozenset[str] | None = IN_PROGRESS,
    runs: tuple[Run, ...] | None = None,
    chain: Chain | None = None,
    checks: tuple[CheckSummary, ...] = (),
) -> Outcome:
    assert run.classification is not None
    return Outcome(
        run=run,
        runs=runs if runs is not None else (run,),
        decision=decide(run.classification, spent, limits),
        spent=spent,
        limits=limits,
        policy=POLICY,
        live=live,
        chain=chain,
        checks=checks,
    )


def spent(**fields: object) -> Spend:
    return NOTHING.model_copy(update=fields)


def report(run: Run, next_step: str, checks: tuple[CheckSummary, ...] = ()) -> Report:
    return Report(issue=ISSUE, attempt=run.attempt, next_step=next_step, checks=checks)


def label(name: str | None, live: frozenset[str] | None = IN_PROGRESS) -> SetLabel:
    return SetLabel(issue=ISSUE, labels=LABELS, label=name, live=live)


def job(run: Run, mode: RunMode = RunMode.CONTINUE) -> Enqueue:
    return Enqueue(job=run_issue_job(SETTINGS, ISSUE, f"after-{run.attempt}", mode, run.attempt))


def handed_back(
    run: Run, next_step: str, enqueued: Enqueue, checks: tuple[CheckSummary, ...] = ()
) -> Plan:
    return (label(LABELS.in_progress), enqueued, report(run, next_step, checks))


def escalated(
    run: Run,
    reason: str,
    limits: Limits = LIMITS,
    spend: Spend = NOTHING,
    work: Run | None = None,
    chain: Chain | None = None,
    checks: tuple[CheckSummary, ...] = (),
) -> Plan:
    key = run.failure_class or "escalated"
    then: Plan = (Count(metric=ESCALATIONS, values=(key,)),)
    if chain is not None:
        because = f"escalated-{ISSUE.number}-{run.attempt}"
        then = (*then, Enqueue(job=advance_chain_job(chain, because)))
    body = render.escalation_comment(reason, spend, limits, work, ["@octo/oncall"])
    return (
        MarkEscalated(issue=ISSUE, attempt=run.attempt),
        label(LABELS.escalated, None),
        report(run, f"a maintainer: {reason}", checks),
        Escalate(issue=ISSUE, attempt=run.attempt, key=key, reason=reason, body=body, then=then),
    )


RESUME_AT = RESET + timedelta(seconds=120)


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        # Continuations, within their budget, on the same branch, with what failed.
        (
            outcome(CHECKS_FAILED, spent(continuations=1), checks=CHECKS),
            handed_back(
                CHECKS_FAILED,
                f"a continuation on `{BRANCH}` (attempt 2 of 4)",
                job(CHECKS_FAILED),
                CHECKS,
            ),
        ),
        (
            outcome(ORPHANED, spent(continuations=3)),
            handed_back(ORPHANED, f"a continuation on `{BRANCH}` (attempt 2 of 4)", job(ORPHANED)),
        ),
        (
            outcome(CHECKS_FAILED, spent(continuations=2), Limits(max_continuations=3)),
            handed_back(
                CHECKS_FAILED, f"a continuation on `{BRANCH}` (attempt 2 of 4)", job(CHECKS_FAILED)
            ),
        ),
        # A new attempt: from the base branch, or on a continuation's branch it was on.
        (
            outcome(AGENT_ERROR, spent(failed_attempts=1)),
            handed_back(
                AGENT_ERROR, "a new attempt from the base branch", job(AGENT_ERROR, RunMode.RETRY)
            ),
        ),
        (
            outcome(RETRIED_CONTINUATION, spent(failed_attempts=2)),
            handed_back(
                RETRIED_CONTINUATION,
                "a new attempt from the base branch",
                job(RETRIED_CONTINUATION, RunMode.CONTINUE),
            ),
        ),
        # A backoff: the delay doubles with each one in a row.
        (
            outcome(TRANSIENT, spent(backoffs_in_a_row=1)),
            handed_back(
                TRANSIENT,
                "trying again in 1m 00s",
                job(TRANSIENT, RunMode.RETRY).model_copy(update={"delay_s": 60.0}),
            ),
        ),
        (
            outcome(TRANSIENT, spent(backoffs_in_a_row=3)),
            handed_back(
                TRANSIENT,
                "trying again in 4m 00s",
                job(TRANSIENT, RunMode.RETRY).model_copy(update={"delay_s": 240.0}),
            ),
        ),
        # Withdrawn: a maintainer took Baton's labels off, so nothing comes next.
        (
            outcome(CHECKS_FAILED, live=frozenset({"bug"}), checks=CHECKS),
            (
                label(None, frozenset({"bug"})),
                report(CHECKS_FAILED, "nothing: a maintainer withdrew the issue", CHECKS),
            ),
        ),
        (
            outcome(TRANSIENT, live=frozenset()),
            (
                label(None, frozenset()),
                report(TRANSIENT, "nothing: a maintainer withdrew the issue"),
            ),
        ),
        # Stopped by an operator: no label, nothing next.
        (
            outcome(STOPPED, live=None, checks=CHECKS),
            (label(None, None), report(STOPPED, "nothing: the run was stopped", CHECKS)),
        ),
        # A usage window: halted until its reset plus the buffer, re-entered then.
        (
            outcome(WINDOW, spent(reentries=1), live=None),
            (
                HaltRun(issue=ISSUE, attempt=1, account="command", resume_at=RESUME_AT),
                Count(metric=HALTS),
                job(WINDOW).model_copy(update={"at": RESUME_AT}),
                label(LABELS.halted, None),
                report(WINDOW, "halted by a usage window: resumable at 07:02 UTC (re-entry 1/2)"),
            ),
        ),
        # Budgets spent: escalated, once, with what spent them.
        (
            outcome(CHECKS_FAILED, spent(continuations=4), live=None, checks=CHECKS),
            escalated(
                CHECKS_FAILED,
                "checks-failed, and all 3 continuations are spent",
                spend=spent(continuations=4),
                work=CHECKS_FAILED,
                checks=CHECKS,
            ),
        ),
        (
            outcome(AGENT_ERROR, spent(failed_attempts=3), live=None),
            escalated(
                AGENT_ERROR,
                "agent-error, and all 3 failed attempts are spent",
                spend=spent(failed_attempts=3),
            ),
        ),
        (
            outcome(WINDOW, spent(reentries=3), live=None),
            escalated(
                WINDOW,
                "provider-window, and all 2 re-entries after usage windows are spent",
                spend=spent(reentries=3),
            ),
        ),
        (
            outcome(TRANSIENT, spent(backoffs_in_a_row=6), live=None),
            escalated(
                TRANSIENT, "provider-transient 6 times in a row", spend=spent(backoffs_in_a_row=6)
            ),
        ),
        (
            outcome(CHECKS_FAILED, spent(cost_usd=5.0), Limits(max_cost_usd=5.0), live=None),
            escalated(
                CHECKS_FAILED,
                "checks-failed, and $5.00 of the $5.00 cost cap is spent",
                limits=Limits(max_cost_usd=5.0),
                spend=spent(cost_usd=5.0),
                work=CHECKS_FAILED,
            ),
        ),
        # Classes that escalate at once; a chain link tells its chain.
        (
            outcome(NO_CHANGE, live=None, runs=(CHECKS_FAILED, NO_CHANGE), chain=CHAIN),
            escalated(
                NO_CHANGE,
                "no-change: the agent finished without changing anything",
                work=CHECKS_FAILED,
                chain=CHAIN,
            ),
        ),
    ],
)
def test_recovery_plan(facts: Outcome, expected: Plan) -> None:
    assert plan(SETTINGS, facts, NOW).effects == expected


@pytest.mark.parametrize(
    ("backoffs", "delay"),
    [(0, 60.0), (1, 60.0), (2, 120.0), (3, 240.0), (6, 1920.0), (7, 3600.0), (20, 3600.0)],
)
def test_backoff_delays_double_up_to_an_hour(backoffs: int, delay: float) -> None:
    assert backoff_delay_s(SETTINGS, backoffs) == delay


def test_a_halt_without_halting_escalates_instead() -> None:
    assert WINDOW.classification is not None
    limits = Limits(halt_on_usage_window=False)
    facts = outcome(WINDOW, limits=limits, live=None)
    planned = plan(SETTINGS, facts, NOW)
    assert planned.halt is None and planned.label == LABELS.escalated
    assert (
        planned.escalation is not None
        and "halt_on_usage_window is off" in planned.escalation.reason
    )


def test_an_audit_hold_escalates_with_its_own_reason() -> None:
    held = classified(RunFacts(ending="audit-flagged"), state=RunState.FAILED)
    decision = Decision(action=Recovery.ESCALATE, reason="the audit flagged 1 deleted test")
    facts = outcome(held, live=None).model_copy(update={"decision": decision})
    expected = escalated(held, "the audit flagged 1 deleted test")
    assert plan(SETTINGS, facts, NOW).effects == expected
