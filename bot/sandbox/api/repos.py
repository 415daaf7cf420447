"""Repository endpoints: repository, branches, refs, compare, contents, permissions, labels."""

from __future__ import annotations

import re

from aiohttp import web
from pydantic import BaseModel, Field

from bot.sandbox import forks, refs
from bot.sandbox.api.apps import ACCOUNT_NAME, REPO_NAME
from bot.sandbox.events import ensure_label
from bot.sandbox.hub import ROLES, actor_of, hub_of, login_of, repo_of, require_role
from bot.sandbox.permissions import read, requires, write
from bot.sandbox.rest import (
    ApiError,
    custom_invalid,
    diff_response,
    forbidden_integration,
    invalid,
    json_response,
    name_taken,
    not_found,
    or_not_found,
    paginate,
    read_body,
    wants_diff,
)
from bot.sandbox.state import ForkApproval

routes = web.RouteTableDef()

COMPARE_COMMITS = 250
_ROLE_TO_PERMISSION = {
    "admin": "admin",
    "maintain": "write",
    "write": "write",
    "triage": "read",
    "read": "read",
}


@routes.get("/repos/{owner}/{repo}")
@requires(read("metadata"))
async def get_repo(request: web.Request) -> web.Response:
    """Describe a repository."""
    return json_response(hub_of(request).render.repo(repo_of(request)))


@routes.get("/repos/{owner}/{repo}/branches/{branch:.+}")
@requires(read("contents"))
async def get_branch(request: web.Request) -> web.Response:
    """Describe a branch and its tip commit."""
    hub = hub_of(request)
    repo = repo_of(request)
    name = request.match_info["branch"]
    git = hub.git(repo)
    tip = await git.branch_tip(name)
    if tip is None:
        raise ApiError(404, "Branch not found")
    api = f"{hub.render.repo_api(repo)}/branches/{name}"
    return json_response(
        {
            "name": name,
            "commit": hub.render.commit(repo, await git.commit(tip)),
            "_links": {"self": api, "html": f"{hub.render.repo_html(repo)}/tree/{name}"},
            "protected": False,
            "protection": {
                "enabled": False,
                "required_status_checks": {
                    "enforcement_level": "off",
                    "contexts": [],
                    "checks": [],
                },
            },
            "protection_url": f"{api}/protection",
        }
    )


@routes.delete("/repos/{owner}/{repo}/git/refs/{ref:.+}")
@requires(write("contents"))
async def delete_ref(request: web.Request) -> web.Response:
    """Delete a branch (`heads/<name>`), with the push webhook GitHub sends for it."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    require_role(request, repo, "write", "delete branches")
    ref = request.match_info["ref"]
    branch = ref.removeprefix("heads/") if ref.startswith("heads/") else None
    if branch is None or not await refs.delete_branch(hub, repo, branch, login_of(request)):
        raise ApiError(422, "Reference does not exist")
    return web.Response(status=204)


@routes.get("/repos/{owner}/{repo}/compare/{basehead:.+}")
@requires(read("contents"))
async def compare(request: web.Request) -> web.StreamResponse:
    """Compare two commits (`base...head`) as GitHub does: from their merge base."""
    hub = hub_of(request)
    repo = repo_of(request)
    git = hub.git(repo)
    parts = re.split(r"\.\.\.?", request.match_info["basehead"], maxsplit=1)
    if len(parts) != 2:
        raise not_found()
    names = [refs.own_ref(repo, p) for p in parts]
    base, head = [await git.resolve(n) if n else None for n in names]
    if base is None or head is None:
        raise not_found()
    merge_base = or_not_found(await git.merge_base(base, head))
    if wants_diff(request):
        return diff_response(await git.diff_text(merge_base, head))
    ahead, behind = await git.count(head, base), await git.count(base, head)
    status = (
        "identical"
        if not (ahead or behind)
        else "ahead"
        if not behind
        else "behind"
        if not ahead
        else "diverged"
    )
    api = hub.render.repo_api(repo)
    html = hub.render.repo_html(repo)
    basehead = f"{base[:12]}...{head[:12]}"
    commits = await git.log(head, [base], COMPARE_COMMITS)
    return json_response(
        {
            "url": f"{api}/compare/{basehead}",
            "html_url": f"{html}/compare/{basehead}",
            "permalink_url": f"{html}/compare/{repo.owner}:{base}...{repo.owner}:{head}",
            "diff_url": f"{html}/compare/{basehead}.diff",
            "patch_url": f"{html}/compare/{basehead}.patch",
            "base_commit": hub.render.commit(repo, await git.commit(base)),
            "merge_base_commit": hub.render.commit(repo, await git.commit(merge_base)),
            "status": status,
            "ahead_by": ahead,
            "behind_by": behind,
            "total_commits": ahead,
            "commits": [hub.render.commit(repo, c) for c in commits],
            "files": [
                hub.render.diff_entry(repo, head, c) for c in await git.diff(merge_base, head)
            ],
        }
    )


@routes.get("/repos/{owner}/{repo}/contents")
@routes.get("/repos/{owner}/{repo}/contents/{path:.+}")
@requires(read("contents"))
async def get_contents(request: web.Request) -> web.Response:
    """Return a file (base64) or a directory listing at a ref (default branch by default)."""
    hub = hub_of(request)
    repo = repo_of(request)
    git = hub.git(repo)
    ref = request.query.get("ref") or repo.default_branch
    sha = await git.resolve(ref)
    path = request.match_info.get("path", "").strip("/")
    entry = await git.entry(sha, path) if sha else None
    if sha is None or entry is None:
        raise not_found()
    if entry.type == "tree":
        listing = await git.list_dir(sha, path)
        return json_response(
            [hub.render.content(repo, ref, e) for e in listing if e.type in ("blob", "tree")]
        )
    if entry.type != "blob":
        raise not_found()
    return json_response(hub.render.content(repo, ref, entry, await git.blob(entry.sha)))


@routes.get("/repos/{owner}/{repo}/collaborators/{username}/permission")
@requires(read("metadata"))
async def collaborator_permission(request: web.Request) -> web.Response:
    """Report a user's permission on a repository."""
    hub = hub_of(request)
    repo = repo_of(request)
    login = request.match_info["username"]
    role = hub.role(repo, login)
    user = hub.render.user(login)
    rank = ROLES.index(role)
    user["permissions"] = {
        name: rank >= ROLES.index(level)
        for name, level in (
            ("pull", "read"),
            ("triage", "triage"),
            ("push", "write"),
            ("maintain", "maintain"),
            ("admin", "admin"),
        )
    }
    user["role_name"] = role
    return json_response({"permission": _ROLE_TO_PERMISSION[role], "role_name": role, "user": user})


@routes.get("/repos/{owner}/{repo}/labels")
@requires(read("issues"), read("pull_requests"))
async def list_labels(request: web.Request) -> web.Response:
    """List a repository's labels."""
    hub = hub_of(request)
    repo = repo_of(request)
    page, headers = paginate(request, hub.public_url, repo.labels)
    return json_response([hub.render.label(repo, lb) for lb in page], headers=headers)


class CreateLabelBody(BaseModel):
    """Body of POST /repos/{owner}/{repo}/labels."""

    name: str = Field(min_length=1)
    color: str = Field(default="ededed", pattern=r"^#?[0-9A-Fa-f]{6}$")
    description: str | None = None


@routes.post("/repos/{owner}/{repo}/labels")
@requires(write("issues"), write("pull_requests"))
async def create_label(request: web.Request) -> web.Response:
    """Create a label."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    require_role(request, repo, "write", "create labels")
    body = await read_body(request, CreateLabelBody, "Label")
    if repo.label(body.name) is not None:
        raise invalid("Label", "name", "already_exists")
    label = ensure_label(hub, repo, body.name)
    label.color = body.color.removeprefix("#").lower()
    label.description = body.description
    return json_response(hub.render.label(repo, label), status=201)


class ForkBody(BaseModel):
    """Body of POST /repos/{owner}/{repo}/forks."""

    organization: str | None = Field(default=None, pattern=ACCOUNT_NAME)
    name: str | None = Field(default=None, pattern=REPO_NAME)
    default_branch_only: bool = False


@routes.post("/repos/{owner}/{repo}/forks")
@requires(write("administration"))
async def create_fork(request: web.Request) -> web.Response:
    """Fork a repository to the caller's account or to an organization, answering 202.

    GitHub ("Create a fork"): forking "happens asynchronously" and answers 202 Accepted
    with the new repository; asked again, it answers with the fork the account already
    has. An App's installation has no account of its own to fork to: it names the
    organization it is installed on. A name the account already uses gets a numbered one.
    """
    hub = hub_of(request)
    parent = repo_of(request)
    actor = actor_of(request)
    assert actor is not None
    body = await read_body(request, ForkBody, "Repository")
    owner = body.organization or (actor.login if actor.kind == "admin" else None)
    if owner is None:
        raise invalid("Repository", "organization", "missing_field")
    if actor.kind == "installation":
        home = hub.installation(owner)
        if home is None or home.id != actor.installation_id:
            raise forbidden_integration()
    if owner.casefold() == parent.owner.casefold():
        raise custom_invalid("Repository", "A repository cannot be forked to its own account.")
    found = forks.fork_of(hub, parent, owner)
    if found is None:
        name = forks.free_name(hub, owner, body.name or parent.name)
        if name is None:
            raise name_taken()
        found = await forks.create(hub, parent, owner, name, body.default_branch_only)
    return json_response(hub.render.repo(found), status=202)


class ForkApprovalBody(BaseModel):
    """Body of PUT /repos/{owner}/{repo}/actions/permissions/fork-pr-contributor-approval."""

    approval_policy: ForkApproval


FORK_APPROVAL = "/repos/{owner}/{repo}/actions/permissions/fork-pr-contributor-approval"


@routes.get(FORK_APPROVAL)
@requires(read("administration"))
async def get_fork_approval(request: web.Request) -> web.Response:
    """Say whose pull requests from forks wait for a maintainer before CI runs."""
    return json_response({"approval_policy": repo_of(request).fork_pr_approval})


@routes.put(FORK_APPROVAL)
@requires(write("administration"))
async def set_fork_approval(request: web.Request) -> web.Response:
    """Choose whose pull requests from forks wait for a maintainer before CI runs."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    require_role(request, repo, "admin", "change its Actions settings")
    body = await read_body(request, ForkApprovalBody, "ForkApproval")
    repo.fork_pr_approval = body.approval_policy
    hub.changed()
    return web.Response(status=204)
