"""The App's own endpoints (JWT), installation tokens, account repositories, rate limit."""

from __future__ import annotations

from aiohttp import web
from pydantic import BaseModel, Field

from bot.sandbox.auth import Actor
from bot.sandbox.calls import DEFAULT_RATE_LIMIT, Budget
from bot.sandbox.hub import Hub, actor_of, hub_of
from bot.sandbox.permissions import Level, Permission, requires_no_permission
from bot.sandbox.rest import (
    ApiError,
    Json,
    bad_credentials,
    forbidden_integration,
    int_param,
    json_response,
    name_taken,
    or_not_found,
    paginate,
    read_body,
    suspended,
)
from bot.sandbox.state import Installation, Repo, default_labels, utc_now

routes = web.RouteTableDef()

REPO_NAME = r"^[A-Za-z0-9_.-]+$"
# GitHub's rule for a login: alphanumerics and single hyphens, at most 39 characters.
ACCOUNT_NAME = r"^[A-Za-z0-9](?:-?[A-Za-z0-9]){0,38}$"


def require_app(request: web.Request) -> tuple[Hub, int]:
    """Insist on an App JWT, as GitHub's /app endpoints do; return the hub and the App's id."""
    actor = actor_of(request)
    if actor is None or actor.kind != "app" or actor.app_id is None:
        raise ApiError(401, "A JSON web token could not be decoded")
    return hub_of(request), actor.app_id


def installation_of(request: web.Request, hub: Hub, app_id: int) -> Installation:
    """Return the App's installation named in the path, or answer 404."""
    wanted = int_param(request, "installation_id")
    return or_not_found(next((i for i in hub.installations_of(app_id) if i.id == wanted), None))


@routes.get("/app")
@requires_no_permission("an App JWT")
async def get_app(request: web.Request) -> web.Response:
    """Describe the authenticated App."""
    hub, app_id = require_app(request)
    return json_response(hub.render.app(app_id, installations_count=True))


@routes.get("/app/installations")
@requires_no_permission("an App JWT")
async def list_installations(request: web.Request) -> web.Response:
    """List the App's installations."""
    hub, app_id = require_app(request)
    page, headers = paginate(request, hub.public_url, hub.installations_of(app_id))
    return json_response([hub.render.installation(i) for i in page], headers=headers)


@routes.get("/app/installations/{installation_id}")
@requires_no_permission("an App JWT")
async def get_installation(request: web.Request) -> web.Response:
    """Describe one installation."""
    hub, app_id = require_app(request)
    return json_response(hub.render.installation(installation_of(request, hub, app_id)))


class AccessTokenBody(BaseModel):
    """Body of POST /app/installations/{id}/access_tokens."""

    repositories: list[str] | None = None
    repository_ids: list[int] | None = None
    permissions: dict[str, Level] | None = None


@routes.post("/app/installations/{installation_id}/access_tokens")
@requires_no_permission("an App JWT")
async def create_access_token(request: web.Request) -> web.Response:
    """Mint an installation access token, optionally limited to repositories and permissions."""
    hub, app_id = require_app(request)
    inst = installation_of(request, hub, app_id)
    if inst.suspended_at is not None:
        raise suspended()
    body = await read_body(request, AccessTokenBody, "InstallationAccessToken")
    granted = hub.app_facts(app_id).permissions
    if body.permissions is not None and not all(
        Permission(name, level).granted_by(granted) for name, level in body.permissions.items()
    ):
        raise ApiError(422, "The permissions requested are not granted to this installation.")
    permissions = dict(granted)
    if body.permissions is not None:
        # Every token keeps metadata: GitHub grants it with any repository permission.
        permissions = {**{k: v for k, v in granted.items() if k == "metadata"}, **body.permissions}
    owned = [r for r in hub.state.repos if r.owner == inst.account]
    selected: list[Repo] | None = None
    if body.repositories is not None or body.repository_ids is not None:
        names = {n.casefold() for n in body.repositories or []}
        ids = set(body.repository_ids or [])
        selected = [r for r in owned if r.name.casefold() in names or r.id in ids]
        if names - {r.name.casefold() for r in owned} or ids - {r.id for r in owned}:
            raise ApiError(
                422,
                "There is at least one repository that does not exist or is not accessible "
                "to the parent installation.",
            )
    repository_ids = [r.id for r in selected] if selected is not None else None
    token = hub.auth.mint(inst.id, repository_ids, permissions)
    data: Json = {
        "token": token.token,
        "expires_at": token.expires_at,
        "permissions": permissions,
        "repository_selection": "all" if selected is None else "selected",
    }
    if selected is not None:
        data["repositories"] = [hub.render.repo(r, webhook=True) for r in selected]
    return json_response(data, status=201)


@routes.get("/installation/repositories")
@requires_no_permission("any installation token")
async def list_installation_repositories(request: web.Request) -> web.Response:
    """List the repositories an installation token can reach."""
    hub = hub_of(request)
    actor = actor_of(request)
    if actor is None or actor.kind != "installation" or actor.installation_id is None:
        raise bad_credentials()
    inst = or_not_found(
        next((i for i in hub.state.installations if i.id == actor.installation_id), None)
    )
    repos = [
        r
        for r in hub.state.repos
        if r.owner == inst.account
        and (actor.repository_ids is None or r.id in actor.repository_ids)
    ]
    page, headers = paginate(request, hub.public_url, repos)
    body: Json = {
        "total_count": len(repos),
        "repository_selection": "all" if actor.repository_ids is None else "selected",
        "repositories": [hub.render.repo(r, webhook=True) for r in page],
    }
    return json_response(body, headers=headers)


@routes.get("/repos/{owner}/{repo}/installation")
@requires_no_permission("an App JWT")
async def get_repo_installation(request: web.Request) -> web.Response:
    """Find the App's installation covering a repository."""
    hub, app_id = require_app(request)
    repo = hub.repo(request.match_info["owner"], request.match_info["repo"])
    inst = or_not_found(hub.installation(repo.owner, app_id) if repo else None)
    return json_response(hub.render.installation(inst))


@routes.get("/users/{username}")
@requires_no_permission("anyone")
async def get_user(request: web.Request) -> web.Response:
    """Describe an account, as GET /users/{username} does (an App's bot is `slug[bot]`)."""
    hub = hub_of(request)
    login = request.match_info["username"]
    if login not in hub.state.users:  # reading never makes an account; GitHub answers 404
        raise ApiError(404, "Not Found")
    return json_response(hub.render.user(login))


@routes.get("/rate_limit")
@requires_no_permission("anyone")
async def rate_limit(request: web.Request) -> web.Response:
    """Report the caller's primary rate limit, as GitHub does (this call costs nothing)."""
    hub = hub_of(request)
    budget = hub.limits.budget_of(actor_of(request))
    unlimited = Budget(DEFAULT_RATE_LIMIT)
    core = (budget or unlimited).figures()
    other = {**unlimited.figures(), "reset": core["reset"]}
    return json_response(
        {"resources": {"core": core, "search": other, "graphql": other}, "rate": core}
    )


class CreateRepoBody(BaseModel):
    """Body of POST /user/repos."""

    name: str = Field(pattern=REPO_NAME)
    description: str | None = None
    private: bool = False
    auto_init: bool = False
    delete_branch_on_merge: bool = False


@routes.post("/user/repos")
@requires_no_permission("users only: installations are refused")
async def create_repo(request: web.Request) -> web.Response:
    """Create a repository for the authenticated user, installing the App on the account."""
    hub = hub_of(request)
    actor = _user_actor(request)
    assert actor.login is not None
    body = await read_body(request, CreateRepoBody, "Repository")
    if hub.repo(actor.login, body.name) is not None:
        raise name_taken()
    now = utc_now()
    repo = Repo(
        id=hub.state.next_id(),
        owner=actor.login,
        name=body.name,
        description=body.description,
        private=body.private,
        delete_branch_on_merge=body.delete_branch_on_merge,
        created_at=now,
        updated_at=now,
        pushed_at=now,
        labels=default_labels(hub.state.next_id),
    )
    hub.user(actor.login)
    git = hub.git(repo)
    await git.init(repo.default_branch)
    if body.auto_init:
        readme = f"# {repo.name}\n" + (f"\n{repo.description}\n" if repo.description else "")
        await git.initial_commit(repo.default_branch, readme, hub.identity(actor.login))
    hub.state.repos.append(repo)
    hub.ensure_installation(repo.owner)
    return json_response(hub.render.repo(repo), status=201)


def _user_actor(request: web.Request) -> Actor:
    actor = actor_of(request)
    if actor is None:
        raise bad_credentials()
    if actor.kind != "admin":
        raise forbidden_integration()
    return actor
