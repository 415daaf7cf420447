"""The spend ledger in Redis: each attempt's cost and turns, once, per UTC day and repository."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from bot.domain.model import MAX_RUN_COST_USD, AgentResult, IssueRef, Limits, Policy, Run
from bot.domain.spend import Budgets, DaySpend, Ledger, Spending
from bot.edges.store import Store, keys
from bot.edges.store.spend import SPEND_TTL_S

NOW = datetime(2026, 12, 1, 6, 30, tzinfo=UTC)
TODAY = NOW.date()
WIDGETS = IssueRef(installation_id=1, repo="octo/widgets", number=7)
GADGETS = IssueRef(installation_id=1, repo="octo/gadgets", number=3)


def ended(
    issue: IssueRef,
    attempt: int,
    at: datetime,
    cost: float | None = None,
    turns: int | None = None,
) -> Run:
    """Return an attempt whose agent ended at an instant, having reported cost and turns."""
    result = AgentResult(
        agent="claude",
        status="success",
        stop_reason="completed",
        cost_usd=cost,
        turns=turns,
        started_at=at - timedelta(minutes=5),
        ended_at=at,
        transcript_path=Path("transcript.jsonl"),
        stderr_path=Path("stderr.log"),
    )
    run = Run.claimed(issue, attempt, f"baton/issue-{issue.number}", at - timedelta(minutes=6))
    return run.model_copy(update={"agent_result": result})


def day(days_ago: int, cost: float, turns: int, attempts: int) -> DaySpend:
    return DaySpend(
        day=TODAY - timedelta(days=days_ago), cost_usd=cost, turns=turns, attempts=attempts
    )


def test_an_attempts_spend_is_added_once_to_its_day_and_repository(store: Store) -> None:
    first = ended(WIDGETS, 1, NOW, cost=1.25, turns=10)
    assert store.record_spend(first)
    assert not store.record_spend(first)  # its job ran twice: counted once
    assert store.record_spend(ended(WIDGETS, 2, NOW, cost=0.5, turns=3))
    assert store.record_spend(ended(GADGETS, 1, NOW - timedelta(days=2), cost=2.0, turns=7))
    # An agent that reports neither cost nor turns: the attempt counts all the same.
    assert store.record_spend(ended(GADGETS, 2, NOW - timedelta(days=2)))

    assert store.spend_ledger(NOW) == Ledger(
        deployment=(day(2, 2.0, 7, 2), day(0, 1.75, 13, 2)),
        repositories={"octo/gadgets": (day(2, 2.0, 7, 2),), "octo/widgets": (day(0, 1.75, 13, 2),)},
    )
    assert store.spend_ledger(NOW).deployment == (day(2, 2.0, 7, 2), day(0, 1.75, 13, 2))


def test_a_run_whose_agent_never_reported_adds_nothing(store: Store) -> None:
    run = ended(WIDGETS, 1, NOW, cost=1.0).model_copy(update={"agent_result": None})
    assert not store.record_spend(run)
    assert store.spend_ledger(NOW) == Ledger()


def test_the_day_is_the_utc_day_the_agent_ended_on(store: Store) -> None:
    late = datetime(2026, 11, 30, 23, 59, 30, tzinfo=UTC)
    store.record_spend(ended(WIDGETS, 1, late, cost=1.0, turns=1))
    store.record_spend(ended(WIDGETS, 2, late + timedelta(minutes=1), cost=2.0, turns=1))
    assert store.spend_ledger(NOW).deployment == (day(1, 1.0, 1, 1), day(0, 2.0, 1, 1))


def test_what_the_ledger_keeps_expires_after_the_window(store: Store) -> None:
    run = ended(WIDGETS, 1, NOW, cost=1.0, turns=2)
    store.record_spend(run)
    for key in (keys.spend_day(TODAY), keys.spent(WIDGETS, 1)):
        assert SPEND_TTL_S - 5 < int(store.redis.ttl(key)) <= SPEND_TTL_S
    # A day past the window is not read, even while Redis still holds it.
    old = ended(WIDGETS, 2, NOW - timedelta(days=30), cost=9.0, turns=9)
    store.record_spend(old)
    assert store.spend_ledger(NOW).deployment == (day(0, 1.0, 2, 1),)
    assert store.spend_ledger(NOW - timedelta(days=1)).deployment == (day(30, 9.0, 9, 1),)


def test_a_start_reads_the_deployments_and_its_repositorys_spend(store: Store) -> None:
    store.record_spend(ended(WIDGETS, 1, NOW - timedelta(days=3), cost=4.0, turns=8))
    store.record_spend(ended(GADGETS, 1, NOW, cost=1.5, turns=2))
    budgets = Budgets(deployment_usd=10.0, repository_usd=5.0)
    assert store.spending("octo/widgets", budgets, NOW) == Spending(
        budgets=budgets,
        deployment=(day(3, 4.0, 8, 1), day(0, 1.5, 2, 1)),
        repository=(day(3, 4.0, 8, 1),),
    )
    # The repository's own budget is noted for the status views, and forgotten with it.
    assert store.spend_ledger(NOW).budgets == {"octo/widgets": 5.0}
    store.spending("octo/widgets", Budgets(deployment_usd=10.0), NOW)
    assert store.spend_ledger(NOW).budgets == {}
    assert store.spending("octo/new", Budgets(), NOW) == Spending(
        deployment=(day(3, 4.0, 8, 1), day(0, 1.5, 2, 1))
    )


def test_an_empty_ledger_reads_as_nothing_spent(store: Store) -> None:
    assert store.spend_ledger(NOW).deployment == ()
    assert store.spending("octo/widgets", Budgets(), NOW) == Spending()
    assert store.spend_ledger(NOW) == Ledger()
    assert not store.redis.exists(keys.spend_day(date(2026, 12, 1)))


def test_a_run_counts_for_at_most_its_issues_cost_cap_whatever_its_agent_claims(
    store: Store,
) -> None:
    """An agent's result file claimed $1e9: one run spent every repository's month."""
    capped = Policy(account="claude", limits=Limits(max_cost_usd=5.0))
    forged = ended(WIDGETS, 1, NOW, cost=1e9, turns=1).model_copy(update={"policy": capped})
    uncapped = ended(GADGETS, 1, NOW, cost=1e9, turns=1)
    assert store.record_spend(forged) and store.record_spend(uncapped)
    assert store.spend_ledger(NOW).repositories == {
        "octo/gadgets": (day(0, MAX_RUN_COST_USD, 1, 1),),
        "octo/widgets": (day(0, 5.0, 1, 1),),
    }


def test_a_cost_that_is_not_a_finite_positive_number_counts_as_none(store: Store) -> None:
    """-1e12 hid real spend from every cap; NaN failed the spend write after its mark."""
    for attempt, claim in enumerate((-1e12, float("nan"), float("inf")), 1):
        run = ended(WIDGETS, attempt, NOW, cost=claim, turns=1)
        assert run.agent_result is not None and run.agent_result.cost_usd is None
        assert any("not credible" in line for line in run.agent_result.evidence)
        assert store.record_spend(run)
    assert store.record_spend(ended(WIDGETS, 4, NOW, cost=1.5, turns=1))
    assert store.spend_ledger(NOW).deployment == (day(0, 1.5, 4, 4),)
