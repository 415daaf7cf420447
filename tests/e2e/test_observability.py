"""Metrics and logs through real processes: what an operator scrapes and reads after a run."""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

import aiohttp

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.model import RunState
from bot.edges.store import Store
from bot.ops.metrics import CONTENT_TYPE
from tests.e2e.test_loop import (
    GREETING_FIX,
    new_repo,
    queued_issue,
    run_state,
)
from tests.ops.test_metrics import samples
from tests.support import StackSpec

OPERATOR_TOKEN = "operator-" + secrets.token_hex(16)
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


STACK = StackSpec(database=3, env={"BATON_OPERATOR_TOKEN": OPERATOR_TOKEN})


async def scrape(stack: LocalBaton) -> Samples:
    """GET /metrics as Prometheus would, with the operator token as Bearer."""
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{stack.web_url}/metrics", headers=headers) as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"] == CONTENT_TYPE
        return samples(await response.text())


def value(found: Samples, name: str, **labels: str) -> float:
    """Return one sample's value (0 when the series does not exist yet)."""
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


def total(found: Samples, name: str, **labels: str) -> float:
    """Return the sum of a metric's samples whose labels include these."""
    wanted = set(labels.items())
    return sum(v for (n, series), v in found.items() if n == name and wanted <= set(series))


async def green_run(maintainer: Maintainer, stack: LocalBaton, store: Store) -> tuple[str, int]:
    repo = await new_repo(maintainer, stack)
    number = await queued_issue(maintainer, repo, "Greet", GREETING_FIX)
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN, RunState.FAILED),
        "the run settling",
        90,
    )
    assert run.state is RunState.PUSHED_GREEN, run.reason
    return repo, number


async def test_metrics_show_the_delivery_the_job_the_run_and_the_api_calls(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    before = await scrape(stack)
    await green_run(maintainer, stack, store)

    def jobs(found: Samples) -> tuple[float, float]:
        return (
            value(found, "baton_jobs_total", job="run_issue", outcome="pushed-pending"),
            total(found, "baton_jobs_total", job="settle_head"),
        )

    async def counted() -> Samples | None:
        found = await scrape(stack)
        grown = all(now > then for now, then in zip(jobs(found), jobs(before), strict=True))
        return found if grown else None

    after = await eventually(counted, "the run and settle jobs counted")

    def grew(name: str, **labels: str) -> float:
        return total(after, name, **labels) - total(before, name, **labels)

    assert grew("baton_webhook_deliveries_total", event="issues", outcome="accepted") >= 1
    assert grew("baton_jobs_total", job="run_issue", outcome="pushed-pending") == 1
    assert grew("baton_jobs_total", job="settle_head") >= 1
    assert grew("baton_run_duration_seconds_count", state="pushed-green") == 1
    assert grew("baton_run_duration_seconds_sum", state="pushed-green") > 0
    assert grew("baton_run_duration_seconds_bucket", state="pushed-green", le="+Inf") == 1
    assert grew("baton_github_api_calls_total", method="GET", status="2xx") >= 1
    assert grew("baton_github_api_calls_total", method="POST", status="2xx") >= 1
    assert total(after, "baton_github_api_calls_total", status="5xx") == 0
    assert 0 < value(after, "baton_github_rate_limit_remaining", installation="1") <= 15000
    assert value(after, "baton_workers") == 2
    queues = {dict(series)["queue"] for name, series in after if name == "baton_queue_depth"}
    assert queues == {"baton-events", "baton-agents"}
    assert ("baton_intake_backlog", ()) in after and ("baton_live_runs", ()) in after


async def test_metrics_count_an_escalation_by_its_failure_class(
    stack: LocalBaton, maintainer: Maintainer
) -> None:
    before = await scrape(stack)
    repo = await new_repo(maintainer, stack)
    await queued_issue(maintainer, repo, "Nothing to do", "No instructions for the agent.")

    def escalations(found: Samples) -> float:
        return value(found, "baton_escalations_total", failure_class="no-change")

    async def escalated() -> Samples | None:
        found = await scrape(stack)
        return found if escalations(found) > escalations(before) else None

    after = await eventually(escalated, "the escalation counted")
    assert escalations(after) - escalations(before) == 1
    settled = "baton_run_duration_seconds_count"
    assert total(after, settled, state="no-change") - total(before, settled, state="no-change") == 1


async def test_metrics_refuse_a_scrape_without_the_token(stack: LocalBaton) -> None:
    async with aiohttp.ClientSession() as session:
        for headers in ({}, {"Authorization": "Bearer not-the-token"}):
            async with session.get(f"{stack.web_url}/metrics", headers=headers) as response:
                assert response.status == 401


def log_files(stack: LocalBaton) -> dict[str, Path]:
    """Return the log of each Baton process (web, workers and their forwarders) by name."""
    return {
        path.stem: path
        for path in sorted(stack.log_dir.glob("*.log"))
        if path.stem == "web" or path.stem.startswith("worker-")
    }


def log_lines(stack: LocalBaton) -> dict[str, list[dict[str, Any]]]:
    """Return every line each Baton process logged, each parsed as the JSON it must be."""
    return {
        name: [as_entry(path, line) for line in path.read_text().splitlines()]
        for name, path in log_files(stack).items()
    }


def as_entry(path: Path, line: str) -> dict[str, Any]:
    try:
        entry = json.loads(line)
    except json.JSONDecodeError:
        raise AssertionError(f"{path.name}: not a JSON line: {line!r}") from None
    assert isinstance(entry, dict), line
    assert {"time", "level", "logger", "message"} <= entry.keys(), line
    return entry


def secrets_of(stack: LocalBaton) -> dict[str, str]:
    """Return every secret that went through Baton's processes, by what it is."""
    key = Path(stack.sandbox_env["GITHUB_PRIVATE_KEY_PATH"]).read_text()
    state = json.loads((stack.workdir / "sandbox" / "state.json").read_text())
    minted = {f"installation token {n}": token for n, token in enumerate(state["tokens"])}
    assert minted, "the sandbox minted no installation token"
    key_lines = [line for line in key.splitlines() if not line.startswith("-----")]
    return {
        "webhook secret": stack.webhook_secret,
        "operator token": OPERATOR_TOKEN,
        "private key": key.strip(),
        **{f"private key line {n}": line for n, line in enumerate(key_lines)},
        **minted,
    }


async def queue_label_delivery(maintainer: Maintainer, repo: str) -> dict[str, Any]:
    """Return the sandbox's record of the delivery that put the queue label on repo's issue."""
    repo_id = (await maintainer.gh.getitem("/repos/{+repo}", {"repo": repo}))["id"]
    deliveries = await maintainer.gh.getitem("/_sandbox/deliveries?event=issues&action=labeled")
    for delivery in deliveries:
        if delivery["repository_id"] != repo_id or delivery["redelivery"]:
            continue
        full = await maintainer.gh.getitem(f"/_sandbox/deliveries/{delivery['id']}")
        if json.loads(full["request"]["payload"])["label"]["name"] == "baton:queue":
            return dict(delivery)
    raise AssertionError(f"no baton:queue delivery for {repo}")


async def test_logs_are_json_lines_in_context_without_a_secret(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo, number = await green_run(maintainer, stack, store)
    # A redelivery, which the web handler logs as the delivery it is.
    delivery = await queue_label_delivery(maintainer, repo)
    await maintainer.gh.post(f"/_sandbox/deliveries/{delivery['id']}/redeliver", data={})

    async def redelivery_logged() -> list[dict[str, Any]] | None:
        web = log_lines(stack)["web"]
        said = [
            e
            for e in web
            if e.get("delivery") == delivery["guid"] and "seen before" in e["message"]
        ]
        return web if said else None

    web = await eventually(redelivery_logged, "the web process logging the redelivery")
    from_handler = [
        e
        for e in web
        if e["logger"].startswith("handlers.") or e["message"].startswith("delivery ")
    ]
    assert from_handler and all("delivery" in e for e in from_handler)

    lines = [entry for entries in log_lines(stack).values() for entry in entries]
    run_lines = [e for e in lines if e.get("job") == "run_issue" and e.get("repo") == repo]
    assert run_lines and all(e["issue"] == number for e in run_lines)
    # A duplicate job finding the issue claimed says so before any attempt is known.
    in_attempt = [e for e in run_lines if "attempt 1 " in e["message"]]
    assert any("claimed on" in e["message"] for e in in_attempt)
    assert any(" pushed " in e["message"] for e in in_attempt)
    assert all((e["run_id"], e["attempt"]) == (f"{repo}#{number}/1", 1) for e in in_attempt)
    settled = [
        e for e in lines if e.get("job") == "settle_head" and e["logger"] == "bot.workflows.settle"
    ]
    assert any(e["repo"] == repo for e in settled)

    for name, path in log_files(stack).items():
        text = path.read_text()
        for what, secret in secrets_of(stack).items():
            assert secret not in text, f"{name}.log holds the {what}"
