"""Keeping Baton's open pull requests mergeable after a push to their base branch.

The decisions are pure (bot/domain/plans/mergeable.py); this module reads the run
records, GitHub's pull requests and the repository's file, tries merges in Baton's
mirror where a decision needs one, and performs what was decided. Every step is
checked against the stored run, so a repeated look, or two pushes looked at together,
change each run once.
"""

from __future__ import annotations

import logging
from functools import partial

from bot.domain.model import Run, utcnow
from bot.domain.plans.mergeable import (
    Action,
    Decision,
    Look,
    PullFacts,
    TrialMerge,
    branch_updated,
    conflict_plan,
    conflicted,
    decide,
    next_look,
    sort_pulls,
    updated_plan,
)
from bot.domain.repo_config import InvalidRepoConfig
from bot.edges.api import load_repo_config, read_pull, read_repository, update_pull_branch
from bot.edges.git import GitError
from bot.edges.github import GitHubApp, GitHubClient, github_app
from bot.edges.store import Store
from bot.workflows.conclude import policy_of
from bot.workflows.execute import execute, record
from bot.workflows.remotes import Remotes, remotes_of
from bot.workflows.services import Services

log = logging.getLogger(__name__)


async def keep_mergeable(services: Services, look: Look) -> str:
    """Take one look at Baton's open pull requests on the pushed branch; return its outcome.

    Look 0 only finds them, without a call to GitHub, and takes the first look a little
    later, once GitHub has had time to compare them with the new base.
    """
    store = services.store
    numbers = look.pulls or tuple(store.open_pulls(look.repo, look.base))
    runs = {number: _run_of(store, look, number) for number in numbers}
    looked, ended = sort_pulls(look.base, runs)
    for number in ended:
        store.forget_open_pull(look.repo, number)
    if not looked:
        return "nothing to look at"
    if look.number == 0:
        record(services, next_look(look, looked, ()))
        return "looking"
    async with github_app(services.settings, store) as app:
        gh = await app.for_installation(look.installation_id)
        checker = _Checker(services, app, gh, look)
        for number in looked:
            run = runs[number]
            assert run is not None  # looked at: it has a run
            await checker.check(run)
        following = next_look(look, checker.pending, checker.updating)
        record(services, following)
    return "looking again" if following else "looked"


def _run_of(store: Store, look: Look, number: int) -> Run | None:
    """Return the newest run on a pull request, if one is recorded."""
    found = store.run_for_pull(look.repo, number)
    return store.run(*found) if found is not None else None


class _Checker:
    """One look's work on its pull requests: what it read once, and what it left undecided."""

    def __init__(self, services: Services, app: GitHubApp, gh: GitHubClient, look: Look) -> None:
        self.services = services
        self.app = app
        self.gh = gh
        self.look = look
        self.pending: list[int] = []
        self.updating: list[int] = []
        self._update_branch: bool | None = None
        self._fetched = False
        self._remotes: Remotes | None = None

    async def check(self, run: Run) -> None:
        """Read the run's pull request, decide what it needs and do it."""
        assert run.pr_number is not None
        pull = await read_pull(self.gh, self.look.repo, run.pr_number)
        facts = PullFacts(
            run=run, pull=pull, look=self.look, update_branch=await self.update_branch()
        )
        decision = decide(facts)
        if decision.action is Action.TRY_MERGE:
            facts = facts.model_copy(update={"merge": await self._trial_merge(facts)})
            decision = decide(facts)
        log.info(
            "%s: pull request #%d after %s@%.12s: %s (%s)",
            run.issue,
            pull.number,
            self.look.base,
            self.look.after,
            decision.action.value,
            decision.reason,
        )
        await self._act(facts, decision)

    async def update_branch(self) -> bool:
        """Return whether the repository's file asks for behind branches to be updated.

        Read once a look (within the hour, from what was read then); an invalid file
        asks for nothing.
        """
        if self._update_branch is None:
            store, repo = self.services.store, self.look.repo
            data = await read_repository(self.gh, store, repo)
            try:
                file = await load_repo_config(self.gh, store, repo, data.default_branch)
            except InvalidRepoConfig as exc:
                log.warning("%s: not updating branches: its file is invalid: %s", repo, exc)
                self._update_branch = False
            else:
                self._update_branch = file.config.update_branch
        return self._update_branch

    async def remotes(self) -> Remotes:
        """Return where the repository's work is fetched from and pushed to, learnt once."""
        if self._remotes is None:
            services = self.services
            data = await read_repository(self.gh, services.store, self.look.repo)
            self._remotes = await remotes_of(
                self.app, services.settings, data, self.look.installation_id
            )
        return self._remotes

    async def _fetch_once(self) -> None:
        """Fetch the repository (and the fork's branches) into the mirror, once a look."""
        if not self._fetched:
            await (await self.remotes()).refresh(self.app, self.services.workspace)
            self._fetched = True

    async def _trial_merge(self, facts: PullFacts) -> TrialMerge:
        """Merge the base into the pull request's head in the mirror, fetched once a look."""
        workspace, repo = self.services.workspace, self.look.repo
        await self._fetch_once()
        head = facts.pull.head.sha or facts.run.head_sha
        assert head is not None
        tried = await workspace.trial_merge(repo, facts.run.branch, head, self.look.base)
        return TrialMerge(parents=tried.parents, behind=tried.behind, conflicts=tried.conflicts)

    async def _act(self, facts: PullFacts, decision: Decision) -> None:
        number = facts.pull.number
        match decision.action:
            case Action.FORGET:
                self.services.store.forget_open_pull(self.look.repo, number)
            case Action.LOOK_AGAIN:
                self.pending.append(number)
            case Action.CONTINUE:
                await self._conflicted(facts)
            case Action.UPDATE:
                await self._update(facts)
            case Action.RECORD_HEAD:
                await self._record_head(facts)

    async def _conflicted(self, facts: PullFacts) -> None:
        """End the run as a merge conflict, naming the files; its recovery follows."""
        run, merge = facts.run, facts.merge
        assert merge is not None and run.head_sha is not None
        failed = self.services.store.update_run(
            run.issue,
            run.attempt,
            partial(
                conflicted,
                base=self.look.base,
                head=run.head_sha,
                files=merge.conflicts,
                at=utcnow(),
            ),
        )
        if failed is not None:
            await execute(self.services, self.gh, conflict_plan(failed))

    async def _update(self, facts: PullFacts) -> None:
        """Ask GitHub to merge the base into the branch; a later look finds its merge.

        A fork's branch GitHub cannot update (maintainers never edit an organization's
        fork): Baton makes the same merge and pushes it there itself.
        """
        run = facts.run
        assert run.head_sha is not None
        remotes = await self.remotes()
        if remotes.fork is not None:
            if await self._merge_into_fork(run, remotes):
                self.updating.append(facts.pull.number)
            return
        refused = await update_pull_branch(self.gh, self.look.repo, facts.pull.number, run.head_sha)
        if refused is not None:
            log.info("%s: GitHub did not update the branch: %s", run.issue, refused)
            return
        self.updating.append(facts.pull.number)

    async def _merge_into_fork(self, run: Run, remotes: Remotes) -> bool:
        """Merge the base into the run's branch in the mirror and push it to the fork,
        leased on the run's head; return whether it went."""
        assert run.head_sha is not None
        workspace = self.services.workspace
        await self._fetch_once()
        merged = await workspace.merge_base_in(
            self.look.repo, run.branch, run.head_sha, self.look.base
        )
        if merged is None:
            log.info("%s: the base does not merge into %s cleanly", run.issue, run.branch)
            return False
        try:
            await remotes.push(self.app, workspace, run.branch, merged, run.head_sha)
        except GitError as exc:
            log.info("%s: the fork's branch was not updated: %s", run.issue, exc)
            return False
        return True

    async def _record_head(self, facts: PullFacts) -> None:
        """Make the merge GitHub made the run's head, and settle it as a pushed head."""
        run, merge, head = facts.run, facts.merge, facts.pull.head.sha
        assert merge is not None and head is not None
        at = utcnow()
        store = self.services.store
        moved = store.update_run(
            run.issue,
            run.attempt,
            partial(branch_updated, head=head, parents=merge.parents, base=self.look.base, at=at),
        )
        if moved is None:
            return
        # Taken once the head is the run's: a result noted before then is settled now.
        checked = store.take_check_result(self.look.repo, head)
        wait_s = policy_of(self.services, moved).no_checks_after_s
        await execute(
            self.services, self.gh, updated_plan(moved, self.look.base, checked, wait_s, at)
        )
