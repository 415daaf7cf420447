"""Issue endpoints: issues, their labels, comments and comment reactions."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from aiohttp import web
from pydantic import BaseModel, Field, RootModel, field_validator

from bot.sandbox import events
from bot.sandbox.hub import Hub, actor_of, has_role, hub_of, login_of, repo_of, require_role
from bot.sandbox.permissions import read, requires, write
from bot.sandbox.render import REACTIONS
from bot.sandbox.rest import (
    ApiError,
    int_param,
    json_response,
    moved,
    or_not_found,
    paginate,
    read_body,
)
from bot.sandbox.state import Comment, Issue, Reaction, Repo, utc_now

routes = web.RouteTableDef()

ISSUE = "/repos/{owner}/{repo}/issues/{issue_number:\\d+}"
COMMENT = "/repos/{owner}/{repo}/issues/comments/{comment_id:\\d+}"


class LabelRef(BaseModel):
    """A label given as an object."""

    name: str = Field(min_length=1)


LabelItems = list[str | LabelRef]


class LabelsObject(BaseModel):
    """A label list wrapped in an object."""

    labels: LabelItems


class LabelsBody(RootModel[LabelsObject | LabelItems]):
    """Any of the three label-list forms GitHub accepts."""

    def names(self) -> list[str]:
        """Return the label names."""
        items = self.root.labels if isinstance(self.root, LabelsObject) else self.root
        return label_names(items)


def label_names(items: LabelItems) -> list[str]:
    """Flatten label names given as strings or objects."""
    return [item if isinstance(item, str) else item.name for item in items]


class CreateIssueBody(BaseModel):
    """Body of POST /repos/{owner}/{repo}/issues."""

    title: str | int
    body: str | None = None
    labels: LabelItems = Field(default_factory=list)
    assignees: list[str] = Field(default_factory=list)
    assignee: str | None = None


class UpdateIssueBody(BaseModel):
    """Body of PATCH /repos/{owner}/{repo}/issues/{issue_number}."""

    title: str | int | None = None
    body: str | None = None
    state: Literal["open", "closed"] | None = None
    state_reason: Literal["completed", "not_planned", "duplicate", "reopened"] | None = None
    labels: LabelItems | None = None
    assignees: list[str] | None = None


class CommentBody(BaseModel):
    """Body of comment creation and edits."""

    body: str


class ReactionBody(BaseModel):
    """Body of POST .../reactions."""

    content: str

    @field_validator("content")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in REACTIONS:
            raise ValueError(f"unknown reaction {value!r}")
        return value


def issue_of(request: web.Request, repo: Repo) -> Issue:
    """Return the issue named in the path, answering as GitHub does when there is none.

    A deleted issue's URLs answer 410 Gone; a transferred one's redirect to it, for callers
    who may read its new repository ("If the issue was transferred to a repository where
    the authenticated user has read access, a 301 Moved Permanently status is returned"),
    and answer 404 to the others.
    """
    number = int_param(request, "issue_number")
    issue = repo.issues.get(number)
    if issue is not None:
        return issue
    gone = or_not_found(repo.gone_issues.get(number))
    if gone.repository_id is None:
        raise ApiError(410, "This issue was deleted")
    hub = hub_of(request)
    target = or_not_found(next((r for r in hub.state.repos if r.id == gone.repository_id), None))
    hub.repo_for(actor_of(request), target.owner, target.name, write=False)
    rest = request.rel_url.raw_path.split(f"/issues/{number}", 1)[1]
    query = request.rel_url.raw_query_string
    location = f"{hub.render.repo_api(target)}/issues/{gone.number}{rest}"
    raise moved(request.method, location + (f"?{query}" if query else ""))


def comment_of(request: web.Request, repo: Repo) -> tuple[Issue, Comment]:
    """Return the comment named in the path and its issue, or answer 404."""
    return or_not_found(repo.find_comment(int_param(request, "comment_id")))


@routes.get("/repos/{owner}/{repo}/issues")
@requires(read("issues"))
async def list_issues(request: web.Request) -> web.Response:
    """List issues and pull requests, filtered and sorted like GitHub."""
    hub = hub_of(request)
    repo = repo_of(request)
    query = request.query
    state = query.get("state", "open")
    wanted = {n.strip().casefold() for n in query.get("labels", "").split(",") if n.strip()}
    found = [
        issue
        for issue in repo.issues.values()
        if (state == "all" or issue.state == state)
        and wanted <= {n.casefold() for n in issue.labels}
        and query.get("creator", issue.user) == issue.user
        and ("assignee" not in query or query["assignee"] in issue.assignees)
    ]
    sort = query.get("sort", "created")
    keys = {
        "created": lambda i: i.created_at,
        "updated": lambda i: i.updated_at,
        "comments": lambda i: len(i.comments),
    }
    found.sort(key=keys.get(sort, keys["created"]), reverse=query.get("direction", "desc") != "asc")
    page, headers = paginate(request, hub.public_url, found)
    return json_response([hub.render.issue(repo, i) for i in page], headers=headers)


@routes.post("/repos/{owner}/{repo}/issues")
@requires(write("issues"))
async def create_issue(request: web.Request) -> web.Response:
    """Open an issue (labels and assignees announced after `opened`, as GitHub does)."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    body = await read_body(request, CreateIssueBody, "Issue")
    sender = login_of(request)
    now = utc_now()
    issue = Issue(
        id=hub.state.next_id(),
        number=repo.next_number(),
        title=str(body.title),
        body=body.body,
        user=sender,
        created_at=now,
        updated_at=now,
    )
    repo.issues[issue.number] = issue
    await events.announce(hub, repo, issue, "opened", sender)
    # "Only users with push access can set labels ... silently dropped otherwise."
    if has_role(request, repo, "write"):
        await events.add_labels(hub, repo, issue, label_names(body.labels), sender)
        assignees = body.assignees or ([body.assignee] if body.assignee else [])
        await events.replace_assignees(hub, repo, issue, assignees, sender)
    return json_response(hub.render.issue(repo, issue), status=201)


@routes.get(ISSUE)
@requires(read("issues"))
async def get_issue(request: web.Request) -> web.Response:
    """Return one issue (or the issue side of a pull request)."""
    repo = repo_of(request)
    return json_response(hub_of(request).render.issue(repo, issue_of(request, repo)))


@routes.patch(ISSUE)
@requires(write("issues"))
async def update_issue(request: web.Request) -> web.Response:
    """Edit an issue: title, body, state (with reason), labels, assignees."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    issue = issue_of(request, repo)
    body = await read_body(request, UpdateIssueBody, "Issue")
    sender = login_of(request)
    new_body = (body.body or "") if "body" in body.model_fields_set else None
    title = str(body.title) if body.title is not None else None
    if sender != issue.user:
        if title is not None or new_body is not None:
            # "Issue owners and users with push access or Triage role can edit an issue."
            require_role(request, repo, "triage", "edit other people's issues")
        if body.state is not None:
            require_role(request, repo, "triage", "close or reopen other people's issues")
    await events.edit(hub, repo, issue, sender, title, new_body)
    if body.state is not None:
        await events.set_state(hub, repo, issue, body.state, body.state_reason, sender)
    # "Without push access ... label changes are silently dropped", assignees likewise.
    push = has_role(request, repo, "write")
    if body.labels is not None and push:
        await events.replace_labels(hub, repo, issue, label_names(body.labels), sender)
    if body.assignees is not None and push:
        await events.replace_assignees(hub, repo, issue, body.assignees, sender)
    return json_response(hub.render.issue(repo, issue))


def _labels_response(hub: Hub, repo: Repo, issue: Issue) -> web.Response:
    return json_response(hub.render.issue_labels(repo, issue))


async def _change_labels(
    request: web.Request,
    change: Callable[[Hub, Repo, Issue, list[str], str], Awaitable[None]],
) -> web.Response:
    """Apply the labels in the request body to the issue with `change` and list the result."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    require_role(request, repo, "triage", "label issues")
    issue = issue_of(request, repo)
    body = await read_body(request, LabelsBody, "Label")
    await change(hub, repo, issue, body.names(), login_of(request))
    return _labels_response(hub, repo, issue)


@routes.get(ISSUE + "/labels")
@requires(read("issues"))
async def list_issue_labels(request: web.Request) -> web.Response:
    """List the labels on an issue."""
    hub = hub_of(request)
    repo = repo_of(request)
    issue = issue_of(request, repo)
    labels = [lb for name in issue.labels if (lb := repo.label(name))]
    page, headers = paginate(request, hub.public_url, labels)
    return json_response([hub.render.label(repo, lb) for lb in page], headers=headers)


@routes.post(ISSUE + "/labels")
@requires(write("issues"))
async def add_issue_labels(request: web.Request) -> web.Response:
    """Add labels to an issue, creating unknown ones."""
    return await _change_labels(request, events.add_labels)


@routes.put(ISSUE + "/labels")
@requires(write("issues"))
async def set_issue_labels(request: web.Request) -> web.Response:
    """Replace all labels on an issue."""
    return await _change_labels(request, events.replace_labels)


@routes.delete(ISSUE + "/labels/{name:.+}")
@requires(write("issues"))
async def remove_issue_label(request: web.Request) -> web.Response:
    """Remove one label from an issue."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    require_role(request, repo, "triage", "label issues")
    issue = issue_of(request, repo)
    if not await events.remove_label(
        hub, repo, issue, request.match_info["name"], login_of(request)
    ):
        raise ApiError(404, "Label does not exist")
    return _labels_response(hub, repo, issue)


@routes.get(ISSUE + "/events")
@requires(read("issues"))
async def list_issue_events(request: web.Request) -> web.Response:
    """List what happened to an issue (labels on and off, closes, reopens), oldest first."""
    hub = hub_of(request)
    repo = repo_of(request)
    issue = issue_of(request, repo)
    page, headers = paginate(request, hub.public_url, issue.events)
    return json_response([hub.render.issue_event(repo, e) for e in page], headers=headers)


@routes.get(ISSUE + "/comments")
@requires(read("issues"))
async def list_comments(request: web.Request) -> web.Response:
    """List an issue's comments, oldest first."""
    hub = hub_of(request)
    repo = repo_of(request)
    issue = issue_of(request, repo)
    since = request.query.get("since", "")
    comments = [c for c in issue.comments if c.updated_at >= since]
    page, headers = paginate(request, hub.public_url, comments)
    return json_response([hub.render.comment(repo, issue, c) for c in page], headers=headers)


@routes.post(ISSUE + "/comments")
@requires(write("issues"))
async def create_comment(request: web.Request) -> web.Response:
    """Comment on an issue or pull request."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    issue = issue_of(request, repo)
    body = await read_body(request, CommentBody, "IssueComment")
    now = utc_now()
    comment = Comment(
        id=hub.state.next_id(),
        user=login_of(request),
        body=body.body,
        created_at=now,
        updated_at=now,
    )
    issue.comments.append(comment)
    events.touch(repo, issue)
    _announce_comment(hub, repo, issue, comment, "created", login_of(request))
    return json_response(hub.render.comment(repo, issue, comment), status=201)


def _announce_comment(
    hub: Hub, repo: Repo, issue: Issue, comment: Comment, action: str, sender: str, **extra: object
) -> None:
    body = {
        "issue": hub.render.issue(repo, issue),
        "comment": hub.render.comment(repo, issue, comment),
        **extra,
    }
    hub.emit(repo, "issue_comment", sender, body, action)


@routes.get(COMMENT)
@requires(read("issues"))
async def get_comment(request: web.Request) -> web.Response:
    """Return one issue comment."""
    repo = repo_of(request)
    issue, comment = comment_of(request, repo)
    return json_response(hub_of(request).render.comment(repo, issue, comment))


@routes.patch(COMMENT)
@requires(write("issues"))
async def update_comment(request: web.Request) -> web.Response:
    """Edit an issue comment."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    issue, comment = comment_of(request, repo)
    if comment.user != login_of(request):
        require_role(request, repo, "write", "edit other people's comments")
    body = await read_body(request, CommentBody, "IssueComment")
    if body.body != comment.body:
        old = comment.body
        comment.body = body.body
        comment.updated_at = utc_now()
        changes = {"body": {"from": old}}
        _announce_comment(hub, repo, issue, comment, "edited", login_of(request), changes=changes)
    return json_response(hub.render.comment(repo, issue, comment))


@routes.delete(COMMENT)
@requires(write("issues"))
async def delete_comment(request: web.Request) -> web.Response:
    """Delete an issue comment."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    issue, comment = comment_of(request, repo)
    if comment.user != login_of(request):
        require_role(request, repo, "write", "delete other people's comments")
    issue.comments.remove(comment)
    events.touch(repo, issue)
    _announce_comment(hub, repo, issue, comment, "deleted", login_of(request))
    return web.Response(status=204)


@routes.get(COMMENT + "/reactions")
@requires(read("issues"))
async def list_reactions(request: web.Request) -> web.Response:
    """List the reactions on a comment, optionally of one kind."""
    hub = hub_of(request)
    repo = repo_of(request)
    _, comment = comment_of(request, repo)
    content = request.query.get("content")
    found = [r for r in comment.reactions if content in (None, r.content)]
    page, headers = paginate(request, hub.public_url, found)
    return json_response([hub.render.reaction(r) for r in page], headers=headers)


@routes.post(COMMENT + "/reactions")
@requires(write("issues"))
async def create_reaction(request: web.Request) -> web.Response:
    """React to a comment: 201 when new, 200 with the existing reaction otherwise."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    _, comment = comment_of(request, repo)
    body = await read_body(request, ReactionBody, "Reaction")
    user = login_of(request)
    existing = next(
        (r for r in comment.reactions if r.user == user and r.content == body.content), None
    )
    if existing is not None:
        return json_response(hub.render.reaction(existing))
    reaction = Reaction(
        id=hub.state.next_id(), user=user, content=body.content, created_at=utc_now()
    )
    comment.reactions.append(reaction)
    return json_response(hub.render.reaction(reaction), status=201)
