"""Metrics: definitions, tallies, the Prometheus text format, Redis storage and GET /metrics."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from gidgethub import HTTPException
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from bot.devkit.devstack import free_port
from bot.domain.model import AgentResult, IssueRef, Run, RunState
from bot.edges.github import github_app
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from bot.ops.logs import current_context
from bot.ops.metrics import (
    AGENT_COST,
    AGENT_TURNS,
    CONTENT_TYPE,
    ESCALATIONS,
    GITHUB_API_CALLS,
    GITHUB_RATE_LIMIT_REMAINING,
    HALTS,
    JOBS,
    QUEUE_DEPTH,
    RUN_DURATION,
    STORED,
    WEBHOOK_DELIVERIES,
    WORKERS,
    Family,
    HistogramSeries,
    Metric,
    MetricType,
    MetricUpdate,
    Series,
    Tally,
    agent_usage,
    current_gauges,
    field_of,
    render_prometheus,
    run_duration,
    run_settled,
    stored_families,
)
from bot.ops.settings import Settings
from bot.web.app import create_app
from handlers import router
from jobs import job, services
from tests.conftest import OPERATOR_TOKEN
from tests.web.test_app import labeled, post

COUNTER = Metric(name="things_total", help="Things.", type=MetricType.COUNTER, labels=("kind",))
GAUGE = Metric(name="level", help="A level.", type=MetricType.GAUGE)
HISTOGRAM = Metric(
    name="wait_seconds",
    help="Waits.",
    type=MetricType.HISTOGRAM,
    labels=("queue",),
    buckets=(0.5, 1, 10),
)


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Parse exposition text with Prometheus's own client: (sample name, labels) to value."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def stored_samples(store: Store) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Return what Redis holds, rendered and parsed back."""
    return samples(render_prometheus(stored_families(store.read_metrics([m.name for m in STORED]))))


def applied(updates: list[MetricUpdate]) -> dict[str, dict[str, str]]:
    """Apply updates to hashes as Redis does (HINCRBY, HINCRBYFLOAT, HSET)."""
    stored: dict[str, dict[str, str]] = {}
    for update in updates:
        fields = stored.setdefault(update.metric, {})
        if update.how == "add":
            fields[update.field] = str(int(fields.get(update.field, "0")) + int(update.value))
        elif update.how == "add_float":
            fields[update.field] = str(float(fields.get(update.field, "0")) + update.value)
        else:
            fields[update.field] = str(update.value)
    return stored


# Definitions ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"name": "bad-name", "type": "counter"}, "should match pattern"),
        ({"name": "x", "type": "counter", "labels": ("bad-label",)}, "not a valid label name"),
        ({"name": "x", "type": "counter", "labels": ("__reserved",)}, "not a valid label name"),
        ({"name": "x", "type": "counter", "labels": ("a", "a")}, "label names repeat"),
        ({"name": "x", "type": "histogram", "labels": ("le",), "buckets": (1,)}, "named le"),
        ({"name": "x", "type": "histogram"}, "needs finite bucket bounds"),
        ({"name": "x", "type": "histogram", "buckets": (1, math.inf)}, "finite bucket bounds"),
        ({"name": "x", "type": "histogram", "buckets": (1, 1)}, "must ascend"),
        ({"name": "x", "type": "gauge", "buckets": (1,)}, "only a histogram has buckets"),
    ],
)
def test_a_malformed_metric_is_refused_with_the_reason(
    fields: dict[str, Any], problem: str
) -> None:
    with pytest.raises(ValidationError, match=problem):
        Metric.model_validate({"help": "Help.", **fields})


def test_baton_metrics_have_distinct_names_and_low_cardinality_labels() -> None:
    names = [metric.name for metric in STORED]
    assert len(names) == len(set(names))
    # An installation is a label (each one's rate limit is watched): they are few and
    # bounded, unlike issues, runs or deliveries, which grow with use.
    forbidden = {"repo", "issue", "number", "delivery", "run_id", "attempt"}
    for metric in STORED:
        assert not forbidden & set(metric.labels), metric.name
        if metric.type is MetricType.COUNTER:
            assert metric.name.endswith("_total")


# Rendering -----------------------------------------------------------------


def test_a_counter_renders_help_type_and_sorted_series() -> None:
    family = Family(COUNTER, [Series(("b",), 2), Series(("a",), 1.5)])
    assert render_prometheus([family]) == (
        "# HELP things_total Things.\n"
        "# TYPE things_total counter\n"
        'things_total{kind="a"} 1.5\n'
        'things_total{kind="b"} 2\n'
    )


def test_a_gauge_without_labels_renders_bare() -> None:
    assert render_prometheus([Family(GAUGE, [Series((), 7.0)])]) == (
        "# HELP level A level.\n# TYPE level gauge\nlevel 7\n"
    )


def test_a_family_without_series_keeps_its_help_and_type() -> None:
    assert render_prometheus([Family(GAUGE, [])]) == "# HELP level A level.\n# TYPE level gauge\n"
    assert render_prometheus([]) == ""


def test_a_histogram_renders_cumulative_buckets_then_sum_and_count() -> None:
    family = Family(HISTOGRAM, [HistogramSeries(("events",), (1, 0, 2, 3), 45.25)])
    assert render_prometheus([family]) == (
        "# HELP wait_seconds Waits.\n"
        "# TYPE wait_seconds histogram\n"
        'wait_seconds_bucket{queue="events",le="0.5"} 1\n'
        'wait_seconds_bucket{queue="events",le="1"} 1\n'
        'wait_seconds_bucket{queue="events",le="10"} 3\n'
        'wait_seconds_bucket{queue="events",le="+Inf"} 6\n'
        'wait_seconds_sum{queue="events"} 45.25\n'
        'wait_seconds_count{queue="events"} 6\n'
    )


def test_label_values_and_help_are_escaped() -> None:
    metric = Metric(
        name="odd_total", help='A \\ "help"\nline.', type=MetricType.COUNTER, labels=("v",)
    )
    text = render_prometheus([Family(metric, [Series(('back\\slash "quoted"\nnewline',), 1)])])
    assert text.splitlines()[0] == '# HELP odd_total A \\\\ "help"\\nline.'
    assert text.splitlines()[2] == 'odd_total{v="back\\\\slash \\"quoted\\"\\nnewline"} 1'
    assert samples(text) == {("odd_total", (("v", 'back\\slash "quoted"\nnewline'),)): 1.0}


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (0, "0"),
        (3.0, "3"),
        (0.25, "0.25"),
        (1e20, "1e+20"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
    ],
)
def test_values_are_written_as_prometheus_reads_them(value: float, shown: str) -> None:
    assert render_prometheus([Family(GAUGE, [Series((), value)])]).endswith(f"level {shown}\n")


@pytest.mark.parametrize(
    ("family", "problem"),
    [
        (Family(COUNTER, [Series((), 1)]), "does not give one value for each label"),
        (Family(COUNTER, [Series(("a", "b"), 1)]), "does not give one value for each label"),
        (Family(COUNTER, [HistogramSeries(("a",), (0, 0, 0, 0), 0)]), "not a histogram"),
        (Family(HISTOGRAM, [Series(("a",), 1)]), "must be HistogramSeries"),
        (Family(HISTOGRAM, [HistogramSeries(("a",), (1, 2), 3)]), "2 bucket counts for 4"),
    ],
)
def test_series_that_do_not_fit_their_metric_are_refused(family: Family, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        render_prometheus([family])


# Tallies and what Redis holds --------------------------------------------------


def test_a_tally_adds_counts_and_keeps_the_last_gauge_reading() -> None:
    tally = Tally().count(COUNTER, "a").count(COUNTER, "a", by=2).count(COUNTER, "b")
    tally.set(GAUGE, 5).set(GAUGE, 4)
    assert sorted(tally.updates(), key=lambda u: (u.metric, u.field)) == [
        MetricUpdate("level", "[]", 4, "set"),
        MetricUpdate("things_total", '["a"]', 3, "add"),
        MetricUpdate("things_total", '["b"]', 1, "add"),
    ]


def test_a_tally_puts_each_observation_in_its_bucket() -> None:
    tally = Tally()
    for value in (0.5, 0.7, 10, 11, 12):
        tally.observe(HISTOGRAM, value, "q")
    assert {u.field: (u.value, u.how) for u in tally.updates()} == {
        '["q","0.5"]': (1, "add"),  # at most 0.5
        '["q","1"]': (1, "add"),
        '["q","10"]': (1, "add"),
        '["q","+Inf"]': (2, "add"),
        '["q","sum"]': (pytest.approx(34.2), "add_float"),
    }


@pytest.mark.parametrize(
    ("record", "problem"),
    [
        (lambda t: t.count(COUNTER), "takes 1 label value"),
        (lambda t: t.count(GAUGE), "is a gauge, not a counter"),
        (lambda t: t.observe(COUNTER, 1, "a"), "is a counter, not a histogram"),
        (lambda t: t.set(HISTOGRAM, 1, "a"), "is a histogram, not a gauge"),
        (lambda t: t.observe(HISTOGRAM, math.nan, "a"), "NaN is not an observation"),
    ],
)
def test_a_tally_refuses_what_does_not_fit_the_metric(record: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        record(Tally())


def test_take_empties_the_tally_and_merge_puts_counts_back() -> None:
    tally = Tally().count(COUNTER, "a").observe(HISTOGRAM, 2, "q").set(GAUGE, 1)
    taken = tally.take()
    assert not tally and taken
    tally.count(COUNTER, "a").set(GAUGE, 9)  # counted while the taken batch failed to store
    tally.merge(taken)
    stored = applied(tally.updates())
    assert stored["things_total"] == {'["a"]': "2"}
    assert stored["wait_seconds"][field_of(["q"], "10")] == "1"
    assert stored["level"] == {"[]": "9"}  # the newer reading stays


def test_stored_counts_render_back_with_zeros_for_unlabelled_counters() -> None:
    tally = Tally()
    tally.count(WEBHOOK_DELIVERIES, "issues", "accepted", by=3)
    tally.count(JOBS, "run_issue", "pushed-pending")
    tally.observe(RUN_DURATION, 42, "pushed-green").observe(RUN_DURATION, 1e6, "pushed-green")
    tally.set(GITHUB_RATE_LIMIT_REMAINING, 4999, "7")
    text = render_prometheus(stored_families(applied(tally.updates())))
    found = samples(text)
    assert found[("baton_webhook_deliveries_total", (("event", "issues"), ("outcome", "accepted")))]
    assert found[("baton_jobs_total", (("job", "run_issue"), ("outcome", "pushed-pending")))] == 1
    green = (("state", "pushed-green"),)
    assert found[("baton_run_duration_seconds_count", green)] == 2
    assert found[("baton_run_duration_seconds_sum", green)] == 1e6 + 42
    assert found[("baton_run_duration_seconds_bucket", (("le", "60"), *green))] == 1
    assert found[("baton_run_duration_seconds_bucket", (("le", "+Inf"), *green))] == 2
    assert found[("baton_halts_total", ())] == 0  # unlabelled counters start at zero
    assert found[("baton_github_rate_limit_remaining", (("installation", "7"),))] == 4999
    assert not any(name.startswith("baton_escalations") for name, _ in found)


def test_no_gauge_reading_is_no_sample_rather_than_zero() -> None:
    text = render_prometheus(stored_families({}))
    assert "# TYPE baton_github_rate_limit_remaining gauge" in text
    assert not any(n == "baton_github_rate_limit_remaining" for n, _ in samples(text))


def test_stored_fields_of_another_shape_are_skipped_and_old_bounds_fold_upwards() -> None:
    stored = {
        JOBS.name: {field_of(["only-one-label"]): "5", field_of(["run_issue", "failed"]): "1"},
        RUN_DURATION.name: {
            field_of(["failed", "45"]): "2",  # a bound no longer defined: counted under 60
            field_of(["failed", "sum"]): "90.0",
        },
    }
    found = samples(render_prometheus(stored_families(stored)))
    assert [key for key in found if key[0] == "baton_jobs_total"] == [
        ("baton_jobs_total", (("job", "run_issue"), ("outcome", "failed")))
    ]
    failed = (("state", "failed"),)
    assert found[("baton_run_duration_seconds_bucket", (("le", "30"), *failed))] == 0
    assert found[("baton_run_duration_seconds_bucket", (("le", "60"), *failed))] == 2


def test_gauges_of_the_moment() -> None:
    families = current_gauges({"baton-events": 2, "baton-agents": 0}, 3, 1, 4)
    assert families[0] == Family(
        QUEUE_DEPTH, [Series(("baton-events",), 2), Series(("baton-agents",), 0)]
    )
    assert families[1] == Family(WORKERS, [Series((), 3)])
    found = samples(render_prometheus(families))
    assert found[("baton_live_runs", ())] == 1 and found[("baton_intake_backlog", ())] == 4


# What Baton measures -----------------------------------------------------------

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
ISSUE = IssueRef(installation_id=1, repo="octo/repo", number=7)


def run_through(*states: RunState) -> Run:
    run = Run.claimed(ISSUE, 1, "baton/issue-7", T0)
    for minutes, state in enumerate(states, start=1):
        run = run.moved(state, T0 + timedelta(minutes=minutes))
    return run


@pytest.mark.parametrize(
    ("before", "after", "settles"),
    [
        (None, RunState.CLAIMED, False),
        (RunState.RUNNING, RunState.PUSHED_PENDING, False),
        (RunState.PUSHED_PENDING, RunState.PUSHED_GREEN, True),
        (RunState.RUNNING, RunState.FAILED, True),
        (RunState.RUNNING, RunState.NO_CHANGE, True),
        (RunState.RUNNING, RunState.KILLED, True),
        (RunState.PUSHED_PENDING, RunState.CLOSED, True),
        (RunState.PUSHED_GREEN, RunState.MERGED, False),
        (RunState.PUSHED_GREEN, RunState.FAILED, False),
        (RunState.FAILED, RunState.HALTED, False),
        (RunState.FAILED, RunState.FAILED, False),  # a rewrite: classified, escalated
    ],
)
def test_a_run_settles_once_when_it_leaves_the_moving_states(
    before: RunState | None, after: RunState, settles: bool
) -> None:
    assert run_settled(before, run_through(after)) is settles


def test_a_settled_run_is_observed_from_its_claim_under_its_state() -> None:
    run = run_through(RunState.PROVISIONING, RunState.RUNNING, RunState.FAILED)
    stored = applied(run_duration(run).updates())[RUN_DURATION.name]
    assert stored[field_of(["failed", "sum"])] == "180.0"
    assert stored[field_of(["failed", "300"])] == "1"


def test_agent_usage_observes_only_what_the_agent_reported(tmp_path: Path) -> None:
    def result(**fields: Any) -> AgentResult:
        return AgentResult(
            agent="claude",
            status="success",
            stop_reason="completed",
            started_at=T0,
            ended_at=T0,
            transcript_path=tmp_path / "t",
            stderr_path=tmp_path / "e",
            **fields,
        )

    assert not agent_usage(result())
    stored = applied(agent_usage(result(turns=12, cost_usd=0.75)).updates())
    assert stored[AGENT_TURNS.name][field_of(["claude", "20"])] == "1"
    assert stored[AGENT_COST.name][field_of(["claude", "sum"])] == "0.75"
    only_turns = applied(agent_usage(result(turns=3)).updates())
    assert AGENT_COST.name not in only_turns


# In Redis ---------------------------------------------------------------------


def test_processes_add_up_in_redis(store: Store) -> None:
    for _ in range(3):  # three processes, each writing its own batch
        tally = Tally().count(ESCALATIONS, "checks-failed").count(HALTS)
        tally.observe(AGENT_COST, 0.5, "claude").set(GITHUB_RATE_LIMIT_REMAINING, 100, "7")
        assert store.add_metrics(tally)
    found = stored_samples(store)
    assert found[("baton_escalations_total", (("failure_class", "checks-failed"),))] == 3
    assert found[("baton_halts_total", ())] == 3
    assert found[("baton_agent_cost_usd_sum", (("agent", "claude"),))] == 1.5
    assert found[("baton_agent_cost_usd_count", (("agent", "claude"),))] == 3
    assert found[("baton_github_rate_limit_remaining", (("installation", "7"),))] == 100


def test_metrics_are_best_effort_when_redis_is_gone(caplog: pytest.LogCaptureFixture) -> None:
    gone = Store.from_url(f"redis://127.0.0.1:{free_port()}/0")
    assert not gone.add_metrics(Tally().count(HALTS))
    assert "metrics not recorded" in caplog.text
    assert gone.add_metrics(Tally())  # nothing to write: nothing to fail


def test_a_run_write_that_settles_the_run_observes_its_duration_once(store: Store) -> None:
    claim = store.claim(ISSUE)
    assert claim is not None
    run = run_through(RunState.PROVISIONING)
    store.save_run(run, claim)
    running = run.moved(RunState.RUNNING, T0 + timedelta(minutes=2))
    store.save_run(running, claim)
    store.save_run(running.moved(RunState.PUSHED_PENDING, T0 + timedelta(minutes=3)), claim)
    green = store.update_run(
        ISSUE, 1, lambda current: current.moved(RunState.PUSHED_GREEN, T0 + timedelta(minutes=4))
    )
    assert green is not None
    store.update_run(ISSUE, 1, lambda current: current.model_copy(update={"reason": "noted"}))
    store.update_run(
        ISSUE, 1, lambda current: current.moved(RunState.MERGED, T0 + timedelta(minutes=9))
    )
    found = samples(render_prometheus(stored_families(store.read_metrics([RUN_DURATION.name]))))
    durations = {key: value for key, value in found.items() if key[0].endswith(("_count", "_sum"))}
    assert durations == {
        ("baton_run_duration_seconds_count", (("state", "pushed-green"),)): 1,
        ("baton_run_duration_seconds_sum", (("state", "pushed-green"),)): 240,
    }


def test_live_runs_counts_the_runs_a_worker_is_on(store: Store) -> None:
    assert store.live_runs() == 0
    for number, state in ((1, RunState.RUNNING), (2, RunState.PUSHED_PENDING), (3, None)):
        issue = ISSUE.model_copy(update={"number": number})
        claim = store.claim(issue)
        assert claim is not None
        run = Run.claimed(issue, store.next_attempt(claim), "b", T0)
        store.save_run(run if state is None else run.moved(state, T0), claim)
    assert store.live_runs() == 2  # running and claimed; pushed-pending waits on checks


def test_a_job_counts_its_outcome_and_logs_in_its_context(
    monkeypatch: pytest.MonkeyPatch, redis_url: str, store: Store
) -> None:
    monkeypatch.setenv("REDIS_URL", redis_url)
    services.cache_clear()
    seen: list[dict[str, object]] = []

    @job
    def example(installation_id: int, repo: str, number: int) -> str:
        seen.append(dict(current_context()))
        if number == 2:
            raise RuntimeError("the job broke")
        return "done"

    try:
        assert example(1, "octo/repo", 1) == "done"
        with pytest.raises(RuntimeError, match="the job broke"):
            example(1, "octo/repo", number=2)
    finally:
        services.cache_clear()
    assert seen == [
        {"repo": "octo/repo", "issue": 1, "job": "example"},
        {"repo": "octo/repo", "issue": 2, "job": "example"},
    ]
    assert current_context() == {}
    assert store.read_metrics([JOBS.name])[JOBS.name] == {
        field_of(["example", "done"]): "1",
        field_of(["example", "failed"]): "1",
    }


async def test_an_app_session_counts_its_api_calls_once_it_ends(
    sandbox: dict[str, str], redis_url: str, store: Store
) -> None:
    env = {k: v for k, v in sandbox.items() if k != "SANDBOX_ADMIN_TOKEN"}
    async with github_app(Settings(**env, REDIS_URL=redis_url), store) as app:
        client = app.app_client()
        await client.getitem("/app")
        with pytest.raises(HTTPException):
            await client.getitem("/app/installations/999999")
        assert store.read_metrics([GITHUB_API_CALLS.name]) == {GITHUB_API_CALLS.name: {}}
    found = stored_samples(store)
    assert found[("baton_github_api_calls_total", (("method", "GET"), ("status", "2xx")))] == 1
    assert found[("baton_github_api_calls_total", (("method", "GET"), ("status", "4xx")))] == 1
    assert 0 < found[("baton_github_rate_limit_remaining", (("installation", "app"),))] < 15000


# GET /metrics --------------------------------------------------------------------


async def test_metrics_are_off_without_an_operator_token(
    aiohttp_client: Any, settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    client = await aiohttp_client(create_app(settings, store, dispatch, router))
    response = await client.get("/metrics", headers={"Authorization": "Bearer anything"})
    assert response.status == 404


async def test_metrics_need_the_operator_token(
    aiohttp_client: Any, operator_settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    client = await aiohttp_client(create_app(operator_settings, store, dispatch, router))
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": OPERATOR_TOKEN}):
        response = await client.get("/metrics", headers=headers)
        assert response.status == 401
        assert OPERATOR_TOKEN not in await response.text()


async def test_metrics_count_the_web_process_s_deliveries_by_event_and_outcome(
    aiohttp_client: Any, operator_settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    client: TestClient = await aiohttp_client(
        create_app(operator_settings, store, dispatch, router)
    )
    assert (await post(client, "issues", labeled()))[1]["outcome"] == "accepted"
    assert (await post(client, "issues", labeled("bug")))[1]["outcome"] == "ignored"
    assert (await post(client, "ping", {"zen": "hi"}))[1]["outcome"] == "ignored"
    forged = await post(client, "issues", labeled(), **{"X-Hub-Signature-256": "sha256=00"})
    assert forged == (401, {"outcome": "refused", "reason": "signature does not match"})
    response = await client.get("/metrics", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
    assert response.status == 200
    assert response.headers["Content-Type"] == CONTENT_TYPE
    found = samples(await response.text())
    deliveries = {
        labels: value for (name, labels), value in found.items() if name == WEBHOOK_DELIVERIES.name
    }
    assert deliveries == {
        (("event", "issues"), ("outcome", "accepted")): 1,
        (("event", "issues"), ("outcome", "ignored")): 1,
        (("event", "ping"), ("outcome", "ignored")): 1,
        (("event", "unknown"), ("outcome", "refused")): 1,
    }
    assert found[("baton_queue_depth", (("queue", "baton-agents"),))] == 0
    assert found[("baton_intake_backlog", ())] == 1  # no forwarder runs here
    assert found[("baton_workers", ())] == 0 and found[("baton_live_runs", ())] == 0


async def test_the_web_process_flushes_its_counts_to_redis_by_itself(
    aiohttp_client: Any, operator_settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    client: TestClient = await aiohttp_client(
        create_app(operator_settings, store, dispatch, router)
    )
    await post(client, "issues", labeled())
    await client.close()  # shutting down flushes what the last second counted
    stored = store.read_metrics([WEBHOOK_DELIVERIES.name])[WEBHOOK_DELIVERIES.name]
    assert stored == {field_of(["issues", "accepted"]): "1"}
