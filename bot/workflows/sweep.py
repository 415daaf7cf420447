"""The reconcile sweep: make Baton converge on whatever a crash or a lost webhook left behind.

The clock runs it every few minutes (and `baton sweep` on demand). Each pass,
under a lease so that two never overlap:

- a live run whose lock is gone (its worker died) is concluded as orphaned, and
  its recovery (a continuation that inherits the branch and PR, or an escalation)
  goes ahead as for any other ending (the clock's takeover check usually does this
  first, seconds after the claim lapses: the sweep is its backstop);
- a pushed run still waiting for its checks is settled by asking the API, in case
  the check webhook never came;
- a green PR awaiting review is looked at for what its lost webhooks said: a merge,
  a close, a review requesting changes, or its issue closed meanwhile; a draft of it
  Baton failed to mark ready for review is marked ready;
- halted issues whose window has reopened are resumed (a lost re-entry);
- an open issue carrying the queue label that nothing is working on, queued for or
  waiting for (a missed `labeled` webhook) is picked up, as the login that last
  added the label, which the job judges as it does a webhook's sender; its text as
  read then stands for the text the lost event carried;
- Baton's labels on issues in flight that drifted from their recorded state are
  corrected (an issue a maintainer took every Baton label off is left alone).

Every item is isolated: an issue deleted or transferred, a repository gone, an
installation suspended or removed ends Baton's work on what it concerns (logged
once) and the pass goes on with the rest, saying how many it skipped and why. The
sweep's reads are conditional, so an idle repository costs no rate limit, and an
installation whose hourly budget runs low is left to its runs until it refills.

What the sweep does about each item is decided in bot/domain/plans/sweep.py: this
module reads what a decision asks for, hands its effects to the executor and its
settlement to the workflow that settles it, and counts the item in its report.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import aiohttp
from gidgethub import HTTPException, RateLimitExceeded

from bot.domain.classify import RunFacts
from bot.domain.model import IssueRef, Labels, Run, RunState, utcnow
from bot.domain.plans import sweep as plans
from bot.domain.plans.sweep import (
    ConcludeOrphan,
    EndIssue,
    Failure,
    InFlight,
    InProgress,
    IssueSeen,
    Outcome,
    PerformRecovery,
    Queued,
    RateLimited,
    Read,
    Refusal,
    SettleIssueClosed,
    Settlement,
    SettlePull,
    SettleReview,
    Step,
    Unreachable,
)
from bot.domain.repo_config import CONFIG_PATH, InvalidRepoConfig, apply_repo_config
from bot.domain.resources import Repository
from bot.edges.api import (
    list_installation_repositories,
    list_installations,
    list_open_issues,
    list_reviews,
    load_repo_config,
    read_issue,
    read_pull,
)
from bot.edges.github import GitHubApp, GitHubClient, github_app
from bot.ops.metrics import SWEEP_FINDINGS, Tally
from bot.workflows.conclude import halted_plan, resume
from bot.workflows.execute import conclude, execute, recover_owed
from bot.workflows.labels import recorded_labels
from bot.workflows.services import Services
from bot.workflows.settle import (
    end_gone_issue,
    settle_issue_closed,
    settle_pull_closed,
    settle_review,
)

log = logging.getLogger(__name__)

LEASE_MS = 10 * 60 * 1000  # far above a pass; a sweeper that died frees it by then
WAIT_GRACE = timedelta(minutes=2)


@dataclass
class SweepReport:
    """What one pass found and did, and what it had to leave."""

    found: dict[Outcome, list[str]] = field(default_factory=dict)  # outcome -> which items
    skipped: Counter[str] = field(default_factory=Counter)  # why -> how many

    def record(self, outcome: Outcome, what: str) -> None:
        """Count an item under an outcome."""
        self.found.setdefault(outcome, []).append(what)

    def tally(self) -> Tally:
        """Return the pass's findings as /metrics counts them."""
        tally = Tally()
        for outcome, items in self.found.items():
            tally.count(SWEEP_FINDINGS, outcome.value, by=len(items))
        return tally

    def summary(self) -> str:
        """Return one line for the log."""
        parts = [
            f"{outcome} {', '.join(self.found[outcome])}"
            for outcome in Outcome
            if self.found.get(outcome)
        ]
        if self.skipped:
            why = ", ".join(f"{n} {reason}" for reason, n in sorted(self.skipped.items()))
            parts.append(f"skipped {self.skipped.total()} ({why})")
        return "; ".join(parts) or "nothing to do"


async def sweep(services: Services, now: datetime | None = None) -> SweepReport | None:
    """Run one pass; None when another sweep holds the lease (it is said in the log)."""
    store = services.store
    holder = f"{socket.gethostname()}-{os.getpid()}"
    if not store.take_sweep_lease(holder, LEASE_MS):
        log.info("sweep skipped: %s is sweeping now", store.sweep_lease_holder())
        return None
    try:
        report = SweepReport()
        async with github_app(services.settings, store) as app:
            for issue in store.in_flight():
                async with _isolated(services, report, str(issue), issue):
                    await _in_flight(services, app, issue, report)
            now = now or utcnow()
            for halt in halted_plan(store, now).due:
                if resume(services, halt):
                    report.record(Outcome.RESUMED, str(halt.issue))
            async with _isolated(services, report, "the App's installations"):
                await _queued_but_idle(services, app, report, now)
        store.mark("sweep", utcnow())
        store.add_metrics(report.tally())
        log.info("sweep: %s", report.summary())
        return report
    finally:
        store.release_sweep_lease(holder)


@asynccontextmanager
async def _isolated(
    services: Services, report: SweepReport, what: str, issue: IssueRef | None = None
) -> AsyncIterator[None]:
    """Keep one item's failure from stopping the pass; end the work on an issue that is gone."""
    try:
        yield
    except RateLimitExceeded as exc:
        _failed(services, report, what, RateLimited(reset_at=exc.rate_limit.reset_datetime), issue)
    except HTTPException as exc:
        refusal = Refusal(status=int(exc.status_code), message=str(exc))
        _failed(services, report, what, refusal, issue)
    except (aiohttp.ClientError, TimeoutError) as exc:
        _failed(services, report, what, Unreachable(error=type(exc).__name__), issue)


def _failed(
    services: Services, report: SweepReport, what: str, failure: Failure, issue: IssueRef | None
) -> None:
    """Count an item GitHub did not answer for; end the work on an issue that is gone."""
    step = plans.failed(failure, issue)
    if isinstance(step.settlement, EndIssue):
        end_gone_issue(services, step.settlement.issue, step.settlement.why)
    _record(services, report, what, step)


def _record(services: Services, report: SweepReport, what: str, step: Step) -> None:
    """Log and count an item as a step of the sweep's decision says."""
    if step.note is not None:
        log.info("sweep: %s", step.note)
    if step.outcome is not None:
        report.record(step.outcome, what)
    if step.skipped is not None:
        _skip(services, report, what, step.skipped)


def _skip(services: Services, report: SweepReport, what: str, why: str) -> None:
    report.skipped[why] += 1
    if services.store.first_notice(f"sweep-skip:{what}:{why}"):
        log.warning("sweep: skipped %s: %s", what, why)
    else:
        log.debug("sweep: skipped %s again: %s", what, why)


async def _take(
    services: Services, gh: GitHubClient, report: SweepReport, what: str, step: Step
) -> None:
    """Do what a step says, and count the item; a settlement that changed nothing is not."""
    await execute(services, gh, step.effects)
    if step.settlement is not None and not await _settle(services, gh, step.settlement):
        if step.otherwise is not None:
            await _take(services, gh, report, what, step.otherwise)
        return
    _record(services, report, what, step)


async def _settle(services: Services, gh: GitHubClient, settlement: Settlement) -> bool:
    """Settle what a lost event would have set off; False when that found nothing to change."""
    match settlement:
        case ConcludeOrphan(run=run):
            return await conclude_orphan(services, gh, run)
        case PerformRecovery(run=run):
            if not services.store.owed_replay_due(run.issue, run.attempt):
                return False  # replayed a moment ago and failed: the pause grows each time
            return await recover_owed(services, gh, run) is not None
        case SettlePull(issue=issue, pull=pull, merged=merged):
            await settle_pull_closed(services, issue.installation_id, issue.repo, pull, merged)
        case SettleReview(issue=issue, pull=pull):
            changed = await settle_review(
                services,
                issue.installation_id,
                issue.repo,
                pull,
                settlement.review_id,
                settlement.author,
                settlement.submitted_at,
            )
            return changed is not None
        case SettleIssueClosed(issue=issue):
            await settle_issue_closed(services, issue)
        case EndIssue(issue=issue, why=why):
            end_gone_issue(services, issue, why)
    return True


async def _in_flight(
    services: Services, app: GitHubApp, issue: IssueRef, report: SweepReport
) -> None:
    """Decide about an issue Baton has a run for, reading of it what the decision asks."""
    store = services.store
    run = store.latest_run(issue)
    if run is None:
        return
    gh = await app.for_installation(issue.installation_id)
    draft = run.pr_number is not None and store.draft_node(issue.repo, run.pr_number) is not None
    item = InFlight(run=run, locked=store.lock_holder(issue) is not None, draft=draft)
    while True:
        step = plans.in_flight(item)
        await _take(services, gh, report, str(issue), step)
        if step.read is None:
            return
        item = await _read(services, gh, item, step.read)


async def _read(services: Services, gh: GitHubClient, item: InFlight, what: Read) -> InFlight:
    """Return the issue in flight with what the decision asked for read."""
    issue, pull = item.run.issue, item.run.pr_number
    if what is Read.ISSUE:
        seen = IssueSeen(
            issue=await read_issue(gh, issue),
            labels=recorded_labels(services.store, services.settings, issue),
            desired=services.store.desired_label(issue),
        )
        return item.model_copy(update={"seen": seen})
    assert pull is not None  # asked for only where the run has a pull request
    if what is Read.PULL:
        return item.model_copy(update={"pull": await read_pull(gh, issue.repo, pull)})
    return item.model_copy(update={"reviews": tuple(await list_reviews(gh, issue.repo, pull))})


async def conclude_orphan(services: Services, gh: GitHubClient, run: Run) -> bool:
    """Conclude a live run whose worker died; False if someone concluded it first.

    The sweep finds such runs, and so, within seconds of a lapsed claim, does the
    clock's takeover check (jobs/takeover.py): both end them here, the same way, and
    perform the recovery of one whose worker died after ending it.
    """
    reason = "the worker running it stopped without finishing it"

    def orphan(current: Run) -> Run | None:
        if not current.state.is_live:
            return None
        return current.moved(RunState.FAILED, utcnow(), note="orphaned").model_copy(
            update={"reason": reason}
        )

    orphaned = services.store.update_run(run.issue, run.attempt, orphan)
    if orphaned is None:
        # Ended meanwhile; a worker that died in its recovery left that owed.
        return await recover_owed(services, gh, run) is not None
    log.warning("%s: attempt %d was orphaned: %s", run.issue, run.attempt, reason)
    # Work it pushed (its head, or a checkpoint) survives on the branch for a continuation.
    pushed = orphaned.head_sha or services.store.checkpoint(run.issue, run.attempt)
    facts = RunFacts(ending="orphaned", new_commits=1 if pushed else 0, detail=reason)
    await conclude(services, gh, orphaned, facts)
    return True


async def _queued_but_idle(
    services: Services, app: GitHubApp, report: SweepReport, now: datetime
) -> None:
    """Pick up open issues that carry the queue label while nothing works on or waits for them."""
    store = services.store
    # An issue waiting for a window or a run slot has a job due then; one long past its
    # time lost that job, and is picked up like any other. One with a run job queued,
    # scheduled or started (a backlog) is already on its way.
    if (backlog := store.intake_backlog()) > 0:
        # Deliveries not yet turned into jobs may be these very label events.
        log.info("sweep: %d accepted deliveries are still being forwarded: no pick-ups", backlog)
        return
    waiting = {issue for issue, until in store.waits() if until > now - WAIT_GRACE}
    waiting |= services.dispatch.pending_runs()
    async for installation in list_installations(app.app_client()):
        what = f"installation {installation.id}"
        budget = store.rate_limit(app.identity, installation.id)
        step = plans.installation(installation, budget, time.time())
        if step is not None:
            _record(services, report, what, step)
            continue
        async with _isolated(services, report, what):
            await _idle_in_installation(services, app, installation.id, waiting, report)


async def _idle_in_installation(
    services: Services,
    app: GitHubApp,
    installation_id: int,
    waiting: set[IssueRef],
    report: SweepReport,
) -> None:
    gh = await app.for_installation(installation_id)
    for repo in await list_installation_repositories(gh):
        async with _isolated(services, report, repo.full_name):
            await _idle_in_repo(services, gh, installation_id, repo, waiting, report)


async def _idle_in_repo(
    services: Services,
    gh: GitHubClient,
    installation_id: int,
    repo: Repository,
    waiting: set[IssueRef],
    report: SweepReport,
) -> None:
    """Look through a repository for issues that wait for Baton, or say Baton is on them."""
    store = services.store
    labels = await _repo_labels(gh, services, repo)
    async for found in list_open_issues(gh, repo.full_name, labels.queue):
        issue = IssueRef(installation_id=installation_id, repo=repo.full_name, number=found.number)
        item = Queued(
            issue=issue,
            found=found,
            label=labels.queue,
            waiting=issue in waiting,
            locked=store.lock_holder(issue) is not None,
            run=store.latest_run(issue),
            at=utcnow(),
        )
        await _take(services, gh, report, str(issue), plans.queued(services.settings, item))
    async for found in list_open_issues(gh, repo.full_name, labels.in_progress):
        issue = IssueRef(installation_id=installation_id, repo=repo.full_name, number=found.number)
        shown = InProgress(
            issue=issue,
            found=found,
            labels=store.label_set(issue) or labels,
            waiting=issue in waiting,
            locked=store.lock_holder(issue) is not None,
            chained=store.chain_of(issue) is not None,
            run=store.latest_run(issue),
            desired=store.desired_label(issue),
        )
        await _take(services, gh, report, str(issue), plans.in_progress(services.settings, shown))


async def _repo_labels(gh: GitHubClient, services: Services, repo: Repository) -> Labels:
    """Return the labels of the repository's issues: its file's, or the deployment's."""
    name, settings = repo.full_name, services.settings
    try:
        file = await load_repo_config(gh, services.store, name, repo.default_branch)
    except InvalidRepoConfig:
        # A run started by the deployment's label explains what is wrong with the file.
        return settings.labels
    except HTTPException as exc:
        # One unreadable file does not stop the pass: the queue label last read will do.
        log.warning("sweep: %s's %s not read (%s)", name, CONFIG_PATH, exc)
        queue = services.store.queue_labels().get(name, settings.queue_label)
        return settings.labels.model_copy(update={"queue": queue})
    return apply_repo_config(settings, file.config).labels
