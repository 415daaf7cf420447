"""The App's webhook deliveries (JWT): list them, read one, ask for one again.

As GitHub has them (https://docs.github.com/en/rest/apps/webhooks): newest first, in
pages a `cursor` starts (the `Link` header names the next and previous ones), each
with the status GitHub recorded (`OK` for a 2xx answer; a receiver that answered
otherwise, or could not be reached, failed it). GitHub redelivers nothing on its own:
a redelivery is asked for, and goes out with the same guid and body, marked as one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from urllib.parse import urlencode

from aiohttp import web

from bot.sandbox.api.apps import require_app
from bot.sandbox.auth import APP_ID
from bot.sandbox.hub import Hub
from bot.sandbox.permissions import requires_no_permission
from bot.sandbox.rest import ApiError, Json, json_response, or_not_found, page_size
from bot.sandbox.webhooks import Delivery

routes = web.RouteTableDef()

_CURSOR = re.compile(r"^v1_(?P<id>[0-9]+)$")
# The `status` filter: the classes of status_code each value selects, as GitHub documents.
_OUTCOMES: dict[str, Callable[[int], bool]] = {
    "success": lambda code: 200 <= code <= 399,
    "failure": lambda code: 400 <= code <= 599,
}
_BOOLEANS = {"true": True, "false": False}


def _attempted(hub: Hub, app_id: int) -> list[Delivery]:
    """Return the App's attempted deliveries, newest first (the sandbox delivers to one App)."""
    if app_id != APP_ID:
        return []
    return sorted(
        (d for d in hub.webhooks.deliveries if d.delivered_at is not None),
        key=lambda d: d.id,
        reverse=True,
    )


def _item(delivery: Delivery) -> Json:
    """Render a delivery as GitHub lists it: no request or response."""
    return {
        "id": delivery.id,
        "guid": delivery.guid,
        "delivered_at": delivery.delivered_at,
        "redelivery": delivery.redelivery,
        "duration": delivery.duration or 0,
        "status": delivery.status,
        "status_code": delivery.status_code or 0,  # GitHub's 0: no answer came
        "event": delivery.event,
        "action": delivery.action,
        "installation_id": delivery.installation_id,
        "repository_id": delivery.repository_id,
    }


def _filtered(request: web.Request, deliveries: Sequence[Delivery]) -> list[Delivery]:
    """Keep the deliveries the `status` and `redelivery` filters select."""
    query = request.query
    outcome = query.get("status")
    redelivery = query.get("redelivery")
    if outcome is not None and outcome not in _OUTCOMES:
        raise ApiError(422, "Validation Failed", [{"field": "status", "code": "invalid"}])
    if redelivery is not None and redelivery not in _BOOLEANS:
        raise ApiError(422, "Validation Failed", [{"field": "redelivery", "code": "invalid"}])
    return [
        d
        for d in deliveries
        if (outcome is None or _OUTCOMES[outcome](d.status_code or 0))
        and (redelivery is None or d.redelivery is _BOOLEANS[redelivery])
    ]


def _start(request: web.Request, deliveries: Sequence[Delivery]) -> int:
    """Return where the page the `cursor` names starts among deliveries (newest first)."""
    cursor = request.query.get("cursor")
    if cursor is None:
        return 0
    named = _CURSOR.match(cursor)
    if named is None:
        raise ApiError(400, "Invalid cursor")
    newest = int(named["id"])
    return next((i for i, d in enumerate(deliveries) if d.id <= newest), len(deliveries))


def _cursor_link(request: web.Request, public_url: str, start: Delivery, rel: str) -> str:
    query = {**request.query, "cursor": f"v1_{start.id}"}
    return f'<{public_url}{request.rel_url.raw_path}?{urlencode(query)}>; rel="{rel}"'


@routes.get("/app/hook/deliveries")
@requires_no_permission("an App JWT")
async def list_deliveries(request: web.Request) -> web.Response:
    """List the App's webhook deliveries, newest first, a cursor's page at a time."""
    hub, app_id = require_app(request)
    found = _filtered(request, _attempted(hub, app_id))
    per_page = page_size(request)
    start = _start(request, found)
    page = found[start : start + per_page]
    links = []
    if start > 0:
        links.append(_cursor_link(request, hub.public_url, found[max(start - per_page, 0)], "prev"))
    if start + per_page < len(found):
        links.append(_cursor_link(request, hub.public_url, found[start + per_page], "next"))
    headers = {"Link": ", ".join(links)} if links else {}
    return json_response([_item(d) for d in page], headers=headers)


def _delivery_of(request: web.Request) -> tuple[Hub, Delivery]:
    hub, app_id = require_app(request)
    wanted = request.match_info["delivery_id"]
    found = next((d for d in _attempted(hub, app_id) if str(d.id) == wanted), None)
    return hub, or_not_found(found)


@routes.get("/app/hook/deliveries/{delivery_id}")
@requires_no_permission("an App JWT")
async def get_delivery(request: web.Request) -> web.Response:
    """Show one delivery with the request it made and the answer it got."""
    hub, delivery = _delivery_of(request)
    body = hub.webhooks.body(delivery)
    answer = delivery.response
    data = {
        **_item(delivery),
        "url": delivery.url or "",
        "request": {
            "headers": hub.webhooks.headers(delivery, body),
            "payload": hub.webhooks.payload(delivery),
        },
        "response": {
            "headers": answer.headers if answer is not None else {},
            "payload": answer.payload if answer is not None else None,
        },
    }
    return json_response(data)


@routes.post("/app/hook/deliveries/{delivery_id}/attempts")
@requires_no_permission("an App JWT")
async def redeliver(request: web.Request) -> web.Response:
    """Deliver a delivery again: the same guid and body, recorded as a redelivery."""
    hub, delivery = _delivery_of(request)
    hub.webhooks.redeliver(delivery)
    return json_response({}, status=202)
