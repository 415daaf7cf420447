"""Baton's footprint on GitHub: labels, the status comment, the pull request."""

from __future__ import annotations

import base64
import binascii
import logging
from typing import Any

from gidgethub import BadRequest

from bot.config import (
    CONFIG_PATH,
    ConfigError,
    ConfigProblem,
    InvalidRepoConfig,
    RepoConfig,
    RepoFile,
    parse_repo_config,
)
from bot.github import GitHubClient
from bot.model import IssueRef
from bot.store import Store

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
    url_vars: dict[str, str | int] = {"repo": issue.repo, "number": issue.number}
    if add is not None:
        await gh.post("/repos/{+repo}/issues/{number}/labels", url_vars, data={"labels": [add]})
    for name in sorted(remove - {add}):
        try:
            await gh.delete(
                "/repos/{+repo}/issues/{number}/labels/{name}", {**url_vars, "name": name}
            )
        except BadRequest as exc:
            if exc.status_code != 404:  # already gone is what we wanted
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


async def read_pull(gh: GitHubClient, repo: str, number: int) -> dict[str, Any]:
    """Return the pull request as GitHub has it now."""
    data: dict[str, Any] = await gh.getitem(
        "/repos/{+repo}/pulls/{number}", {"repo": repo, "number": number}
    )
    return data


async def open_or_update_pr(
    gh: GitHubClient, issue: IssueRef, *, branch: str, base: str, title: str, body: str
) -> dict[str, Any]:
    """Open the branch's pull request, or update the open one: never two for one branch."""
    existing = [
        pr
        async for pr in gh.getiter(
            "/repos/{+repo}/pulls{?state,head}",
            {"repo": issue.repo, "state": "open", "head": f"{issue.owner}:{branch}"},
        )
    ]
    if existing:
        pr: dict[str, Any] = await gh.patch(
            existing[0]["url"], data={"title": title, "body": body, "base": base}
        )
        return pr
    created: dict[str, Any] = await gh.post(
        "/repos/{+repo}/pulls",
        {"repo": issue.repo},
        data={"title": title, "head": branch, "base": base, "body": body},
    )
    return created


async def pr_files(gh: GitHubClient, repo: str, number: int) -> list[str]:
    """Return the files the pull request's own diff touches."""
    return [
        str(entry["filename"])
        async for entry in gh.getiter(
            "/repos/{+repo}/pulls/{number}/files", {"repo": repo, "number": number}
        )
    ]


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
    url_vars = {"repo": repo, "path": CONFIG_PATH, "ref": ref}
    try:
        entry = await gh.getitem("/repos/{+repo}/contents/{+path}{?ref}", url_vars)
    except BadRequest as exc:
        if exc.status_code == 404:
            return RepoFile()
        raise
    blob_sha = str(entry["sha"])
    try:
        text = base64.b64decode(str(entry.get("content", ""))).decode()
    except (binascii.Error, UnicodeDecodeError) as exc:
        problem = ConfigProblem("", f"the file is not UTF-8 text ({exc})")
        raise InvalidRepoConfig(blob_sha, ConfigError([problem])) from exc
    cached = store.cached_repo_config(repo, blob_sha)
    if cached is not None:
        return RepoFile(RepoConfig.model_validate_json(cached), blob_sha, text)
    try:
        config = parse_repo_config(text)
    except ConfigError as exc:
        raise InvalidRepoConfig(blob_sha, exc) from exc
    store.cache_repo_config(repo, blob_sha, config.model_dump_json())
    return RepoFile(config, blob_sha, text)
