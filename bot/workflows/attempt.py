"""One attempt at one issue: claim, worktree, agent, push, pull request."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from gidgethub import HTTPException

from bot.agents import (
    AgentConfigError,
    AgentRequest,
    adapter_for,
    agent_home,
    egress_for_run,
    egress_policy_for,
    programs_of,
)
from bot.agents.setup import run_setup
from bot.domain import issue_text as snapshot
from bot.domain import render
from bot.domain.checks import failing_checks
from bot.domain.classify import Ending, RunFacts
from bot.domain.issue_text import IssueText, Snapshot
from bot.domain.jobs import RunMode, run_issue_job
from bot.domain.model import AgentResult, IssueRef, Run, RunState, utcnow
from bot.domain.render import Continuation, ReviewComment, ReviewSummary
from bot.domain.repo_config import CONFIG_PATH, InvalidRepoConfig, apply_repo_config
from bot.edges.api import (
    label_names,
    load_repo_config,
    open_or_update_pr,
    read_check_runs,
    read_combined_status,
    read_issue,
    read_pull,
    read_repository,
)
from bot.edges.git import GitError, Salvage, Workspace, branch_name, salvage_branch
from bot.edges.github import GitHubApp, GitHubClient, github_app
from bot.edges.store import Claim, LockLost
from bot.ops.logs import log_context
from bot.ops.metrics import agent_usage
from bot.ops.worker import stopping
from bot.workflows.chain import stack_base
from bot.workflows.conclude import conclude, policy_of, post_status, report
from bot.workflows.labels import set_state_label
from bot.workflows.services import Services
from bot.workflows.standing import queued_by_a_steerer, standing_of

log = logging.getLogger(__name__)

CLAIM_RETRY_S = 30.0
SLOT_RETRY_S = 30.0
STOP_POLL_S = 1.0
INTERRUPTED = "interrupted by a worker restart; continuing"
# A label event this recent stands for a read of its issue (GitHub's clock and ours agree
# to within seconds; a later withdrawal is recorded from its own webhook).
EVENT_VIEW = timedelta(seconds=30)


async def run_issue(
    services: Services,
    issue: IssueRef,
    mode: RunMode = RunMode.FRESH,
    after: int = 0,
    queued_by: str | None = None,
    text: Snapshot | None = None,
    labels: tuple[str, ...] | None = None,
) -> Run | None:
    """Claim the issue and run one attempt at it; None when there was nothing to do.

    queued_by is who put the queue label on, for a fresh run; when it is not known,
    the issue's events say. text is the issue as it was queued, for a fresh run: it
    is recorded once queued_by is known to steer, and every attempt's brief uses it.
    labels are what its label event showed on the issue, where it did.
    """
    if services.store.paused_since(issue.repo) is not None:
        # Held, not lost: resuming the repository makes this start.
        services.store.hold(issue, mode.value, after)
        if text is not None:
            services.store.update_queued_text(issue, lambda current: snapshot.hold(current, text))
        log.info("%s: %s is paused; holding a %s run", issue, issue.repo, mode.value)
        return None
    claim = services.store.claim(issue)
    if claim is None:
        log.info(
            "%s: already claimed (%s); not starting a second run",
            issue,
            services.store.lock_holder(issue),
        )
        if mode is not RunMode.FRESH:
            # A recovery is owed to this issue: try again once the holder is done, rather
            # than lose it (a duplicate of this very job finds nothing to do then).
            job = run_issue_job(services.settings, issue, f"after-{after}", mode, after)
            services.dispatch.enqueue_later(job, CLAIM_RETRY_S)
        return None
    try:
        async with github_app(services.settings, services.store) as app:
            attempt = _Attempt(services, app, claim, mode, after, queued_by, text, labels)
            return await attempt.execute()
    finally:
        services.store.release_run_slot(issue)
        services.store.release(claim)


async def remove_finished_worktrees(services: Services, issue: IssueRef) -> None:
    """Remove this machine's worktrees of the repository's issues whose pull request closed.

    A merge is settled on whichever machine takes the job, which removes only its own
    worktree; a machine that ran the issue clears its copy here, when it next works on
    the repository.
    """
    workspace = services.workspace
    for number in workspace.worktree_issues(issue.repo):
        other = issue.model_copy(update={"number": number})
        latest = services.store.latest_run(other)
        if latest is not None and latest.state in (RunState.MERGED, RunState.CLOSED):
            await workspace.remove(issue.repo, number)


async def inherit_open_pr(gh: GitHubClient, previous: Run) -> dict[str, Any]:
    """Return the predecessor's PR fields for a continuation, if that PR is still open.

    Asked of GitHub at claim time, not assumed: a closed or merged PR is never
    carried onto a new attempt, and an unreadable one is not either (the
    attempt links whatever PR is open for its branch when it pushes).
    """
    if previous.pr_number is None:
        return {}
    try:
        pull = await read_pull(gh, previous.issue.repo, previous.pr_number)
    except HTTPException as exc:
        log.warning(
            "%s: cannot read PR #%d (%s); not inheriting it",
            previous.issue,
            previous.pr_number,
            exc,
        )
        return {}
    if pull["state"] != "open" or pull["head"]["ref"] != previous.branch:
        log.info(
            "%s: PR #%d is %s; not inheriting it",
            previous.issue,
            previous.pr_number,
            "merged" if pull.get("merged") else pull["state"],
        )
        return {}
    return {"pr_number": previous.pr_number, "pr_url": previous.pr_url}


class _Attempt:
    """The work of one claimed attempt; every write is fenced by the claim."""

    def __init__(
        self,
        services: Services,
        app: GitHubApp,
        claim: Claim,
        mode: RunMode,
        after: int,
        queued_by: str | None = None,
        text: Snapshot | None = None,
        labels: tuple[str, ...] | None = None,
    ) -> None:
        self.services = services
        self.settings = services.settings
        self.store = services.store
        self.app = app
        self.claim = claim
        self.issue = claim.issue
        self.mode = mode
        self.after = after
        self.queued_by = queued_by
        self.offered = text  # the issue as queued, when this start carries it
        self.shown_labels = labels  # the labels its label event showed, when it did
        self.text = IssueText()  # what the brief uses: recorded by execute before any work
        self.stopped = False
        self.pushed_tip: str | None = None  # the branch's tip on GitHub, as Baton last pushed
        self.salvage: Salvage | None = None  # the uncommitted work this attempt last saved
        self.salvage_tip: str | None = None  # the salvage branch on GitHub, as last known
        self.heartbeat: asyncio.Task[None] | None = None
        self.setup_commands: tuple[str, ...] = ()

    async def execute(self) -> Run | None:
        await self.app.learn_bot_login()  # so the web process can tell Baton's own events apart
        await self.app.learn_bot_user_id(self.issue.installation_id)  # its commits' address
        gh = await self.app.for_installation(self.issue.installation_id)
        repo = await read_repository(gh, self.store, self.issue.repo)
        base = str(repo["default_branch"])
        # The repository's file first: it may name the labels the issue is judged by.
        try:
            file = await load_repo_config(gh, self.store, self.issue.repo, base)
        except InvalidRepoConfig as exc:
            invalid: InvalidRepoConfig | None = exc
        else:
            # A file asking for more than the deployment allows starts nothing either,
            # but its labels still name the issue's state.
            invalid = file.refused_by(self.settings)
            self.settings = apply_repo_config(self.settings, file.config)
            self.setup_commands = tuple(file.config.setup or ())
        data = self._as_the_label_event_showed_it() or await read_issue(gh, self.issue)
        labels = label_names(data)
        try:
            previous = self._predecessor(data, labels)
        except _NotNow as why:
            log.info("%s: not starting a %s run: %s", self.issue, self.mode.value, why)
            return None
        if self.mode is RunMode.FRESH and not await self._queued_by_a_steerer(gh):
            return None
        self.text = self._queued_text(data)
        if invalid is not None:
            await self._refuse_config(gh, invalid, base, labels)
            return None
        try:
            base = await self._stack_base(gh, base, str(repo["clone_url"]))
        except _Refused as why:
            await self._refuse(gh, str(why), render.refusal_comment(str(why)), labels)
            return None
        policy = self.settings.policy
        reopens_at = self.store.window_reopens_at(policy.account, utcnow())
        if reopens_at is not None and policy.limits.halt_on_usage_window:
            await self._wait_for_window(gh, policy.account, reopens_at, labels)
            return None
        slots = self.settings.max_concurrent_runs_per_repo
        if slots is not None and not self.store.take_run_slot(self.issue, slots):
            await self._wait_for_slot(gh, slots)
            return None
        attempt = self.store.next_attempt(self.claim)
        branch = previous.branch if previous else branch_name(self.issue.number, self.text.title)
        run = Run.claimed(self.issue, attempt, branch, utcnow()).model_copy(
            update={
                "continuation_of": previous.attempt
                if previous and self.mode is RunMode.CONTINUE
                else None,
                "queued_fresh": self.mode in (RunMode.FRESH, RunMode.CHAIN),
                "policy": policy,
                "title": self.text.title,
            }
        )
        if self.mode is RunMode.CONTINUE and previous is not None:
            run = run.model_copy(update=await inherit_open_pr(gh, previous))
        with log_context(run_id=run.run_id, attempt=attempt):
            return await self._begin(gh, run, labels, previous, base, str(repo["clone_url"]))

    async def _begin(
        self,
        gh: GitHubClient,
        run: Run,
        labels: set[str],
        previous: Run | None,
        base: str,
        clone_url: str,
    ) -> Run | None:
        """Record the claimed attempt, show it on the issue, and do its work."""
        self.store.save_run(run, self.claim)
        self.store.clear_stop(self.issue)
        self.store.clear_halt(self.issue)
        self.store.clear_wait(self.issue)
        self.store.mark("dispatch", utcnow())
        log.info(
            "%s: attempt %d (%s) claimed on %s",
            self.issue,
            run.attempt,
            self.mode.value,
            run.branch,
        )
        # In-progress goes on before any work starts: a crash never makes it look unclaimed.
        await self._label(gh, self.settings.labels.in_progress, labels)
        await report(self.services, gh, run)
        self.heartbeat = heartbeat = asyncio.create_task(self._heartbeat())
        try:
            return await self._work(gh, run, previous, base, clone_url)
        except LockLost:
            log.warning("%s: lost the issue's lock; stopping without touching GitHub", self.issue)
            return None
        except (GitError, HTTPException, AgentConfigError, OSError) as exc:
            return await self._end(gh, run, "infra-failed", RunState.FAILED, _one_line(exc))
        finally:
            heartbeat.cancel()

    async def _wait_for_window(
        self, gh: GitHubClient, account: str, reopens_at: datetime, labels: set[str]
    ) -> None:
        """Start nothing while the account's window is closed; come back when it reopens."""
        self._come_back_at(reopens_at, "window")
        if self.mode is not RunMode.FRESH:
            # A fresh run keeps the queue label it starts from; a recovery shows it is held.
            await self._label(gh, self.settings.labels.halted, labels)
        await post_status(
            self.services, gh, self.issue, render.waiting_comment(account, reopens_at, utcnow())
        )
        log.info(
            "%s: %s's usage window is closed; waiting until %s", self.issue, account, reopens_at
        )

    async def _wait_for_slot(self, gh: GitHubClient, limit: int) -> None:
        """Start nothing while the repository's runs fill its slots; look again shortly."""
        retry_at = utcnow() + timedelta(seconds=SLOT_RETRY_S)
        if not self.store.is_waiting(self.issue):  # said once, not every time it looks
            comment = render.slot_wait_comment(self.issue.repo, limit, retry_at, utcnow())
            await post_status(self.services, gh, self.issue, comment)
        self._come_back_at(retry_at, "slot")
        log.info("%s: %s's %d run slots are taken; waiting", self.issue, self.issue.repo, limit)

    def _as_the_label_event_showed_it(self) -> dict[str, Any] | None:
        """Return the issue as its label event showed it, when that was a moment ago.

        A fresh queueing's event carries the issue open, with its title, its body and
        the queue label, as of seconds ago: reading it again would say the same. A
        maintainer who takes the label off since withdraws it through that event's
        own webhook, which is checked here; an older event is read again.
        """
        offered, shown = self.offered, self.shown_labels
        if self.mode is not RunMode.FRESH or offered is None or shown is None:
            return None
        if utcnow() - offered.at > EVENT_VIEW or self.store.withdrawn_since(self.issue, offered.at):
            return None
        return {
            "state": "open",
            "title": offered.title,
            "body": offered.body,
            "labels": [{"name": name} for name in shown],
        }

    def _queued_text(self, data: dict[str, Any]) -> IssueText:
        """Record the text this attempt works from, if it is a new queueing's, and return it.

        A fresh start records the text it carries: the label event's, the sweep's
        read, or the one a paused repository held. A fresh start that carries none,
        or any attempt that finds none recorded, records the issue as read now.
        """
        store, issue, fresh = self.store, self.issue, self.mode is RunMode.FRESH
        current = store.queued_text(issue)
        offered = self.offered or (current.held if fresh and current is not None else None)
        if offered is None and (fresh or current is None or current.queued is None):
            title, body = str(data["title"]), data.get("body")
            offered = snapshot.snapshot(title, body, utcnow(), self.queued_by, "claim")
        if offered is not None:
            latest = store.latest_run(issue)
            # A text recorded before the latest run started was an earlier queueing's.
            since = latest.started_at if latest is not None else None
            chosen = offered
            if store.update_queued_text(issue, lambda held: snapshot.queue(held, chosen, since)):
                log.info("%s: working from the issue as %s", issue, _AS[chosen.how])
        recorded = store.queued_text(issue)
        assert recorded is not None and recorded.queued is not None
        return recorded

    async def _queued_by_a_steerer(self, gh: GitHubClient) -> bool:
        """Return whether whoever put the queue label on may queue; if not, undo it, once said."""
        self.queued_by = await queued_by_a_steerer(
            gh, self.store, self.settings, self.issue, self.queued_by
        )
        return self.queued_by is not None

    def _come_back_at(self, when: datetime, why: str) -> None:
        """Schedule this same start for when, and index the issue as waiting until then."""
        key = f"{why}-{int(when.timestamp())}"
        job = run_issue_job(
            self.settings, self.issue, key, self.mode, self.after, queued_by=self.queued_by
        )
        self.services.dispatch.enqueue_at(job, when)
        self.store.record_wait(self.issue, when)

    async def _stack_base(self, gh: GitHubClient, base: str, clone_url: str) -> str:
        """Return the branch a chain link builds on: its predecessor's, while that is unmerged.

        Never the base branch in place of a predecessor's: a tip that is gone, or
        a predecessor's worktree holding work it never committed, refuses the link.
        """
        chain = self.store.chain_of(self.issue)
        if chain is None or self.issue.number not in chain.links:
            return base
        predecessor = await stack_base(gh, self.services, chain, self.issue.number)
        if predecessor is None:
            return base
        workspace = self.services.workspace
        token = await self.app.installation_token(self.issue.installation_id)
        await workspace.refresh_mirror(self.issue.repo, clone_url, token)
        pred = f"#{predecessor.issue.number}"
        if await workspace.remote_branch(self.issue.repo, predecessor.branch) is None:
            raise _Refused(
                f"{pred}'s branch `{predecessor.branch}` no longer exists, so there is no "
                f"committed tip to build #{self.issue.number} on (Baton never builds a link "
                "on the base branch in its place). Restore the branch, or re-queue the "
                f"chain once {pred} is merged."
            )
        if await workspace.is_dirty(self.issue.repo, predecessor.issue.number):
            raise _Refused(
                f"{pred}'s worktree holds uncommitted work, so its branch is not the tip "
                f"#{self.issue.number} should build on. Commit and push it, or discard it, "
                "then re-queue the chain."
            )
        return predecessor.branch

    async def _label(self, gh: GitHubClient, label: str, labels: set[str] | None = None) -> None:
        """Make label the issue's one Baton state label (labels: what it carries, if known)."""
        await set_state_label(
            gh, self.store, self.services.dispatch, self.settings.labels, self.issue, label, labels
        )

    async def _refuse(
        self, gh: GitHubClient, reason: str, comment: str | None, labels: set[str]
    ) -> None:
        """Start nothing: the issue is a maintainer's to act on; comment says why, if given.

        labels are what the issue carries, as read: its queue label comes off.
        """
        log.warning("%s: not starting: %s", self.issue, reason)
        await self._label(gh, self.settings.labels.escalated, labels)
        if comment is not None:
            await post_status(self.services, gh, self.issue, comment)

    async def _refuse_config(
        self, gh: GitHubClient, invalid: InvalidRepoConfig, base: str, labels: set[str]
    ) -> None:
        """Start nothing on a file that is invalid or asks too much; say why, once per version."""
        comment = None
        if self.store.first_config_error(self.issue, invalid.blob_sha):
            problems = [problem.within_file for problem in invalid.error.problems]
            comment = render.config_error_comment(CONFIG_PATH, base, problems)
        await self._refuse(gh, str(invalid), comment, labels)

    def _predecessor(self, data: dict[str, Any], labels: set[str]) -> Run | None:
        """Return the run this attempt follows (None for a fresh one); raise _NotNow to skip."""
        if "pull_request" in data or data["state"] != "open":
            raise _NotNow("not an open issue")
        if self.mode is RunMode.FRESH:
            if self.settings.labels.queue not in labels:
                raise _NotNow(f"it no longer carries {self.settings.labels.queue}")
            return None
        if self.mode is RunMode.CHAIN:
            chain = self.store.chain_of(self.issue)
            if chain is None or self.issue.number not in chain.links:
                raise _NotNow("it is no longer a link of a chain")
            return None
        latest = self.store.latest_run(self.issue)
        if latest is None or latest.attempt != self.after or latest.classification is None:
            raise _NotNow(f"attempt {self.after} is not the latest, concluded attempt")
        if not labels & self.settings.labels.active:
            raise _NotNow("a maintainer withdrew it")
        return latest

    async def _work(
        self,
        gh: GitHubClient,
        run: Run,
        previous: Run | None,
        base: str,
        clone_url: str,
    ) -> Run | None:
        run = self._move(run, RunState.PROVISIONING)
        workspace = self.services.workspace
        await remove_finished_worktrees(self.services, self.issue)
        token = await self.app.installation_token(self.issue.installation_id)
        mirror = await workspace.refresh_mirror(self.issue.repo, clone_url, token)
        base_sha = await workspace.rev_parse(mirror, f"refs/remotes/origin/{base}")
        remote_tip = await workspace.remote_branch(self.issue.repo, run.branch)
        start = remote_tip if remote_tip and run.continuation_of is not None else base_sha
        worktree = await workspace.provision(
            self.issue.repo, self.issue.number, run.branch, start, (base, base_sha)
        )
        self.salvage_tip = await workspace.remote_branch(
            self.issue.repo, salvage_branch(self.issue.number)
        )
        salvaged = None
        if run.continuation_of is not None:
            salvaged = await workspace.salvaged(self.issue.repo, self.issue.number, start)
        if salvaged is not None:
            # Uncommitted, as the agent left it: what it commits of it is this attempt's work.
            await workspace.restore(self.issue.repo, self.issue.number, salvaged.sha)
            log.info("%s: starting from the work salvaged at %s", self.issue, salvaged.saved_at)
        run = self._move(run, RunState.RUNNING, base_branch=base, base_sha=base_sha)
        await report(self.services, gh, run)

        continuation = await self._continuation(gh, previous) if run.continuation_of else None
        if continuation is not None and salvaged is not None:
            continuation = continuation.model_copy(
                update={"salvaged_at": salvaged.saved_at, "salvaged_files": salvaged.files}
            )
        self.pushed_tip = remote_tip
        run_dir = self._run_dir(run)
        checkpoints = asyncio.create_task(self._checkpoint(run, clone_url, start))
        try:
            result = await self._run_agent(run, worktree, run_dir, continuation)
        finally:
            checkpoints.cancel()
        run = run.model_copy(update={"agent_result": result})
        self.store.add_metrics(agent_usage(result))
        if stopping():
            return await self._interrupted(gh, run, clone_url, start)
        head_sha = await workspace.collect(
            self.issue.repo,
            self.issue.number,
            start,
            leftovers=f"Work on #{self.issue.number} (Baton, attempt {run.attempt})",
        )
        new_commits = await workspace.commits_since(self.issue.repo, start, head_sha)
        changed = await workspace.has_diff(self.issue.repo, base_sha, head_sha)
        # Known before the push, so the PR is opened with its list of files in one call.
        files = await pull_files(workspace, self.issue.repo, base_sha, head_sha) if changed else []
        if new_commits:
            # Pushed even when the agent stopped short: a continuation builds on it, here or
            # on another machine, and an operator's stop keeps the work.
            # Recorded before the push, so a check result that races the PR finds its run.
            run = self._move(run, run.state, head_sha=head_sha)
            self._ensure_claim()
            token = await self.app.installation_token(self.issue.installation_id)
            try:
                await workspace.push(
                    self.issue.repo, clone_url, run.branch, head_sha, token, self.pushed_tip
                )
            except GitError as exc:
                return await self._end(
                    gh,
                    run,
                    "push-failed",
                    RunState.FAILED,
                    f"pushing {run.branch} failed: {_one_line(exc)}",
                )
            await self._drop_salvage(clone_url)
        if result.stop_reason == "cancelled":
            return await self._end(
                gh, run, "stopped", RunState.KILLED, "stopped by a maintainer", new_commits
            )
        if result.status != "success":
            return await self._end(
                gh,
                run,
                "agent",
                RunState.FAILED,
                result.result_text or result.stop_reason,
                new_commits,
            )
        if not new_commits or not changed:
            return await self._end(
                gh, run, "agent", RunState.NO_CHANGE, "the agent finished without changing any file"
            )
        return await self._open_pull(gh, run, result, base, files)

    async def _open_pull(
        self, gh: GitHubClient, run: Run, result: AgentResult, base: str, files: list[str]
    ) -> Run | None:
        report_text = result.result_text or ""
        title = render.pr_title(self.text.title, self.issue.number)
        try:
            pr = await open_or_update_pr(
                gh,
                self.issue,
                branch=run.branch,
                base=base,
                title=title,
                body=render.pr_body(run, report_text, files),
                number=run.pr_number,
            )
        except HTTPException as exc:
            return await self._end(
                gh,
                run,
                "pr-failed",
                RunState.FAILED,
                f"opening the pull request failed: {_one_line(exc)}",
            )
        run = self._move(
            run,
            RunState.PUSHED_PENDING,
            pr_number=int(pr["number"]),
            pr_url=str(pr["html_url"]),
            changed_files=files,
        )
        await report(self.services, gh, run)
        # A check result that came before the run was recorded as pushed found nothing to
        # settle and said so: look once now. Otherwise the result's own event settles it.
        assert run.head_sha is not None
        if self.store.take_check_result(self.issue.repo, run.head_sha):
            self.services.dispatch.settle_head(
                self.issue.installation_id, self.issue.repo, run.head_sha
            )
        else:
            # A head no CI runs on sends no event at all: look once its silence is an answer.
            self.services.dispatch.settle_head_at(
                self.issue.installation_id,
                self.issue.repo,
                run.head_sha,
                utcnow() + timedelta(seconds=policy_of(self.services, run).no_checks_after_s),
            )
        log.info(
            "%s: attempt %d pushed %s to %s", self.issue, run.attempt, run.head_sha[:12], run.pr_url
        )
        chain = self.store.chain_of(self.issue)
        if chain is not None:
            self.services.dispatch.advance_chain(chain, f"pushed-{run.head_sha}")  # its manifest
        return run

    async def _continuation(self, gh: GitHubClient, previous: Run | None) -> Continuation | None:
        """Return what the agent needs to know about the attempt it continues."""
        if previous is None:
            return None
        checks = []
        if previous.failure_class == "checks-failed" and previous.head_sha:
            runs = await read_check_runs(gh, self.issue.repo, previous.head_sha)
            status = await read_combined_status(gh, self.issue.repo, previous.head_sha)
            required = policy_of(self.services, previous).required_checks
            checks = failing_checks(runs, status, required)
        review = None
        if previous.review_id is not None and previous.pr_number is not None:
            review = await self._review(gh, previous.pr_number, previous.review_id)
        return Continuation(previous=previous, failing_checks=tuple(checks), review=review)

    async def _review(self, gh: GitHubClient, pull: int, review_id: int) -> ReviewSummary | None:
        url_vars: dict[str, str | int] = {"repo": self.issue.repo, "number": pull}
        reviews = [r async for r in gh.getiter("/repos/{+repo}/pulls/{number}/reviews", url_vars)]
        found = next((r for r in reviews if r["id"] == review_id), None)
        if found is None or not await self._steers(gh, found["user"], "review"):
            return None
        comments = [
            ReviewComment(path=str(c["path"]), line=c.get("line"), body=str(c["body"]))
            async for c in gh.getiter("/repos/{+repo}/pulls/{number}/comments", url_vars)
            if c.get("pull_request_review_id") == review_id  # the reviewer's, judged above
        ]
        return ReviewSummary(
            author=str(found["user"]["login"]),
            body=str(found.get("body") or ""),
            comments=tuple(comments),
        )

    async def _steers(self, gh: GitHubClient, user: dict[str, Any], what: str) -> bool:
        """Return whether what a user wrote may reach the brief: only a steerer's words do."""
        login = str(user["login"])
        standing = await standing_of(
            gh, self.store, self.settings, self.issue.repo, login, user.get("type")
        )
        if not standing.allowed:
            log.warning("%s: left a %s out of the brief: %s", self.issue, what, standing)
        return standing.allowed

    def _run_dir(self, run: Run) -> Path:
        return (
            self.settings.data_dir
            / "runs"
            / self.issue.repo
            / str(self.issue.number)
            / str(run.attempt)
        )

    async def _run_agent(
        self,
        run: Run,
        worktree: Path,
        run_dir: Path,
        continuation: Continuation | None,
    ) -> AgentResult:
        io_dir = run_dir / "io"  # the request's io_dir, made before the request exists
        io_dir.mkdir(parents=True, exist_ok=True)
        brief_path = run_dir / "brief.md"  # shown read-only: the agent cannot swap it
        brief_path.write_text(
            render.brief(
                self.text.title,  # as queued: never the issue as it stands now
                self.text.body,
                str(self.issue),
                run.attempt,
                self.settings.limits.max_runs,
                continuation,
            )
        )
        home = agent_home(self.settings.data_dir, self.issue.repo, self.issue.number)
        policy = egress_policy_for(self.settings)
        async with egress_for_run(policy, str(self.issue)) as (egress_dir, proxy):
            jail = self.services.jails.make(
                worktree=worktree,
                home=home,
                scratch=run_dir / "jail",
                readable=(
                    self.services.workspace.mirror_path(self.issue.repo) / "objects",
                    brief_path,
                ),
                writable=(io_dir,),
                network=self.settings.agent_network,
                egress_dir=egress_dir,
                programs=programs_of(
                    self.settings, self.setup_commands, self.services.settings.agent_command
                ),
            )
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
                # The agent picks its session up where the CLI can and the session is on this
                # machine; the brief alone is always enough when it cannot.
                resume_session_id=_previous_session(continuation),
                jail=jail,
            )
            result = await self._agent_in(request)
            refused = proxy.refused if proxy is not None else ()
        if refused:
            log.warning("%s: the sandbox refused the agent %s", self.issue, ", ".join(refused))
        return result.model_copy(update={"refused_hosts": list(refused)})

    async def _agent_in(self, request: AgentRequest) -> AgentResult:
        """Run the setup commands, then the agent, until it ends or a maintainer stops it."""
        failed_setup = await run_setup(self.setup_commands, request, self.settings.agent)
        if failed_setup is not None:
            return failed_setup
        agent = asyncio.create_task(adapter_for(self.settings).run(request))
        watch = asyncio.create_task(self._watch_for_stop(agent))
        try:
            return await agent
        except asyncio.CancelledError:
            if not (self.stopped or stopping()):
                raise
            now = utcnow()
            return AgentResult(
                agent=self.settings.agent,
                status="failed",
                stop_reason="cancelled",
                started_at=now,
                ended_at=now,
                transcript_path=request.transcript_path,
                stderr_path=request.stderr_path,
                result_text="stopped by a maintainer" if self.stopped else INTERRUPTED,
            )
        finally:
            watch.cancel()

    async def _checkpoint(self, run: Run, clone_url: str, start: str) -> None:
        """Save the agent's work every few minutes, while it works.

        A worker that dies then loses at most the work since the last checkpoint:
        the continuation, on any machine, starts from what was pushed.
        """
        while True:
            await asyncio.sleep(self.settings.checkpoint_seconds)
            await self._save(run, clone_url, start)

    async def _save(self, run: Run, clone_url: str, start: str) -> None:
        """Push what the agent has committed to the branch, and what it has not to salvage.

        The salvage is a commit on the agent's last commit, on a branch of its own: the
        pull request never moves to it.
        """
        workspace = self.services.workspace
        repo, number = self.issue.repo, self.issue.number
        try:
            head = await workspace.collect(repo, number, start, None)
            if head not in (start, self.pushed_tip):
                self._ensure_claim()
                token = await self.app.installation_token(self.issue.installation_id)
                await workspace.push(repo, clone_url, run.branch, head, token, self.pushed_tip)
                self.pushed_tip = head
                self.store.record_checkpoint(self.issue, run.attempt, head)
                log.info("%s: attempt %d checkpointed at %s", self.issue, run.attempt, head[:12])
            message = f"Uncommitted work on #{number} (Baton, attempt {run.attempt}, salvaged)"
            salvage = await workspace.salvage(repo, number, start, self.salvage, message)
            if salvage is None or salvage.sha == self.salvage_tip:
                return
            self._ensure_claim()
            token = await self.app.installation_token(self.issue.installation_id)
            branch = salvage_branch(number)
            await workspace.push(repo, clone_url, branch, salvage.sha, token, self.salvage_tip)
        except (LockLost, GitError, HTTPException, OSError) as exc:
            log.warning("%s: checkpoint not pushed: %s", self.issue, _one_line(exc))
            return
        self.salvage, self.salvage_tip = salvage, salvage.sha
        log.info(
            "%s: attempt %d salvaged its edits at %s", self.issue, run.attempt, salvage.sha[:12]
        )

    async def _drop_salvage(self, clone_url: str) -> None:
        """Delete the issue's salvage branch: the work it held is on the issue's branch now."""
        if self.salvage_tip is None:
            return
        workspace = self.services.workspace
        branch = salvage_branch(self.issue.number)
        try:
            token = await self.app.installation_token(self.issue.installation_id)
            await workspace.delete_branch(
                self.issue.repo, clone_url, branch, token, self.salvage_tip
            )
        except (GitError, HTTPException) as exc:
            log.warning("%s: %s not deleted: %s", self.issue, branch, _one_line(exc))
            return
        self.salvage = self.salvage_tip = None
        log.info("%s: deleted %s", self.issue, branch)

    async def _interrupted(
        self, gh: GitHubClient, run: Run, clone_url: str, start: str
    ) -> Run | None:
        """End a run its worker is stopping: save its work, give the issue to another worker.

        Charged to nothing; the claim goes back before the continuation is queued, so
        whichever worker takes that job can claim the issue at once.
        """
        log.warning("%s: the worker is stopping; saving attempt %d's work", self.issue, run.attempt)
        await self._save(run, clone_url, start)
        new_commits = 0
        if self.pushed_tip is not None and self.pushed_tip != start:
            new_commits = await self.services.workspace.commits_since(
                self.issue.repo, start, self.pushed_tip
            )
        run = self._move(run, RunState.FAILED, reason=INTERRUPTED)
        if self.heartbeat is not None:
            self.heartbeat.cancel()
        self.store.release_run_slot(self.issue)
        self.store.release(self.claim)
        facts = RunFacts(ending="interrupted", new_commits=new_commits, detail=INTERRUPTED)
        log.warning(
            "%s: attempt %d ended %s: %s", self.issue, run.attempt, run.state.value, INTERRUPTED
        )
        return await conclude(self.services, gh, run, facts)

    async def _watch_for_stop(self, agent: asyncio.Task[AgentResult]) -> None:
        while not agent.done():
            await asyncio.sleep(STOP_POLL_S)
            if stopping():
                log.warning("%s: the worker is stopping; stopping the agent", self.issue)
                agent.cancel()
                return
            if self.store.stop_requested(self.issue):
                log.warning("%s: a maintainer stopped the run; stopping the agent", self.issue)
                self.stopped = True
                agent.cancel()
                return

    def _move(self, run: Run, state: RunState, **fields: Any) -> Run:
        moved = run if state is run.state else run.moved(state, utcnow())
        moved = moved.model_copy(update=fields)
        self.store.save_run(moved, self.claim)
        return moved

    def _ensure_claim(self) -> None:
        if not self.store.heartbeat(self.claim):
            raise LockLost(f"{self.issue}: the lock expired")

    async def _end(
        self,
        gh: GitHubClient,
        run: Run,
        ending: Ending,
        state: RunState,
        reason: str,
        new_commits: int = 0,
    ) -> Run | None:
        run = self._move(run, state, reason=reason)
        agent = run.agent_result
        facts = RunFacts(
            ending=ending,
            stop_reason=agent.stop_reason if agent and ending in ("agent", "stopped") else None,
            new_commits=new_commits,
            resets_at=agent.resets_at if agent else None,
            detail=reason,
        )
        log.warning("%s: attempt %d ended %s: %s", self.issue, run.attempt, state.value, reason)
        return await conclude(self.services, gh, run, facts)

    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.store.lock_ttl_ms / 1000 / 3)  # three beats per lease
            if not self.store.heartbeat(self.claim):
                log.error("%s: heartbeat found the lock lost", self.issue)
                return
            self.store.refresh_run_slot(self.issue)


async def pull_files(workspace: Workspace, repo: str, base_sha: str, head_sha: str) -> list[str]:
    """Return the files a pull request of head onto base changes, from Baton's mirror.

    GitHub's own diff of a pull request: head against its merge base with base.
    """
    out = await workspace.git.run_bytes(
        workspace.mirror_path(repo), "diff", "--name-only", "-z", f"{base_sha}...{head_sha}"
    )
    return [name.decode(errors="replace") for name in out.split(b"\0") if name]


def _previous_session(continuation: Continuation | None) -> str | None:
    if continuation is None or continuation.previous.agent_result is None:
        return None
    return continuation.previous.agent_result.session_id


_AS = {
    "label": "it was when it was queued",
    "chain": "it was when its chain was queued",
    "sweep": "the sweep read it (its label event was lost)",
    "claim": "read now (no text was recorded when it was queued)",
}


class _Refused(Exception):
    """The attempt must not start, and a maintainer must be told why."""


class _NotNow(Exception):
    """The attempt should not start: the issue moved on, or a maintainer withdrew it."""


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]
