"""Baton's metrics: what is measured, how it is tallied, and Prometheus's text format.

Baton runs as many processes on many machines, so counts add up in Redis
(`Store.add_metrics`), not in any one process. A process tallies in memory
(`Tally`) and writes a batch at a time; the web process renders what Redis
holds, with gauges read at scrape time, as text exposition format 0.0.4.
Every stored label value comes from a small fixed set: never a repository, an
issue or a delivery id. The spend gauges alone name repositories, read from the
ledger at scrape time: only those agents spent on in the rolling 30 days.
"""

from __future__ import annotations

import enum
import itertools
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, model_validator

from bot.domain.model import AgentResult, Run, RunState
from bot.domain.spend import AgentSpend, DaySpend, Ledger, in_window, total

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


class MetricType(enum.StrEnum):
    """The Prometheus metric types Baton uses."""

    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"


class Metric(BaseModel):
    """One metric family: its name, help text, type, label names and (histograms) buckets."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
    help: str = Field(min_length=1)
    type: MetricType
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = Field(
        default=(), description="histograms: finite upper bounds, ascending; +Inf is implied"
    )

    @model_validator(mode="after")
    def _well_formed(self) -> Metric:
        for label in self.labels:
            if not _LABEL_NAME.match(label) or label.startswith("__"):
                raise ValueError(f"{self.name}: {label!r} is not a valid label name")
        if len(set(self.labels)) != len(self.labels):
            raise ValueError(f"{self.name}: label names repeat: {self.labels}")
        if self.type is MetricType.HISTOGRAM:
            if "le" in self.labels:
                raise ValueError(f"{self.name}: a histogram cannot have a label named le")
            bounds = self.buckets
            if not bounds or not all(math.isfinite(b) for b in bounds):
                raise ValueError(f"{self.name}: a histogram needs finite bucket bounds")
            if any(low >= high for low, high in itertools.pairwise(bounds)):
                raise ValueError(f"{self.name}: bucket bounds must ascend: {bounds}")
        elif self.buckets:
            raise ValueError(f"{self.name}: only a histogram has buckets")
        return self


WEBHOOK_DELIVERIES = Metric(
    name="baton_webhook_deliveries_total",
    help="Webhook deliveries answered by the web process, by event and outcome "
    "(event is unknown until the signature is verified).",
    type=MetricType.COUNTER,
    labels=("event", "outcome"),
)
JOBS = Metric(
    name="baton_jobs_total",
    help="Jobs finished by the workers, by job and outcome (what the job returned, "
    "or failed when it raised).",
    type=MetricType.COUNTER,
    labels=("job", "outcome"),
)
RUN_DURATION = Metric(
    name="baton_run_duration_seconds",
    help="Time from a run's claim until it settled (pushed-green, or a terminal state), "
    "by the state it settled in.",
    type=MetricType.HISTOGRAM,
    labels=("state",),
    buckets=(30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400),
)
AGENT_TURNS = Metric(
    name="baton_agent_turns",
    help="Turns each agent process took, by agent (when the agent reports them).",
    type=MetricType.HISTOGRAM,
    labels=("agent",),
    buckets=(1, 5, 10, 20, 50, 100, 200, 500),
)
AGENT_COST = Metric(
    name="baton_agent_cost_usd",
    help="What each agent process cost in US dollars, by agent (when the agent reports it).",
    type=MetricType.HISTOGRAM,
    labels=("agent",),
    buckets=(0.01, 0.1, 0.5, 1, 2, 5, 10, 20, 50),
)
ESCALATIONS = Metric(
    name="baton_escalations_total",
    help="Issues handed to a maintainer, by the failure class of the run that escalated.",
    type=MetricType.COUNTER,
    labels=("failure_class",),
)
AUDIT_FLAGS = Metric(
    name="baton_audit_flags_total",
    help="What the settlement audit flagged in green pull requests' diffs, by kind "
    "(test-removed, skip-added, assertion-weakened, diff-unreadable, ...).",
    type=MetricType.COUNTER,
    labels=("kind",),
)
HALTS = Metric(
    name="baton_halts_total",
    help="Runs halted by a provider's usage window.",
    type=MetricType.COUNTER,
)
REDELIVERIES = Metric(
    name="baton_webhook_redeliveries_total",
    help="Failed webhook deliveries the clock found, by what came of them: asked (GitHub was "
    "asked to deliver the event again), refused (GitHub refused to), left (over a pass's "
    "bound, or GitHub did not answer the asking: for the next pass).",
    type=MetricType.COUNTER,
    labels=("outcome",),
)
SWEEP_FINDINGS = Metric(
    name="baton_sweep_findings_total",
    help="What reconcile sweep passes found and set right, by outcome: orphaned, settled, "
    "recovered (a recovery cut short, performed), stuck (an issue shown in progress with "
    "nothing working on it), relabelled, picked_up, ...",
    type=MetricType.COUNTER,
    labels=("outcome",),
)
GITHUB_API_CALLS = Metric(
    name="baton_github_api_calls_total",
    help="Requests to GitHub's REST API, by method and status class (2xx, 4xx, 5xx; "
    "error when no response came).",
    type=MetricType.COUNTER,
    labels=("method", "status"),
)
GITHUB_RATE_LIMIT_REMAINING = Metric(
    name="baton_github_rate_limit_remaining",
    help="The x-ratelimit-remaining GitHub last sent an installation (or the App, `app`).",
    type=MetricType.GAUGE,
    labels=("installation",),
)
QUEUE_DEPTH = Metric(
    name="baton_queue_depth",
    help="Jobs waiting on each queue.",
    type=MetricType.GAUGE,
    labels=("queue",),
)
WORKERS = Metric(name="baton_workers", help="Workers registered with RQ.", type=MetricType.GAUGE)
LIVE_RUNS = Metric(
    name="baton_live_runs",
    help="Runs a worker is on now (claimed, provisioning or running).",
    type=MetricType.GAUGE,
)
INTAKE_BACKLOG = Metric(
    name="baton_intake_backlog",
    help="Accepted deliveries not yet turned into jobs.",
    type=MetricType.GAUGE,
)
AGENT_SPEND = Metric(
    name="baton_agent_spend_usd",
    help="What agents spent across the deployment in US dollars, from the spend ledger, by "
    "window: today (UTC) or 30d (the rolling 30 days the monthly budgets are judged over).",
    type=MetricType.GAUGE,
    labels=("window",),
)
AGENT_SPEND_TURNS = Metric(
    name="baton_agent_spend_turns",
    help="Turns agents took across the deployment, from the spend ledger, by window "
    "(today or 30d).",
    type=MetricType.GAUGE,
    labels=("window",),
)
REPO_SPEND = Metric(
    name="baton_repo_agent_spend_usd",
    help="What agents spent on each repository in US dollars, by window (today or 30d); "
    "only repositories with spend in the rolling 30 days appear.",
    type=MetricType.GAUGE,
    labels=("repo", "window"),
)
REPO_SPEND_TURNS = Metric(
    name="baton_repo_agent_spend_turns",
    help="Turns agents took on each repository, by window (today or 30d); only repositories "
    "with spend in the rolling 30 days appear.",
    type=MetricType.GAUGE,
    labels=("repo", "window"),
)
MONTHLY_BUDGET = Metric(
    name="baton_monthly_budget_usd",
    help="The deployment's budget over the rolling 30 days (BATON_MONTHLY_BUDGET_USD), when set.",
    type=MetricType.GAUGE,
)

STORED = (
    WEBHOOK_DELIVERIES,
    JOBS,
    RUN_DURATION,
    AGENT_TURNS,
    AGENT_COST,
    ESCALATIONS,
    AUDIT_FLAGS,
    HALTS,
    REDELIVERIES,
    SWEEP_FINDINGS,
    GITHUB_API_CALLS,
    GITHUB_RATE_LIMIT_REMAINING,
)
"""The metrics kept in Redis; the gauges after them are read when Prometheus scrapes."""

_SETTLED = frozenset({RunState.PUSHED_GREEN}) | frozenset(s for s in RunState if s.is_terminal)


# Tallying ------------------------------------------------------------------


@dataclass(frozen=True)
class MetricUpdate:
    """One change to one stored field: add to it, or (a gauge) set it."""

    metric: str
    field: str
    value: float
    how: Literal["add", "add_float", "set"]


def field_of(values: Sequence[str], part: str | None = None) -> str:
    """Return the Redis hash field of one series (and, for a histogram, one of its parts)."""
    return orjson.dumps([*values, part] if part is not None else list(values)).decode()


def _number(value: float) -> str:
    """Format a number the way Prometheus's Go client does: 1, 0.5, +Inf."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(float(value))


class Tally:
    """Counts, observations and gauge readings made in memory, to be stored in one batch.

    Counting is a dict update, cheap enough for the web process's acknowledgement path.
    """

    def __init__(self) -> None:
        # Keyed by metric name: a str hashes once, a model on every call.
        self._counts: dict[tuple[str, tuple[str, ...]], int] = {}
        self._observations: dict[tuple[str, tuple[str, ...]], list[float]] = {}
        self._gauges: dict[tuple[str, tuple[str, ...]], float] = {}
        self._histograms: dict[str, Metric] = {}

    def __bool__(self) -> bool:
        return bool(self._counts or self._observations or self._gauges)

    def count(self, metric: Metric, *values: str, by: int = 1) -> Tally:
        """Add by to a counter's series; return the tally."""
        key = (metric.name, _checked(metric, MetricType.COUNTER, values))
        self._counts[key] = self._counts.get(key, 0) + by
        return self

    def observe(self, metric: Metric, value: float, *values: str) -> Tally:
        """Record one observation in a histogram's series; return the tally."""
        key = (metric.name, _checked(metric, MetricType.HISTOGRAM, values))
        if math.isnan(value):
            raise ValueError(f"{metric.name}: NaN is not an observation")
        self._histograms[metric.name] = metric
        self._observations.setdefault(key, []).append(value)
        return self

    def set(self, metric: Metric, value: float, *values: str) -> Tally:
        """Set a gauge's series to value (the last reading wins); return the tally."""
        self._gauges[(metric.name, _checked(metric, MetricType.GAUGE, values))] = value
        return self

    def take(self) -> Tally:
        """Return a tally of everything counted so far, leaving this one empty."""
        taken = Tally()
        taken._counts, self._counts = self._counts, {}
        taken._observations, self._observations = self._observations, {}
        taken._gauges, self._gauges = self._gauges, {}
        taken._histograms = dict(self._histograms)
        return taken

    def merge(self, other: Tally) -> None:
        """Add another tally's counts and observations to this one.

        A gauge reading this tally has is the newer one (the other was taken
        before it) and stays.
        """
        for key, count in other._counts.items():
            self._counts[key] = self._counts.get(key, 0) + count
        for key, observed in other._observations.items():
            self._observations.setdefault(key, []).extend(observed)
        self._histograms.update(other._histograms)
        for key, value in other._gauges.items():
            self._gauges.setdefault(key, value)

    def updates(self) -> list[MetricUpdate]:
        """Return the changes to the stored fields that this tally makes."""
        found = [
            MetricUpdate(name, field_of(values), count, "add")
            for (name, values), count in self._counts.items()
        ]
        for (name, values), observed in self._observations.items():
            bounds = [*self._histograms[name].buckets, math.inf]
            in_bucket: dict[float, int] = {}
            for value in observed:
                bound = next(b for b in bounds if value <= b)
                in_bucket[bound] = in_bucket.get(bound, 0) + 1
            found += [
                MetricUpdate(name, field_of(values, _number(bound)), n, "add")
                for bound, n in in_bucket.items()
            ]
            found.append(MetricUpdate(name, field_of(values, "sum"), sum(observed), "add_float"))
        found += [
            MetricUpdate(name, field_of(values), value, "set")
            for (name, values), value in self._gauges.items()
        ]
        return found


def _checked(metric: Metric, kind: MetricType, values: tuple[str, ...]) -> tuple[str, ...]:
    if metric.type is not kind:
        raise ValueError(f"{metric.name} is a {metric.type.value}, not a {kind.value}")
    if len(values) != len(metric.labels):
        raise ValueError(
            f"{metric.name} takes {len(metric.labels)} label value(s) "
            f"({', '.join(metric.labels) or 'none'}), got {len(values)}"
        )
    return values


def run_settled(before: RunState | None, run: Run) -> bool:
    """Return whether a write that moves a run from before to run.state settles it.

    A run settles when it leaves the states a worker or its checks still move
    (claimed, provisioning, running, pushed-pending) for pushed-green or a
    terminal state; moving on from there (green to merged) is not a second settling.
    """
    return run.state in _SETTLED and before not in _SETTLED


def run_duration(run: Run) -> Tally:
    """Return the observation of a settled run's duration, from its claim."""
    seconds = (run.history[-1].at - run.started_at).total_seconds()
    return Tally().observe(RUN_DURATION, seconds, run.state.value)


def agent_usage(result: AgentResult) -> Tally:
    """Return the turns and cost an agent process reported, as observations."""
    tally = Tally()
    if result.turns is not None:
        tally.observe(AGENT_TURNS, result.turns, result.agent)
    if result.cost_usd is not None:
        tally.observe(AGENT_COST, result.cost_usd, result.agent)
    return tally


# Rendering -------------------------------------------------------------------


@dataclass(frozen=True)
class Series:
    """One counter or gauge series: its label values (in the metric's order) and value."""

    values: tuple[str, ...]
    value: float


@dataclass(frozen=True)
class HistogramSeries:
    """One histogram series: observations per bucket (not cumulative; +Inf last) and sum."""

    values: tuple[str, ...]
    counts: tuple[int, ...]
    sum: float


@dataclass(frozen=True)
class Family:
    """A metric and its series, ready to render."""

    metric: Metric
    series: Sequence[Series | HistogramSeries]


def stored_families(stored: Mapping[str, Mapping[str, str]]) -> list[Family]:
    """Turn the hashes Redis holds (metric name to fields) into families, in STORED order.

    A counter or histogram without labels starts at zero; a gauge without a
    reading is left out (0 would be a reading). Fields of another shape (a
    metric whose labels changed since) are skipped.
    """
    families = []
    for metric in STORED:
        fields = stored.get(metric.name, {})
        if metric.type is MetricType.HISTOGRAM:
            series: Sequence[Series | HistogramSeries] = _histograms(metric, fields)
        else:
            series = [
                Series(tuple(values), float(value))
                for values, value in _decoded(fields, len(metric.labels))
            ]
            if not series and not metric.labels and metric.type is MetricType.COUNTER:
                series = [Series((), 0.0)]
        families.append(Family(metric, series))
    return families


def _decoded(fields: Mapping[str, str], width: int) -> Iterable[tuple[list[str], str]]:
    for field, value in fields.items():
        values = orjson.loads(field)
        if isinstance(values, list) and len(values) == width:
            yield [str(v) for v in values], value


def _histograms(metric: Metric, fields: Mapping[str, str]) -> list[HistogramSeries]:
    bounds = [*metric.buckets, math.inf]
    by_series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}
    if not metric.labels:
        by_series[()] = ([0] * len(bounds), [0.0])
    for values, value in _decoded(fields, len(metric.labels) + 1):
        counts, total = by_series.setdefault(tuple(values[:-1]), ([0] * len(bounds), [0.0]))
        part = values[-1]
        if part == "sum":
            total[0] = float(value)
        else:
            # A bound no longer defined counts in the next one up: still at most that bound.
            index = next(i for i, b in enumerate(bounds) if float(part) <= b)
            counts[index] += int(value)
    return [
        HistogramSeries(values, tuple(counts), total[0])
        for values, (counts, total) in by_series.items()
    ]


def current_gauges(
    queue_depths: Mapping[str, int], workers: int, live_runs: int, intake_backlog: int
) -> list[Family]:
    """Return the gauges read at scrape time as families."""
    return [
        Family(QUEUE_DEPTH, [Series((queue,), depth) for queue, depth in queue_depths.items()]),
        Family(WORKERS, [Series((), workers)]),
        Family(LIVE_RUNS, [Series((), live_runs)]),
        Family(INTAKE_BACKLOG, [Series((), intake_backlog)]),
    ]


def spend_gauges(ledger: Ledger, budget_usd: float | None, now: datetime) -> list[Family]:
    """Return spend today and over the rolling 30 days, the deployment's and each repository's,
    and the deployment's budget.

    A repository is a label here, unlike in the stored metrics: the ledger holds only the
    repositories agents spent on in the window, so the series are as few as the work.
    """
    today = now.astimezone(UTC).date()

    def windows(days: Sequence[DaySpend]) -> dict[str, AgentSpend]:
        return {
            "today": total(day for day in days if day.day == today),
            "30d": total(in_window(days, now)),
        }

    def family(
        metric: Metric,
        spends: Mapping[tuple[str, ...], dict[str, AgentSpend]],
        measure: Callable[[AgentSpend], float],
    ) -> Family:
        return Family(
            metric,
            [
                Series((*labels, window), measure(spent))
                for labels, in_windows in spends.items()
                for window, spent in in_windows.items()
            ],
        )

    Spends = dict[tuple[str, ...], dict[str, AgentSpend]]  # labels before the window's
    deployment: Spends = {(): windows(ledger.deployment)}
    repos: Spends = {(repo,): windows(days) for repo, days in ledger.repositories.items()}
    budget = [Series((), budget_usd)] if budget_usd is not None else []
    return [
        family(AGENT_SPEND, deployment, lambda spent: spent.cost_usd),
        family(AGENT_SPEND_TURNS, deployment, lambda spent: spent.turns),
        family(REPO_SPEND, repos, lambda spent: spent.cost_usd),
        family(REPO_SPEND_TURNS, repos, lambda spent: spent.turns),
        Family(MONTHLY_BUDGET, budget),
    ]


def render_prometheus(families: Sequence[Family]) -> str:
    """Render families in Prometheus text exposition format 0.0.4.

    Each family gets its HELP and TYPE lines, then its series sorted by label
    values; a histogram's buckets are cumulative, with _sum and _count after them.
    """
    lines: list[str] = []
    for family in families:
        metric = family.metric
        lines.append(f"# HELP {metric.name} {_escape_help(metric.help)}")
        lines.append(f"# TYPE {metric.name} {metric.type.value}")
        for series in sorted(family.series, key=lambda s: s.values):
            if len(series.values) != len(metric.labels):
                raise ValueError(
                    f"{metric.name}: series {series.values} does not give one value for "
                    f"each label ({', '.join(metric.labels) or 'none'})"
                )
            labels = list(zip(metric.labels, series.values, strict=True))
            if isinstance(series, HistogramSeries):
                lines += _histogram_lines(metric, labels, series)
            elif metric.type is MetricType.HISTOGRAM:
                raise ValueError(f"{metric.name}: a histogram's series must be HistogramSeries")
            else:
                lines.append(f"{metric.name}{_labels(labels)} {_number(series.value)}")
    return "".join(f"{line}\n" for line in lines)


def _histogram_lines(
    metric: Metric, labels: list[tuple[str, str]], series: HistogramSeries
) -> list[str]:
    if metric.type is not MetricType.HISTOGRAM:
        raise ValueError(f"{metric.name} is a {metric.type.value}, not a histogram")
    bounds = [*metric.buckets, math.inf]
    if len(series.counts) != len(bounds):
        raise ValueError(
            f"{metric.name}: {len(series.counts)} bucket counts for {len(bounds)} buckets"
        )
    lines = []
    cumulative = 0
    for bound, count in zip(bounds, series.counts, strict=True):
        cumulative += count
        bucket_labels = _labels([*labels, ("le", _number(bound))])
        lines.append(f"{metric.name}_bucket{bucket_labels} {cumulative}")
    lines.append(f"{metric.name}_sum{_labels(labels)} {_number(series.sum)}")
    lines.append(f"{metric.name}_count{_labels(labels)} {cumulative}")
    return lines


def _labels(labels: Sequence[tuple[str, str]]) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{name}="{_escape_value(value)}"' for name, value in labels) + "}"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _escape_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
