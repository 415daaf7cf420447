"""Request middleware: authentication, call counting, faults, rate-limit headers, persistence."""

from __future__ import annotations

import logging

from aiohttp import web
from aiohttp.typedefs import Handler

from bot.sandbox.auth import ACT_AS_HEADER
from bot.sandbox.hub import ACTOR, hub_of
from bot.sandbox.rest import ApiError, bad_credentials, not_found

log = logging.getLogger(__name__)

ADMIN_PREFIX = "/_sandbox/"
GIT_ROUTE = "git-http"


@web.middleware
async def sandbox_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Apply the sandbox's request rules; git smart-HTTP requests pass straight through."""
    if request.match_info.route.name == GIT_ROUTE:
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
        if not admin:
            await hub.faults.apply(request.method, request.path)
        response = await handler(request)
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


def _template(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else request.path
