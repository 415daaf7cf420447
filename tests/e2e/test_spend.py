"""A monthly budget through real processes: one issue spends it, the next waits with one comment,
and the status page and /metrics show the budget spent."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from typing import Any

import aiohttp

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.model import IssueRef, RunState
from bot.edges.store import Store
from tests.e2e.test_loop import (
    GREETING_FIX,
    baton_comments,
    latest_run,
    new_repo,
    queued_issue,
    run_state,
)
from tests.e2e.test_observability import OPERATOR_TOKEN, Samples, scrape, value
from tests.support import StackSpec
from tests.web.test_status_page import section, shown_text

STACK = StackSpec(
    database=14,
    env={"BATON_OPERATOR_TOKEN": OPERATOR_TOKEN, "BATON_MONTHLY_BUDGET_USD": "1"},
)
WAITING = "waiting for the monthly budget"


async def status_page(stack: LocalBaton) -> str:
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{stack.web_url}/status", headers=headers) as response,
    ):
        assert response.status == 200
        return await response.text()


async def comments_saying(
    maintainer: Maintainer, repo: str, number: int, text: str
) -> list[dict[str, Any]] | None:
    said = await baton_comments(maintainer, repo, number)
    return said if any(text in comment["body"] for comment in said) else None


async def test_a_spent_budget_holds_the_next_issue_with_one_comment(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    first = await queued_issue(maintainer, repo, "Greet", f"agent: costs 1.25 30\n{GREETING_FIX}")
    run = await eventually(
        lambda: run_state(
            store, repo, first, RunState.PUSHED_PENDING, RunState.PUSHED_GREEN, RunState.FAILED
        ),
        "the first issue's run pushing",
        90,
    )
    assert run.state is not RunState.FAILED, run.reason
    assert run.agent_result is not None and run.agent_result.cost_usd == 1.25
    # Its spend is in the ledger once its agent ends: the budget of $1 is spent.
    spent = await scrape(stack)
    assert value(spent, "baton_agent_spend_usd", window="30d") == 1.25
    assert value(spent, "baton_agent_spend_turns", window="today") == 30
    assert value(spent, "baton_monthly_budget_usd") == 1

    def not_started(found: Samples) -> float:
        return value(found, "baton_jobs_total", job="run_issue", outcome="not started")

    initial = not_started(spent)
    second = await queued_issue(maintainer, repo, "Greet again", GREETING_FIX)
    [comment] = await eventually(
        lambda: comments_saying(maintainer, repo, second, WAITING), "the budget comment", 60
    )
    frees_at = datetime.combine(datetime.now(UTC).date() + timedelta(days=30), time(), UTC)
    body = comment["body"]
    assert "This deployment's monthly budget of $1.00 (`BATON_MONTHLY_BUDGET_USD`)" in body
    assert "agents spent $1.25 over the rolling 30 days" in body
    assert f"starting at {frees_at:%Y-%m-%d} 00:00 UTC" in body
    issue = IssueRef(installation_id=1, repo=repo, number=second)
    assert latest_run(store, repo, second) is None  # never claimed an attempt
    assert await maintainer.labels(repo, second) == {"baton:queue"}  # still queued
    assert dict(store.waits())[issue] == frees_at

    async def held_since(count: float) -> float | None:
        now = not_started(await scrape(stack))
        return now if now > count else None

    # Queued again while the budget is still spent: it waits again, and says so in the
    # same comment.
    before = await eventually(lambda: held_since(initial), "the first hold counted")
    await maintainer.remove_label(repo, second, "baton:queue")
    await maintainer.add_label(repo, second, "baton:queue")

    await eventually(lambda: held_since(before), "the second start held")
    assert [c["id"] for c in await baton_comments(maintainer, repo, second)] == [comment["id"]]
    assert latest_run(store, repo, second) is None

    page = await status_page(stack)
    spend = shown_text(section(page, "spend"))
    assert "All repositories $1.25 30 turns" in spend
    assert f"$1.00 spent new issues start {frees_at:%Y-%m-%d} 00:00 UTC" in spend
    waiting = shown_text(section(page, "halted"))
    assert f"{repo}#{second} waiting starts at {frees_at:%Y-%m-%d} 00:00 UTC" in waiting
