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
  a close, a review requesting changes, or its issue closed meanwhile;
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
from typing import Any

import aiohttp
from gidgethub import HTTPException, RateLimitExceeded

from bot.domain.chains import names_a_chain
from bot.domain.classify import RunFacts
from bot.domain.gone import disappearance, moved_elsewhere
from bot.domain.issue_text import snapshot
from bot.domain.jobs import queue_chain_job, run_issue_job
from bot.domain.model import IssueRef, Run, RunState, utcnow
from bot.domain.pacing import sweep_may_spend
from bot.domain.repo_config import CONFIG_PATH, InvalidRepoConfig
from bot.edges.api import label_names, load_repo_config, read_issue, read_pull
from bot.edges.github import GitHubApp, GitHubClient, github_app
from bot.workflows.conclude import conclude, halted_plan, resume
from bot.workflows.labels import recorded_labels, sync_labels
from bot.workflows.services import Services
from bot.workflows.settle import (
    end_gone_issue,
    settle_issue_closed,
    settle_pull_closed,
    settle_review,
)

log = logging.getLogger(__name__)

LEASE_MS = 10 * 60 * 1000  # far above a pass; a sweeper that died frees it by then
SWEEP_KEY = "sweep"
WAIT_GRACE = timedelta(minutes=2)


@dataclass
class SweepReport:
    """What one pass found and did, and what it had to leave."""

    orphaned: list[str] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    picked_up: list[str] = field(default_factory=list)
    relabelled: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    paused: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)  # why -> how many

    def summary(self) -> str:
        """Return one line for the log."""
        parts = [
            f"{name} {', '.join(items)}"
            for name, items in vars(self).items()
            if items and isinstance(items, list)
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
                    report.resumed.append(str(halt.issue))
            async with _isolated(services, report, "the App's installations"):
                await _queued_but_idle(services, app, report, now)
        store.mark("sweep", utcnow())
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
        _skip(
            services,
            report,
            what,
            f"the rate limit is spent until {exc.rate_limit.reset_datetime:%H:%M} UTC",
        )
    except HTTPException as exc:
        gone = disappearance(int(exc.status_code), str(exc))
        if gone is not None and issue is not None and gone.of_issue:
            end_gone_issue(services, issue, gone.why)
            report.ended.append(str(issue))
            return
        why = gone.why if gone is not None else f"GitHub answered {exc.status_code}"
        _skip(services, report, what, why)
    except (aiohttp.ClientError, TimeoutError) as exc:
        _skip(services, report, what, f"GitHub could not be reached ({type(exc).__name__})")


def _skip(services: Services, report: SweepReport, what: str, why: str) -> None:
    report.skipped[why] += 1
    if services.store.first_notice(f"sweep-skip:{what}:{why}"):
        log.warning("sweep: skipped %s: %s", what, why)
    else:
        log.debug("sweep: skipped %s again: %s", what, why)


async def _in_flight(
    services: Services, app: GitHubApp, issue: IssueRef, report: SweepReport
) -> None:
    store, dispatch = services.store, services.dispatch
    run = store.latest_run(issue)
    if run is None:
        return
    gh = await app.for_installation(issue.installation_id)
    if run.state.is_live and store.lock_holder(issue) is None:
        if await conclude_orphan(services, gh, run):
            report.orphaned.append(str(issue))
        return
    if run.state is RunState.PUSHED_PENDING and run.head_sha is not None:
        dispatch.settle_head(issue.installation_id, issue.repo, run.head_sha)
        report.settled.append(str(issue))
    data = await read_issue(gh, issue)
    if (where := moved_elsewhere(issue, data)) is not None:
        end_gone_issue(services, issue, f"moved to {where}")
        report.ended.append(str(issue))
        return
    # A merge closes its issue too: what happened to the PR is asked first.
    if run.state is RunState.PUSHED_GREEN and await _missed_on_pull(services, gh, run):
        report.settled.append(str(issue))
        return
    if data.get("state") == "closed":
        await settle_issue_closed(services, issue)  # its closing webhook was lost
        report.settled.append(str(issue))
        return
    if await _relabel(services, gh, issue, label_names(data)):
        report.relabelled.append(str(issue))


async def _missed_on_pull(services: Services, gh: GitHubClient, run: Run) -> bool:
    """Settle what a green PR's lost webhooks said: merged, closed, or changes requested."""
    issue = run.issue
    if run.pr_number is None:
        return False
    pull = await read_pull(gh, issue.repo, run.pr_number)
    if pull.get("state") == "closed":
        merged = bool(pull.get("merged"))
        await settle_pull_closed(services, issue.installation_id, issue.repo, run.pr_number, merged)
        return True
    reviews = [
        review
        async for review in gh.getiter(
            "/repos/{+repo}/pulls/{number}/reviews",
            {"repo": issue.repo, "number": run.pr_number},
        )
        if review.get("state") == "CHANGES_REQUESTED" and review.get("commit_id") == run.head_sha
    ]
    if not reviews:
        return False
    latest = reviews[-1]
    changed = await settle_review(
        services,
        issue.installation_id,
        issue.repo,
        run.pr_number,
        int(latest["id"]),
        str((latest.get("user") or {}).get("login", "")),
        _when(latest.get("submitted_at")),
    )
    return changed is not None


def _when(value: object) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")) if value else None
    except ValueError:
        return None


async def _relabel(services: Services, gh: GitHubClient, issue: IssueRef, live: set[str]) -> bool:
    """Correct Baton's labels on an issue whose labels drifted from its recorded state.

    An issue that carries none of Baton's labels was withdrawn by a maintainer:
    it is left as it is, never labelled back into the queue.
    """
    store = services.store
    labels = recorded_labels(store, services.settings, issue)
    ours = live & labels.states
    desired = store.desired_label(issue)
    if not ours or ours == ({desired} if desired else set()):
        return False
    await sync_labels(gh, store, labels, issue, live)
    return True


async def conclude_orphan(services: Services, gh: GitHubClient, run: Run) -> bool:
    """Conclude a live run whose worker died; False if someone concluded it first.

    The sweep finds such runs, and so, within seconds of a lapsed claim, does the
    clock's takeover check (jobs/takeover.py): both end them here, the same way.
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
        return False
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
    async for installation in app.app_client().getiter("/app/installations"):
        installation_id = int(installation["id"])
        what = f"installation {installation_id}"
        if installation.get("suspended_at"):
            _skip(services, report, what, "the installation is suspended")
            continue
        if not sweep_may_spend(store.rate_limit(app.identity, installation_id), time.time()):
            report.paused.append(what)  # its runs have the rest of the hour's budget
            continue
        async with _isolated(services, report, what):
            gh = await app.for_installation(installation_id)
            repos = [
                repo
                async for repo in gh.getiter(
                    "/installation/repositories", iterable_key="repositories"
                )
            ]
        for repo in repos:
            async with _isolated(services, report, str(repo.get("full_name"))):
                await _idle_in_repo(services, gh, installation_id, repo, waiting, report)


async def _idle_in_repo(
    services: Services,
    gh: GitHubClient,
    installation_id: int,
    repo: dict[str, Any],
    waiting: set[IssueRef],
    report: SweepReport,
) -> None:
    settings = services.settings
    queue_label = await _queue_label(gh, services, repo)
    url_vars = {"repo": repo["full_name"], "label": queue_label}
    async for data in gh.getiter("/repos/{+repo}/issues?state=open&labels={label}", url_vars):
        if "pull_request" in data:
            continue
        issue = IssueRef(
            installation_id=installation_id, repo=str(repo["full_name"]), number=int(data["number"])
        )
        if issue in waiting or not _idle(services, issue):
            continue
        # Who put the label on is found and judged by the job, from its events.
        queued_by = None
        body = data.get("body")
        # Its label event was lost with the text it carried: what is read now
        # stands for the issue as queued.
        text = snapshot(str(data["title"]), body, utcnow(), queued_by, "sweep")
        job = (
            queue_chain_job(issue, SWEEP_KEY, queued_by, text)
            if names_a_chain(body, issue.repo)
            else run_issue_job(settings, issue, SWEEP_KEY, queued_by=queued_by, text=text)
        )
        services.dispatch.enqueue([job])
        log.info(
            "sweep: %s carries %s with nothing working on it: picked up, with its "
            "text as read now (the lost label event carried it as queued)",
            issue,
            queue_label,
        )
        report.picked_up.append(str(issue))


async def _queue_label(gh: GitHubClient, services: Services, repo: dict[str, Any]) -> str:
    """Return the label that queues the repository's issues: its own, or the deployment's."""
    name = str(repo["full_name"])
    try:
        file = await load_repo_config(gh, services.store, name, str(repo["default_branch"]))
    except InvalidRepoConfig:
        # A run started by the deployment's label explains what is wrong with the file.
        return services.settings.queue_label
    except HTTPException as exc:
        # One unreadable file does not stop the pass: the label last read will do.
        log.warning("sweep: %s's %s not read (%s)", name, CONFIG_PATH, exc)
        return services.store.queue_labels().get(name, services.settings.queue_label)
    return file.config.labels.queue or services.settings.queue_label


def _idle(services: Services, issue: IssueRef) -> bool:
    """Return whether nothing holds or runs this queued issue."""
    store = services.store
    if store.lock_holder(issue) is not None:
        return False
    run = store.latest_run(issue)
    return run is None or not (run.state.is_live or run.state is RunState.PUSHED_PENDING)
