"""Test and operator endpoints under /_sandbox/ (admin token only)."""

from __future__ import annotations

from typing import Literal

from aiohttp import web
from pydantic import BaseModel

from bot.sandbox.faults import ApiFault
from bot.sandbox.hub import Hub, hub_of
from bot.sandbox.rest import json_response, or_not_found, read_body, read_json
from bot.sandbox.webhooks import Delivery, WebhookFaults

routes = web.RouteTableDef()

_API_FAULT_FIELDS = set(ApiFault.model_fields) - {"fired"}


class FaultsBody(BaseModel):
    """Body of POST /_sandbox/faults: an API fault rule, webhook faults, and/or a seed."""

    seed: int | None = None
    webhooks: WebhookFaults | None = None


class CollaboratorBody(BaseModel):
    """Body of PUT /_sandbox/repos/{owner}/{repo}/collaborators/{username}."""

    permission: Literal["read", "triage", "write", "maintain", "admin"] = "write"


class ConfigBody(BaseModel):
    """Body of PATCH /_sandbox/config."""

    webhook_url: str | None


@routes.get("/_sandbox/deliveries")
async def list_deliveries(request: web.Request) -> web.Response:
    """List recorded deliveries, oldest first, optionally filtered by event and action."""
    hub = hub_of(request)
    query = request.query
    found = [
        d.model_dump()
        for d in hub.webhooks.deliveries
        if query.get("event", d.event) == d.event and query.get("action", d.action) == d.action
    ]
    return json_response(found)


def _find(request: web.Request) -> Delivery:
    wanted = request.match_info["delivery_id"]
    return or_not_found(
        next((d for d in hub_of(request).webhooks.deliveries if str(d.id) == wanted), None)
    )


@routes.get("/_sandbox/deliveries/{delivery_id}")
async def get_delivery(request: web.Request) -> web.Response:
    """Show one delivery with the exact request it made."""
    hub = hub_of(request)
    delivery = _find(request)
    body = hub.webhooks.body(delivery)
    data = delivery.model_dump()
    data["request"] = {"headers": hub.webhooks.headers(delivery, body), "payload": body.decode()}
    return json_response(data)


@routes.post("/_sandbox/deliveries/{delivery_id}/redeliver")
async def redeliver(request: web.Request) -> web.Response:
    """Deliver a recorded delivery again (same guid and body)."""
    attempt = hub_of(request).webhooks.redeliver(_find(request))
    return json_response(attempt.model_dump(), status=202)


def _faults_response(hub: Hub) -> web.Response:
    return json_response(
        {
            "api": [rule.model_dump() for rule in hub.faults.rules],
            "webhooks": hub.webhooks.faults.model_dump(),
        }
    )


@routes.post("/_sandbox/faults")
async def add_faults(request: web.Request) -> web.Response:
    """Add an API fault rule, set webhook faults, and/or reseed the fault generator."""
    hub = hub_of(request)
    data = await read_json(request)
    body = await read_body(request, FaultsBody, "Fault")
    if isinstance(data, dict) and _API_FAULT_FIELDS & data.keys():
        hub.faults.rules.append(await read_body(request, ApiFault, "Fault"))
    if body.webhooks is not None:
        hub.webhooks.faults = body.webhooks
    if body.seed is not None:
        hub.rng.seed(body.seed)
    return _faults_response(hub)


@routes.get("/_sandbox/faults")
async def get_faults(request: web.Request) -> web.Response:
    """Show the active fault rules."""
    return _faults_response(hub_of(request))


@routes.delete("/_sandbox/faults")
async def clear_faults(request: web.Request) -> web.Response:
    """Remove every fault."""
    hub = hub_of(request)
    hub.faults.rules.clear()
    hub.webhooks.faults = WebhookFaults()
    return web.Response(status=204)


@routes.get("/_sandbox/calls")
async def get_calls(request: web.Request) -> web.Response:
    """Count REST API calls by caller kind and `METHOD path-template`."""
    return json_response(hub_of(request).calls.snapshot())


@routes.delete("/_sandbox/calls")
async def reset_calls(request: web.Request) -> web.Response:
    """Forget the counted calls."""
    hub_of(request).calls.reset()
    return web.Response(status=204)


@routes.put("/_sandbox/repos/{owner}/{repo}/collaborators/{username}")
async def add_collaborator(request: web.Request) -> web.Response:
    """Give a user a role on a repository."""
    hub = hub_of(request)
    repo = or_not_found(hub.repo(request.match_info["owner"], request.match_info["repo"]))
    body = await read_body(request, CollaboratorBody, "Collaborator")
    login = request.match_info["username"]
    hub.user(login)
    repo.collaborators[login] = body.permission
    return web.Response(status=204)


@routes.get("/_sandbox/config")
async def get_config(request: web.Request) -> web.Response:
    """Show the runtime configuration."""
    return _config_response(hub_of(request))


def _config_response(hub: Hub) -> web.Response:
    return json_response({"webhook_url": hub.webhooks.url})


@routes.patch("/_sandbox/config")
async def update_config(request: web.Request) -> web.Response:
    """Change the runtime configuration (the webhook URL)."""
    hub = hub_of(request)
    body = await read_body(request, ConfigBody, "Config")
    hub.webhooks.url = body.webhook_url
    return _config_response(hub)
