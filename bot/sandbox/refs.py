"""Branch updates (pushes, merges, deletions) and everything GitHub does in response."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from bot.sandbox import checks, events, forks, pulls
from bot.sandbox.git_backend import ZERO_SHA
from bot.sandbox.hub import Hub
from bot.sandbox.references import closing_references
from bot.sandbox.rest import ApiError, Json
from bot.sandbox.state import Issue, Repo, utc_now

PUSH_COMMITS = 20
# How long after answering "Update branch" GitHub's background merge is made here.
UPDATE_BRANCH_DELAY = 1.0

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RefUpdate:
    """One branch moving from `before` to `after` (ZERO_SHA for created/deleted)."""

    branch: str
    before: str
    after: str


def own_ref(repo: Repo, spec: str) -> str | None:
    """Read `ref` or `owner:ref` of this repository's owner; None for other owners (no forks)."""
    owner, sep, ref = spec.partition(":")
    if not sep:
        return spec
    return ref if owner.casefold() == repo.owner.casefold() else None


async def apply(hub: Hub, repo: Repo, updates: list[RefUpdate], sender: str) -> None:
    """Announce branch updates, sync the pull requests they touch and start CI on new heads."""
    for update in updates:
        repo.pushed_at = repo.updated_at = utc_now()
        await _announce_push(hub, repo, update, sender)
        if update.after == ZERO_SHA:
            await _branch_deleted(hub, repo, update.branch, sender)
            continue
        await forks.head_moved(hub, repo, update.branch, update.before, update.after, sender)
        for issue in pulls.open_pulls(repo):
            assert issue.pull is not None
            if (
                issue.pull.head_repo_id is None
                and issue.pull.head_ref == update.branch
                and issue.pull.head_sha != update.after
            ):
                issue.pull.head_sha = update.after
                events.touch(repo, issue)
                await events.announce(
                    hub,
                    repo,
                    issue,
                    "synchronize",
                    sender,
                    before=update.before,
                    after=update.after,
                )
        await checks.queue_suites(hub, repo, update.branch, update.before, update.after, sender)
        await checks.start_ci(hub, repo, update.branch, update.before, update.after, sender)
    hub.changed()


async def _announce_push(hub: Hub, repo: Repo, update: RefUpdate, sender: str) -> None:
    git = hub.git(repo)
    created, deleted = update.before == ZERO_SHA, update.after == ZERO_SHA
    html = hub.render.repo_html(repo)
    body: Json = {
        "ref": f"refs/heads/{update.branch}",
        "before": update.before,
        "after": update.after,
        "pusher": {"name": sender, "email": hub.identity(sender).email},
        "created": created,
        "deleted": deleted,
        "forced": not (created or deleted)
        and not await git.is_ancestor(update.before, update.after),
        "base_ref": None,
        "compare": f"{html}/compare/{update.before[:12]}...{update.after[:12]}",
        "commits": [],
        "head_commit": None,
    }
    if not deleted:
        tips = await git.branches()
        exclude = (
            [update.before]
            if not created
            else [sha for b, sha in tips.items() if b != update.branch]
        )
        commits = await git.log(update.after, exclude, PUSH_COMMITS, with_files=True)
        if commits and commits[-1].sha == update.after:
            head = commits[-1]
        else:
            head = (await git.log(update.after, [], 1, with_files=True))[0]
        body["commits"] = [hub.render.push_commit(repo, c) for c in commits]
        body["head_commit"] = hub.render.push_commit(repo, head)
        if created:
            body["compare"] = f"{html}/commit/{update.after[:12]}"
    hub.emit(repo, "push", sender, body)


async def _branch_deleted(hub: Hub, repo: Repo, branch: str, sender: str) -> None:
    """Close pull requests from a deleted branch; retarget or close those into it, like GitHub."""
    for base, pull in forks.pulls_from(hub, repo, branch):
        async with hub.lock(base):
            await events.set_state(hub, base, pull, "closed", None, sender)
    for issue in pulls.open_pulls(repo):
        assert issue.pull is not None
        if issue.pull.head_ref == branch and issue.pull.head_repo_id is None:
            await events.set_state(hub, repo, issue, "closed", None, sender)
        elif issue.pull.base_ref == branch:
            merged_from = next(
                (
                    i.pull.base_ref
                    for i in repo.issues.values()
                    if i.pull is not None
                    and i.pull.merged_at
                    and i.pull.head_ref == branch
                    and i.pull.head_repo_id is None
                ),
                None,
            )
            if merged_from and await hub.git(repo).branch_tip(merged_from):
                await events.change_base(hub, repo, issue, merged_from, sender)
            else:
                await events.set_state(hub, repo, issue, "closed", None, sender)


async def delete_branch(hub: Hub, repo: Repo, branch: str, sender: str) -> bool:
    """Delete a branch through the API; False if it does not exist."""
    async with hub.lock(repo):
        git = hub.git(repo)
        tip = await git.branch_tip(branch)
        if tip is None:
            return False
        await git.delete_branch(branch, tip)
        await apply(hub, repo, [RefUpdate(branch, tip, ZERO_SHA)], sender)
        return True


async def merge(
    hub: Hub,
    repo: Repo,
    issue: Issue,
    method: str,
    expected_sha: str | None,
    title: str | None,
    message: str | None,
    merger: str,
) -> str:
    """Merge a pull request into its base branch with a real merge (or squash) commit."""
    pull = issue.pull
    assert pull is not None
    if issue.state != "open" or pull.draft:
        raise ApiError(405, "Pull Request is not mergeable")
    if method == "rebase":
        raise ApiError(405, "Rebase merges are not allowed on this repository.")
    if expected_sha and expected_sha != pull.head_sha:
        raise ApiError(409, "Head branch was modified. Review and try the merge again.")
    async with hub.lock(repo):
        git = hub.git(repo)
        base = await git.branch_tip(pull.base_ref)
        tree = await git.merge_tree(base, pull.head_sha) if base else None
        if base is None or tree is None:
            raise ApiError(405, "Pull Request is not mergeable")
        commits = await git.log(pull.head_sha, [base], 250)
        if method == "squash":
            title = title or f"{issue.title} (#{issue.number})"
            default = "\n\n".join(f"* {c.message}" for c in commits)
            parents = [base]
        else:
            head_owner = hub.render.head_repo(repo, pull)
            source = head_owner.owner if head_owner else "unknown"
            title = title or f"Merge pull request #{issue.number} from {source}/{pull.head_ref}"
            default = issue.title
            parents = [base, pull.head_sha]
        text = "\n\n".join(
            part for part in (title, default if message is None else message) if part
        )
        sha = await git.commit_tree(tree, parents, text + "\n", hub.identity(merger))
        await git.update_ref(pull.base_ref, sha, base)
        pull.base_sha = base
        pull.merged_at = utc_now()
        pull.merge_commit_sha = sha
        pull.merged_by = merger
        issue.state = "closed"
        issue.closed_at = pull.merged_at
        events.touch(repo, issue)
        await events.announce(hub, repo, issue, "closed", merger)
        if pull.base_ref == repo.default_branch:
            texts = [issue.body or "", *(c.message for c in commits)]
            await _close_referenced(hub, repo, texts, merger)
        await apply(hub, repo, [RefUpdate(pull.base_ref, base, sha)], merger)
    if repo.delete_branch_on_merge and pull.head_repo_id is None:
        await delete_branch(hub, repo, pull.head_ref, merger)
    return sha


async def update_branch(
    hub: Hub, repo: Repo, issue: Issue, expected_sha: str | None, sender: str
) -> None:
    """Accept "Update branch": refuse what cannot merge, and merge later, as GitHub does.

    GitHub answers 202 Accepted and makes the merge in the background ("Updating pull
    request branch."), so the head moves, and `push` and `synchronize` are sent, only
    after the answer: the merge is made UPDATE_BRANCH_DELAY later. Refused at once (422)
    for a closed pull request, a head other than expected_sha, a base the head already
    contains, or a merge that conflicts.
    """
    async with hub.lock(repo):
        head, _, _ = await _merge_of(hub, repo, issue, expected_sha)
    hub.spawn(_merge_base_later(hub, repo, issue, head, sender))


async def _merge_of(
    hub: Hub, repo: Repo, issue: Issue, expected_sha: str | None
) -> tuple[str, str, str]:
    """Return the head, base and merged tree of an update-branch, or raise GitHub's 422."""
    pull = issue.pull
    assert pull is not None
    if issue.state != "open":
        raise ApiError(422, "Pull request is closed.")
    if pull.head_repo_id is not None:
        # The sandbox's forks are closed to maintainers' edits, as an organization's fork
        # always is on GitHub ("Allowing changes to a pull request branch created from a
        # fork": only a user-owned fork can allow them).
        raise ApiError(422, "Maintainers are not allowed to edit this pull request's head.")
    git = hub.git(repo)
    head = pull.head_sha
    if expected_sha is not None and expected_sha != head:
        raise ApiError(422, "expected head sha didn't match current head ref.")
    base = await git.branch_tip(pull.base_ref)
    if base is None or await git.is_ancestor(base, head):
        raise ApiError(422, "There are no new commits on the base branch.")
    tree = await git.merge_tree(head, base)
    if tree is None:
        raise ApiError(422, "merge conflict between base and head")
    return head, base, tree


async def _merge_base_later(hub: Hub, repo: Repo, issue: Issue, head: str, sender: str) -> None:
    """Merge the base into the head accepted, once the 202 has gone; a head moved since is
    left alone (GitHub's background merge fails quietly)."""
    await asyncio.sleep(UPDATE_BRANCH_DELAY)
    try:
        await _merge_base(hub, repo, issue, head, sender)
    except ApiError as err:
        log.info("update-branch of %s#%d not made: %s", repo.full_name, issue.number, err)
    except Exception:
        log.exception("update-branch of %s#%d failed", repo.full_name, issue.number)
    hub.changed()


async def _merge_base(hub: Hub, repo: Repo, issue: Issue, expected: str, sender: str) -> None:
    """Make GitHub's merge commit: "Merge branch '<base>' into <head>", by the sender, with
    the head as first parent; move the head branch and announce it."""
    async with hub.lock(repo):
        head, base, tree = await _merge_of(hub, repo, issue, expected)
        pull = issue.pull
        assert pull is not None
        git = hub.git(repo)
        message = f"Merge branch '{pull.base_ref}' into {pull.head_ref}\n"
        sha = await git.commit_tree(tree, [head, base], message, hub.identity(sender))
        await git.update_ref(pull.head_ref, sha, head)
        await apply(hub, repo, [RefUpdate(pull.head_ref, head, sha)], sender)


async def _close_referenced(hub: Hub, repo: Repo, texts: list[str], sender: str) -> None:
    """Close the issues a merged pull request names with a closing keyword, in any repository."""
    named = {ref for text in texts for ref in closing_references(text, repo.full_name)}
    for full_name, number in sorted(named):
        target = hub.repo(*full_name.split("/", 1))
        issue = target.issues.get(number) if target is not None else None
        if target and issue and issue.pull is None and issue.state == "open":
            await events.set_state(hub, target, issue, "closed", "completed", sender)
