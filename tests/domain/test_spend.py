"""Monthly budgets over the rolling 30 days, and the new starts they hold; pure, no I/O."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from typing import get_args

import pytest

from bot.domain.commands import Standing
from bot.domain.effects import Enqueue, PostStatus, RecordWait
from bot.domain.issue_text import IssueText, Snapshot
from bot.domain.jobs import RunMode, run_issue_job
from bot.domain.model import Budget, Classification, FailureClass, IssueRef, Recovery, Run
from bot.domain.plans.admission import (
    Admit,
    Fact,
    Learn,
    Stack,
    StartFacts,
    Wait,
    Window,
    admit,
)
from bot.domain.render import STATUS_MARKER
from bot.domain.spend import (
    AgentSpend,
    Budgets,
    BudgetSpent,
    BudgetState,
    DaySpend,
    Spending,
    budget_spent,
    budget_state,
    budget_wait_comment,
    in_window,
    leaves_window,
    shown_days,
    total,
    window,
)
from bot.ops.settings import Settings

NOW = datetime(2026, 12, 1, 6, 30, tzinfo=UTC)
TODAY = date(2026, 12, 1)
ISSUE = IssueRef(installation_id=1, repo="octo/widgets", number=7)


def ago(days: int) -> date:
    return TODAY - timedelta(days=days)


def spent(days_ago: int, cost: float, turns: int = 0, attempts: int = 1) -> DaySpend:
    return DaySpend(day=ago(days_ago), cost_usd=cost, turns=turns, attempts=attempts)


def midnight(day: date) -> datetime:
    return datetime(day.year, day.month, day.day, tzinfo=UTC)


# The window ----------------------------------------------------------------------


def test_the_window_is_today_and_the_29_utc_days_before_it() -> None:
    days = window(NOW)
    assert len(days) == 30
    assert (days[0], days[-1]) == (ago(29), TODAY)
    # A time given in another zone is judged by its UTC day.
    evening_in_new_york = datetime(2026, 12, 1, 20, tzinfo=timezone(timedelta(hours=-5)))
    assert window(evening_in_new_york)[-1] == date(2026, 12, 2)


def test_a_days_spend_leaves_the_window_at_midnight_thirty_days_later() -> None:
    assert leaves_window(ago(29)) == midnight(TODAY + timedelta(days=1))
    assert ago(29) in window(leaves_window(ago(29)) - timedelta(microseconds=1))
    assert ago(29) not in window(leaves_window(ago(29)))


def test_days_outside_the_window_are_left_out_and_the_rest_add_up() -> None:
    days = [spent(30, 9.0), spent(0, 1.5, 10), spent(29, 2.0, 4, 2), spent(-1, 7.0)]
    assert [day.day for day in in_window(days, NOW)] == [ago(29), TODAY]
    assert total(in_window(days, NOW)) == AgentSpend(cost_usd=3.5, turns=14, attempts=3)
    assert total([]) == AgentSpend()


def test_the_status_page_shows_the_last_seven_days_today_first() -> None:
    shown = shown_days([spent(0, 1.0), spent(2, 2.0), spent(9, 5.0)], NOW)
    assert [day.day for day in shown] == [ago(n) for n in range(7)]
    assert [day.cost_usd for day in shown] == [1.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0]


# A budget against the spend ---------------------------------------------------------


@pytest.mark.parametrize(
    ("days", "budget", "expected"),
    [
        # Nothing spent: all of it is left.
        ([], 10.0, BudgetState(budget_usd=10.0, spent_usd=0.0, since=None, frees_at=None)),
        # Below the budget: what is left.
        (
            [spent(3, 2.5), spent(1, 4.0)],
            10.0,
            BudgetState(budget_usd=10.0, spent_usd=6.5, since=ago(3), frees_at=None),
        ),
        # Reaching the budget spends it; the oldest day leaving frees it.
        (
            [spent(3, 4.0), spent(1, 6.0)],
            10.0,
            BudgetState(
                budget_usd=10.0,
                spent_usd=10.0,
                since=ago(3),
                frees_at=leaves_window(ago(3)),
            ),
        ),
        # Well past it: the days leave oldest first until the rest is below it.
        (
            [spent(20, 3.0), spent(10, 5.0), spent(5, 4.0), spent(0, 2.0)],
            6.0,
            BudgetState(
                budget_usd=6.0,
                spent_usd=14.0,
                since=ago(20),
                frees_at=leaves_window(ago(5)),
            ),
        ),
        # One day spent it all: it frees as that day leaves.
        (
            [spent(0, 25.0)],
            10.0,
            BudgetState(
                budget_usd=10.0, spent_usd=25.0, since=TODAY, frees_at=leaves_window(TODAY)
            ),
        ),
        # A day of attempts that cost nothing (unreported) is not where spend began.
        (
            [spent(12, 0.0, 30, 3), spent(2, 12.0)],
            10.0,
            BudgetState(
                budget_usd=10.0, spent_usd=12.0, since=ago(2), frees_at=leaves_window(ago(2))
            ),
        ),
        # What has left the window counts for nothing.
        (
            [spent(31, 50.0), spent(1, 1.0)],
            10.0,
            BudgetState(budget_usd=10.0, spent_usd=1.0, since=ago(1), frees_at=None),
        ),
    ],
)
def test_budget_state(days: list[DaySpend], budget: float, expected: BudgetState) -> None:
    state = budget_state(budget, days, NOW)
    assert state == expected
    assert state.exhausted is (expected.frees_at is not None)
    assert state.left_usd == max(0.0, budget - expected.spent_usd)


DEPLOYMENT_DAYS = (spent(20, 6.0), spent(10, 4.0), spent(1, 2.0))
REPO_DAYS = (spent(10, 4.0), spent(1, 2.0))


@pytest.mark.parametrize(
    ("budgets", "scope", "frees_after"),
    [
        # No budget, or none spent: nothing holds the start.
        (Budgets(), None, None),
        (Budgets(deployment_usd=20.0, repository_usd=10.0), None, None),
        # The deployment's budget (12 spent of 10): frees as day 20 leaves (6 left < 10).
        (Budgets(deployment_usd=10.0), "deployment", 20),
        # The repository's own (6 spent of 5): frees as day 10 leaves.
        (Budgets(deployment_usd=50.0, repository_usd=5.0), "repository", 10),
        (Budgets(repository_usd=5.0), "repository", 10),
        # Both spent: the one that frees later holds the start.
        (Budgets(deployment_usd=1.0, repository_usd=5.0), "deployment", 1),
        (Budgets(deployment_usd=10.0, repository_usd=1.0), "repository", 1),
        # Both free at the same instant: the deployment's is named.
        (Budgets(deployment_usd=3.0, repository_usd=5.0), "deployment", 10),
        (Budgets(deployment_usd=1.0, repository_usd=1.0), "deployment", 1),
    ],
)
def test_budget_spent(budgets: Budgets, scope: str | None, frees_after: int | None) -> None:
    spending = Spending(budgets=budgets, deployment=DEPLOYMENT_DAYS, repository=REPO_DAYS)
    held = budget_spent(ISSUE.repo, spending, NOW)
    if scope is None:
        assert held is None
        return
    assert held is not None and frees_after is not None
    assert (held.scope, held.repo) == (scope, ISSUE.repo)
    assert held.frees_at == leaves_window(ago(frees_after))


@pytest.mark.parametrize(
    ("deployment", "file", "expected"),
    [
        (None, None, Budgets()),
        ("100", None, Budgets(deployment_usd=100.0)),
        ("100", 100.0, Budgets(deployment_usd=100.0)),  # repeating it sets no budget of its own
        ("100", 40.0, Budgets(deployment_usd=100.0, repository_usd=40.0)),
        (None, 40.0, Budgets(repository_usd=40.0)),
    ],
)
def test_a_repositorys_own_budget_is_one_below_the_deployments(
    deployment: str | None, file: float | None, expected: Budgets
) -> None:
    ours = Settings(BATON_MONTHLY_BUDGET_USD=deployment)
    applied = ours.model_copy(update={"monthly_budget_usd": file or ours.monthly_budget_usd})
    assert Budgets.of(ours, applied) == expected


def test_the_comment_names_the_budget_the_spend_and_when_starts_resume() -> None:
    state = budget_state(10.0, [spent(3, 4.0), spent(1, 6.5)], NOW)
    held = BudgetSpent(scope="deployment", repo=ISSUE.repo, state=state)
    body = budget_wait_comment(held, "baton:queue", NOW)
    assert body.startswith(STATUS_MARKER)
    assert "This deployment's monthly budget of $10.00 (`BATON_MONTHLY_BUDGET_USD`)" in body
    assert "spent $10.50 over the rolling 30 days, since 2026-11-28" in body
    assert "starting at 2026-12-28 00:00 UTC" in body
    assert "take `baton:queue` off the issue that was queued and put it back" in body
    own = budget_wait_comment(held.model_copy(update={"scope": "repository"}), "go", NOW)
    assert "`octo/widgets`'s monthly budget of $10.00 (`monthly_budget_usd` in" in own


# Admission: a spent budget holds new issues, not the work of started ones ---------------

BUDGETED = Settings(
    BATON_AGENT="command",
    BATON_AGENT_COMMAND="true",
    BATON_MAX_CONCURRENT_RUNS_PER_REPO=None,
    BATON_MONTHLY_BUDGET_USD="10",
)
LABELS = BUDGETED.labels
TEXT = IssueText(queued=Snapshot(title="Fix it", body="", at=NOW, by="octo", how="label"))
SPENT = Spending(budgets=Budgets(deployment_usd=10.0), deployment=(spent(4, 12.0),))
UNSPENT = Spending(budgets=Budgets(deployment_usd=10.0), deployment=(spent(4, 3.0),))


def concluded() -> Run:
    run = Run.claimed(ISSUE, 2, "baton/issue-7-fix-it", NOW - timedelta(hours=1))
    classification = Classification(
        failure_class=FailureClass.CHECKS_FAILED,
        recovery=Recovery.CONTINUE,
        charged_to=Budget.CONTINUATIONS,
        evidence="ended: checks-failed",
    )
    return run.model_copy(update={"classification": classification})


def start(mode: RunMode, **fields: object) -> StartFacts:
    base: dict[str, object] = {
        "issue": ISSUE,
        "mode": mode,
        "after": 0,
        "open": True,
        "carried": frozenset({LABELS.queue}),
        "default_branch": "main",
        "text": TEXT,
        "window": Window(),
    }
    if mode is RunMode.FRESH:
        base["standing"] = Standing(login="octo", role="admin", minimum="write", allowed=True)
    if mode is RunMode.CHAIN:
        base |= {"chain_link": True, "stack": Stack()}
    if mode in (RunMode.CONTINUE, RunMode.RETRY):
        base |= {"after": 2, "latest": concluded(), "carried": frozenset({LABELS.in_progress})}
    return StartFacts.model_validate(base | fields)


def budget_wait(mode: RunMode, queued_by: str | None) -> Wait:
    frees_at = leaves_window(ago(4))
    job = run_issue_job(
        BUDGETED, ISSUE, f"budget-{int(frees_at.timestamp())}", mode, 0, queued_by=queued_by
    )
    held = budget_spent(ISSUE.repo, SPENT, NOW)
    assert held is not None
    return Wait(
        note=f"the deployment's monthly budget is spent; waiting until {frees_at}",
        on="budget",
        until=frees_at,
        job=job,
        plan=(
            Enqueue(job=job, at=frees_at),
            RecordWait(issue=ISSUE, until=frees_at),
            PostStatus(issue=ISSUE, body=budget_wait_comment(held, LABELS.queue, NOW)),
        ),
    )


F, C, R, CH = RunMode.FRESH, RunMode.CONTINUE, RunMode.RETRY, RunMode.CHAIN


@pytest.mark.parametrize(
    ("settings", "facts", "expected"),
    [
        # A new issue learns the spend once its text is recorded, before anything costlier.
        (BUDGETED, start(F, text=None), Learn(fact="text")),
        (BUDGETED, start(F, window=None), Learn(fact="spending")),
        (BUDGETED, start(CH, stack=None, window=None), Learn(fact="spending")),
        # Spent: it waits for the budget to free, keeping its queue label, said in one comment.
        (BUDGETED, start(F, spending=SPENT), budget_wait(F, "octo")),
        (BUDGETED, start(CH, spending=SPENT), budget_wait(CH, None)),
        # Not spent: it goes on to the next fact, and starts.
        (BUDGETED, start(F, spending=UNSPENT, window=None), Learn(fact="window")),
        (BUDGETED, start(F, spending=UNSPENT), Admit(base="main", text=TEXT)),
        # The work of an issue already started goes on, spent or not.
        (BUDGETED, start(C), Admit(previous=concluded(), base="main", text=TEXT)),
        (BUDGETED, start(R), Admit(previous=concluded(), base="main", text=TEXT)),
        # Without a budget, the spend is never read.
        (
            BUDGETED.model_copy(update={"monthly_budget_usd": None}),
            start(F),
            Admit(base="main", text=TEXT),
        ),
    ],
)
def test_admission_under_a_monthly_budget(
    settings: Settings, facts: StartFacts, expected: Wait | Admit | Learn
) -> None:
    assert admit(settings, facts, NOW) == expected


def test_each_fact_admission_asks_for_is_the_start_facts_field_it_fills_in() -> None:
    assert "spending" in get_args(Fact)
    assert set(get_args(Fact)) <= set(StartFacts.model_fields)
