"""The web process: verify, deduplicate, route, enqueue; acknowledge within milliseconds."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import orjson
import redis
from aiohttp import web
from gidgethub import ValidationFailure, sansio
from rq import Worker

from bot.dispatch import Dispatcher
from bot.intake import Intake
from bot.logs import log_context
from bot.metrics import (
    CONTENT_TYPE,
    STORED,
    WEBHOOK_DELIVERIES,
    Tally,
    current_gauges,
    render_prometheus,
    stored_families,
)
from bot.model import utcnow
from bot.overview import deployment_warnings, gather_overview
from bot.settings import Settings
from bot.status_page import render_status_page
from bot.store import IntakeLog, Store
from handlers import HandlerContext, router

log = logging.getLogger(__name__)

MAX_PAYLOAD_BYTES = 25 * 1024 * 1024  # GitHub caps webhook payloads at 25 MB
QUEUE_LABELS_REFRESH_S = 2.0


@dataclass
class WebContext:
    """What the web process holds for its whole life."""

    settings: Settings
    store: Store
    dispatch: Dispatcher
    intake: Intake
    queue_labels: dict[str, str] = field(default_factory=dict)
    _bot_login: str | None = None

    def bot_login(self) -> str | None:
        """Return the App's bot login, read once it is known (a worker learns it from GET /app)."""
        if self._bot_login is None:
            self._bot_login = self.settings.bot_login or self.store.bot_login()
        return self._bot_login


CONTEXT = web.AppKey("context", WebContext)


OPERATOR_COOKIE = "baton_operator"


def operator_allowed(request: web.Request) -> bool:
    """Return whether the request carries the operator token (header or cookie).

    Raises 404 when no token is set: operator pages are never public by default.
    """
    token = request.app[CONTEXT].settings.operator_token
    if token is None:
        raise web.HTTPNotFound(text="operator pages are off: set BATON_OPERATOR_TOKEN\n")
    expected = token.get_secret_value().encode()
    scheme, _, offered = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer":
        offered = request.cookies.get(OPERATOR_COOKIE, "")
    return hmac.compare_digest(offered.encode(), expected)


UNKNOWN_EVENT = "unknown"  # the event a delivery is counted under until its signature is verified


@dataclass(frozen=True)
class _Answer:
    """The answer to one delivery, and the event it is counted under."""

    status: int
    outcome: str
    reason: str | None = None
    event: str = UNKNOWN_EVENT

    def response(self) -> web.Response:
        """Return the JSON answer: the outcome, and why when there is more to say."""
        answer = {"outcome": self.outcome}
        if self.reason is not None:
            answer["reason"] = self.reason
        return web.Response(
            body=orjson.dumps(answer), status=self.status, content_type="application/json"
        )


async def receive_webhook(request: web.Request) -> web.Response:
    """Accept one webhook delivery: 202 once it is verified, recorded and routed."""
    with log_context(delivery=request.headers.get("X-GitHub-Delivery")):
        answer = await _receive(request)
    request.app[DELIVERIES].count(WEBHOOK_DELIVERIES, answer.event, answer.outcome)
    return answer.response()


async def _receive(request: web.Request) -> _Answer:
    web_ctx = request.app[CONTEXT]
    if request.content_length is not None and request.content_length > MAX_PAYLOAD_BYTES:
        return _Answer(413, "refused", "payload over GitHub's 25 MB cap")
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _Answer(413, "refused", "payload over GitHub's 25 MB cap")
    secret = web_ctx.settings.webhook_secret
    if secret is not None:
        signature = request.headers.get("X-Hub-Signature-256")
        if not signature:
            return _Answer(401, "refused", "missing X-Hub-Signature-256")
        try:
            sansio.validate_event(body, signature=signature, secret=secret)
        except ValidationFailure:
            log.warning("refused a delivery with a bad signature from %s", request.remote)
            return _Answer(401, "refused", "signature does not match")
    event_name = request.headers.get("X-GitHub-Event")
    delivery_id = request.headers.get("X-GitHub-Delivery")
    if not event_name or not delivery_id:
        return _Answer(400, "refused", "missing X-GitHub-Event or X-GitHub-Delivery")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _Answer(400, "refused", "body is not JSON", event_name)
    if not isinstance(data, dict):
        return _Answer(400, "refused", "body is not a JSON object", event_name)
    event = sansio.Event(data, event=event_name, delivery_id=delivery_id)
    if not router.fetch(event):
        return _Answer(202, "ignored", event=event_name)
    ctx = HandlerContext(
        settings=web_ctx.settings,
        bot_login=web_ctx.bot_login,
        repo_queue_labels=web_ctx.queue_labels,
    )
    try:
        await router.dispatch(event, ctx)
    except Exception:
        log.exception("delivery %s (%s): handler failed", delivery_id, event_name)
        return _Answer(500, "failed", event=event_name)
    if not ctx.jobs:
        return _Answer(202, "ignored", event=event_name)
    try:
        if not await web_ctx.intake.submit(delivery_id, ctx.jobs):
            log.info("delivery %s (%s) seen before; ignored", delivery_id, event_name)
            return _Answer(202, "duplicate", event=event_name)
    except redis.RedisError as exc:
        log.error("delivery %s (%s): Redis unavailable: %s", delivery_id, event_name, exc)
        return _Answer(503, "retry", "state store unavailable", event_name)
    return _Answer(202, "accepted", event=event_name)


DELIVERIES = web.AppKey("deliveries", Tally)  # counted in memory, written about once a second
DELIVERIES_FLUSH_S = 1.0


async def _flush_deliveries(app: web.Application) -> None:
    """Add the deliveries counted since the last flush to Redis (kept for the next on failure)."""
    counted = app[DELIVERIES]
    batch = counted.take()
    if batch and not await asyncio.to_thread(app[CONTEXT].store.add_metrics, batch):
        counted.merge(batch)


async def _keep_flushing_deliveries(app: web.Application) -> AsyncIterator[None]:
    """Flush the delivery counts once a second while the web process runs, and once at its end.

    One batch a second, never a Redis call per delivery: acknowledging stays as fast.
    """
    task = _every(DELIVERIES_FLUSH_S, lambda: _flush_deliveries(app))
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await _flush_deliveries(app)


def _every(interval_s: float, action: Callable[[], Awaitable[None]]) -> asyncio.Task[None]:
    """Start a task that runs action every interval_s seconds until it is cancelled."""

    async def repeat() -> None:
        while True:
            await asyncio.sleep(interval_s)
            await action()

    return asyncio.create_task(repeat())


def _scrape(ctx: WebContext) -> str:
    """Read the stored metrics and the gauges of the moment, and render them (blocking I/O)."""
    stored = ctx.store.read_metrics([metric.name for metric in STORED])
    gauges = current_gauges(
        queue_depths=ctx.dispatch.depths(),
        workers=Worker.count(connection=ctx.dispatch.connection),
        live_runs=ctx.store.live_runs(),
        intake_backlog=ctx.store.intake_backlog(),
    )
    return render_prometheus([*stored_families(stored), *gauges])


async def metrics(request: web.Request) -> web.Response:
    """Serve Baton's metrics in Prometheus's text format, to the operator token as Bearer."""
    if not operator_allowed(request):
        return web.Response(
            status=401,
            text="Baton's metrics need the operator token: send Authorization: Bearer <token> "
            "(BATON_OPERATOR_TOKEN).\n",
            headers={"WWW-Authenticate": 'Bearer realm="baton"'},
        )
    await _flush_deliveries(request.app)  # this process's latest deliveries count too
    try:
        text = await asyncio.to_thread(_scrape, request.app[CONTEXT])
    except redis.RedisError as exc:
        log.error("metrics: Redis unavailable: %s", exc)
        return web.Response(status=503, text="Baton's state store (Redis) is unavailable.\n")
    return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})


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


STATUS_RUNS = 50  # the recent runs the status page lists besides the live ones
_STATUS_HEADERS = {
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def _status_refused() -> web.Response:
    return web.Response(
        status=401,
        text="Baton's status page needs the operator token (BATON_OPERATOR_TOKEN): open "
        "/status?token=<token> once in a browser, which keeps it in a cookie, "
        "or send the header Authorization: Bearer <token>.\n",
        headers={"WWW-Authenticate": 'Bearer realm="baton"'},
    )


async def status_page(request: web.Request) -> web.Response:
    """Serve the operator's status page; ?token=<operator token> trades the token for a cookie."""
    ctx = request.app[CONTEXT]
    allowed = operator_allowed(request)
    offered = request.query.get("token")
    if offered is not None:
        token = ctx.settings.operator_token
        assert token is not None  # operator_allowed answers 404 without one
        if not hmac.compare_digest(offered.encode(), token.get_secret_value().encode()):
            return _status_refused()
        # Into a cookie, and out of the address bar, the history and any shared link.
        redirect = web.Response(status=303, headers={"Location": request.path})
        secure = request.secure or request.headers.get("X-Forwarded-Proto") == "https"
        redirect.set_cookie(
            OPERATOR_COOKIE, offered, path="/", httponly=True, samesite="Strict", secure=secure
        )
        return redirect
    if not allowed:
        return _status_refused()
    now = utcnow()
    try:
        # The store speaks synchronous redis-py: read it off the event loop.
        overview = await asyncio.to_thread(
            gather_overview,
            ctx.store,
            ctx.dispatch,
            now,
            STATUS_RUNS,
            deployment_warnings(ctx.settings),
        )
    except redis.RedisError as exc:
        log.error("status page: Redis unavailable: %s", exc)
        return web.Response(status=503, text="Baton's state store (Redis) is unavailable.\n")
    return web.Response(
        text=render_status_page(overview, now), content_type="text/html", headers=_STATUS_HEADERS
    )


async def _keep_queue_labels(app: web.Application) -> AsyncIterator[None]:
    """Keep the repositories' own queue labels in memory, so routing never waits on Redis."""
    ctx = app[CONTEXT]

    async def refresh() -> None:
        try:
            ctx.queue_labels = await asyncio.to_thread(ctx.store.queue_labels)
        except redis.RedisError as exc:
            log.warning("repositories' queue labels not refreshed: %s", exc)

    await refresh()  # before the first delivery
    task = _every(QUEUE_LABELS_REFRESH_S, refresh)
    yield
    task.cancel()


def create_app(settings: Settings, store: Store, dispatch: Dispatcher) -> web.Application:
    """Build the web application."""
    settings.webhook_secret  # noqa: B018 - refuse to build an app that would accept unsigned events
    app = web.Application(client_max_size=MAX_PAYLOAD_BYTES)
    intake_log = IntakeLog.from_url(settings.redis_url)
    app[CONTEXT] = WebContext(settings, store, dispatch, Intake(intake_log))

    async def close_intake(_app: web.Application) -> None:
        await intake_log.close()

    app.on_cleanup.append(close_intake)
    app[DELIVERIES] = Tally()
    app.cleanup_ctx.append(_keep_flushing_deliveries)
    app.cleanup_ctx.append(_keep_queue_labels)
    app.router.add_post("/webhook", receive_webhook)
    app.router.add_get("/healthz", health)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/status", status_page)
    return app
