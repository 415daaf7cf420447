"""Baton's check run: the phase each state shows, what it says, and when it is written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.domain.check_run import (
    CheckPhase,
    CheckRunRecord,
    CheckRunView,
    check_run_view,
    head_of,
    phase_of,
    replaced_head,
    write_for,
)
from bot.domain.checks import reported_by_others
from bot.domain.classify import RunFacts, classify
from bot.domain.model import AuditFinding, AuditKind, IssueRef, Run, RunState

ISSUE = IssueRef(installation_id=1, repo="octo/widgets", number=7)
BRANCH = "baton/issue-7-fix-it"
NOW = datetime(2026, 12, 1, 9, tzinfo=UTC)
H1, H2 = "1" * 40, "2" * 40
ESCALATION = "https://github.com/octo/widgets/issues/7#issuecomment-99"


def run(
    state: RunState,
    attempt: int = 1,
    ending: RunFacts | None = None,
    **fields: object,
) -> Run:
    claimed = Run.claimed(ISSUE, attempt, BRANCH, NOW - timedelta(minutes=30))
    moved = claimed if state is RunState.CLAIMED else claimed.moved(state, NOW)
    if ending is not None:
        classification = classify(ending)
        fields |= {
            "classification": classification,
            "failure_class": classification.failure_class.value,
        }
    return moved.model_copy(update={"pr_number": 5, **fields})


RED = RunFacts(ending="checks-failed")
TRANSIENT = RunFacts(ending="agent", stop_reason="provider_transient")
STOPPED = RunFacts(ending="stopped")


@pytest.mark.parametrize(
    ("shown", "phase"),
    [
        (run(RunState.CLAIMED), CheckPhase.WORKING),
        (run(RunState.RUNNING), CheckPhase.WORKING),
        (run(RunState.PUSHED_PENDING, head_sha=H1), CheckPhase.CHECKING),
        (run(RunState.PUSHED_GREEN, head_sha=H1), CheckPhase.GREEN),
        (run(RunState.HALTED, head_sha=H1), CheckPhase.HALTED),
        (run(RunState.MERGED, head_sha=H1), CheckPhase.ENDED),
        (run(RunState.CLOSED, head_sha=H1), CheckPhase.ENDED),
        # Red, and handed back to the agent: it works on the next attempt at once.
        (run(RunState.FAILED, ending=RED, head_sha=H1), CheckPhase.WORKING),
        # Tried again later, or stopped by a maintainer: nothing runs.
        (run(RunState.FAILED, ending=TRANSIENT, head_sha=H1), CheckPhase.WAITING),
        (run(RunState.KILLED, ending=STOPPED, head_sha=H1), CheckPhase.WAITING),
        # Budgets spent: whatever its class named, a maintainer decides.
        (run(RunState.FAILED, ending=RED, head_sha=H1, escalated=True), CheckPhase.ESCALATED),
        # Ended, and not classified yet: nothing to show until its recovery is known.
        (run(RunState.FAILED, head_sha=H1), None),
    ],
)
def test_each_state_shows_its_phase(shown: Run, phase: CheckPhase | None) -> None:
    assert phase_of(shown) is phase


def test_a_red_head_of_a_withdrawn_issue_waits() -> None:
    red = run(RunState.FAILED, ending=RED, head_sha=H1)
    assert phase_of(red, withdrawn=True) is CheckPhase.WAITING
    assert phase_of(run(RunState.RUNNING), withdrawn=True) is CheckPhase.WORKING


@pytest.mark.parametrize(
    ("phase", "status", "conclusion"),
    [
        (CheckPhase.WORKING, "in_progress", None),
        (CheckPhase.CHECKING, "in_progress", None),
        (CheckPhase.GREEN, "completed", "success"),
        (CheckPhase.HALTED, "completed", "neutral"),
        (CheckPhase.WAITING, "completed", "neutral"),
        (CheckPhase.SUPERSEDED, "completed", "neutral"),
        (CheckPhase.ENDED, "completed", "neutral"),
        (CheckPhase.ESCALATED, "completed", "action_required"),
    ],
)
def test_each_phase_has_its_status_and_conclusion(
    phase: CheckPhase, status: str, conclusion: str | None
) -> None:
    shown = run(RunState.PUSHED_PENDING, head_sha=H1)
    view = check_run_view(phase, shown, [shown], 4, NOW)
    assert (view.status, view.conclusion) == (status, conclusion)


def test_the_summary_says_the_phase_the_attempt_and_what_comes_next() -> None:
    first = run(RunState.PUSHED_PENDING, head_sha=H1)
    second = run(RunState.PUSHED_PENDING, attempt=2, head_sha=H2, continuation_of=1)
    view = check_run_view(CheckPhase.CHECKING, second, [first, second], 4, NOW)
    assert view.title == "Waiting on CI: attempt 2 of 4"
    assert "Pull request opened; waiting for its checks." in view.summary
    assert "Next: the checks' verdict" in view.summary
    assert view.details_url is None
    rows = [line for line in view.text.splitlines() if line.startswith("| ")]
    assert [row.split("|")[1].strip() for row in rows] == ["attempt", "1", "2"]


def test_a_red_head_handed_back_shows_the_next_attempt_at_work() -> None:
    red = run(RunState.FAILED, ending=RED, head_sha=H1)
    view = check_run_view(CheckPhase.WORKING, red, [red], 4, NOW, "a continuation (attempt 2)")
    assert view.title == "The agent is working: attempt 2 of 4"
    assert "Next: a continuation (attempt 2)" in view.summary
    assert "Re-run this check" not in view.summary


def test_an_escalation_links_its_comment_and_shows_the_attempts_and_the_audit() -> None:
    flag = AuditFinding(kind=AuditKind.TEST_REMOVED, path="tests/test_cart.py", note="a test")
    held = run(RunState.FAILED, ending=RED, head_sha=H1, escalated=True, audit=[flag])
    view = check_run_view(
        CheckPhase.ESCALATED, held, [held], 4, NOW, "a maintainer decides: spent", ESCALATION
    )
    assert view.conclusion == "action_required"
    assert view.details_url == ESCALATION
    assert f"[the escalation comment]({ESCALATION})" in view.summary
    assert "Re-run this check to retry" in view.summary
    assert "| 1 | checks-failed |" in view.text
    assert "**test-removed** · `tests/test_cart.py`" in view.text


def test_what_a_check_run_says_notifies_nobody() -> None:
    red = run(RunState.FAILED, ending=RED, head_sha=H1)
    view = check_run_view(CheckPhase.WAITING, red, [red], 4, NOW, "ask @octocat")
    assert "Next: ask @\u200doctocat" in view.summary


def test_the_key_ignores_the_time_spent() -> None:
    working = run(RunState.RUNNING, attempt=2, continuation_of=1)
    now = check_run_view(CheckPhase.WORKING, working, [working], 4, NOW)
    later = check_run_view(CheckPhase.WORKING, working, [working], 4, NOW + timedelta(hours=2))
    assert now.text != later.text and now.key == later.key
    stopped = check_run_view(CheckPhase.WAITING, working, [working], 4, NOW)
    assert stopped.key != now.key


def test_the_head_a_run_stands_on_is_its_push_or_the_one_it_continues() -> None:
    first = run(RunState.FAILED, ending=RED, head_sha=H1)
    working = run(RunState.RUNNING, attempt=2, continuation_of=1)
    again = run(RunState.RUNNING, attempt=3, continuation_of=2)
    pushed = working.model_copy(update={"head_sha": H2})
    fresh = run(RunState.RUNNING, attempt=2)
    runs = [first, working, again]
    assert head_of(runs, first) == H1
    assert head_of(runs, working) == H1
    assert head_of(runs, again) == H1  # through an attempt that pushed nothing
    assert head_of([first, pushed], pushed) == H2
    assert head_of([first, fresh], fresh) is None  # from the base branch: nothing yet
    assert head_of([run(RunState.RUNNING)], run(RunState.RUNNING)) is None


def test_a_push_replaces_the_head_an_earlier_attempt_pushed_on_its_branch() -> None:
    first = run(RunState.FAILED, ending=RED, head_sha=H1)
    second = run(RunState.PUSHED_PENDING, attempt=2, head_sha=H2, continuation_of=1)
    same = run(RunState.PUSHED_PENDING, attempt=2, head_sha=H1, continuation_of=1)
    assert replaced_head([first, second], second) == H1
    assert replaced_head([first, second], first) is None
    assert replaced_head([first, same], same) is None
    elsewhere = second.model_copy(update={"branch": "baton/issue-7-again"})
    assert replaced_head([first, elsewhere], elsewhere) is None


def view_of(phase: CheckPhase) -> CheckRunView:
    shown = run(RunState.PUSHED_PENDING, head_sha=H1)
    return check_run_view(phase, shown, [shown], 4, NOW)


def record_of(view: CheckRunView) -> CheckRunRecord:
    return CheckRunRecord(id=10, conclusion=view.conclusion, said=view.key)


@pytest.mark.parametrize(
    ("record", "view", "write"),
    [
        pytest.param(None, view_of(CheckPhase.CHECKING), "create", id="a head's first"),
        pytest.param(None, view_of(CheckPhase.GREEN), "create", id="born green"),
        pytest.param(None, view_of(CheckPhase.SUPERSEDED), None, id="nothing to close"),
        pytest.param(None, view_of(CheckPhase.ENDED), None, id="nothing to end"),
        pytest.param(
            record_of(view_of(CheckPhase.CHECKING)),
            view_of(CheckPhase.CHECKING),
            None,
            id="says it already: a job run twice writes once",
        ),
        pytest.param(
            record_of(view_of(CheckPhase.CHECKING)),
            view_of(CheckPhase.GREEN),
            "update",
            id="under way: the same check run",
        ),
        pytest.param(
            record_of(view_of(CheckPhase.WORKING)),
            view_of(CheckPhase.SUPERSEDED),
            "update",
            id="under way, superseded",
        ),
        pytest.param(
            record_of(view_of(CheckPhase.GREEN)),
            view_of(CheckPhase.ENDED),
            None,
            id="green stays green once merged",
        ),
        pytest.param(
            record_of(view_of(CheckPhase.HALTED)),
            view_of(CheckPhase.WAITING),
            None,
            id="completed with its conclusion already",
        ),
        pytest.param(
            record_of(view_of(CheckPhase.ESCALATED)),
            view_of(CheckPhase.WORKING),
            "create",
            id="completed, and work starts anew: a new check run",
        ),
        pytest.param(
            record_of(view_of(CheckPhase.WAITING)),
            view_of(CheckPhase.ESCALATED),
            "create",
            id="completed, another conclusion: a new check run",
        ),
    ],
)
def test_a_completed_check_run_is_never_changed(
    record: CheckRunRecord | None, view: CheckRunView, write: str | None
) -> None:
    assert write_for(record, view) == write


def test_the_verdict_reads_every_app_but_baton() -> None:
    suites = [{"app": {"id": 1}}, {"app": {"id": 2}}, {"app": None}, {}]
    assert reported_by_others(suites, 1) == [{"app": {"id": 2}}, {"app": None}, {}]
    assert reported_by_others(suites, None) == suites
