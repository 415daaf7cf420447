"""Facts about pull requests that come from git: base tips, diff stats, mergeability.

Mergeability is computed the way GitHub computes it, in the background ("Get a pull
request"): "The value of the `mergeable` attribute can be `true`, `false`, or `null`. If
the value is `null`, then GitHub has started a background job to compute the
mergeability. After giving the job time to complete, resubmit the request. When the job
finishes, you will see a non-null value for the `mergeable` attribute in the response."

So in the sandbox one job compares one base tip with one head. A REST answer carrying the
full pull request (opening, reading or editing it) when base or head has moved since the
last job, or there was none, says `mergeable: null` and `mergeable_state: "unknown"` and
starts a job; every later answer says what that job found (waiting for it if it is still
running) until base or head move again. Webhook payloads and pages show what the job found
for the current base and head, or null, and start none.

`mergeable_state`, once known (GitHub's MergeStateStatus): `dirty` when the merge
conflicts, `draft` for a draft, `unstable` while a check or status of the head is not
passing, `clean` otherwise. `blocked` and `behind` come from branch protection (required
reviews or checks, "Require branches to be up to date before merging"), which sandbox
repositories do not have: a pull request whose base moved on without a conflict is
`clean`, as on a GitHub repository without protection. Compare base and head
(`behind_by`) to tell that it is behind.
"""

from __future__ import annotations

import re

from bot.sandbox.hub import Hub
from bot.sandbox.render import PullFacts, suite_outcome
from bot.sandbox.state import Issue, MergeCheck, Pull, Repo


def drafts_allowed(hub: Hub, repo: Repo) -> bool:
    """Tell whether a repository may have draft pull requests.

    GitHub ("Create a pull request"): "Draft pull requests are available in public
    repositories with GitHub Free and GitHub Free for organizations, GitHub Pro, and legacy
    per-repository billing plans, and in public and private repositories with GitHub Team
    and GitHub Enterprise Cloud."
    """
    return not repo.private or hub.user(repo.owner).plan in ("team", "enterprise")


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


async def facts(hub: Hub, repo: Repo, issue: Issue, start_check: bool = False) -> PullFacts:
    """Compute what a full pull request shows from the repository's git data.

    start_check: this is a REST answer, which starts a mergeability job when one is due.
    """
    pull = issue.pull
    assert pull is not None
    git = hub.git(repo)
    base = base_sha(issue, await git.branches())
    fork_point = await git.merge_base(base, pull.head_sha) or base
    changes = await git.diff(fork_point, pull.head_sha)
    mergeable: bool | None = None
    state = "unknown"
    if issue.state == "open":
        mergeable = await _mergeability(hub, repo, pull, base, start_check)
        if mergeable is not None:
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


async def _mergeability(hub: Hub, repo: Repo, pull: Pull, base: str, start: bool) -> bool | None:
    """Return what the mergeability job for this base and head found; None until one has run."""
    check = pull.merge_check
    if check is None or (check.base_sha, check.head_sha) != (base, pull.head_sha):
        if start:
            pull.merge_check = MergeCheck(base_sha=base, head_sha=pull.head_sha)
            hub.spawn(_run_check(hub, repo, pull.merge_check))
        return None
    await _run_check(hub, repo, check)  # a job still running finishes before this answer
    return check.mergeable


async def _run_check(hub: Hub, repo: Repo, check: MergeCheck) -> None:
    """Run a mergeability job: try the merge of head into base without a worktree."""
    if check.mergeable is None:
        tree = await hub.git(repo).merge_tree(check.base_sha, check.head_sha)
        check.mergeable = tree is not None
        hub.changed()


def _mergeable_state(repo: Repo, issue: Issue, mergeable: bool) -> str:
    assert issue.pull is not None
    if not mergeable:
        return "dirty"
    if issue.pull.draft:
        return "draft"
    head = issue.pull.head_sha
    # A suite no App started a run in shows nowhere on the pull request.
    suites = [s for s in repo.check_suites if s.head_sha == head and repo.runs_of(s.id)]
    checks = [suite_outcome(s, repo.runs_of(s.id)) for s in suites]
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
