"""Pull request endpoints: pulls, files, merges, reviews and review comments."""

from __future__ import annotations

from typing import Literal

from aiohttp import web
from pydantic import BaseModel, Field

from bot.sandbox import events, forks, pulls, refs
from bot.sandbox.hub import Hub, hub_of, login_of, repo_of, require_role
from bot.sandbox.permissions import read, requires, write
from bot.sandbox.rest import (
    custom_invalid,
    diff_response,
    int_param,
    invalid,
    json_response,
    or_not_found,
    paginate,
    read_body,
    wants_diff,
)
from bot.sandbox.state import Issue, Pull, Repo, Review, ReviewComment, utc_now

routes = web.RouteTableDef()

PULL = "/repos/{owner}/{repo}/pulls/{pull_number:\\d+}"
DRAFTS_REFUSED = "Draft pull requests are not supported in this repository."  # GitHub's words
# The sandbox's forks are an organization's, whose branches maintainers can never edit.
FORK_EDITS_REFUSED = "Maintainers cannot edit a pull request from an organization's fork."
PULL_FILES_CAP = 3000  # GitHub lists at most this many of a pull request's files
REVIEW_STATES = {
    "APPROVE": "APPROVED",
    "REQUEST_CHANGES": "CHANGES_REQUESTED",
    "COMMENT": "COMMENTED",
}


class CreatePullBody(BaseModel):
    """Body of POST /repos/{owner}/{repo}/pulls."""

    title: str | None = None
    head: str
    base: str
    body: str | None = None
    draft: bool = False
    maintainer_can_modify: bool = False


class UpdatePullBody(BaseModel):
    """Body of PATCH /repos/{owner}/{repo}/pulls/{pull_number}."""

    title: str | None = None
    body: str | None = None
    state: Literal["open", "closed"] | None = None
    base: str | None = None
    maintainer_can_modify: bool | None = None


class MergeBody(BaseModel):
    """Body of PUT .../pulls/{pull_number}/merge."""

    commit_title: str | None = None
    commit_message: str | None = None
    sha: str | None = None
    merge_method: Literal["merge", "squash", "rebase"] = "merge"


class UpdateBranchBody(BaseModel):
    """Body of PUT .../pulls/{pull_number}/update-branch."""

    expected_head_sha: str | None = None


class DraftReviewComment(BaseModel):
    """A line comment submitted with a review."""

    path: str
    body: str
    line: int
    side: Literal["LEFT", "RIGHT"] = "RIGHT"


class CreateReviewBody(BaseModel):
    """Body of POST .../pulls/{pull_number}/reviews."""

    commit_id: str | None = None
    body: str = ""
    event: Literal["APPROVE", "REQUEST_CHANGES", "COMMENT"] | None = None
    comments: list[DraftReviewComment] = Field(default_factory=list)


def pull_of(request: web.Request, repo: Repo) -> tuple[Issue, Pull]:
    """Return the pull request named in the path and its issue, or answer 404."""
    issue = or_not_found(repo.issues.get(int_param(request, "pull_number")))
    return issue, or_not_found(issue.pull)


async def full_pull(hub: Hub, repo: Repo, issue: Issue, status: int = 200) -> web.Response:
    """Answer with a full pull request (starting its mergeability job when one is due)."""
    facts = await pulls.facts(hub, repo, issue, start_check=True)
    return json_response(hub.render.pull(repo, issue, facts), status=status)


@routes.get("/repos/{owner}/{repo}/pulls")
@requires(read("pull_requests"))
async def list_pulls(request: web.Request) -> web.Response:
    """List pull requests, filtered by state, head (`owner:branch`) and base."""
    hub = hub_of(request)
    repo = repo_of(request)
    query = request.query
    state = query.get("state", "open")
    found = [
        issue
        for issue in repo.issues.values()
        if issue.pull is not None
        and (state == "all" or issue.state == state)
        and ("head" not in query or _headed_by(hub, repo, issue.pull, query["head"]))
        and query.get("base", issue.pull.base_ref) == issue.pull.base_ref
    ]
    sort = query.get("sort", "created")
    key = (lambda i: i.updated_at) if sort == "updated" else (lambda i: i.created_at)
    descending = query.get("direction", "desc" if sort == "created" else "asc") == "desc"
    found.sort(key=key, reverse=descending)
    page, headers = paginate(request, hub.public_url, found)
    tips = await hub.git(repo).branches()
    return json_response(
        [hub.render.pull_simple(repo, i, pulls.base_sha(i, tips)) for i in page], headers=headers
    )


def _headed_by(hub: Hub, repo: Repo, pull: Pull, spec: str) -> bool:
    """Tell whether a pull request's head is `user:ref` (or a ref of the repository's own)."""
    owner, sep, ref = spec.partition(":")
    if not sep:
        return pull.head_repo_id is None and pull.head_ref == spec
    head_repo = hub.render.head_repo(repo, pull)
    return (
        head_repo is not None
        and head_repo.owner.casefold() == owner.casefold()
        and pull.head_ref == ref
    )


@routes.post("/repos/{owner}/{repo}/pulls")
@requires(write("pull_requests"))
async def create_pull(request: web.Request) -> web.Response:
    """Open a pull request from a branch of the same repository, or of a fork of it.

    GitHub ("Create a pull request"): `head` is "The name of the branch where your changes
    are implemented. For cross-repository pull requests in the same network, namespace head
    with a user like this: username:branch." Opening one from a fork takes no role on the
    base repository beyond reading it.
    """
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    body = await read_body(request, CreatePullBody, "PullRequest")
    sender = login_of(request)
    fork = _head_fork(hub, repo, body.head)
    head = body.head.partition(":")[2] if fork else refs.own_ref(repo, body.head)
    if head is None:
        raise invalid("PullRequest", "head")
    if fork is None:
        require_role(request, repo, "write", "open pull requests from its branches")
    elif body.maintainer_can_modify:
        raise custom_invalid("PullRequest", FORK_EDITS_REFUSED)
    async with hub.lock(repo):
        git = hub.git(repo)
        base_sha = await git.branch_tip(body.base)
        if fork is None:
            head_sha = await git.branch_tip(head)
        else:
            head_sha = await forks.take_head(hub, repo, fork, head)
        if base_sha is None:
            raise invalid("PullRequest", "base")
        if head_sha is None:
            raise invalid("PullRequest", "head")
        fork_id = fork.id if fork else None
        await _refuse_pull(hub, repo, body, (fork or repo, head), (base_sha, head_sha))
        now = utc_now()
        issue = Issue(
            id=hub.state.next_id(),
            number=repo.next_number(),
            title=body.title or "",
            body=body.body,
            user=sender,
            created_at=now,
            updated_at=now,
            pull=Pull(
                head_ref=head,
                head_sha=head_sha,
                head_repo_id=fork_id,
                base_ref=body.base,
                base_sha=base_sha,
                draft=body.draft,
                maintainer_can_modify=body.maintainer_can_modify,
            ),
        )
        repo.issues[issue.number] = issue
        await git.set_pull_head(issue.number, head_sha)
        events.touch(repo, issue)
        await events.announce(hub, repo, issue, "opened", sender)
        if fork is not None:
            await forks.run_pull_ci(hub, repo, issue, None, sender)
    return await full_pull(hub, repo, issue, status=201)


def _head_fork(hub: Hub, repo: Repo, spec: str) -> Repo | None:
    """Return the fork an `owner:branch` head names, when owner is not the repository's."""
    owner, sep, _ = spec.partition(":")
    if not sep or owner.casefold() == repo.owner.casefold():
        return None
    fork = forks.fork_of(hub, repo, owner)
    if fork is None:
        raise invalid("PullRequest", "head")
    return fork


async def _refuse_pull(
    hub: Hub,
    repo: Repo,
    body: CreatePullBody,
    head: tuple[Repo, str],
    shas: tuple[str, str],
) -> None:
    """Refuse a pull request GitHub would not open: one already open for the same head and
    base, a head with no history in common or no commits beyond the base, no title, or a
    draft a free plan's private repository cannot have."""
    head_repo, branch = head
    base_sha, head_sha = shas
    git = hub.git(repo)
    head_repo_id = None if head_repo is repo else head_repo.id
    if any(
        i.pull
        and i.pull.head_repo_id == head_repo_id
        and i.pull.head_ref == branch
        and i.pull.base_ref == body.base
        for i in pulls.open_pulls(repo)
    ):
        raise custom_invalid(
            "PullRequest", f"A pull request already exists for {head_repo.owner}:{branch}."
        )
    if await git.merge_base(head_sha, base_sha) is None:
        message = f"The {branch} branch has no history in common with {body.base}"
        raise custom_invalid("PullRequest", message)
    if await git.count(head_sha, base_sha) == 0:
        raise custom_invalid("PullRequest", f"No commits between {body.base} and {branch}")
    if not body.title:
        raise invalid("PullRequest", "title", "missing_field")
    if body.draft and not pulls.drafts_allowed(hub, repo):
        raise custom_invalid("PullRequest", DRAFTS_REFUSED)


@routes.get(PULL)
@requires(read("pull_requests"))
async def get_pull(request: web.Request) -> web.Response:
    """Return one pull request (or its diff, for the diff media type)."""
    hub = hub_of(request)
    repo = repo_of(request)
    issue, _ = pull_of(request, repo)
    if wants_diff(request):
        fork_point, head = await pulls.diff_range(hub, repo, issue)
        return diff_response(await hub.git(repo).diff_text(fork_point, head))
    return await full_pull(hub, repo, issue)


@routes.patch(PULL)
@requires(write("pull_requests"))
async def update_pull(request: web.Request) -> web.Response:
    """Edit a pull request: title, body, state, base."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    issue, pull = pull_of(request, repo)
    body = await read_body(request, UpdatePullBody, "PullRequest")
    sender = login_of(request)
    if sender != issue.user:
        _require_roles_for_others(request, repo, body)
    git = hub.git(repo)
    if body.base is not None and await git.branch_tip(body.base) is None:
        raise invalid("PullRequest", "base")
    if body.state == "open" and issue.state == "closed":
        pull.head_sha = await _reopened_head(hub, repo, issue)
    if body.maintainer_can_modify is not None:
        if body.maintainer_can_modify and pull.head_repo_id is not None:
            raise custom_invalid("PullRequest", FORK_EDITS_REFUSED)
        pull.maintainer_can_modify = body.maintainer_can_modify
    new_body = (body.body or "") if "body" in body.model_fields_set else None
    await events.edit(hub, repo, issue, sender, body.title, new_body)
    if body.base is not None:
        await events.change_base(hub, repo, issue, body.base, sender)
    if body.state is not None:
        await events.set_state(hub, repo, issue, body.state, None, sender)
    return await full_pull(hub, repo, issue)


def _require_roles_for_others(request: web.Request, repo: Repo, body: UpdatePullBody) -> None:
    """Refuse an edit of someone else's pull request beyond the sender's role, as GitHub does."""
    if body.state is not None:
        require_role(request, repo, "triage", "close or reopen other people's pull requests")
    if {"title", "body", "base", "maintainer_can_modify"} & body.model_fields_set:
        require_role(request, repo, "write", "edit other people's pull requests")


async def _reopened_head(hub: Hub, repo: Repo, issue: Issue) -> str:
    """Return the head a closed pull request reopens at; refuse a merged one or a deleted head."""
    pull = issue.pull
    assert pull is not None
    if pull.merged_at:
        raise custom_invalid(
            "PullRequest", "state cannot be changed. The pull request has been merged."
        )
    fork = hub.repo_by_id(pull.head_repo_id) if pull.head_repo_id is not None else None
    if fork is not None:
        tip = await forks.take_head(hub, repo, fork, pull.head_ref)
        if tip is not None:
            await hub.git(repo).set_pull_head(issue.number, tip)
    elif pull.head_repo_id is not None:
        tip = None  # the fork is gone
    else:
        tip = await hub.git(repo).branch_tip(pull.head_ref)
    if tip is None:
        raise custom_invalid("PullRequest", "state cannot be changed. The head branch was deleted.")
    return tip


@routes.get(PULL + "/files")
@requires(read("pull_requests"))
async def list_files(request: web.Request) -> web.Response:
    """List the files a pull request changes (diff from the merge base to the head).

    GitHub ("List pull requests files"): "Responses include a maximum of 3000 files.
    The paginated response returns 30 files per page by default."
    """
    hub = hub_of(request)
    repo = repo_of(request)
    issue, _ = pull_of(request, repo)
    fork_point, head = await pulls.diff_range(hub, repo, issue)
    changes = (await hub.git(repo).diff(fork_point, head))[:PULL_FILES_CAP]
    page, headers = paginate(request, hub.public_url, changes)
    return json_response([hub.render.diff_entry(repo, head, c) for c in page], headers=headers)


@routes.put(PULL + "/merge")
@requires(write("contents"))
async def merge_pull(request: web.Request) -> web.Response:
    """Merge a pull request (merge commit or squash)."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    require_role(request, repo, "write", "merge pull requests")
    issue, _ = pull_of(request, repo)
    body = await read_body(request, MergeBody, "PullRequest")
    sha = await refs.merge(
        hub,
        repo,
        issue,
        body.merge_method,
        body.sha,
        body.commit_title,
        body.commit_message,
        login_of(request),
    )
    return json_response(
        {"sha": sha, "merged": True, "message": "Pull Request successfully merged"}
    )


@routes.put(PULL + "/update-branch")
@requires(write("pull_requests"))
async def update_branch(request: web.Request) -> web.Response:
    """Merge the base branch into the pull request's head branch ("Update branch").

    GitHub answers 202 Accepted with a message, and 422 when the head is not the
    expected_head_sha, the base has nothing new, or the merge conflicts.
    """
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    require_role(request, repo, "write", "update pull request branches")
    issue, _ = pull_of(request, repo)
    body = await read_body(request, UpdateBranchBody, "PullRequest")
    await refs.update_branch(hub, repo, issue, body.expected_head_sha, login_of(request))
    return json_response(
        {
            "message": "Updating pull request branch.",
            "url": f"{hub.render.repo_api(repo)}/pulls/{issue.number}",
        },
        status=202,
    )


@routes.get(PULL + "/reviews")
@requires(read("pull_requests"))
async def list_reviews(request: web.Request) -> web.Response:
    """List a pull request's reviews, oldest first."""
    hub = hub_of(request)
    repo = repo_of(request)
    issue, pull = pull_of(request, repo)
    page, headers = paginate(request, hub.public_url, pull.reviews)
    return json_response([hub.render.review(repo, issue, r) for r in page], headers=headers)


@routes.post(PULL + "/reviews")
@requires(write("pull_requests"))
async def create_review(request: web.Request) -> web.Response:
    """Submit a review (APPROVE, REQUEST_CHANGES, COMMENT) with optional line comments."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    issue, pull = pull_of(request, repo)
    body = await read_body(request, CreateReviewBody, "PullRequestReview")
    user = login_of(request)
    if body.event in ("APPROVE", "REQUEST_CHANGES") and user == issue.user:
        verb = "approve" if body.event == "APPROVE" else "request changes on"
        raise custom_invalid("PullRequestReview", f"Can not {verb} your own pull request")
    if body.event in ("REQUEST_CHANGES", "COMMENT") and not body.body and not body.comments:
        raise invalid("PullRequestReview", "body", "missing_field")
    now = utc_now()
    review = Review(
        id=hub.state.next_id(),
        user=user,
        body=body.body,
        state=REVIEW_STATES[body.event] if body.event else "PENDING",
        commit_id=body.commit_id or pull.head_sha,
        submitted_at=now if body.event else None,
    )
    comments = await _line_comments(hub, repo, issue, review, body.comments)
    pull.reviews.append(review)
    pull.review_comments.extend(comments)
    events.touch(repo, issue)
    if body.event:
        tips = await hub.git(repo).branches()
        payload = {
            "review": hub.render.review(repo, issue, review, webhook=True),
            "pull_request": hub.render.pull_simple(repo, issue, pulls.base_sha(issue, tips)),
        }
        hub.emit(repo, "pull_request_review", user, payload, "submitted")
    return json_response(hub.render.review(repo, issue, review))


async def _line_comments(
    hub: Hub, repo: Repo, issue: Issue, review: Review, drafts: list[DraftReviewComment]
) -> list[ReviewComment]:
    """Anchor review comments to the diff, refusing lines the diff does not show."""
    if not drafts:
        return []
    fork_point, head = await pulls.diff_range(hub, repo, issue)
    changes = {c.filename: c for c in await hub.git(repo).diff(fork_point, head)}
    comments = []
    for index, draft in enumerate(drafts):
        change = changes.get(draft.path)
        if change is None or change.patch is None:
            raise invalid("PullRequestReviewComment", "path", index=index)
        hunk = pulls.diff_hunk(change.patch, draft.line, draft.side)
        if hunk is None:
            raise invalid("PullRequestReviewComment", "line", index=index)
        comments.append(
            ReviewComment(
                id=hub.state.next_id(),
                review_id=review.id,
                user=review.user,
                path=draft.path,
                line=draft.line,
                side=draft.side,
                body=draft.body,
                commit_id=review.commit_id,
                diff_hunk=hunk,
                created_at=review.submitted_at or utc_now(),
            )
        )
    return comments


@routes.get(PULL + "/comments")
@requires(read("pull_requests"))
async def list_review_comments(request: web.Request) -> web.Response:
    """List the review comments on a pull request's diff."""
    hub = hub_of(request)
    repo = repo_of(request)
    issue, pull = pull_of(request, repo)
    page, headers = paginate(request, hub.public_url, pull.review_comments)
    return json_response([hub.render.review_comment(repo, issue, c) for c in page], headers=headers)
