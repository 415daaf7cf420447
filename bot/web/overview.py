"""What Baton is doing, read from Redis in one pass: the data behind `baton status` and /status."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field
from rq import Worker

from bot.domain.chains import LinkStatus, link_status, next_step, successors
from bot.domain.model import Chain, Run, RunState
from bot.domain.pacing import RateBudget, sweep_may_spend
from bot.domain.plans.redelivery import RedeliveryPass
from bot.domain.spend import (
    AgentSpend,
    BudgetState,
    DaySpend,
    Ledger,
    budget_state,
    in_window,
    shown_days,
    total,
)
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from bot.ops.settings import Settings

SANDBOX_OFF_WARNING = (
    "Agents run without a sandbox (BATON_AGENT_SANDBOX=off): each agent reaches the "
    "worker's files, environment, network and loopback services such as Redis."
)


class IssueSummary(BaseModel):
    """One issue of one repository, as the status views name it."""

    model_config = ConfigDict(frozen=True)

    repo: str
    number: int

    @property
    def issue(self) -> str:
        """Return the issue as `owner/repo#N`."""
        return f"{self.repo}#{self.number}"


class RunSummary(IssueSummary):
    """One attempt at one issue, as the status views show it."""

    attempt: int
    title: str | None = None
    state: RunState
    started_at: datetime
    changed_at: datetime = Field(description="when the run reached its current state")
    pr_number: int | None = None
    pr_url: str | None = None
    failure_class: str | None = None
    reason: str | None = None
    cost_usd: float | None = None
    escalated: bool = False
    refused_hosts: list[str] = Field(
        default_factory=list, description="host:port the agent's sandbox refused to reach"
    )

    @classmethod
    def of(cls, run: Run) -> RunSummary:
        """Return the summary of a recorded run."""
        return cls(
            repo=run.issue.repo,
            number=run.issue.number,
            attempt=run.attempt,
            title=run.title,
            state=run.state,
            started_at=run.started_at,
            changed_at=run.history[-1].at,
            pr_number=run.pr_number,
            pr_url=run.pr_url,
            failure_class=run.failure_class,
            reason=run.reason,
            cost_usd=run.agent_result.cost_usd if run.agent_result is not None else None,
            escalated=run.escalated,
            refused_hosts=run.agent_result.refused_hosts if run.agent_result is not None else [],
        )

    @property
    def live(self) -> bool:
        """Return whether a worker is working on the run now."""
        return self.state.is_live

    def took(self, now: datetime) -> timedelta:
        """Return the time from claim to its current state (to now, while live)."""
        return (now if self.live else self.changed_at) - self.started_at


class RepoSummary(BaseModel):
    """One repository Baton has runs on (or has paused)."""

    model_config = ConfigDict(frozen=True)

    repo: str
    live: int = Field(description="runs a worker is working on now")
    paused_since: datetime | None = None
    held_starts: int = Field(default=0, description="starts the pause holds")
    settled_while_paused: int = 0


class TimedIssue(IssueSummary):
    """An issue that waits until an instant: halted by a usage window, or waiting to start."""

    until: datetime


class HeldIssue(IssueSummary):
    """An issue whose start is held."""

    held_by: int | None = Field(
        default=None, description="the stopped chain link holding it; None: the repository's pause"
    )


class LinkSummary(BaseModel):
    """One link of a chain and where it stands."""

    model_config = ConfigDict(frozen=True)

    number: int
    status: LinkStatus


class ChainSummary(BaseModel):
    """One chain with each link's state."""

    model_config = ConfigDict(frozen=True)

    chain_id: str
    links: list[LinkSummary]
    held_by: int | None = Field(default=None, description="the stopped link holding the chain")


class InstallationBudget(BaseModel):
    """One installation's hourly GitHub request budget, as its last answer reported it."""

    model_config = ConfigDict(frozen=True)

    installation_id: int
    limit: int
    remaining: int
    resets_at: datetime
    sweeps_paused: bool = Field(description="the sweep leaves it to its runs until it refills")

    @classmethod
    def of(cls, installation_id: int, budget: RateBudget, now: datetime) -> InstallationBudget:
        """Return the view of a recorded budget at now."""
        return cls(
            installation_id=installation_id,
            limit=budget.limit,
            remaining=budget.left_at(now.timestamp()),
            resets_at=datetime.fromtimestamp(budget.reset_at, UTC),
            sweeps_paused=not sweep_may_spend(budget, now.timestamp()),
        )


class SpendRow(BaseModel):
    """The agent spend of the deployment, or of one repository, and the budget it has."""

    model_config = ConfigDict(frozen=True)

    repo: str | None = Field(description="None: the whole deployment")
    days: tuple[DaySpend, ...] = Field(description="the days shown one by one, today first")
    window: AgentSpend = Field(description="over the rolling 30 days")
    budget: BudgetState | None = None

    @classmethod
    def of(
        cls, repo: str | None, days: tuple[DaySpend, ...], budget_usd: float | None, now: datetime
    ) -> SpendRow:
        """Return the row of the days' spend, judged against budget_usd, at now."""
        return cls(
            repo=repo,
            days=shown_days(days, now),
            window=total(in_window(days, now)),
            budget=None if budget_usd is None else budget_state(budget_usd, days, now),
        )


class SpendView(BaseModel):
    """What agents spent, per day and over the rolling 30 days, and the monthly budgets."""

    model_config = ConfigDict(frozen=True)

    deployment: SpendRow
    repos: list[SpendRow] = Field(
        default_factory=list, description="by name: each with spend in the window or a budget"
    )

    @classmethod
    def of(cls, ledger: Ledger, budget_usd: float | None, now: datetime) -> SpendView:
        """Return the view of the ledger at now, with the deployment's budget."""
        names = sorted({*ledger.repositories, *ledger.budgets})
        return cls(
            deployment=SpendRow.of(None, ledger.deployment, budget_usd, now),
            repos=[
                SpendRow.of(repo, ledger.repositories.get(repo, ()), ledger.budgets.get(repo), now)
                for repo in names
            ],
        )


class Overview(BaseModel):
    """A snapshot of what Baton is doing, plain data for the status views."""

    model_config = ConfigDict(frozen=True)

    taken_at: datetime = Field(description="when the snapshot was read")
    queues: dict[str, int] = Field(description="jobs waiting on each queue")
    workers: int
    marks: dict[str, datetime] = Field(description="when each thing (sweep, dispatch) last ran")
    repos: list[RepoSummary] = Field(default_factory=list, description="by name")
    runs: list[RunSummary] = Field(
        default_factory=list, description="every live run and the most recent others, newest first"
    )
    halted: list[TimedIssue] = Field(default_factory=list, description="soonest first")
    waiting: list[TimedIssue] = Field(default_factory=list, description="soonest first")
    held: list[HeldIssue] = Field(default_factory=list)
    chains: list[ChainSummary] = Field(default_factory=list)
    budgets: list[InstallationBudget] = Field(default_factory=list, description="by installation")
    warnings: list[str] = Field(
        default_factory=list, description="risks the deployment runs at, shown first"
    )
    spend: SpendView | None = Field(
        default=None, description="agent spend and the monthly budgets, where read"
    )
    redelivery: RedeliveryPass | None = Field(
        default=None, description="what the last pass for lost webhook deliveries found and did"
    )

    @property
    def live_runs(self) -> list[RunSummary]:
        """Return the runs a worker is working on now."""
        return [run for run in self.runs if run.live]

    @property
    def completions(self) -> list[RunSummary]:
        """Return the runs that pushed their work or came to an end, newest first."""
        return [run for run in self.runs if not run.live]

    @property
    def escalated(self) -> list[RunSummary]:
        """Return each issue's latest run when Baton handed the issue to a human after it."""
        latest: dict[str, RunSummary] = {}
        for run in self.runs:
            if run.issue not in latest or run.attempt > latest[run.issue].attempt:
                latest[run.issue] = run
        return [run for run in latest.values() if run.escalated]


def _chain_view(store: Store, chain: Chain) -> tuple[ChainSummary, list[HeldIssue]]:
    """Return the chain's summary and the links its stopped link holds (from Redis alone)."""
    # Whether an issue is still open is GitHub's to say; a status view reads Redis only.
    statuses = {
        number: link_status(store.latest_run(chain.issue(number)), issue_open=True)
        for number in chain.links
    }
    step = next_step(chain.links, statuses)
    held_by = step.held_by if step.action == "held" else None
    held = []
    if held_by is not None:
        held = [
            HeldIssue(repo=chain.repo, number=number, held_by=held_by)
            for number in successors(chain.links, held_by)
            if statuses[number] is LinkStatus.NOT_STARTED
        ]
    summary = ChainSummary(
        chain_id=chain.chain_id,
        links=[LinkSummary(number=n, status=statuses[n]) for n in chain.links],
        held_by=held_by,
    )
    return summary, held


def deployment_warnings(settings: Settings) -> list[str]:
    """Return the risks a deployment with these settings runs at (pure: the process's own)."""
    warnings = []
    if settings.agent_sandbox == "off":
        warnings.append(SANDBOX_OFF_WARNING)
    return warnings


def uncontained_warning(workers: Sequence[str]) -> list[str]:
    """Return the warning naming the workers that report running agents uncontained."""
    if not workers:
        return []
    return [f"{SANDBOX_OFF_WARNING} Workers reporting it: {', '.join(workers)}."]


def gather_overview(
    store: Store,
    dispatch: Dispatcher,
    now: datetime,
    limit: int,
    warnings: Sequence[str] = (),
    app_identity: str | None = None,
    monthly_budget_usd: float | None = None,
) -> Overview:
    """Read the overview from Redis at now: every live run and the `limit` most recent runs.

    warnings are the reading process's own (`deployment_warnings`), shown above
    everything with those the workers report, wherever they run; app_identity names
    the App whose installations' request budgets are shown; monthly_budget_usd is the
    deployment's budget, shown against its spend.
    """
    recorded = store.recent_runs(limit)
    for issue in store.in_flight():
        run = store.latest_run(issue)
        if run is not None and run.state.is_live:
            recorded.append(run)
    unique = {run.run_id: RunSummary.of(run) for run in recorded}
    runs = sorted(unique.values(), key=lambda run: run.started_at, reverse=True)
    pauses = {repo: (since, held, settled) for repo, since, held, settled in store.pauses()}
    repos = []
    for repo in sorted({run.repo for run in runs} | set(pauses)):
        since, held_starts, settled = pauses.get(repo, (None, 0, 0))
        repos.append(
            RepoSummary(
                repo=repo,
                live=sum(1 for run in runs if run.repo == repo and run.live),
                paused_since=since,
                held_starts=held_starts,
                settled_while_paused=settled,
            )
        )
    held = [HeldIssue(repo=repo, number=n) for repo in pauses for n in store.held_issues(repo)]
    chains = []
    for chain in sorted(store.chains(), key=lambda chain: chain.chain_id):
        summary, held_links = _chain_view(store, chain)
        chains.append(summary)
        held += held_links
    return Overview(
        taken_at=now,
        queues=dispatch.depths(),
        workers=Worker.count(connection=dispatch.connection),
        marks={what: datetime.fromisoformat(at) for what, at in store.marks().items()},
        redelivery=store.last_redelivery_pass(),
        repos=repos,
        runs=runs,
        halted=[TimedIssue(repo=i.repo, number=i.number, until=at) for i, at in store.halts()],
        waiting=[TimedIssue(repo=i.repo, number=i.number, until=at) for i, at in store.waits()],
        held=held,
        chains=chains,
        budgets=[
            InstallationBudget.of(installation_id, budget, now)
            for installation_id, budget in (
                store.rate_limits(app_identity) if app_identity else {}
            ).items()
        ],
        warnings=[*warnings, *uncontained_warning(store.uncontained_workers())],
        spend=SpendView.of(store.spend_ledger(now), monthly_budget_usd, now),
    )
