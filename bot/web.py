"""The web process: verify, deduplicate, route, enqueue; acknowledge within milliseconds."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import orjson
import redis
from aiohttp import web
from gidgethub import ValidationFailure, sansio

from bot.dispatch import Dispatcher
from bot.intake import Intake
from bot.settings import Settings
from bot.store import IntakeLog, Store
from handlers import HandlerContext, router

log = logging.getLogger(__name__)

MAX_PAYLOAD_BYTES = 25 * 1024 * 1024  # GitHub caps webhook payloads at 25 MB


@dataclass
class WebContext:
    """What the web process holds for its whole life."""

    settings: Settings
    store: Store
    dispatch: Dispatcher
    intake: Intake
    _bot_login: str | None = None

    def bot_login(self) -> str | None:
        """Return the App's bot login, read once it is known (a worker learns it from GET /app)."""
        if self._bot_login is None:
            self._bot_login = self.settings.bot_login or self.store.bot_login()
        return self._bot_login


CONTEXT = web.AppKey("context", WebContext)


def _answer(status: int, outcome: str, **extra: object) -> web.Response:
    body = orjson.dumps({"outcome": outcome, **extra})
    return web.Response(body=body, status=status, content_type="application/json")


async def receive_webhook(request: web.Request) -> web.Response:
    """Accept one webhook delivery: 202 once it is verified, recorded and routed."""
    web_ctx = request.app[CONTEXT]
    if request.content_length is not None and request.content_length > MAX_PAYLOAD_BYTES:
        return _answer(413, "refused", reason="payload over GitHub's 25 MB cap")
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _answer(413, "refused", reason="payload over GitHub's 25 MB cap")
    secret = web_ctx.settings.webhook_secret
    if secret is not None:
        signature = request.headers.get("X-Hub-Signature-256")
        if not signature:
            return _answer(401, "refused", reason="missing X-Hub-Signature-256")
        try:
            sansio.validate_event(body, signature=signature, secret=secret)
        except ValidationFailure:
            log.warning("refused a delivery with a bad signature from %s", request.remote)
            return _answer(401, "refused", reason="signature does not match")
    event_name = request.headers.get("X-GitHub-Event")
    delivery_id = request.headers.get("X-GitHub-Delivery")
    if not event_name or not delivery_id:
        return _answer(400, "refused", reason="missing X-GitHub-Event or X-GitHub-Delivery")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _answer(400, "refused", reason="body is not JSON")
    if not isinstance(data, dict):
        return _answer(400, "refused", reason="body is not a JSON object")
    event = sansio.Event(data, event=event_name, delivery_id=delivery_id)
    if not router.fetch(event):
        return _answer(202, "ignored")
    ctx = HandlerContext(settings=web_ctx.settings, bot_login=web_ctx.bot_login)
    try:
        await router.dispatch(event, ctx)
    except Exception:
        log.exception("delivery %s (%s): handler failed", delivery_id, event_name)
        return _answer(500, "failed")
    if not ctx.jobs:
        return _answer(202, "ignored")
    try:
        if not await web_ctx.intake.submit(delivery_id, ctx.jobs):
            log.info("delivery %s (%s) seen before; ignored", delivery_id, event_name)
            return _answer(202, "duplicate")
    except redis.RedisError as exc:
        log.error("delivery %s (%s): Redis unavailable: %s", delivery_id, event_name, exc)
        return _answer(503, "retry", reason="state store unavailable")
    return _answer(202, "accepted")


async def health(request: web.Request) -> web.Response:
    """Report whether Redis answers and how deep each queue is."""
    ctx = request.app[CONTEXT]
    try:
        ctx.store.ping()
        depths = ctx.dispatch.depths()
        backlog = ctx.store.intake_backlog()
    except Exception as exc:
        return web.json_response({"status": "degraded", "redis": str(exc)}, status=503)
    return web.json_response(
        {"status": "ok", "redis": "ok", "queues": depths, "intake_backlog": backlog}
    )


def create_app(settings: Settings, store: Store, dispatch: Dispatcher) -> web.Application:
    """Build the web application."""
    settings.webhook_secret  # noqa: B018 - refuse to build an app that would accept unsigned events
    app = web.Application(client_max_size=MAX_PAYLOAD_BYTES)
    intake_log = IntakeLog.from_url(settings.redis_url)
    app[CONTEXT] = WebContext(settings, store, dispatch, Intake(intake_log))

    async def close_intake(_app: web.Application) -> None:
        await intake_log.close()

    app.on_cleanup.append(close_intake)
    app.router.add_post("/webhook", receive_webhook)
    app.router.add_get("/healthz", health)
    return app
