"""Request middleware: authentication, rate limits (primary and secondary), App permissions,
faults, ETags, call counts, request IDs."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from http import HTTPStatus

from aiohttp import web
from aiohttp.typedefs import Handler

from bot.sandbox.auth import ACT_AS_HEADER, Actor
from bot.sandbox.calls import Budget, rate_limited
from bot.sandbox.graphql import GraphQLError, operation_of
from bot.sandbox.hub import ACTOR, Hub, hub_of
from bot.sandbox.permissions import requirement_of
from bot.sandbox.rest import ApiError, bad_credentials, forbidden_integration, not_found, read_json
from bot.sandbox.secondary import CONTENT_METHODS, REQUEST_ID_HEADER, Usage, new_request_id

log = logging.getLogger(__name__)

ADMIN_PREFIX = "/_sandbox/"
GIT_ROUTE = "git-http"
PAGE_ROUTE = "html-page"
ACCEPTED_PERMISSIONS = "X-Accepted-GitHub-Permissions"
RATE_LIMIT_PATH = "/rate_limit"
GRAPHQL_PATH = "/graphql"


@dataclass
class _Call:
    """What the middleware learns of one REST call, to count it whatever its answer."""

    admin: bool
    request_id: str = field(default_factory=new_request_id)
    actor: Actor | None = None
    budget: Budget | None = None
    spent: bool = False


@web.middleware
async def sandbox_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Apply the sandbox's request rules; git smart-HTTP and web pages pass straight through.

    Neither is a REST call: no faults apply, and GitHub's API call count leaves them out.
    """
    if request.match_info.route.name in (GIT_ROUTE, PAGE_ROUTE):
        return await handler(request)
    hub = hub_of(request)
    call = _Call(admin=request.path.startswith(ADMIN_PREFIX))
    try:
        response = await _served(request, handler, hub, call)
    except ApiError as err:
        response = err.response()
    except (web.HTTPNotFound, web.HTTPMethodNotAllowed):
        response = not_found().response()
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        response = ApiError(500, "Server Error").response()
    finally:
        if request.method != "GET":
            hub.changed()
    if not call.admin:
        _count(request, hub, call, response)
    response.headers[REQUEST_ID_HEADER] = call.request_id
    return response


async def _served(
    request: web.Request, handler: Handler, hub: Hub, call: _Call
) -> web.StreamResponse:
    """Authenticate, charge, authorize and serve one call, noting in call who made it."""
    actor = call.actor = hub.auth.from_header(
        request.headers.get("Authorization"), request.headers.get(ACT_AS_HEADER)
    )
    request[ACTOR] = actor
    if call.admin:
        if actor is None or actor.kind != "admin":
            raise bad_credentials()
        return _conditional(request, await handler(request))
    call.budget = hub.limits.budget_of(actor)
    # "Accessing this endpoint does not count against your REST API rate limit."
    budget = call.budget if request.path != RATE_LIMIT_PATH else None
    if actor is not None and budget is not None and budget.exhausted():
        raise rate_limited(actor, budget)
    admitted = await _admitted(request, hub, actor, call.request_id)
    try:
        if budget is not None:
            # Spent before serving, so concurrent calls cannot overdraw the budget.
            budget.spend()
            call.spent = True
        return await _authorized(request, handler, hub, actor)
    finally:
        if admitted is not None:
            hub.secondary.release(admitted)


async def _authorized(
    request: web.Request, handler: Handler, hub: Hub, actor: Actor | None
) -> web.StreamResponse:
    """Check the caller's App permissions, apply any fault, and serve the call."""
    accepted = _check_permissions(request, actor)
    await hub.faults.apply(request.method, request.path)
    response = _conditional(request, await handler(request))
    if accepted:
        response.headers[ACCEPTED_PERMISSIONS] = accepted
    return response


async def _admitted(
    request: web.Request, hub: Hub, actor: Actor | None, request_id: str
) -> Usage | None:
    """Let an installation's call in under its secondary limits (None: not limited).

    Raises GitHub's 403 when a limit refuses it; a refused call is neither served nor
    counted as a write.
    """
    if actor is None or actor.kind != "installation" or actor.installation_id is None:
        return None
    content = await _creates_content(request)
    return hub.secondary.admit(actor.installation_id, content, request_id)


async def _creates_content(request: web.Request) -> bool:
    """Tell whether a call is content-creating: a REST write, or a GraphQL mutation.

    GitHub's content limits cover "actions taken ... via the REST API and GraphQL API";
    a GraphQL query sent with POST creates nothing. A body that does not parse is no
    mutation (the endpoint answers it with its errors).
    """
    if request.method not in CONTENT_METHODS:
        return False
    if request.path != GRAPHQL_PATH:
        return True
    try:
        operation, _ = operation_of(await read_json(request))
    except (ApiError, GraphQLError):
        return False
    return operation.kind == "mutation"


def _count(request: web.Request, hub: Hub, call: _Call, response: web.StreamResponse) -> None:
    """Count a REST call as GitHub does, and show its caller's rate limit (a 304 is free)."""
    kind = call.actor.kind if call.actor is not None else "anonymous"
    inst = call.actor.installation_id if call.actor is not None else None
    not_modified = response.status == HTTPStatus.NOT_MODIFIED
    hub.calls.count(kind, inst, request.method, _template(request), not_modified)
    if call.budget is not None:
        if call.spent and not_modified:
            call.budget.refund()
        response.headers.update(call.budget.headers())


def _conditional(request: web.Request, response: web.StreamResponse) -> web.StreamResponse:
    """Tag a successful read with an ETag; answer 304 when the client already holds it.

    GitHub: "Most endpoints return an etag header ... You can use the values of these
    headers to make conditional GET requests"; a 304 carries no body. The tag covers the
    Authorization header too, as GitHub's does ("ETag ... includes the authorization"):
    a tag read with one token is no tag for the next, so a new token reads in full.
    """
    if (
        request.method != "GET"
        or response.status != HTTPStatus.OK
        or not isinstance(response, web.Response)
        or not isinstance(response.body, bytes)
    ):
        return response
    digest = hashlib.sha256(request.headers.get("Authorization", "").encode())
    digest.update(response.body)
    etag = f'W/"{digest.hexdigest()[:40]}"'
    response.headers["ETag"] = etag
    held = {
        tag.strip().removeprefix("W/")
        for tag in request.headers.get("If-None-Match", "").split(",")
    }
    if etag.removeprefix("W/") not in held and "*" not in held:
        return response
    return web.Response(status=HTTPStatus.NOT_MODIFIED, headers={"ETag": etag})


def _check_permissions(request: web.Request, actor: Actor | None) -> str | None:
    """Refuse an installation whose token lacks what the route requires, as GitHub does.

    Returns the X-Accepted-GitHub-Permissions value for an installation's answer.
    """
    match = request.match_info
    if actor is None or actor.kind != "installation" or match.http_exception is not None:
        return None
    requirement = requirement_of(match.handler)
    if requirement is None:
        log.error("%s %s declares no permission: refused", request.method, request.path)
        raise forbidden_integration()
    if not requirement.met_by(actor.permissions):
        refused = forbidden_integration()
        refused.headers[ACCEPTED_PERMISSIONS] = requirement.header()
        raise refused
    return requirement.header()


def _template(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else request.path
