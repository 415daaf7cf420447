"""Baton's footprint on GitHub: labels, the status comment, the pull request."""

from __future__ import annotations

import base64
import binascii
import logging
from dataclasses import dataclass
from typing import Any

from gidgethub import BadRequest

from bot.domain.checks import combined_state, nothing_reported
from bot.domain.model import IssueRef
from bot.domain.repo_config import (
    CONFIG_PATH,
    ConfigError,
    ConfigProblem,
    InvalidRepoConfig,
    RepoConfig,
    RepoFile,
    parse_repo_config,
)
from bot.edges.github import GitHubClient
from bot.edges.store import Store

log = logging.getLogger(__name__)


async def read_issue(gh: GitHubClient, issue: IssueRef) -> dict[str, Any]:
    """Return the issue as GitHub has it now."""
    data: dict[str, Any] = await gh.getitem(
        "/repos/{+repo}/issues/{number}", {"repo": issue.repo, "number": issue.number}
    )
    return data


def label_names(issue_data: dict[str, Any]) -> set[str]:
    """Return the names of the labels an issue carries."""
    return {str(label["name"]) for label in issue_data.get("labels", [])}


async def swap_labels(
    gh: GitHubClient, issue: IssueRef, *, add: str | None, remove: set[str]
) -> None:
    """Put add on the issue, then take remove off: never a moment without a Baton state label."""
    if add is not None:
        await add_label(gh, issue, add)
    for name in sorted(remove - {add}):
        await remove_label(gh, issue, name)


async def add_label(gh: GitHubClient, issue: IssueRef, name: str) -> set[str]:
    """Add one label to the issue; return every label it carries then (GitHub's answer)."""
    url_vars: dict[str, str | int] = {"repo": issue.repo, "number": issue.number}
    carried = await gh.post(
        "/repos/{+repo}/issues/{number}/labels", url_vars, data={"labels": [name]}
    )
    return {str(label["name"]) for label in carried}


async def remove_label(gh: GitHubClient, issue: IssueRef, name: str) -> None:
    """Take one label off the issue; one already gone is what was wanted."""
    url_vars: dict[str, str | int] = {"repo": issue.repo, "number": issue.number, "name": name}
    try:
        await gh.delete("/repos/{+repo}/issues/{number}/labels/{name}", url_vars)
    except BadRequest as exc:
        if exc.status_code != 404:
            raise


async def upsert_comment(
    gh: GitHubClient, repo: str, number: int, comment_id: int | None, body: str
) -> int:
    """Edit comment_id in place, or post a new comment if there is none (or it was deleted)."""
    if comment_id is not None:
        try:
            await gh.patch(
                "/repos/{+repo}/issues/comments/{id}",
                {"repo": repo, "id": comment_id},
                data={"body": body},
            )
            return comment_id
        except BadRequest as exc:
            if exc.status_code != 404:
                raise
            log.info("%s#%d: comment %s was deleted; posting a new one", repo, number, comment_id)
    comment = await gh.post(
        "/repos/{+repo}/issues/{number}/comments",
        {"repo": repo, "number": number},
        data={"body": body},
    )
    return int(comment["id"])


async def post_comment(gh: GitHubClient, issue: IssueRef, body: str) -> None:
    """Post a new comment on the issue."""
    await gh.post(
        "/repos/{+repo}/issues/{number}/comments",
        {"repo": issue.repo, "number": issue.number},
        data={"body": body},
    )


async def read_repository(gh: GitHubClient, store: Store, repo: str) -> dict[str, str]:
    """Return the repository's default branch and clone URL, read at most once an hour.

    Both change rarely (a rename, a new default branch), while the repository's own
    answer changes with every push, so a conditional read of it is seldom free.
    """
    seen = store.seen_repository(repo)
    if seen is not None:
        return seen
    data = await gh.getitem("/repos/{+repo}", {"repo": repo})
    facts = {"default_branch": str(data["default_branch"]), "clone_url": str(data["clone_url"])}
    store.see_repository(repo, facts)
    return facts


async def read_pull(gh: GitHubClient, repo: str, number: int) -> dict[str, Any]:
    """Return the pull request as GitHub has it now."""
    data: dict[str, Any] = await gh.getitem(
        "/repos/{+repo}/pulls/{number}", {"repo": repo, "number": number}
    )
    return data


async def open_or_update_pr(
    gh: GitHubClient,
    issue: IssueRef,
    *,
    branch: str,
    base: str,
    title: str,
    body: str,
    number: int | None = None,
) -> dict[str, Any]:
    """Open the branch's pull request, or update the open one: never two for one branch.

    number is the open PR the attempt took over, updated in one call while it is still
    open. Otherwise the PR is opened; GitHub refuses a second open PR for a branch
    (422), and then the open one is found and updated.
    """
    fields = {"title": title, "body": body, "base": base}
    if number is not None:
        url_vars: dict[str, str | int] = {"repo": issue.repo, "number": number}
        updated: dict[str, Any] = await gh.patch(
            "/repos/{+repo}/pulls/{number}", url_vars, data=fields
        )
        if updated["state"] == "open":
            return updated
    try:
        created: dict[str, Any] = await gh.post(
            "/repos/{+repo}/pulls", {"repo": issue.repo}, data={**fields, "head": branch}
        )
    except BadRequest as exc:
        if exc.status_code != 422:
            raise
        existing = [
            pr
            async for pr in gh.getiter(
                "/repos/{+repo}/pulls{?state,head}",
                {"repo": issue.repo, "state": "open", "head": f"{issue.owner}:{branch}"},
            )
        ]
        if not existing:
            raise  # refused for another reason: the caller reports it
        pr: dict[str, Any] = await gh.patch(existing[0]["url"], data=fields)
        return pr
    return created


async def load_repo_config(gh: GitHubClient, store: Store, repo: str, ref: str) -> RepoFile:
    """Return the repository's `.github/baton.yml` at ref; the defaults when there is none.

    Validated once per version of the file (its blob sha); raises InvalidRepoConfig.
    Whether this deployment allows what a valid file asks for is the caller's to ask
    (RepoFile.refused_by). The repository's queue label is remembered for the web
    process, which routes `labeled` events without calling GitHub.
    """
    file = await _read_repo_config(gh, store, repo, ref)
    store.record_queue_label(repo, file.config.labels.queue)
    return file


async def _read_repo_config(gh: GitHubClient, store: Store, repo: str, ref: str) -> RepoFile:
    seen = store.seen_repo_file(repo, ref)
    if seen is not None:
        # Read within the hour at this ref: a push that changes it is read at once.
        blob_sha, text = seen
        return _validated(store, repo, blob_sha, text) if blob_sha else RepoFile()
    url_vars = {"repo": repo, "path": CONFIG_PATH, "ref": ref}
    try:
        entry = await gh.getitem("/repos/{+repo}/contents/{+path}{?ref}", url_vars)
    except BadRequest as exc:
        if exc.status_code == 404:
            store.see_repo_file(repo, ref, "", "")
            return RepoFile()
        raise
    blob_sha = str(entry["sha"])
    try:
        text = base64.b64decode(str(entry.get("content", ""))).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        problem = ConfigProblem("", f"the file is not UTF-8 text ({exc})")
        raise InvalidRepoConfig(blob_sha, ConfigError([problem])) from exc
    store.see_repo_file(repo, ref, blob_sha, text)
    return _validated(store, repo, blob_sha, text)


def _validated(store: Store, repo: str, blob_sha: str, text: str) -> RepoFile:
    """Return one version of the file validated, once per blob; raise InvalidRepoConfig."""
    cached = store.cached_repo_config(repo, blob_sha)
    if cached is not None:
        return RepoFile(RepoConfig.model_validate_json(cached), blob_sha, text)
    try:
        config = parse_repo_config(text)
    except ConfigError as exc:
        raise InvalidRepoConfig(blob_sha, exc) from exc
    store.cache_repo_config(repo, blob_sha, config.model_dump_json())
    return RepoFile(config, blob_sha, text)


@dataclass(frozen=True)
class HeadChecks:
    """Everything a head's CI reported, every page of it."""

    suites: list[dict[str, Any]]
    combined_status: dict[str, Any]

    @property
    def silent(self) -> bool:
        """Tell whether no CI has said anything about the head."""
        return nothing_reported(self.suites, self.combined_status)


async def read_head_checks(gh: GitHubClient, repo: str, sha: str) -> HeadChecks:
    """Return every check suite and commit status reported on a head, every page."""
    suites = [
        suite
        async for suite in gh.getiter(
            "/repos/{+repo}/commits/{sha}/check-suites",
            {"repo": repo, "sha": sha},
            iterable_key="check_suites",
        )
    ]
    return HeadChecks(suites, await read_combined_status(gh, repo, sha))


async def read_combined_status(gh: GitHubClient, repo: str, sha: str) -> dict[str, Any]:
    """Return a head's combined status, its state taken over every page of its statuses."""
    statuses = [
        status
        async for status in gh.getiter(
            "/repos/{+repo}/commits/{sha}/status",
            {"repo": repo, "sha": sha},
            iterable_key="statuses",
        )
    ]
    return {"state": combined_state(statuses), "total_count": len(statuses), "statuses": statuses}


async def read_check_runs(gh: GitHubClient, repo: str, sha: str) -> list[dict[str, Any]]:
    """Return every check run reported on a head, every page."""
    return [
        run
        async for run in gh.getiter(
            "/repos/{+repo}/commits/{sha}/check-runs",
            {"repo": repo, "sha": sha},
            iterable_key="check_runs",
        )
    ]
