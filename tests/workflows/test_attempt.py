"""PR inheritance: a continuation takes over the PR only while GitHub says it is open."""

from __future__ import annotations

from pathlib import Path

from bot.devkit.maintainer import Maintainer
from bot.domain.model import IssueRef, Run, RunState, utcnow
from bot.edges.github import GitHubApp
from bot.workflows.attempt import inherit_open_pr

BRANCH = "baton/issue-1-fix"


async def previous_run_with_pr(maintainer: Maintainer, tmp_path: Path) -> Run:
    """A concluded attempt that pushed BRANCH and opened a PR from it, as Baton does."""
    repo = await maintainer.create_repo("widgets", {"README.md": "hi\n"}, tmp_path)
    seed = tmp_path / "seed-widgets"
    await maintainer.git.run(seed, "checkout", "-q", "-b", BRANCH)
    (seed / "fix.txt").write_text("fixed\n")
    await maintainer.git.run(seed, "add", "-A")
    await maintainer.git.run(seed, "commit", "-q", "-m", "fix")
    await maintainer.git.run(seed, "push", "-q", repo["clone_url"], BRANCH, token=maintainer.token)
    pull = await maintainer.gh.post(
        "/repos/{+repo}/pulls",
        {"repo": repo["full_name"]},
        data={"title": "Fix", "head": BRANCH, "base": "main", "body": "Closes #1"},
    )
    issue = IssueRef(installation_id=1, repo=repo["full_name"], number=1)
    run = Run.claimed(issue, 1, BRANCH, utcnow()).moved(RunState.FAILED, utcnow())
    return run.model_copy(update={"pr_number": pull["number"], "pr_url": pull["html_url"]})


async def test_an_open_pr_is_inherited(
    app: GitHubApp, maintainer: Maintainer, tmp_path: Path
) -> None:
    previous = await previous_run_with_pr(maintainer, tmp_path)
    gh = await app.for_installation(1)
    assert await inherit_open_pr(gh, previous) == {
        "pr_number": previous.pr_number,
        "pr_url": previous.pr_url,
    }


async def test_a_closed_pr_is_never_inherited(
    app: GitHubApp, maintainer: Maintainer, tmp_path: Path
) -> None:
    previous = await previous_run_with_pr(maintainer, tmp_path)
    await maintainer.gh.patch(
        "/repos/{+repo}/pulls/{number}",
        {"repo": previous.issue.repo, "number": previous.pr_number},
        data={"state": "closed"},
    )
    assert await inherit_open_pr(await app.for_installation(1), previous) == {}


async def test_a_merged_pr_is_never_inherited(
    app: GitHubApp, maintainer: Maintainer, tmp_path: Path
) -> None:
    previous = await previous_run_with_pr(maintainer, tmp_path)
    await maintainer.merge(previous.issue.repo, int(str(previous.pr_number)))
    assert await inherit_open_pr(await app.for_installation(1), previous) == {}


async def test_an_unreadable_pr_fails_closed(
    app: GitHubApp, maintainer: Maintainer, tmp_path: Path
) -> None:
    previous = await previous_run_with_pr(maintainer, tmp_path)
    await maintainer.gh.post(
        "/_sandbox/faults",
        data={
            "method": "GET",
            "path": f"^/repos/{previous.issue.repo}/pulls/\\d+$",
            "status": 502,
        },
    )
    assert await inherit_open_pr(await app.for_installation(1), previous) == {}


async def test_a_run_without_a_pr_inherits_nothing(app: GitHubApp, maintainer: Maintainer) -> None:
    await maintainer.gh.post("/user/repos", data={"name": "none"})
    issue = IssueRef(installation_id=1, repo="maintainer/none", number=1)
    previous = Run.claimed(issue, 1, BRANCH, utcnow())
    assert await inherit_open_pr(await app.for_installation(1), previous) == {}
