"""One attempt at one issue: claim, worktree, agent, push, pull request."""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from gidgethub import HTTPException

from bot.agents import (
    AgentConfigError,
    AgentRequest,
    adapter_for,
    egress_for_run,
    egress_policy_for,
    home_for_run,
    programs_of,
    reporters_of,
)
from bot.agents.setup import run_setup
from bot.domain import issue_text as snapshot
from bot.domain import render
from bot.domain.checks import failing_checks, reported_by_others
from bot.domain.classify import RunFacts
from bot.domain.commands import Standing
from bot.domain.issue_text import IssueText, Snapshot
from bot.domain.jobs import RunMode
from bot.domain.leaks import Leak, find_leaks, masked, parse_added_lines, passed_values
from bot.domain.model import AgentResult, IssueRef, Run, RunState, utcnow
from bot.domain.plans.admission import (
    Admission,
    Admit,
    Arrival,
    Fact,
    Learn,
    RefusedConfig,
    Slot,
    Stack,
    StartFacts,
    Window,
    admit,
    arrival,
)
from bot.domain.plans.ending import End, after_agent, ended
from bot.domain.render import Continuation, ReviewComment, ReviewSummary
from bot.domain.repo_config import InvalidRepoConfig, apply_repo_config
from bot.domain.resources import Issue, Label, Repository, User
from bot.domain.spend import Budgets, Spending
from bot.edges.api import (
    learn_app_id,
    learn_bot_user_id,
    list_check_runs,
    list_review_comments,
    list_reviews,
    load_repo_config,
    read_combined_status,
    read_issue,
    read_pull,
    read_repository,
)
from bot.edges.git import SALVAGE_CAP, GitError, Salvage, Workspace, branch_name
from bot.edges.github import GitHubApp, GitHubClient, github_app
from bot.edges.store import Claim, KeptSalvage, LockLost
from bot.ops.logs import log_context
from bot.ops.metrics import agent_usage
from bot.ops.worker import stopping
from bot.workflows import pulls
from bot.workflows.chain import stack_base
from bot.workflows.conclude import policy_of, report
from bot.workflows.execute import conclude, execute, record
from bot.workflows.labels import set_state_label
from bot.workflows.remotes import ForkMissing, Remotes, remotes_of
from bot.workflows.services import Services
from bot.workflows.standing import queuer_standing, standing_of
from bot.workflows.steer import with_chosen_agent
from bot.workflows.transcripts import keep_transcript

log = logging.getLogger(__name__)

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
    agent: str | None = None,
) -> Run | None:
    """Claim the issue and run one attempt at it; None when there was nothing to do.

    queued_by is who put the queue label on, for a fresh run; when it is not known,
    the issue's events say. text is the issue as it was queued, for a fresh run: it
    is recorded once queued_by is known to steer, and every attempt's brief uses it.
    labels are what its label event showed on the issue, where it did. agent is the
    one a steerer's `/baton start --agent` picked, where one did.
    """
    store = services.store
    paused = store.paused_since(issue.repo) is not None
    claim = None if paused else store.claim(issue)  # a paused repository's start is held
    facts = Arrival(
        issue=issue,
        mode=mode,
        after=after,
        text=text,
        paused=paused,
        claimed=claim is not None,
        holder=store.lock_holder(issue) if claim is None else None,
        handing_over=claim is None and _handing_over(store.latest_run(issue), after),
        agent=agent,
    )
    stop = arrival(services.settings, facts, utcnow())
    if stop is not None:
        log.log(stop.level, "%s: %s", issue, stop.note)
        record(services, stop.plan)
        return None
    assert claim is not None  # arrival() lets only a claimed start go on
    try:
        async with github_app(services.settings, services.store) as app:
            attempt = _Attempt(services, app, claim, mode, after, queued_by, text, labels, agent)
            return await attempt.execute()
    finally:
        services.store.release_run_slot(issue)
        services.store.release(claim)


def _handing_over(latest: Run | None, after: int) -> bool:
    """Return whether the latest run is the ended attempt a start after `after` follows."""
    return latest is not None and latest.attempt == after and not latest.state.is_live


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
    if pull.state != "open" or pull.head.ref != previous.branch:
        log.info(
            "%s: PR #%d is %s; not inheriting it",
            previous.issue,
            previous.pr_number,
            "merged" if pull.merged else pull.state,
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
        agent: str | None = None,
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
        self.asked_agent = agent  # the agent `/baton start --agent` picked, when one did
        self.text = IssueText()  # what the brief uses: recorded by execute before any work
        self.stopped = False
        self.pushed_tip: str | None = None  # the branch's tip on GitHub, as Baton last pushed
        self.remotes: Remotes | None = None  # where the work is fetched and pushed, once learnt
        self.salvage: Salvage | None = None  # the uncommitted work this attempt last saved
        self.salvage_tip: str | None = None  # the salvage branch on GitHub, as last known
        self.heartbeat: asyncio.Task[None] | None = None
        self.setup_commands: tuple[str, ...] = ()
        self.draft_until_green = False  # the repository's file: a new pull request is a draft

    async def execute(self) -> Run | None:
        await self.app.learn_bot_login()  # so the web process can tell Baton's own events apart
        # The bot account's id: the address its commits are authored with.
        await learn_bot_user_id(self.app, self.store, self.issue.installation_id)
        gh = await self.app.for_installation(self.issue.installation_id)
        repo = await read_repository(gh, self.store, self.issue.repo)
        # The repository's file first: it may name the labels the issue is judged by.
        refused = await self._configure(gh, repo.default_branch)
        data = self._as_the_label_event_showed_it() or await read_issue(gh, self.issue)
        self.settings = await with_chosen_agent(
            self.services, gh, self.settings, self.issue, self.mode, self.asked_agent, data
        )
        start = await self._admission(gh, data, repo, refused)
        if not isinstance(start, Admit):
            if start.note is not None:
                log.log(start.level, "%s: %s", self.issue, start.note)
            await execute(self.services, gh, start.plan)
            return None
        self.text = start.text
        run = await self._claimed_run(gh, start)
        with log_context(run_id=run.run_id, attempt=run.attempt):
            return await self._begin(gh, run, data.label_names, start.previous, start.base, repo)

    async def _configure(self, gh: GitHubClient, base: str) -> RefusedConfig | None:
        """Apply the repository's file to the settings; return it, where it starts nothing.

        A file asking for more than the deployment allows starts nothing either, but
        its labels still name the issue's state.
        """
        try:
            file = await load_repo_config(gh, self.store, self.issue.repo, base)
        except InvalidRepoConfig as exc:
            invalid: InvalidRepoConfig | None = exc
        else:
            invalid = file.refused_by(self.settings)
            self.settings = apply_repo_config(self.settings, file.config)
            self.setup_commands = tuple(file.config.setup or ())
            self.draft_until_green = file.config.draft_until_green
        if invalid is None:
            return None
        problems = tuple(problem.within_file for problem in invalid.error.problems)
        return RefusedConfig(reason=str(invalid), blob_sha=invalid.blob_sha, problems=problems)

    async def _admission(
        self, gh: GitHubClient, data: Issue, repo: Repository, refused: RefusedConfig | None
    ) -> Admission:
        """Judge the claimed start, learning each fact admit() asks for, as it asks."""
        chain = self.store.chain_of(self.issue)
        facts = StartFacts(
            issue=self.issue,
            mode=self.mode,
            after=self.after,
            queued_by=self.queued_by,
            agent=self.asked_agent,
            open=not data.is_pull_request and data.state == "open",
            carried=frozenset(data.label_names),
            latest=self.store.latest_run(self.issue),
            chain_link=chain is not None and self.issue.number in chain.links,
            default_branch=repo.default_branch,
            refused_config=refused,
        )
        while True:
            verdict = admit(self.settings, facts, utcnow())
            if not isinstance(verdict, Learn):
                return verdict
            learnt = await self._learn(gh, verdict.fact, data, repo)
            facts = facts.model_copy(update={verdict.fact: learnt})

    async def _learn(
        self, gh: GitHubClient, fact: Fact, data: Issue, repo: Repository
    ) -> Standing | IssueText | Spending | Stack | Window | Slot:
        """Learn one fact of the start: it may cost GitHub calls, git, a write or a run slot."""
        if fact == "standing":
            standing = await queuer_standing(
                gh, self.store, self.settings, self.issue, self.queued_by
            )
            self.queued_by = standing.login if standing.allowed else None
            return standing
        if fact == "text":
            return self._queued_text(data)
        if fact == "spending":
            budgets = Budgets.of(self.services.settings, self.settings)
            return self.store.spending(self.issue.repo, budgets, utcnow())
        if fact == "stack":
            return await self._stack(gh, repo)
        if fact == "window":
            account = self.settings.policy.account
            return Window(reopens_at=self.store.window_reopens_at(account, utcnow()))
        limit = self.settings.max_concurrent_runs_per_repo
        assert fact == "slot" and limit is not None
        got = self.store.take_run_slot(self.issue, limit)
        return Slot(got=got, waiting=not got and self.store.is_waiting(self.issue))

    async def _claimed_run(self, gh: GitHubClient, start: Admit) -> Run:
        """Return the admitted attempt's run, as claimed: on its branch, with its PR if open."""
        previous, mode = start.previous, self.mode
        follows = previous if mode is RunMode.CONTINUE else None  # what a continuation takes over
        attempt = self.store.next_attempt(self.claim)
        branch = previous.branch if previous else branch_name(self.issue.number, start.text.title)
        run = Run.claimed(self.issue, attempt, branch, utcnow()).model_copy(
            update={
                "continuation_of": follows.attempt if follows else None,
                "queued_fresh": mode in (RunMode.FRESH, RunMode.CHAIN),
                "policy": self.settings.policy,
                "title": start.text.title,
                "agent": self.settings.agent,
            }
        )
        if follows is not None:
            run = run.model_copy(update=await inherit_open_pr(gh, follows))
        return run

    async def _begin(
        self,
        gh: GitHubClient,
        run: Run,
        labels: set[str],
        previous: Run | None,
        base: str,
        repo: Repository,
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
        # The claim is kept from here on: even the first writes may wait for their slots.
        self.heartbeat = heartbeat = asyncio.create_task(self._heartbeat())
        try:
            # In-progress goes on before any work starts: a crash never makes it look unclaimed.
            await self._label(gh, self.settings.labels.in_progress, labels)
            await report(self.services, gh, run)
            remotes = await self._remotes_for(repo)
            if remotes.fork is not None:
                # A pull request from a fork can only target the repository's own branch.
                pull_base = repo.default_branch if base != repo.default_branch else None
                run = self._move(run, run.state, head_owner=remotes.fork.owner, pull_base=pull_base)
            return await self._work(gh, run, previous, base)
        except LockLost:
            log.warning("%s: lost the issue's lock; stopping without touching GitHub", self.issue)
            return None
        except (GitError, HTTPException, AgentConfigError, ForkMissing, OSError) as exc:
            end = ended("infra-failed", RunState.FAILED, _one_line(exc), run.agent_result)
            return await self._end(gh, run, end)
        finally:
            heartbeat.cancel()

    def _as_the_label_event_showed_it(self) -> Issue | None:
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
        return Issue(
            number=self.issue.number,
            state="open",
            title=offered.title,
            body=offered.body,
            labels=tuple(Label(name=name) for name in shown),
        )

    def _queued_text(self, data: Issue) -> IssueText:
        """Record the text this attempt works from, if it is a new queueing's, and return it.

        A fresh start records the text it carries: the label event's, the sweep's
        read, or the one a paused repository held. A fresh start that carries none,
        or any attempt that finds none recorded, records the issue as read now.
        """
        store, issue, fresh = self.store, self.issue, self.mode is RunMode.FRESH
        current = store.queued_text(issue)
        offered = self.offered or (current.held if fresh and current is not None else None)
        if offered is None and (fresh or current is None or current.queued is None):
            title, body = data.title, data.body
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

    async def _remotes_for(self, repo: Repository) -> Remotes:
        """Return where this issue's work is fetched from and pushed to, learnt once."""
        if self.remotes is None:
            self.remotes = await remotes_of(
                self.app, self.settings, repo, self.issue.installation_id
            )
        return self.remotes

    def _pushes(self) -> Remotes:
        """Return the remotes learnt when the attempt began."""
        assert self.remotes is not None, "learnt in _begin, before any work"
        return self.remotes

    async def _stack(self, gh: GitHubClient, repo: Repository) -> Stack:
        """Return what a chain link builds on: its predecessor's branch, while that is unmerged.

        Never the base branch in place of a predecessor's: a tip that is gone, or
        a predecessor's worktree holding work it never committed, refuses the link.
        """
        chain = self.store.chain_of(self.issue)
        if chain is None or self.issue.number not in chain.links:
            return Stack()
        predecessor = await stack_base(gh, self.services, chain, self.issue.number)
        if predecessor is None:
            return Stack()
        workspace = self.services.workspace
        try:
            remotes = await self._remotes_for(repo)
        except ForkMissing as exc:
            return Stack(refusal=str(exc))
        await remotes.refresh(self.app, workspace)
        pred = f"#{predecessor.issue.number}"
        if await workspace.remote_branch(self.issue.repo, predecessor.branch) is None:
            return Stack(
                refusal=f"{pred}'s branch `{predecessor.branch}` no longer exists, so there is no "
                f"committed tip to build #{self.issue.number} on (Baton never builds a link "
                "on the base branch in its place). Restore the branch, or re-queue the "
                f"chain once {pred} is merged."
            )
        if await workspace.is_dirty(self.issue.repo, predecessor.issue.number):
            return Stack(
                refusal=f"{pred}'s worktree holds uncommitted work, so its branch is not the tip "
                f"#{self.issue.number} should build on. Commit and push it, or discard it, "
                "then re-queue the chain."
            )
        return Stack(branch=predecessor.branch)

    async def _label(self, gh: GitHubClient, label: str, labels: set[str] | None = None) -> None:
        """Make label the issue's one Baton state label (labels: what it carries, if known)."""
        await set_state_label(
            gh, self.store, self.services.dispatch, self.settings.labels, self.issue, label, labels
        )

    async def _work(
        self,
        gh: GitHubClient,
        run: Run,
        previous: Run | None,
        base: str,
    ) -> Run | None:
        run = self._move(run, RunState.PROVISIONING)
        workspace = self.services.workspace
        await remove_finished_worktrees(self.services, self.issue)
        mirror = await self._pushes().refresh(self.app, workspace)
        base_sha = await workspace.rev_parse(mirror, f"refs/remotes/origin/{base}")
        remote_tip = await workspace.remote_branch(self.issue.repo, run.branch)
        start = remote_tip if remote_tip and run.continuation_of is not None else base_sha
        worktree = await workspace.provision(
            self.issue.repo, self.issue.number, run.branch, start, (base, base_sha)
        )
        kept = self.store.kept_salvage(self.issue)
        self.salvage_tip = kept.sha if kept is not None else None
        salvaged = None
        if run.continuation_of is not None and kept is not None:
            salvaged = await workspace.salvaged(
                self.issue.repo, self.issue.number, start, kept.bundle
            )
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
        checkpoints = asyncio.create_task(self._checkpoint(run, start))
        try:
            result = await self._run_agent(run, worktree, run_dir, continuation)
        finally:
            checkpoints.cancel()
        if result.result_text:
            # The agent's report reaches the pull request and comments: no credential in it.
            values = passed_values(self.settings.agent_passthrough_env, os.environ)
            shown = await asyncio.to_thread(masked, result.result_text, values)
            result = result.model_copy(update={"result_text": shown})
        run = run.model_copy(update={"agent_result": result})
        self.store.add_metrics(agent_usage(result))
        self.store.record_spend(run)
        # However the agent ended, before the push can fail; masked in a thread, so a
        # megabyte of transcript never stops the heartbeat.
        await asyncio.to_thread(keep_transcript, self.services, run)
        if stopping():
            return await self._interrupted(gh, run, start)
        return await self._after_agent(gh, run, result, (start, base_sha))

    async def _after_agent(
        self,
        gh: GitHubClient,
        run: Run,
        result: AgentResult,
        built_on: tuple[str, str],
    ) -> Run | None:
        """Push what the agent committed; end the attempt as it ended, or open its PR.

        built_on is where the worktree started, and the base branch's tip.
        """
        start, base_sha = built_on
        workspace, repo = self.services.workspace, self.issue.repo
        head_sha = await workspace.collect(
            repo,
            self.issue.number,
            start,
            leftovers=f"Work on #{self.issue.number} (Baton, attempt {run.attempt})",
        )
        new_commits = await workspace.commits_since(repo, start, head_sha)
        changed = await workspace.has_diff(repo, base_sha, head_sha)
        # Known before the push, so the PR is opened with its list of files in one call.
        files = await pull_files(workspace, repo, base_sha, head_sha) if changed else []
        push_failure, leaks = None, await self._leaks(head_sha) if new_commits else []
        if new_commits and not leaks:
            # Pushed even when the agent stopped short: a continuation builds on it, here or
            # on another machine, and an operator's stop keeps the work.
            # Recorded before the push, so a check result that races the PR finds its run.
            run = self._move(run, run.state, head_sha=head_sha)
            push_failure = await self._push(run, head_sha)
        end = after_agent(result, new_commits, changed, push_failure, leaks)
        if end is not None:
            return await self._end(gh, run, end)
        return await self._open_pull(gh, run, result, files)

    async def _leaks(self, head: str) -> list[Leak]:
        """Return the credentials the commits up to head that GitHub lacks would publish.

        Scanned in a thread: a large diff never stops the heartbeat.
        """
        diff = await self.services.workspace.unpublished_diff(self.issue.repo, head)
        values = passed_values(self.settings.agent_passthrough_env, os.environ)
        return await asyncio.to_thread(find_leaks, parse_added_lines(diff), values)

    async def _push(self, run: Run, head_sha: str) -> str | None:
        """Push the attempt's commits to its branch; return why that failed, where it did."""
        self._ensure_claim()
        try:
            await self._pushes().push(
                self.app, self.services.workspace, run.branch, head_sha, self.pushed_tip
            )
        except GitError as exc:
            return f"pushing {run.branch} failed: {_one_line(exc)}"
        self._drop_salvage()
        return None

    async def _open_pull(
        self, gh: GitHubClient, run: Run, result: AgentResult, files: list[str]
    ) -> Run | None:
        """Open the attempt's PR; put it off when GitHub asks Baton to wait or fails for now."""
        report_text = result.result_text or ""
        title = render.pr_title(self.text.title, self.issue.number)
        body = render.pr_body(run, report_text, files)
        run = self._move(run, run.state, changed_files=files)
        try:
            opened = await pulls.open_pull(gh, run, title, body, self.draft_until_green)
        except pulls.PUT_OFF_BY as exc:
            decided = pulls.put_off_by(run, exc, self.draft_until_green)
            if isinstance(decided, End):
                return await self._end(gh, run, decided)
            self.store.save_run(decided, self.claim)
            await pulls.after_put_off(self.services, gh, decided)
            return decided
        except HTTPException as exc:
            return await self._end(gh, run, pulls.failed(run, exc))
        run = self._move(
            run,
            RunState.PUSHED_PENDING,
            pr_number=opened.pull.number,
            pr_url=opened.pull.html_url,
            drafts_refused=opened.drafts_refused,
        )
        await pulls.after_opened(self.services, gh, run, opened)
        return run

    async def _continuation(self, gh: GitHubClient, previous: Run | None) -> Continuation | None:
        """Return what the agent needs to know about the attempt it continues."""
        if previous is None:
            return None
        checks = []
        if previous.failure_class == "checks-failed" and previous.head_sha:
            runs = await list_check_runs(gh, self.issue.repo, previous.head_sha)
            status = await read_combined_status(gh, self.issue.repo, previous.head_sha)
            required = policy_of(self.services, previous).required_checks
            reported = [run.model_dump() for run in runs]
            others = reported_by_others(reported, await learn_app_id(self.app, self.store))
            checks = failing_checks(others, status.model_dump(), required)
        review = None
        if previous.review_id is not None and previous.pr_number is not None:
            review = await self._review(gh, previous.pr_number, previous.review_id)
        return Continuation(previous=previous, failing_checks=tuple(checks), review=review)

    async def _review(self, gh: GitHubClient, pull: int, review_id: int) -> ReviewSummary | None:
        reviews = await list_reviews(gh, self.issue.repo, pull)
        found = next((r for r in reviews if r.id == review_id), None)
        if found is None or found.user is None or not await self._steers(gh, found.user, "review"):
            return None
        comments = [
            ReviewComment(path=c.path, line=c.line, body=c.body)
            for c in await list_review_comments(gh, self.issue.repo, pull)
            if c.pull_request_review_id == review_id  # the reviewer's, judged above
        ]
        return ReviewSummary(
            author=found.user.login,
            body=found.body or "",
            comments=tuple(comments),
        )

    async def _steers(self, gh: GitHubClient, user: User, what: str) -> bool:
        """Return whether what a user wrote may reach the brief: only a steerer's words do."""
        standing = await standing_of(
            gh, self.store, self.settings, self.issue.repo, user.login, user.type
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
        # Off the loop: the home holds what the agent left, as many files as it made.
        home = await asyncio.to_thread(
            home_for_run, self.settings, self.issue.repo, self.issue.number
        )
        policy = egress_policy_for(self.settings)
        async with egress_for_run(policy, str(self.issue)) as (egress_dir, proxy):
            jail = self.services.jails.make(
                worktree=worktree,
                home=home.path,
                pinned=home.pinned,
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
                caches_of=self.issue.repo,
                reporters=reporters_of(self.settings),
            )
            request = AgentRequest(
                run_id=run.run_id,
                issue_number=self.issue.number,
                attempt=run.attempt,
                worktree=worktree,
                brief_path=brief_path,
                run_dir=run_dir,
                deadline=utcnow() + timedelta(seconds=self.settings.agent_wall_clock_seconds),
                home=home.path,
                passthrough_env=tuple(self.settings.agent_passthrough_env),
                held_env=policy.agent_env if policy is not None else {},
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

    async def _checkpoint(self, run: Run, start: str) -> None:
        """Save the agent's work every few minutes, while it works.

        A worker that dies then loses at most the work since the last checkpoint:
        the continuation, on any machine, starts from what was pushed.
        """
        while True:
            await asyncio.sleep(self.settings.checkpoint_seconds)
            await self._save(run, start)

    async def _save(self, run: Run, start: str) -> None:
        """Push what the agent has committed to the branch; keep what it has not as salvage.

        The salvage is a commit on the agent's last commit, kept in Redis as a bundle, so
        whichever machine continues the issue starts from it. It never goes to GitHub:
        there, any ref pushed may start a workflow with the repository's secrets.
        """
        workspace = self.services.workspace
        repo, number = self.issue.repo, self.issue.number
        try:
            head = await workspace.collect(repo, number, start, None)
            if head not in (start, self.pushed_tip):
                if await self._kept_back(head):
                    return
                self._ensure_claim()
                await self._pushes().push(self.app, workspace, run.branch, head, self.pushed_tip)
                self.pushed_tip = head
                self.store.record_checkpoint(self.issue, run.attempt, head)
                log.info("%s: attempt %d checkpointed at %s", self.issue, run.attempt, head[:12])
            message = f"Uncommitted work on #{number} (Baton, attempt {run.attempt}, salvaged)"
            salvage = await workspace.salvage(repo, number, start, self.salvage, message)
            if salvage is None or salvage.sha == self.salvage_tip:
                return
            if await self._kept_back(salvage.sha):
                return
            since = (start,) if self.pushed_tip is None else (start, self.pushed_tip)
            bundle = await workspace.salvage_bundle(repo, number, since)
            if bundle is None:
                log.warning(
                    "%s: salvage over %d bytes kept on this machine", self.issue, SALVAGE_CAP
                )
                self._drop_salvage()  # an older one kept would be restored as if it were this
                self.salvage = salvage
                return
            self.store.keep_salvage(self.claim, KeptSalvage(sha=salvage.sha, bundle=bundle))
        except (LockLost, GitError, HTTPException, OSError) as exc:
            log.warning("%s: checkpoint not pushed: %s", self.issue, _one_line(exc))
            return
        self.salvage, self.salvage_tip = salvage, salvage.sha
        log.info(
            "%s: attempt %d salvaged its edits at %s", self.issue, run.attempt, salvage.sha[:12]
        )

    async def _kept_back(self, head: str) -> bool:
        """Tell whether a checkpoint is kept from GitHub for the credentials it would publish.

        The attempt's own end escalates them, once, naming each; a checkpoint only says so.
        """
        leaks = await self._leaks(head)
        if leaks:
            log.warning("%s: checkpoint kept back: it carries %s", self.issue, leaks[0])
        return bool(leaks)

    def _drop_salvage(self) -> None:
        """Forget the issue's kept salvage: its work is on the branch now, or outgrown."""
        if self.salvage_tip is None:
            return
        self.store.drop_salvage(self.issue, self.salvage_tip)
        self.salvage = self.salvage_tip = None
        log.info("%s: dropped the kept salvage", self.issue)

    async def _interrupted(self, gh: GitHubClient, run: Run, start: str) -> Run | None:
        """End a run its worker is stopping: save its work, give the issue to another worker.

        Charged to nothing; the claim goes back before the continuation is queued, so
        whichever worker takes that job can claim the issue at once.
        """
        log.warning("%s: the worker is stopping; saving attempt %d's work", self.issue, run.attempt)
        await self._save(run, start)
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

    async def _end(self, gh: GitHubClient, run: Run, end: End) -> Run | None:
        """Record how the attempt ended, then classify it and perform its recovery."""
        run = self._move(run, end.state, reason=end.reason)
        log.warning(
            "%s: attempt %d ended %s: %s", self.issue, run.attempt, run.state.value, end.reason
        )
        return await conclude(self.services, gh, run, end.facts)

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
    "command": "it was when `/baton start` queued it",
    "sweep": "the sweep read it (its label event was lost)",
    "claim": "read now (no text was recorded when it was queued)",
}


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:500]
