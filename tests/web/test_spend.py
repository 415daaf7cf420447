"""Agent spend in view: the status page, `baton status` and /metrics, per repository and day,
over the rolling 30 days, against the monthly budgets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from aiohttp.test_utils import TestClient

from bot.domain.spend import Budgets, DaySpend, Ledger
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from bot.ops.metrics import render_prometheus, spend_gauges
from bot.ops.settings import Settings
from bot.web.app import create_app
from bot.web.overview import Overview, SpendView, gather_overview
from bot.web.status_page import render_status_page, render_status_text
from handlers import router
from tests.conftest import OPERATOR_TOKEN
from tests.edges.test_store_spend import GADGETS, WIDGETS, ended
from tests.ops.test_metrics import samples
from tests.web.test_status_page import section, shown_text

NOW = datetime(2026, 12, 1, 6, 30, tzinfo=UTC)
TODAY = NOW.date()


def day(days_ago: int, cost: float, turns: int, attempts: int = 1) -> DaySpend:
    return DaySpend(
        day=TODAY - timedelta(days=days_ago), cost_usd=cost, turns=turns, attempts=attempts
    )


LEDGER = Ledger(
    deployment=(day(20, 6.0, 40, 2), day(2, 3.0, 20), day(0, 1.5, 12)),
    repositories={
        "octo/gadgets": (day(20, 6.0, 40, 2),),
        "octo/widgets": (day(2, 3.0, 20), day(0, 1.5, 12)),
    },
    budgets={"octo/gadgets": 5.0, "octo/spare": 2.0},
)


def overview(budget_usd: float | None) -> Overview:
    return Overview(
        taken_at=NOW,
        queues={"baton-events": 0, "baton-agents": 0},
        workers=1,
        marks={},
        spend=SpendView.of(LEDGER, budget_usd, NOW),
    )


def rows(page: str) -> list[str]:
    """Return the words of each row of the spend section's table, headings first."""
    spend = section(page, "spend")
    return [shown_text(row) for row in spend.split("<tr>")[1:]]


def test_the_page_shows_each_repository_per_day_over_30_days_and_against_its_budget() -> None:
    page = render_status_page(overview(budget_usd=20.0), NOW)
    headings, everyone, gadgets, spare, widgets = rows(page)
    assert headings == (
        "Repository today 11-30 11-29 11-28 11-27 11-26 11-25 30 days Monthly budget Left"
    )
    assert everyone == (
        "All repositories $1.50 12 turns — $3.00 20 turns — — — — "
        "$10.50 72 turns, 4 attempts $20.00 $9.50"
    )
    # Over its own budget: spent, and new issues start once day 20's spend leaves.
    assert gadgets == (
        "octo/gadgets — — — — — — — $6.00 40 turns, 2 attempts $5.00 "
        "spent new issues start 2026-12-11 00:00 UTC"
    )
    assert spare == "octo/spare — — — — — — — — $2.00 $2.00"  # a budget, nothing spent
    assert widgets == (
        "octo/widgets $1.50 12 turns — $3.00 20 turns — — — — $4.50 32 turns, 2 attempts — —"
    )


def test_the_page_shows_the_deployments_budget_spent() -> None:
    everyone = rows(render_status_page(overview(budget_usd=10.0), NOW))[1]
    assert everyone.endswith("$10.00 spent new issues start 2026-12-11 00:00 UTC")
    assert rows(render_status_page(overview(budget_usd=None), NOW))[1].endswith("— —")


def test_a_page_without_the_spend_read_leaves_the_section_out() -> None:
    bare = Overview(taken_at=NOW, queues={}, workers=0, marks={})
    assert 'aria-labelledby="spend"' not in render_status_page(bare, NOW)


def test_baton_status_prints_the_30_day_totals_and_budgets() -> None:
    lines = render_status_text(overview(budget_usd=20.0), NOW).splitlines()
    for line in [
        "all repositories: $10.50 spent over the rolling 30 days, 72 turns, 4 attempts "
        "(today $1.50); monthly budget $20.00, $9.50 left",
        "octo/gadgets: $6.00 spent over the rolling 30 days, 40 turns, 2 attempts "
        "(today $0.00); monthly budget $5.00 spent: new issues start 2026-12-11 00:00 UTC",
        "octo/widgets: $4.50 spent over the rolling 30 days, 32 turns, 2 attempts (today $1.50)",
    ]:
        assert line in lines


def test_the_overview_reads_the_ledger_and_the_budgets(store: Store, dispatch: Dispatcher) -> None:
    store.record_spend(ended(WIDGETS, 1, NOW, cost=1.5, turns=12))
    store.record_spend(ended(GADGETS, 1, NOW - timedelta(days=20), cost=6.0, turns=40))
    store.spending("octo/gadgets", Budgets(deployment_usd=20.0, repository_usd=5.0), NOW)

    spend = gather_overview(store, dispatch, NOW, 10, monthly_budget_usd=20.0).spend

    assert spend is not None
    assert (spend.deployment.window.cost_usd, spend.deployment.window.turns) == (7.5, 52)
    assert spend.deployment.budget is not None and spend.deployment.budget.left_usd == 12.5
    gadgets, widgets = spend.repos
    assert (gadgets.repo, widgets.repo) == ("octo/gadgets", "octo/widgets")
    assert gadgets.budget is not None and gadgets.budget.exhausted
    assert widgets.budget is None and widgets.days[0].cost_usd == 1.5


# /metrics: the deployment's spend, and each repository's in the window ----------------------


def test_spend_gauges_give_today_the_30_days_and_the_budget() -> None:
    found = samples(render_prometheus(spend_gauges(LEDGER, 20.0, NOW)))
    gadgets, widgets = ("repo", "octo/gadgets"), ("repo", "octo/widgets")
    assert found == {
        ("baton_agent_spend_usd", (("window", "30d"),)): 10.5,
        ("baton_agent_spend_usd", (("window", "today"),)): 1.5,
        ("baton_agent_spend_turns", (("window", "30d"),)): 72,
        ("baton_agent_spend_turns", (("window", "today"),)): 12,
        ("baton_repo_agent_spend_usd", (gadgets, ("window", "30d"))): 6,
        ("baton_repo_agent_spend_usd", (gadgets, ("window", "today"))): 0,
        ("baton_repo_agent_spend_usd", (widgets, ("window", "30d"))): 4.5,
        ("baton_repo_agent_spend_usd", (widgets, ("window", "today"))): 1.5,
        ("baton_repo_agent_spend_turns", (gadgets, ("window", "30d"))): 40,
        ("baton_repo_agent_spend_turns", (gadgets, ("window", "today"))): 0,
        ("baton_repo_agent_spend_turns", (widgets, ("window", "30d"))): 32,
        ("baton_repo_agent_spend_turns", (widgets, ("window", "today"))): 12,
        ("baton_monthly_budget_usd", ()): 20,
    }
    unset = samples(render_prometheus(spend_gauges(Ledger(), None, NOW)))
    assert unset[("baton_agent_spend_usd", (("window", "30d"),))] == 0
    assert ("baton_monthly_budget_usd", ()) not in unset
    assert not any(name.startswith("baton_repo_") for name, _ in unset), "no spend, no series"


async def test_metrics_show_the_ledgers_spend_and_the_budget(
    aiohttp_client: Any, operator_settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    now = datetime.now(UTC)
    store.record_spend(ended(WIDGETS, 1, now, cost=0.75, turns=9))
    store.record_spend(ended(GADGETS, 1, now - timedelta(days=3), cost=2.0, turns=4))
    budgeted = operator_settings.model_copy(update={"monthly_budget_usd": 50.0})
    client: TestClient = await aiohttp_client(create_app(budgeted, store, dispatch, router))

    response = await client.get("/metrics", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})

    assert response.status == 200
    found = samples(await response.text())
    assert found[("baton_agent_spend_usd", (("window", "today"),))] == 0.75
    assert found[("baton_agent_spend_usd", (("window", "30d"),))] == 2.75
    assert found[("baton_agent_spend_turns", (("window", "30d"),))] == 13
    assert found[("baton_monthly_budget_usd", ())] == 50
