"""The web process: verify, deduplicate, route, enqueue; acknowledge within milliseconds."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import ipaddress
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import orjson
import redis
from aiohttp import web
from gidgethub import sansio
from gidgethub.routing import Router
from rq import Worker

from bot.domain.ingress import (
    SESSION_TTL_S,
    FailedTokens,
    UnverifiedReads,
    client_address,
    is_loopback_host,
    new_session,
    session_key,
    session_valid,
    signature_matches,
)
from bot.domain.jobs import JobSpec
from bot.domain.model import IssueRef, utcnow
from bot.domain.payloads import payload_problem
from bot.domain.transcript import NoTranscript, issue_named, view_of
from bot.edges.intake import Intake
from bot.edges.queue import Dispatcher
from bot.edges.store import IntakeLog, Store
from bot.edges.store.transcripts import find_transcript, transcripts_for
from bot.ops.logs import log_context
from bot.ops.metrics import (
    CONTENT_TYPE,
    STORED,
    WEBHOOK_DELIVERIES,
    Tally,
    current_gauges,
    render_prometheus,
    spend_gauges,
    stored_families,
)
from bot.ops.settings import Settings
from bot.web.delivery import HandlerContext
from bot.web.overview import deployment_warnings, gather_overview
from bot.web.status_page import (
    TRANSCRIPTS_PATH,
    render_no_transcript_page,
    render_status_page,
    render_transcript_page,
)

log = logging.getLogger(__name__)

# GitHub caps webhook payloads at 25 MB: a smaller cap would refuse deliveries GitHub does
# send (a push lists every commit pushed, with every path each one touched). What bounds
# memory is the budget of unverified reads below, not this cap.
MAX_PAYLOAD_BYTES = 25 * 1024 * 1024
# Bodies read before their signature is checked: at most this many at once, declaring at
# most this many bytes together (about 2.5 of the largest). A routed payload is a few kB and
# is read in one turn of the event loop, so only slow or huge bodies hold a slot for long.
UNVERIFIED_READS = 64
UNVERIFIED_BUDGET_BYTES = 64 * 1024 * 1024
READ_TIMEOUT_S = 10.0  # GitHub itself gives up on a delivery after 10 s
QUEUE_LABELS_REFRESH_S = 2.0


@dataclass
class WebContext:
    """What the web process holds for its whole life."""

    settings: Settings
    secret: str  # the webhook secret
    store: Store
    dispatch: Dispatcher
    intake: Intake
    router: Router  # the handlers: every event family's routes, composed in one place
    queue_labels: dict[str, str] = field(default_factory=dict)
    reads: UnverifiedReads = field(
        default_factory=lambda: UnverifiedReads(UNVERIFIED_READS, UNVERIFIED_BUDGET_BYTES)
    )
    failed_tokens: FailedTokens = field(default_factory=FailedTokens)
    operator_token: str | None = None  # None: the operator pages are off
    operator_key: bytes | None = None  # signs the status page's sessions
    _bot_login: str | None = None

    def bot_login(self) -> str | None:
        """Return the App's bot login, read once it is known (a worker learns it from GET /app)."""
        if self._bot_login is None:
            self._bot_login = self.settings.bot_login or self.store.bot_login()
        return self._bot_login


CONTEXT = web.AppKey("context", WebContext)


OPERATOR_COOKIE = "baton_operator"


def _operator_token(request: web.Request) -> str:
    """Return the operator token; 404 when none is set: operator pages are never public."""
    token = request.app[CONTEXT].operator_token
    if token is None:
        raise web.HTTPNotFound(text="operator pages are off: set BATON_OPERATOR_TOKEN\n")
    return token


def _client(request: web.Request) -> str:
    settings = request.app[CONTEXT].settings
    named = request.headers.get(settings.trusted_proxy_header)
    return client_address(request.remote, named, settings.trusted_proxies)


def _throttled(request: web.Request) -> None:
    """Answer 429 to an address that offered too many wrong operator tokens of late."""
    wait = request.app[CONTEXT].failed_tokens.retry_after(_client(request), time.time())
    if wait:
        raise web.HTTPTooManyRequests(
            text=f"Too many wrong operator tokens from this address: try again in {wait} s.\n",
            headers={"Retry-After": str(wait)},
        )


def _token_matches(request: web.Request, offered: str, token: str) -> bool:
    """Compare an offered token in constant time; count it against its address if wrong."""
    matches = hmac.compare_digest(offered.encode(), token.encode())
    if not matches:
        request.app[CONTEXT].failed_tokens.failed(_client(request), time.time())
    return matches


def operator_allowed(request: web.Request) -> bool:
    """Return whether the request carries the operator token as Bearer, or a session cookie.

    Raises 404 when no token is set, 429 while its address is refused for wrong tokens.
    A request that offers nothing is refused without counting against its address.
    """
    token = _operator_token(request)
    _throttled(request)
    scheme, _, offered = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return _token_matches(request, offered, token)
    session = request.cookies.get(OPERATOR_COOKIE)
    if session is None:
        return False
    key = request.app[CONTEXT].operator_key
    assert key is not None  # made with the app whenever a token is set
    if session_valid(key, session, time.time()):
        return True
    request.app[CONTEXT].failed_tokens.failed(_client(request), time.time())
    return False


def cookie_secure(request: web.Request) -> bool:
    """Return whether the session cookie is Secure: always, but when nothing stands between
    a browser on this machine and Baton.

    That is a loopback Host, asked from a loopback peer, through no proxy. A proxy on
    this machine connects from loopback and may well pass `Host: 127.0.0.1`; the
    headers it adds are what give it away.
    """
    proxied = any(_is_proxy_header(name) for name in request.headers)
    local = is_loopback_host(request.headers.get("Host", "")) and _is_loopback_peer(request)
    return proxied or not local


def _is_proxy_header(name: str) -> bool:
    name = name.lower()
    return name.startswith("x-forwarded-") or name in ("forwarded", "x-real-ip")


def _is_loopback_peer(request: web.Request) -> bool:
    try:
        return ipaddress.ip_address(request.remote or "").is_loopback
    except ValueError:
        return False  # not an IP address (a Unix socket): nothing says it is this machine


UNKNOWN_EVENT = "unknown"  # the event a delivery is counted under until its signature is verified


@dataclass(frozen=True)
class _Answer:
    """The answer to one delivery, and the event it is counted under."""

    status: int
    outcome: str
    reason: str | None = None
    event: str = UNKNOWN_EVENT
    retry_after_s: int | None = None

    def response(self) -> web.Response:
        """Return the JSON answer: the outcome, and why when there is more to say."""
        answer = {"outcome": self.outcome}
        if self.reason is not None:
            answer["reason"] = self.reason
        headers = {} if self.retry_after_s is None else {"Retry-After": str(self.retry_after_s)}
        return web.Response(
            body=orjson.dumps(answer),
            status=self.status,
            content_type="application/json",
            headers=headers,
        )


_TOO_LARGE = _Answer(413, "refused", "payload over GitHub's 25 MB cap")


async def receive_webhook(request: web.Request) -> web.Response:
    """Accept one webhook delivery: 202 once it is verified, recorded and routed."""
    with log_context(delivery=request.headers.get("X-GitHub-Delivery")):
        answer = await _receive(request)
    request.app[DELIVERIES].count(WEBHOOK_DELIVERIES, answer.event, answer.outcome)
    return answer.response()


async def _verified_body(request: web.Request) -> bytes | _Answer:
    """Read the body under the cap and the unverified-read budget, and check its signature."""
    size = request.content_length
    if size is not None and size > MAX_PAYLOAD_BYTES:
        return _TOO_LARGE
    if request.headers.get("Content-Encoding", "identity").lower() != "identity":
        # GitHub never compresses a delivery; a compressed body would weigh more in memory
        # than its Content-Length says, before its signature is checked.
        return _Answer(415, "refused", "compressed deliveries are not accepted")
    reads = request.app[CONTEXT].reads
    weight = MAX_PAYLOAD_BYTES if size is None else size
    if not reads.take(weight):
        log.warning("refused a delivery from %s: too many bodies being read", request.remote)
        return _Answer(503, "retry", "too many deliveries being read", retry_after_s=1)
    try:
        if request.content.is_eof():  # all of it arrived with the headers: nothing to wait for
            body = await request.read()
        else:
            async with asyncio.timeout(READ_TIMEOUT_S):
                body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        return _TOO_LARGE
    except TimeoutError:
        return _Answer(408, "refused", f"body not received within {READ_TIMEOUT_S:.0f} s")
    finally:
        reads.give_back(weight)
    signature = request.headers.get("X-Hub-Signature-256")
    if not signature:
        return _Answer(401, "refused", "missing X-Hub-Signature-256")
    if not signature_matches(body, signature, request.app[CONTEXT].secret):
        log.warning("refused a delivery with a bad signature from %s", request.remote)
        return _Answer(401, "refused", "signature does not match")
    return body


async def _receive(request: web.Request) -> _Answer:
    body = await _verified_body(request)
    if isinstance(body, _Answer):
        return body
    event = _event_of(request, body)
    if isinstance(event, _Answer):
        return event
    web_ctx = request.app[CONTEXT]
    jobs = await _handled(web_ctx, event)
    if isinstance(jobs, _Answer):
        return jobs
    if not jobs:
        return _Answer(202, "ignored", event=event.event)
    return await _recorded(web_ctx.intake, event, jobs)


def _event_of(request: web.Request, body: bytes) -> sansio.Event | _Answer:
    """Return the verified body as GitHub's event, or the answer refusing what is no event."""
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
    if not isinstance(data.get("action"), str | None):
        return _refused(event_name, None, "action: not a string")
    return sansio.Event(data, event=event_name, delivery_id=delivery_id)


async def _handled(web_ctx: WebContext, event: sansio.Event) -> list[JobSpec] | _Answer:
    """Run the event's handlers on a payload checked first; return the jobs they chose.

    What the handlers read is checked before they run: they, and the jobs, see only
    that. A handler that fails all the same refuses the delivery in one line: it is
    Baton's to fix, and the traceback would say nothing the event, action and error
    do not.
    """
    action: str | None = event.data.get("action")
    if not web_ctx.router.fetch(event):
        return _Answer(202, "ignored", event=event.event)
    problem = payload_problem(event.event, action, event.data)
    if problem is not None:
        return _refused(event.event, action, problem)
    ctx = HandlerContext(
        settings=web_ctx.settings,
        bot_login=web_ctx.bot_login,
        repo_queue_labels=web_ctx.queue_labels,
    )
    try:
        await web_ctx.router.dispatch(event, ctx)
    except redis.RedisError as exc:
        log.error("%s: Redis unavailable to its handler: %s", _named(event.event, action), exc)
        return _Answer(503, "retry", "state store unavailable", event.event)
    except Exception as exc:
        failure = type(exc).__name__
        log.error("refused %s: its handler failed: %s", _named(event.event, action), failure)
        return _Answer(400, "refused", f"Baton could not handle it ({failure})", event.event)
    return ctx.jobs


async def _recorded(intake: Intake, event: sansio.Event, jobs: list[JobSpec]) -> _Answer:
    """Record a new delivery's jobs for the workers; a delivery seen before adds none."""
    delivery_id = event.delivery_id
    try:
        if not await intake.submit(delivery_id, jobs):
            log.info("delivery %s (%s) seen before; ignored", delivery_id, event.event)
            return _Answer(202, "duplicate", event=event.event)
    except redis.RedisError as exc:
        log.error("delivery %s (%s): Redis unavailable: %s", delivery_id, event.event, exc)
        return _Answer(503, "retry", "state store unavailable", event.event)
    return _Answer(202, "accepted", event=event.event)


def _named(event: str, action: str | None) -> str:
    """Return how a delivery is named in the log: `issues.labeled`, or `push`."""
    return f"{event}.{action}" if action is not None else event


def _refused(event: str, action: str | None, problem: str) -> _Answer:
    """Refuse a signed delivery Baton cannot use, in one log line naming what is wrong."""
    log.warning("refused %s: unusable payload: %s", _named(event, action), problem)
    return _Answer(400, "refused", f"unusable payload: {problem}", event)


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
    now = utcnow()
    spend = spend_gauges(ctx.store.spend_ledger(now), ctx.settings.monthly_budget_usd, now)
    return render_prometheus([*stored_families(stored), *gauges, *spend])


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
        # The detail is the operator's (the log); the public learns only that it is down.
        log.error("healthz: Redis unavailable: %s", exc)
        return web.json_response({"status": "degraded", "redis": "unavailable"}, status=503)
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
    offered = request.query.get("token")
    if offered is not None:
        token = _operator_token(request)
        _throttled(request)
        if not _token_matches(request, offered, token):
            return _status_refused()
        # Out of the address bar, the history and any shared link; the cookie holds a
        # signed expiry, never the token.
        key = request.app[CONTEXT].operator_key
        assert key is not None  # made with the app whenever a token is set
        redirect = web.Response(status=303, headers={"Location": request.path})
        redirect.set_cookie(
            OPERATOR_COOKIE,
            new_session(key, time.time()),
            path="/",
            max_age=SESSION_TTL_S,
            httponly=True,
            samesite="Strict",
            secure=cookie_secure(request),
        )
        return redirect
    if not operator_allowed(request):
        return _status_refused()
    ctx = request.app[CONTEXT]
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
            ctx.settings.app_identity,
            ctx.settings.monthly_budget_usd,
        )
    except redis.RedisError as exc:
        log.error("status page: Redis unavailable: %s", exc)
        return web.Response(status=503, text="Baton's state store (Redis) is unavailable.\n")
    return web.Response(
        text=render_status_page(overview, now), content_type="text/html", headers=_STATUS_HEADERS
    )


def _transcript_html(ctx: WebContext, issue: IssueRef, attempt: int) -> str:
    """Read an attempt's run and kept transcript, and render its page (blocking I/O)."""
    settings, store = ctx.settings, ctx.store
    days = settings.transcript_days
    found = find_transcript(store, transcripts_for(settings, store), issue, attempt, days, utcnow())
    return render_transcript_page(found.run, view_of(found.transcript), days)


async def transcript_page(request: web.Request) -> web.Response:
    """Serve an attempt's transcript to the operator, whichever machine ran the attempt."""
    if not operator_allowed(request):
        return _status_refused()
    named = request.match_info
    try:
        issue = issue_named(f"{named['owner']}/{named['name']}#{named['number']}")
        page = await asyncio.to_thread(
            _transcript_html, request.app[CONTEXT], issue, int(named["attempt"])
        )
    except NoTranscript as exc:
        return web.Response(
            status=404,
            text=render_no_transcript_page(str(exc)),
            content_type="text/html",
            headers=_STATUS_HEADERS,
        )
    except (redis.RedisError, OSError) as exc:
        log.error("transcript page: the transcripts are unavailable: %s", exc)
        return web.Response(status=503, text="Baton's transcripts are unavailable.\n")
    return web.Response(text=page, content_type="text/html", headers=_STATUS_HEADERS)


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


def create_app(
    settings: Settings, store: Store, dispatch: Dispatcher, router: Router
) -> web.Application:
    """Build the web application, routing each webhook to router's handlers."""
    secret = settings.webhook_secret  # refuses to build an app that would accept unsigned events
    operator_token = settings.operator_secret  # refuses a token short enough to guess
    app = web.Application(client_max_size=MAX_PAYLOAD_BYTES)
    intake_log = IntakeLog.from_url(settings.redis_url)
    app[CONTEXT] = WebContext(
        settings,
        secret,
        store,
        dispatch,
        Intake(intake_log),
        router,
        operator_token=operator_token,
        operator_key=None if operator_token is None else session_key(operator_token),
    )

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
    app.router.add_get(
        TRANSCRIPTS_PATH + r"/{owner}/{name}/{number:\d+}/{attempt:\d+}", transcript_page
    )
    return app
