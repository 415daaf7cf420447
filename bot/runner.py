"""One attempt at one issue, from claim to pull request, and its settlement by checks."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from gidgethub import HTTPException

from bot import render
from bot.agents import AgentConfigError, AgentRequest, adapter_for
from bot.checks import Verdict, checks_verdict
from bot.dispatch import Dispatcher
from bot.git import Git, GitError, Identity, Workspace, branch_name
from bot.github import GitHubApp, GitHubClient, github_app
from bot.lifecycle import settle_checks
from bot.model import AgentResult, IssueRef, Run, RunState, utcnow
from bot.settings import Settings
from bot.store import LOCK_TTL_MS, Claim, LockLost, Store
from bot.tracker import (
    label_names,
    open_or_update_pr,
    pr_files,
    read_issue,
    swap_labels,
    write_status_comment,
)

log = logging.getLogger(__name__)

HEARTBEAT_S = LOCK_TTL_MS / 1000 / 3


@dataclass(frozen=True)
class Services:
    """What a job needs from its process: settings, state, and the queues."""

    settings: Settings
    store: Store
    dispatch: Dispatcher

    @property
    def workspace(self) -> Workspace:
        """Return the mirrors and worktrees under the data directory."""
        identity = Identity(self.settings.git_author_name, self.settings.git_author_email)
        return Workspace(Git(identity), self.settings.data_dir)


async def run_issue(services: Services, issue: IssueRef) -> Run | None:
    """Claim the issue and run one attempt at it; None when there was nothing to do."""
    claim = services.store.claim(issue)
    if claim is None:
        log.info(
            "%s: already claimed (%s); not starting a second run",
            issue,
            services.store.lock_holder(issue),
        )
        return None
    try:
        async with github_app(services.settings, services.store) as app:
            return await _Attempt(services, app, claim).execute()
    finally:
        services.store.release(claim)


class _Attempt:
    """The work of one claimed attempt; every write is fenced by the claim."""

    def __init__(self, services: Services, app: GitHubApp, claim: Claim) -> None:
        self.services = services
        self.settings = services.settings
        self.store = services.store
        self.app = app
        self.claim = claim
        self.issue = claim.issue

    async def execute(self) -> Run | None:
        await self.app.learn_bot_login()  # so the web process can tell Baton's own events apart
        gh = await self.app.for_installation(self.issue.installation_id)
        data = await read_issue(gh, self.issue)
        labels = label_names(data)
        if "pull_request" in data or data["state"] != "open":
            log.info("%s: not an open issue; nothing to run", self.issue)
            return None
        if self.settings.queue_label not in labels:
            # The label was withdrawn, or an earlier run already took the issue off the queue.
            log.info(
                "%s: no longer carries %s; not starting", self.issue, self.settings.queue_label
            )
            return None
        attempt = self.store.next_attempt(self.claim)
        run = Run.claimed(
            self.issue, attempt, branch_name(self.issue.number, data["title"]), utcnow()
        )
        self.store.save_run(run, self.claim)
        self.store.mark("dispatch", utcnow())
        log.info("%s: attempt %d claimed on %s", self.issue, attempt, run.branch)
        # In-progress goes on before any work starts: a crash never makes it look unclaimed.
        await swap_labels(
            gh,
            self.issue,
            add=self.settings.in_progress_label,
            remove=labels & self._state_labels(),
        )
        await self._report(gh, run)
        heartbeat = asyncio.create_task(self._heartbeat())
        try:
            return await self._work(gh, run, data)
        except (GitError, HTTPException, AgentConfigError, OSError) as exc:
            return await self._finish(gh, run, RunState.FAILED, "infrastructure", _one_line(exc))
        except LockLost:
            log.warning("%s: lost the issue's lock; stopping without touching GitHub", self.issue)
            return None
        except Exception as exc:
            await self._finish(gh, run, RunState.FAILED, "internal-error", _one_line(exc))
            raise
        finally:
            heartbeat.cancel()

    async def _work(self, gh: GitHubClient, run: Run, data: dict[str, Any]) -> Run:
        repo = await gh.getitem("/repos/{+repo}", {"repo": self.issue.repo})
        base, clone_url = str(repo["default_branch"]), str(repo["clone_url"])
        run = self._move(run, RunState.PROVISIONING)
        workspace = self.services.workspace
        token = await self.app.installation_token(self.issue.installation_id)
        mirror = await workspace.refresh_mirror(self.issue.repo, clone_url, token)
        base_sha = await workspace.rev_parse(mirror, f"refs/remotes/origin/{base}")
        remote_branch = await workspace.remote_branch(self.issue.repo, run.branch)
        worktree = await workspace.provision(
            self.issue.repo, self.issue.number, run.branch, base_sha
        )
        run = self._move(run, RunState.RUNNING, base_branch=base, base_sha=base_sha)
        await self._report(gh, run)

        result = await self._run_agent(run, worktree, data)
        run = run.model_copy(update={"agent_result": result})
        await workspace.commit_leftovers(
            worktree, f"Work on #{self.issue.number} (Baton, attempt {run.attempt})"
        )
        if result.status != "success":
            return await self._finish(
                gh,
                run,
                RunState.FAILED,
                result.failure_class or "agent-error",
                result.result_text or result.stop_reason,
            )
        if not await workspace.has_diff(worktree, base_sha):
            return await self._finish(
                gh,
                run,
                RunState.NO_CHANGE,
                "no-change",
                "the agent finished without changing any file",
            )

        head_sha = await workspace.rev_parse(worktree, "HEAD")
        # Recorded before the push, so a check result that races the PR still finds its run.
        run = self._move(run, RunState.RUNNING, head_sha=head_sha)
        self._ensure_claim()
        token = await self.app.installation_token(self.issue.installation_id)
        try:
            await workspace.push(worktree, clone_url, run.branch, token, remote_branch)
        except GitError as exc:
            return await self._finish(
                gh,
                run,
                RunState.FAILED,
                "push-failed",
                f"pushing {run.branch} failed: {_one_line(exc)}",
            )
        report = result.result_text or ""
        title = render.pr_title(str(data["title"]), self.issue.number)
        try:
            pr = await open_or_update_pr(
                gh,
                self.issue,
                branch=run.branch,
                base=base,
                title=title,
                body=render.pr_body(run, report, None),
            )
            files = await pr_files(gh, self.issue.repo, int(pr["number"]))
            await gh.patch(pr["url"], data={"body": render.pr_body(run, report, files)})
        except HTTPException as exc:
            return await self._finish(
                gh,
                run,
                RunState.FAILED,
                "pr-failed",
                f"opening the pull request failed: {_one_line(exc)}",
            )
        run = self._move(
            run,
            RunState.PUSHED_PENDING,
            pr_number=int(pr["number"]),
            pr_url=str(pr["html_url"]),
            changed_files=files,
        )
        await self._report(gh, run)
        # Checks may have finished before the run was recorded as pushed; look once now.
        self.services.dispatch.settle_head(self.issue.installation_id, self.issue.repo, head_sha)
        log.info("%s: attempt %d opened %s", self.issue, run.attempt, run.pr_url)
        return run

    async def _run_agent(self, run: Run, worktree: Path, data: dict[str, Any]) -> AgentResult:
        run_dir = (
            self.settings.data_dir
            / "runs"
            / self.issue.repo
            / str(self.issue.number)
            / str(run.attempt)
        )
        run_dir.mkdir(parents=True, exist_ok=True)
        brief_path = run_dir / "brief.md"
        brief_path.write_text(
            render.brief(str(data["title"]), data.get("body"), str(self.issue), run.attempt)
        )
        home = self.settings.data_dir / "agent-home"
        home.mkdir(parents=True, exist_ok=True)
        request = AgentRequest(
            run_id=run.run_id,
            issue_number=self.issue.number,
            attempt=run.attempt,
            worktree=worktree,
            brief_path=brief_path,
            run_dir=run_dir,
            deadline=utcnow() + timedelta(seconds=self.settings.agent_wall_clock_seconds),
            home=home,
            passthrough_env=tuple(self.settings.agent_passthrough_env),
        )
        return await adapter_for(self.settings).run(request)

    def _state_labels(self) -> set[str]:
        s = self.settings
        return {s.queue_label, s.in_progress_label, s.review_label, s.failed_label}

    def _move(self, run: Run, state: RunState, **fields: Any) -> Run:
        moved = run if state is run.state else run.moved(state, utcnow())
        moved = moved.model_copy(update=fields)
        self.store.save_run(moved, self.claim)
        return moved

    def _ensure_claim(self) -> None:
        if not self.store.heartbeat(self.claim):
            raise LockLost(f"{self.issue}: the lock expired")

    async def _finish(
        self, gh: GitHubClient, run: Run, state: RunState, failure_class: str, reason: str
    ) -> Run:
        log.warning(
            "%s: attempt %d ended %s (%s): %s",
            self.issue,
            run.attempt,
            state.value,
            failure_class,
            reason,
        )
        run = self._move(run, state, failure_class=failure_class, reason=reason)
        await swap_labels(
            gh, self.issue, add=self.settings.failed_label, remove={self.settings.in_progress_label}
        )
        await self._report(gh, run)
        return run

    async def _report(self, gh: GitHubClient, run: Run) -> None:
        await write_status_comment(gh, self.store, self.issue, render.status_comment(run, utcnow()))

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            if not self.store.heartbeat(self.claim):
                log.error("%s: heartbeat found the lock lost", self.issue)
                return


async def settle_head(
    services: Services, installation_id: int, repo: str, head_sha: str
) -> Run | None:
    """Settle the run that pushed head_sha from the head's check results, if they are final."""
    found = services.store.run_for_head(repo, head_sha)
    if found is None:
        return None
    issue, attempt = found
    run = services.store.run(issue, attempt)
    if run is None or run.state is not RunState.PUSHED_PENDING or run.head_sha != head_sha:
        return None
    settings = services.settings
    async with github_app(settings, services.store) as app:
        gh = await app.for_installation(installation_id)
        url_vars = {"repo": repo, "sha": head_sha}
        suites = await gh.getitem("/repos/{+repo}/commits/{sha}/check-suites", url_vars)
        status = await gh.getitem("/repos/{+repo}/commits/{sha}/status", url_vars)
        verdict = checks_verdict(suites["check_suites"], status)
        if verdict is Verdict.PENDING:
            return None
        settled = services.store.update_run(
            issue, attempt, lambda current: settle_checks(current, head_sha, verdict, utcnow())
        )
        if settled is None:
            return None  # someone else settled it first, or a newer head took over
        add = settings.review_label if verdict is Verdict.GREEN else settings.failed_label
        await swap_labels(gh, issue, add=add, remove={settings.in_progress_label})
        await write_status_comment(
            gh, services.store, issue, render.status_comment(settled, utcnow())
        )
        log.info(
            "%s: attempt %d settled %s at %s", issue, attempt, settled.state.value, head_sha[:12]
        )
        return settled


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]
