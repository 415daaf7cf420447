"""Forks and the pull requests opened from them, as GitHub keeps them.

A fork is a repository of its own, with its own git, whose `parent` is the repository it
was made from. A pull request from a fork's branch lives in the parent: the parent keeps
its head under `refs/pull/<number>/head`, moves it when the fork's branch moves, and runs
its own CI on it for the `pull_request` event, with none of its secrets (GitHub: "Using
secrets in GitHub Actions": "secrets are not passed to workflows that are triggered by a
pull request from a fork"). Actions is off in a fork until its owner turns it on, so a
push to a fork runs no CI of its own.
"""

from __future__ import annotations

from bot.sandbox import checks, ci, events
from bot.sandbox.auth import CI_APP_ID
from bot.sandbox.hub import ROLES, Hub
from bot.sandbox.state import Issue, Repo, default_labels, utc_now

# Names a fork takes when its parent's name is taken on the account: name-1, name-2, …
FORK_NAME_TRIES = 100


def fork_of(hub: Hub, parent: Repo, owner: str) -> Repo | None:
    """Return owner's fork of parent, if owner has one."""
    return next(
        (
            r
            for r in hub.state.repos
            if r.parent_id == parent.id and r.owner.casefold() == owner.casefold()
        ),
        None,
    )


def pulls_from(hub: Hub, fork: Repo, branch: str) -> list[tuple[Repo, Issue]]:
    """Return the open pull requests, in other repositories, whose head is a fork's branch."""
    return [
        (repo, issue)
        for repo in hub.state.repos
        for issue in repo.issues.values()
        if issue.pull is not None
        and issue.state == "open"
        and issue.pull.head_repo_id == fork.id
        and issue.pull.head_ref == branch
    ]


def free_name(hub: Hub, owner: str, wanted: str) -> str | None:
    """Return the first of wanted, wanted-1, wanted-2 … that owner has no repository named."""
    for n in range(FORK_NAME_TRIES):
        name = wanted if n == 0 else f"{wanted}-{n}"
        if hub.repo(owner, name) is None:
            return name
    return None


async def create(hub: Hub, parent: Repo, owner: str, name: str, default_only: bool) -> Repo:
    """Make owner's fork of parent named name, with its branches (or its default one)."""
    now = utc_now()
    fork = Repo(
        id=hub.state.next_id(),
        owner=owner,
        name=name,
        description=parent.description,
        private=parent.private,
        default_branch=parent.default_branch,
        created_at=now,
        updated_at=now,
        pushed_at=now,
        labels=default_labels(hub.state.next_id),
        parent_id=parent.id,
    )
    git = hub.git(fork)
    await git.init(parent.default_branch)
    wanted = [parent.default_branch] if default_only else ["*"]
    await git.fetch_from(hub.git(parent), *(f"+refs/heads/{b}:refs/heads/{b}" for b in wanted))
    hub.user(owner)
    hub.state.repos.append(fork)
    hub.changed()
    return fork


async def take_head(hub: Hub, base: Repo, fork: Repo, branch: str) -> str | None:
    """Bring a fork's branch into its parent's git; return its tip (None: no such branch)."""
    tip = await hub.git(fork).branch_tip(branch)
    if tip is not None:
        await hub.git(base).fetch_from(hub.git(fork), tip)
    return tip


async def head_moved(
    hub: Hub, fork: Repo, branch: str, before: str, after: str, sender: str
) -> None:
    """Follow a push to a fork's branch in every pull request it heads: the parent's
    `refs/pull/<n>/head` moves, `synchronize` is sent, and the parent's CI runs on it."""
    for base, issue in pulls_from(hub, fork, branch):
        assert issue.pull is not None
        if issue.pull.head_sha == after:
            continue
        async with hub.lock(base):
            await hub.git(base).fetch_from(hub.git(fork), after)
            await hub.git(base).set_pull_head(issue.number, after)
            issue.pull.head_sha = after
            events.touch(base, issue)
            await events.announce(
                hub, base, issue, "synchronize", sender, before=before, after=after
            )
            await run_pull_ci(hub, base, issue, before, sender)
        hub.changed()


async def run_pull_ci(hub: Hub, base: Repo, issue: Issue, before: str | None, sender: str) -> None:
    """Run the base repository's CI on a fork's pull request head, with no secrets.

    The suite has no branch and lists no pull request, as GitHub's does for a head in a
    fork (the check_suite webhook: "When the check suite's head_branch is in a forked
    repository it will be null and the pull_requests array will be empty").
    """
    assert issue.pull is not None
    head = issue.pull.head_sha
    names = await ci.planned_checks(hub.git(base), head)
    if not names:
        return
    suite, new = checks.suite_for(hub, base, CI_APP_ID, head, None, before)
    if not new:
        return
    suite.from_fork = True
    await checks.announce_suite(hub, base, suite, sender)
    if needs_approval(hub, base, issue):
        suite.awaiting_approval = True
        body = {"check_suite": await checks.suite_json(hub, base, suite, webhook=True)}
        hub.emit(base, "check_suite", sender, body, "completed")
        return
    await checks.start_runs(hub, base, suite, names)


def needs_approval(hub: Hub, base: Repo, issue: Issue) -> bool:
    """Tell whether a fork's pull request waits for a maintainer before CI runs on it.

    GitHub ("Approving workflow runs from public forks"): by the repository's policy, a
    first-time contributor (no pull request merged into it yet) or every outside
    contributor waits; "new to GitHub" applies to no sandbox account.
    """
    assert issue.pull is not None and issue.pull.head_repo_id is not None
    fork = hub.repo_by_id(issue.pull.head_repo_id)
    contributor = fork.owner if fork is not None else issue.user
    if base.fork_pr_approval == "first_time_contributors_new_to_github":
        return False
    if base.fork_pr_approval == "all_external_contributors":
        return ROLES.index(hub.role(base, contributor)) < ROLES.index("write")
    return not any(
        i.pull is not None and i.pull.merged_at and i.pull.head_repo_id == issue.pull.head_repo_id
        for i in base.issues.values()
    )


async def approve(hub: Hub, base: Repo, issue: Issue, sender: str) -> bool:
    """Run the CI a fork's pull request head waits with, as "Approve and run workflows"
    does on its page; return whether any waited."""
    assert issue.pull is not None
    waiting = [
        s for s in base.check_suites if s.awaiting_approval and s.head_sha == issue.pull.head_sha
    ]
    for suite in waiting:
        suite.awaiting_approval = False
        names = await ci.planned_checks(hub.git(base), suite.head_sha)
        await checks.start_runs(hub, base, suite, names)
    hub.changed()
    return bool(waiting)
