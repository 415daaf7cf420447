"""Facts about pull requests that come from git: base tips, diff stats, mergeability."""

from __future__ import annotations

import re

from bot.sandbox.hub import Hub
from bot.sandbox.render import PullFacts, suite_state
from bot.sandbox.state import Issue, Repo


def open_pulls(repo: Repo) -> list[Issue]:
    """Return the open pull requests of a repository."""
    return [i for i in repo.issues.values() if i.pull is not None and i.state == "open"]


def base_sha(issue: Issue, tips: dict[str, str]) -> str:
    """Return a pull request's base sha: the live branch tip while open, frozen once closed."""
    assert issue.pull is not None
    if issue.state == "open":
        return tips.get(issue.pull.base_ref, issue.pull.base_sha)
    return issue.pull.base_sha


async def diff_range(hub: Hub, repo: Repo, issue: Issue) -> tuple[str, str]:
    """Return what a pull request's diff spans: its merge base with the base, and its head."""
    pull = issue.pull
    assert pull is not None
    git = hub.git(repo)
    base = base_sha(issue, await git.branches())
    return await git.merge_base(base, pull.head_sha) or base, pull.head_sha


async def facts(hub: Hub, repo: Repo, issue: Issue) -> PullFacts:
    """Compute what a full pull request shows from the repository's git data."""
    pull = issue.pull
    assert pull is not None
    git = hub.git(repo)
    base = base_sha(issue, await git.branches())
    fork_point = await git.merge_base(base, pull.head_sha) or base
    changes = await git.diff(fork_point, pull.head_sha)
    mergeable: bool | None = None
    state = "unknown"
    if issue.state == "open":
        mergeable = await git.merge_tree(base, pull.head_sha) is not None
        state = _mergeable_state(repo, issue, mergeable)
    return PullFacts(
        base_sha=base,
        commits=await git.count(pull.head_sha, base),
        additions=sum(c.additions for c in changes),
        deletions=sum(c.deletions for c in changes),
        changed_files=len(changes),
        mergeable=mergeable,
        mergeable_state=state,
    )


def _mergeable_state(repo: Repo, issue: Issue, mergeable: bool) -> str:
    assert issue.pull is not None
    if not mergeable:
        return "dirty"
    if issue.pull.draft:
        return "draft"
    head = issue.pull.head_sha
    suites = [s for s in repo.check_suites if s.head_sha == head]
    checks = [suite_state(repo.runs_of(s.id)) for s in suites]
    latest = {s.context: s.state for s in repo.statuses if s.sha == head}
    green = all(c == ("completed", "success") or c[1] in ("neutral", "skipped") for c in checks)
    if not green or any(state != "success" for state in latest.values()):
        return "unstable"
    return "clean"


_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


def diff_hunk(patch: str, line: int, side: str) -> str | None:
    """Return the hunk up to a commented line (GitHub's diff_hunk); None if the diff lacks it."""
    hunk: list[str] = []
    old = new = 0
    for text in patch.splitlines():
        if match := _HUNK.match(text):
            old, new = int(match[1]), int(match[2])
            hunk = [text]
            continue
        hunk.append(text)
        if text.startswith("\\"):
            continue
        added, removed = text.startswith("+"), text.startswith("-")
        if (side == "RIGHT" and not removed and new == line) or (
            side == "LEFT" and not added and old == line
        ):
            return "\n".join(hunk)
        old += 0 if added else 1
        new += 0 if removed else 1
    return None
