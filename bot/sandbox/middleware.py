"""Request middleware: authentication, App permissions, faults, call counts, rate limits, saves."""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from bot.sandbox.auth import ACT_AS_HEADER, Actor
from bot.sandbox.hub import ACTOR, hub_of
from bot.sandbox.permissions import requirement_of
from bot.sandbox.rest import ApiError, bad_credentials, forbidden_integration, not_found

log = logging.getLogger(__name__)

ADMIN_PREFIX = "/_sandbox/"
GIT_ROUTE = "git-http"
PAGE_ROUTE = "html-page"
ACCEPTED_PERMISSIONS = "X-Accepted-GitHub-Permissions"


@web.middleware
async def sandbox_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Apply the sandbox's request rules; git smart-HTTP and web pages pass straight through.

    Neither is a REST call: no faults apply, and GitHub's API call count leaves them out.
    """
    if request.match_info.route.name in (GIT_ROUTE, PAGE_ROUTE):
        return await handler(request)
    hub = hub_of(request)
    admin = request.path.startswith(ADMIN_PREFIX)
    kind = "anonymous"
    try:
        actor = hub.auth.from_header(
            request.headers.get("Authorization"), request.headers.get(ACT_AS_HEADER)
        )
        request[ACTOR] = actor
        kind = actor.kind if actor is not None else "anonymous"
        if admin and kind != "admin":
            raise bad_credentials()
        accepted = _check_permissions(request, actor) if not admin else None
        if not admin:
            await hub.faults.apply(request.method, request.path)
        response = await handler(request)
        if accepted:
            response.headers[ACCEPTED_PERMISSIONS] = accepted
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
    if not admin:
        hub.calls.count(kind, request.method, _template(request))
        rate = hub.calls.rate(kind)
        response.headers.update(
            {
                "X-RateLimit-Limit": str(rate["limit"]),
                "X-RateLimit-Remaining": str(rate["remaining"]),
                "X-RateLimit-Reset": str(rate["reset"]),
                "X-RateLimit-Used": str(rate["used"]),
                "X-RateLimit-Resource": "core",
            }
        )
    return response


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
