"""Classification and budgets: every class of DESIGN.md's table, and every budget boundary."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.domain.budget import decide, spend
from bot.domain.classify import RunFacts, classify
from bot.domain.model import (
    AgentResult,
    Budget,
    Classification,
    FailureClass,
    IssueRef,
    Limits,
    Recovery,
    Run,
    RunState,
)

RESET = datetime(2026, 12, 1, 7, tzinfo=UTC)
C, R, B = FailureClass, Recovery, Budget


@pytest.mark.parametrize(
    ("facts", "expected"),
    [
        (RunFacts(ending="checks-failed"), (C.CHECKS_FAILED, R.CONTINUE, B.CONTINUATIONS)),
        (RunFacts(ending="changes-requested"), (C.CHANGES_REQUESTED, R.CONTINUE, B.CONTINUATIONS)),
        (RunFacts(ending="merge-conflict"), (C.MERGE_CONFLICT, R.CONTINUE, B.CONTINUATIONS)),
        (
            RunFacts(ending="agent", stop_reason="max_turns", new_commits=2),
            (C.TURN_CAP_PROGRESS, R.CONTINUE, B.CONTINUATIONS),
        ),
        (
            RunFacts(ending="agent", stop_reason="max_turns", new_commits=0),
            (C.TURN_CAP_SPINNING, R.ESCALATE, B.NOTHING),
        ),
        (
            RunFacts(ending="agent", stop_reason="wall_clock", new_commits=1),
            (C.WALL_CLOCK_CAP_PROGRESS, R.CONTINUE, B.CONTINUATIONS),
        ),
        (
            RunFacts(ending="agent", stop_reason="wall_clock", new_commits=0),
            (C.WALL_CLOCK_CAP_SPINNING, R.ESCALATE, B.NOTHING),
        ),
        (
            RunFacts(ending="agent", stop_reason="completed", new_commits=0),
            (C.NO_CHANGE, R.ESCALATE, B.NOTHING),
        ),
        (RunFacts(ending="orphaned", new_commits=0), (C.ORPHAN_CLEAN, R.REQUEUE, B.CONTINUATIONS)),
        (
            RunFacts(ending="orphaned", new_commits=3),
            (C.ORPHAN_PROGRESS, R.CONTINUE, B.CONTINUATIONS),
        ),
        (RunFacts(ending="agent", stop_reason="cli_error"), (C.AGENT_ERROR, R.RETRY, B.ATTEMPTS)),
        (RunFacts(ending="agent", stop_reason="no_result"), (C.AGENT_ERROR, R.RETRY, B.ATTEMPTS)),
        (RunFacts(ending="agent", stop_reason="resume_miss"), (C.AGENT_ERROR, R.RETRY, B.ATTEMPTS)),
        (
            RunFacts(ending="agent", stop_reason="something new"),
            (C.AGENT_ERROR, R.RETRY, B.ATTEMPTS),
        ),
        (RunFacts(ending="agent", stop_reason=None), (C.AGENT_ERROR, R.RETRY, B.ATTEMPTS)),
        (
            RunFacts(ending="agent", stop_reason="provider_window", resets_at=RESET),
            (C.PROVIDER_WINDOW, R.HALT, B.REENTRIES),
        ),
        (
            RunFacts(ending="agent", stop_reason="provider_window"),
            (C.PROVIDER_CREDIT, R.ESCALATE, B.NOTHING),
        ),
        (
            RunFacts(ending="agent", stop_reason="provider_credit"),
            (C.PROVIDER_CREDIT, R.ESCALATE, B.NOTHING),
        ),
        (RunFacts(ending="agent", stop_reason="auth"), (C.PROVIDER_CREDIT, R.ESCALATE, B.NOTHING)),
        (RunFacts(ending="agent", stop_reason="max_budget"), (C.COST_CAP, R.ESCALATE, B.NOTHING)),
        (
            RunFacts(ending="agent", stop_reason="provider_transient"),
            (C.PROVIDER_TRANSIENT, R.BACKOFF, B.NOTHING),
        ),
        (
            RunFacts(ending="agent", stop_reason="cli_missing"),
            (C.ENV_START_FAILURE, R.BACKOFF, B.NOTHING),
        ),
        (
            RunFacts(ending="agent", stop_reason="cli_usage_error"),
            (C.ENV_START_FAILURE, R.BACKOFF, B.NOTHING),
        ),
        (RunFacts(ending="push-failed"), (C.DISPATCH_INFRA, R.BACKOFF, B.NOTHING)),
        (RunFacts(ending="credential-found"), (C.CREDENTIAL_FOUND, R.ESCALATE, B.NOTHING)),
        (RunFacts(ending="pr-failed"), (C.DISPATCH_INFRA, R.BACKOFF, B.NOTHING)),
        (RunFacts(ending="infra-failed"), (C.DISPATCH_INFRA, R.BACKOFF, B.NOTHING)),
        (RunFacts(ending="stopped"), (C.ADMIN_KILL, R.NONE, B.NOTHING)),
        (RunFacts(ending="audit-flagged"), (C.AUDIT_FLAGGED, R.ESCALATE, B.NOTHING)),
        # A restart is nobody's fault: continued at once, whatever the run had done.
        (RunFacts(ending="interrupted"), (C.INTERRUPTED, R.CONTINUE, B.NOTHING)),
        (
            RunFacts(ending="interrupted", new_commits=2),
            (C.INTERRUPTED, R.CONTINUE, B.NOTHING),
        ),
        (RunFacts(ending="agent", stop_reason="cancelled"), (C.ADMIN_KILL, R.NONE, B.NOTHING)),
    ],
)
def test_classify(facts: RunFacts, expected: tuple[FailureClass, Recovery, Budget]) -> None:
    got = classify(facts)
    assert (got.failure_class, got.recovery, got.charged_to) == expected
    assert f"ended: {facts.ending}" in got.evidence


def test_every_class_is_reachable() -> None:
    reached = {classify(f).failure_class for f in _ALL_FACTS}
    assert reached == set(FailureClass)


_ALL_FACTS = (
    [
        RunFacts(ending=e)
        for e in (
            "checks-failed",
            "changes-requested",
            "merge-conflict",
            "stopped",
            "push-failed",
            "credential-found",
            "audit-flagged",
            "interrupted",
        )
    ]
    + [RunFacts(ending="orphaned", new_commits=n) for n in (0, 1)]
    + [
        RunFacts(ending="agent", stop_reason=r, new_commits=n, resets_at=RESET)
        for r in ("max_turns", "wall_clock")
        for n in (0, 1)
    ]
    + [
        RunFacts(ending="agent", stop_reason=r, resets_at=RESET)
        for r in (
            "completed",
            "cli_error",
            "provider_window",
            "provider_credit",
            "max_budget",
            "provider_transient",
            "cli_missing",
        )
    ]
)


def test_a_completed_run_with_commits_is_not_a_failure() -> None:
    with pytest.raises(ValueError, match="success"):
        classify(RunFacts(ending="agent", stop_reason="completed", new_commits=1))


def test_window_evidence_names_the_reset_time() -> None:
    got = classify(RunFacts(ending="agent", stop_reason="provider_window", resets_at=RESET))
    assert "window resets at 2026-12-01T07:00:00+00:00" in got.evidence


ISSUE = IssueRef(installation_id=1, repo="o/r", number=1)


def run(attempt: int, facts: RunFacts | None, continuation_of: int | None = None) -> Run:
    record = Run.claimed(ISSUE, attempt, "baton/issue-1", RESET).moved(RunState.FAILED, RESET)
    update: dict[str, object] = {
        "continuation_of": continuation_of,
        "queued_fresh": attempt == 1,
    }
    if facts is not None:
        update["classification"] = classify(facts)
    return record.model_copy(update=update)


def last(runs: list[Run]) -> Classification:
    classification = runs[-1].classification
    assert classification is not None
    return classification


CHECKS = RunFacts(ending="checks-failed")
AGENT_ERROR = RunFacts(ending="agent", stop_reason="cli_error")
TRANSIENT = RunFacts(ending="agent", stop_reason="provider_transient")


def test_spend_counts_continuations_attempts_and_classes() -> None:
    runs = [
        run(1, AGENT_ERROR),
        run(2, CHECKS),
        run(3, CHECKS, continuation_of=2),
        run(4, TRANSIENT, continuation_of=3),
    ]
    spent = spend(runs)
    assert (spent.continuations, spent.failed_attempts, spent.backoffs_in_a_row) == (2, 1, 1)
    assert spent.reentries == 0
    assert spent.by_class == {"agent-error": 1, "checks-failed": 2}


@pytest.mark.parametrize(
    ("continuations", "action"),
    [(0, Recovery.CONTINUE), (2, Recovery.CONTINUE), (3, Recovery.ESCALATE)],
)
def test_continuation_budget_boundary(continuations: int, action: Recovery) -> None:
    runs = [run(1, CHECKS)] + [
        run(n + 2, CHECKS, continuation_of=n + 1) for n in range(continuations)
    ]
    decision = decide(last(runs), spend(runs), Limits())
    assert decision.action is action
    if action is Recovery.ESCALATE:
        assert decision.exhausted == "continuations"
        assert decision.reason == "checks-failed, and all 3 continuations are spent"


@pytest.mark.parametrize(
    ("failures", "action"), [(1, Recovery.RETRY), (2, Recovery.RETRY), (3, Recovery.ESCALATE)]
)
def test_failed_attempt_budget_boundary(failures: int, action: Recovery) -> None:
    runs = [run(n + 1, AGENT_ERROR) for n in range(failures)]
    decision = decide(last(runs), spend(runs), Limits())
    assert decision.action is action
    assert (decision.exhausted == "attempts") == (action is Recovery.ESCALATE)


def test_requeue_respects_the_continuation_ceiling() -> None:
    orphan = RunFacts(ending="orphaned")
    runs = [run(1, orphan), run(2, orphan, continuation_of=1)]
    assert decide(last(runs), spend(runs), Limits(max_continuations=1)).action is Recovery.ESCALATE


def test_usage_window_reentries_escalate_past_their_bound() -> None:
    window = RunFacts(ending="agent", stop_reason="provider_window", resets_at=RESET)
    runs = [run(1, window), run(2, window, continuation_of=1)]
    assert decide(last(runs), spend(runs), Limits(max_reentries=2)).action is Recovery.HALT
    runs.append(run(3, window, continuation_of=2))
    decision = decide(last(runs), spend(runs), Limits(max_reentries=2))
    assert (decision.action, decision.exhausted) == (Recovery.ESCALATE, "reentries")


def test_backoffs_escalate_past_their_cap_and_reset_on_anything_else() -> None:
    limits = Limits(max_backoffs=2)
    runs = [run(n + 1, TRANSIENT) for n in range(3)]
    assert decide(last(runs), spend(runs), limits).action is Recovery.ESCALATE
    runs = [run(1, TRANSIENT), run(2, TRANSIENT), run(3, AGENT_ERROR), run(4, TRANSIENT)]
    assert decide(last(runs), spend(runs), limits).action is Recovery.BACKOFF


@pytest.mark.parametrize(
    "facts",
    [
        RunFacts(ending="agent", stop_reason="completed"),
        RunFacts(ending="agent", stop_reason="max_turns"),
        RunFacts(ending="agent", stop_reason="provider_credit"),
    ],
)
def test_classes_that_escalate_say_why(facts: RunFacts) -> None:
    classification: Classification = classify(facts)
    decision = decide(classification, spend([]), Limits())
    assert decision.action is Recovery.ESCALATE
    assert decision.reason.startswith(f"{classification.failure_class.value}: ")


def test_charge_free_recoveries_go_ahead() -> None:
    for facts in (RunFacts(ending="stopped"), TRANSIENT):
        classification = classify(facts)
        assert decide(classification, spend([]), Limits()).action is classification.recovery


def test_a_fresh_queueing_starts_the_budgets_again() -> None:
    runs = [run(1, CHECKS), run(2, CHECKS, continuation_of=1), run(3, CHECKS, continuation_of=2)]
    fresh = run(4, AGENT_ERROR).model_copy(update={"queued_fresh": True})
    spent = spend([*runs, fresh])
    assert (spent.continuations, spent.failed_attempts) == (0, 1)


def test_max_runs_counts_the_first_attempt_and_every_continuation() -> None:
    assert Limits().max_runs == 4


def costing(record: Run, cost_usd: float) -> Run:
    now = record.started_at
    result = AgentResult(
        agent="claude",
        status="failed",
        stop_reason="completed",
        started_at=now,
        ended_at=now,
        transcript_path=Path("transcript.jsonl"),
        stderr_path=Path("stderr.log"),
        cost_usd=cost_usd,
    )
    return record.model_copy(update={"agent_result": result})


@pytest.mark.parametrize(
    ("costs", "action"),
    [((1.5, 2.0), Recovery.CONTINUE), ((3.0, 2.0), Recovery.ESCALATE), ((5.0,), Recovery.ESCALATE)],
)
def test_the_cost_cap_stops_further_work_once_reached(
    costs: tuple[float, ...], action: Recovery
) -> None:
    runs = [
        costing(run(n + 1, CHECKS, continuation_of=n or None), cost) for n, cost in enumerate(costs)
    ]
    decision = decide(last(runs), spend(runs), Limits(max_cost_usd=5.0))
    assert decision.action is action
    if action is Recovery.ESCALATE:
        assert decision.exhausted == "cost"
        assert decision.reason == "checks-failed, and $5.00 of the $5.00 cost cap is spent"


def test_the_cost_cap_counts_only_since_the_issue_was_last_queued() -> None:
    requeued = run(2, CHECKS).model_copy(update={"queued_fresh": True})
    runs = [costing(run(1, CHECKS), 9.0), costing(requeued, 1.0)]
    assert spend(runs).cost_usd == 1.0  # attempt 2 was queued afresh by a maintainer
    assert decide(last(runs), spend(runs), Limits(max_cost_usd=5.0)).action is Recovery.CONTINUE


def test_without_a_cost_cap_spend_is_only_reported() -> None:
    runs = [costing(run(1, CHECKS), 500.0)]
    assert decide(last(runs), spend(runs), Limits()).action is Recovery.CONTINUE


def test_a_repository_that_opts_out_of_halting_escalates_at_a_window() -> None:
    window = RunFacts(ending="agent", stop_reason="provider_window", resets_at=RESET)
    runs = [run(1, window)]
    decision = decide(last(runs), spend(runs), Limits(halt_on_usage_window=False))
    assert decision.action is Recovery.ESCALATE
    assert "halt_on_usage_window is off" in decision.reason


@pytest.mark.parametrize("facts", _ALL_FACTS)
def test_every_ending_gets_a_decision_and_an_escalation_says_why(facts: RunFacts) -> None:
    decision = decide(classify(facts), spend([]), Limits())
    assert decision.reason
    if decision.action is Recovery.ESCALATE:
        assert ":" in decision.reason or "spent" in decision.reason
