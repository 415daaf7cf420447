"""Lost webhook deliveries asked for again, as GitHub's guide for Apps has it.

GitHub does not redeliver a failed delivery by itself
(https://docs.github.com/en/webhooks/using-webhooks/automatically-redelivering-failed-deliveries-for-a-github-app-webhook):
Baton lists the App's deliveries (`GET /app/hook/deliveries`) and asks for each event
none of whose deliveries it answered (`POST /app/hook/deliveries/{id}/attempts`).
"""

from __future__ import annotations

import asyncio
import re

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.model import IssueRef, RunState
from bot.edges.store import Store
from tests.e2e.test_loop import (
    GREETING_FIX,
    new_repo,
    queued_issue,
    run_state,
)
from tests.e2e.test_observability import OPERATOR_TOKEN, scrape, value
from tests.support import StackSpec, baton_command

# The sweep is put off for a day: what brings the lost label back is the redelivery.
STACK = StackSpec(
    database=20,
    env={"BATON_SWEEP_INTERVAL_SECONDS": "86400", "BATON_OPERATOR_TOKEN": OPERATOR_TOKEN},
)
CLOSED_PORT = "http://127.0.0.1:9/webhook"  # Baton down: nothing listens there


async def test_a_label_lost_while_baton_was_down_is_delivered_again_once(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    await maintainer.set_webhook_url(CLOSED_PORT)
    try:
        number = await queued_issue(maintainer, repo, "Labelled while Baton was down", GREETING_FIX)

        async def lost() -> bool:
            listed = await maintainer.gh.getitem("/_sandbox/deliveries?event=issues&action=labeled")
            return any(d["status"] != "pending" and not d["status_code"] for d in listed)

        await eventually(lost, "the label's delivery failing")
    finally:
        await maintainer.set_webhook_url(f"{stack.web_url}/webhook")
    issue = IssueRef(installation_id=1, repo=repo, number=number)
    assert store.latest_run(issue) is None, "nothing came of the lost delivery yet"

    # GitHub failing to answer the asking leaves the event for the next pass, not asked.
    asking = {"method": "POST", "path": "^/app/hook/deliveries/\\d+/attempts$", "status": 502}
    await maintainer.gh.post("/_sandbox/faults", data=asking)
    try:
        unanswered = await asyncio.to_thread(baton_command, stack, "redeliver")
    finally:
        await maintainer.gh.delete("/_sandbox/faults")
    assert "asked again 0," in unanswered and store.latest_run(issue) is None, unanswered
    asked_before = value(await scrape(stack), "baton_webhook_redeliveries_total", outcome="asked")
    said = await asyncio.to_thread(baton_command, stack, "redeliver")
    # The label's event, and any other the closed port lost meanwhile (the issue's opening).
    asked = re.search(r"asked again (\d+),", said)
    assert asked is not None and int(asked[1]) >= 1, said
    counted = await scrape(stack)
    assert value(
        counted, "baton_webhook_redeliveries_total", outcome="asked"
    ) == asked_before + int(asked[1])
    assert value(counted, "baton_webhook_redeliveries_total", outcome="left") >= 1  # unanswered
    await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the redelivered run", 60
    )
    again = await asyncio.to_thread(baton_command, stack, "redeliver")
    assert "asked again 0," in again, again
    assert len(store.runs(issue)) == 1, "the event was acted on once"
    redelivered = await maintainer.gh.getitem("/_sandbox/deliveries?event=issues&action=labeled")
    assert any(d["redelivery"] and d["status_code"] == 202 for d in redelivered)
    last = store.last_redelivery_pass()
    assert last is not None and last.asked == 0 and last.listed > 0
