"""The reconcile sweep: make Baton converge on whatever a crash or a lost webhook left behind.

It runs every few minutes and when a worker starts. Each pass, under a lease so
that two never overlap:

- a live run whose lock is gone (its worker died) is concluded as orphaned, and
  its recovery (a continuation that inherits the branch and PR, or an escalation)
  goes ahead as for any other ending;
- a pushed run still waiting for its checks is settled by asking the API, in case
  the check webhook never came;
- halted issues whose window has reopened are resumed (a lost re-entry);
- an open issue carrying the queue label that nothing is working on (a missed
  `labeled` webhook) is picked up, as the login that last added the label, which
  the job judges as it does a webhook's sender; its text as read then stands for
  the text the lost event carried;
- Baton's labels on issues in flight that drifted from their recorded state are
  corrected (an issue a maintainer took every Baton label off is left alone).
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from gidgethub import HTTPException

from bot.chains import names_a_chain
from bot.classify import RunFacts
from bot.config import CONFIG_PATH, InvalidRepoConfig
from bot.dispatch import queue_chain_job, run_issue_job
from bot.github import GitHubApp, GitHubClient, github_app
from bot.labels import recorded_labels, sync_labels
from bot.model import IssueRef, Run, RunState, utcnow
from bot.recovery import Services, conclude, halted_plan, resume
from bot.snapshot import snapshot
from bot.tracker import label_names, load_repo_config, read_issue

log = logging.getLogger(__name__)

LEASE_MS = 10 * 60 * 1000  # far above a pass; a sweeper that died frees it by then
SWEEP_KEY = "sweep"
WAIT_GRACE = timedelta(minutes=2)


@dataclass
class SweepReport:
    """What one pass found and did."""

    orphaned: list[str] = field(default_factory=list)
    settled: list[str] = field(default_factory=list)
    resumed: list[str] = field(default_factory=list)
    picked_up: list[str] = field(default_factory=list)
    relabelled: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """Return one line for the log."""
        parts = [f"{name} {', '.join(items)}" for name, items in vars(self).items() if items]
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
            await _in_flight(services, app, report)
            now = now or utcnow()
            for halt in halted_plan(store, now).due:
                if resume(services, halt):
                    report.resumed.append(str(halt.issue))
            await _queued_but_idle(services, app, report, now)
        store.mark("sweep", utcnow())
        log.info("sweep: %s", report.summary())
        return report
    finally:
        store.release_sweep_lease(holder)


async def _in_flight(services: Services, app: GitHubApp, report: SweepReport) -> None:
    store, dispatch = services.store, services.dispatch
    for issue in store.in_flight():
        run = store.latest_run(issue)
        if run is None:
            continue
        gh = await app.for_installation(issue.installation_id)
        if run.state.is_live and store.lock_holder(issue) is None:
            if await _orphaned(services, gh, run):
                report.orphaned.append(str(issue))
            continue
        if run.state is RunState.PUSHED_PENDING and run.head_sha is not None:
            dispatch.settle_head(issue.installation_id, issue.repo, run.head_sha)
            report.settled.append(str(issue))
        if await _relabel(services, gh, issue):
            report.relabelled.append(str(issue))


async def _relabel(services: Services, gh: GitHubClient, issue: IssueRef) -> bool:
    """Correct Baton's labels on an issue whose labels drifted from its recorded state.

    An issue that carries none of Baton's labels was withdrawn by a maintainer:
    it is left as it is, never labelled back into the queue.
    """
    store = services.store
    labels = recorded_labels(store, services.settings, issue)
    live = label_names(await read_issue(gh, issue))
    ours = live & labels.states
    desired = store.desired_label(issue)
    if not ours or ours == ({desired} if desired else set()):
        return False
    await sync_labels(gh, store, labels, issue, live)
    return True


async def _orphaned(services: Services, gh: GitHubClient, run: Run) -> bool:
    """Conclude a live run whose worker died; False if someone concluded it first."""
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
    settings = services.settings
    # An issue waiting for a window or a run slot has a job due then; one long past its
    # time lost that job, and is picked up like any other.
    waiting = {issue for issue, until in services.store.waits() if until > now - WAIT_GRACE}
    async for installation in app.app_client().getiter("/app/installations"):
        installation_id = int(installation["id"])
        gh = await app.for_installation(installation_id)
        async for repo in gh.getiter("/installation/repositories", iterable_key="repositories"):
            queue_label = await _queue_label(gh, services, repo)
            url_vars = {"repo": repo["full_name"], "label": queue_label}
            async for data in gh.getiter(
                "/repos/{+repo}/issues?state=open&labels={label}", url_vars
            ):
                if "pull_request" in data:
                    continue
                issue = IssueRef(
                    installation_id=installation_id,
                    repo=str(repo["full_name"]),
                    number=int(data["number"]),
                )
                if issue not in waiting and _idle(services, issue):
                    # Who put the label on is found and judged by the job, from its events.
                    queued_by = None
                    body = data.get("body")
                    # Its label event was lost with the text it carried: what is read now
                    # stands for the issue as queued.
                    text = snapshot(str(data["title"]), body, utcnow(), queued_by, "sweep")
                    job = (
                        queue_chain_job(issue, SWEEP_KEY, queued_by, text)
                        if names_a_chain(body, issue.repo)
                        else run_issue_job(
                            settings, issue, SWEEP_KEY, queued_by=queued_by, text=text
                        )
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
