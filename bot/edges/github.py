"""GitHub access: App JWTs, installation tokens, a client that retries what is worth it."""

from __future__ import annotations

import json
import logging
import random
import re
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterator,
    Mapping,
    MutableMapping,
)
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import aiohttp
import redis
from gidgethub import (
    BadGraphQLRequest,
    BadRequest,
    GitHubBroken,
    HTTPException,
    apps,
    sansio,
)
from gidgethub.aiohttp import GitHubAPI

from bot.domain.model import utcnow
from bot.domain.pacing import (
    HOLD_WORKER_S,
    RateBudget,
    WritePace,
    budget_from_headers,
    reschedules,
    secondary_stop_s,
)
from bot.edges.store import CachedToken, Store, WriteSlot
from bot.ops.metrics import GITHUB_API_CALLS, GITHUB_RATE_LIMIT_REMAINING, Tally
from bot.ops.settings import Settings

log = logging.getLogger(__name__)

USER_AGENT = "baton-github-app"
TOKEN_SAFETY_MARGIN_S = 5 * 60  # stop using a token this long before GitHub expires it
# What an installation client is built with: gidgethub then makes token headers, and
# GitHubClient._request puts the token valid at each call in place of it.
LIVE_TOKEN = "live"  # noqa: S105 - a placeholder, never sent
MAX_ATTEMPTS = 5
# What GitHub counts as content-creating (a GraphQL call is a POST): paced per installation.
WRITE_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})
MAX_WAIT_S = 120.0
PER_PAGE = 100  # GitHub's largest page: a list is read in the fewest calls
# A token minted this recently may not have reached every GitHub server yet: its 401
# or 403 is retried for as long (octokit does the same for about 5 s).
FRESH_TOKEN_S = 5.0
FRESH_TOKEN_STEP_S = 0.5
# The reads Baton repeats (each sweep pass, each run): kept with their ETags so that
# reading them again is conditional, and an unchanged answer (304) costs no rate limit.
CONDITIONAL_READS = re.compile(
    r"/(app/installations|installation/repositories"
    r"|repos/[^/]+/[^/]+(/issues(/\d+)?|/contents/.+|/pulls/\d+(/reviews)?)?)$"
)

ConditionalEntry = tuple[str | None, str | None, Any, str | None]


def retry_delay(
    status: int,
    headers: Mapping[str, str],
    message: str,
    attempt: int,
    base_s: float = 0.5,
    token_age_s: float | None = None,
) -> float | None:
    """Return how long to wait before retrying a failed request, or None not to retry.

    Server errors back off exponentially with jitter; secondary rate limits
    (403 or 429) wait as long as GitHub's Retry-After says, in full however long
    (retrying early can get an integration banned), else a minute doubled per
    repeat. A token minted less than FRESH_TOKEN_S ago (token_age_s) that is
    refused is retried until it is that old. A primary rate limit or any other
    client error is not retried: waiting an hour belongs to a scheduler, not to a
    request.
    """
    if attempt >= MAX_ATTEMPTS:
        return None
    if is_secondary_limit(status, headers, message):
        return secondary_stop_s(retry_after_header(headers), attempt)
    if status >= 500:
        backoff = base_s * 2 ** (attempt - 1)
        return float(min(backoff + random.uniform(0, backoff / 2), MAX_WAIT_S))  # noqa: S311
    if (
        status in (401, 403)
        and token_age_s is not None
        and token_age_s < FRESH_TOKEN_S
        and headers.get("x-ratelimit-remaining") != "0"
    ):
        return min(FRESH_TOKEN_STEP_S * attempt, FRESH_TOKEN_S - token_age_s)
    return None


def retry_after_header(headers: Mapping[str, str]) -> str | None:
    """Return an answer's Retry-After, however it is spelt."""
    return headers.get("retry-after") or headers.get("Retry-After")


def is_secondary_limit(status: int, headers: Mapping[str, str], message: str) -> bool:
    """Tell a secondary-limit answer: a 403 or 429 with Retry-After, or that says so."""
    return status in (403, 429) and (
        retry_after_header(headers) is not None or "secondary rate limit" in message.lower()
    )


def refuses_token(status: int, message: str) -> bool:
    """Whether GitHub refused the token itself: revoked or expired (401), or suspended (403)."""
    suspended = status == HTTPStatus.FORBIDDEN and "installation has been suspended" in message
    return status == HTTPStatus.UNAUTHORIZED or suspended


def with_page_size(url: str) -> str:
    """Return url asking for GitHub's largest page, unless it names a page size itself."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    if any(name == "per_page" for name, _ in query):
        return url
    return urlunsplit(parts._replace(query=urlencode([*query, ("per_page", str(PER_PAGE))])))


class ConditionalReads(MutableMapping[str, ConditionalEntry]):
    """gidgethub's response cache, kept in Redis for the reads Baton repeats.

    gidgethub sends a cached entry's ETag as `If-None-Match` and answers a 304
    from the entry. Only CONDITIONAL_READS are kept; the entries of one scope (an
    installation) are not enumerable, as gidgethub never asks to.
    """

    def __init__(self, store: Store, scope: str) -> None:
        self._store = store
        self._scope = scope

    @staticmethod
    def kept(url: str) -> bool:
        """Tell whether a GET of url is one Baton repeats."""
        return CONDITIONAL_READS.search(urlsplit(url).path) is not None

    def __getitem__(self, url: str) -> ConditionalEntry:
        raw = None
        if self.kept(url):
            with _best_effort("an ETag read"):
                raw = self._store.conditional_read(self._scope, url)
        if raw is None:
            raise KeyError(url)
        etag, last_modified, data, more = json.loads(raw)
        return etag, last_modified, data, more

    def __setitem__(self, url: str, entry: ConditionalEntry) -> None:
        if self.kept(url):
            with _best_effort("an ETag kept"):
                self._store.remember_conditional_read(self._scope, url, json.dumps(entry))

    def __delitem__(self, url: str) -> None:
        with _best_effort("an ETag dropped"):
            self._store.forget_conditional_read(self._scope, url)

    def __iter__(self) -> Iterator[str]:
        return iter(())

    def __len__(self) -> int:
        return 0


@contextmanager
def _best_effort(what: str) -> Iterator[None]:
    """Let a request go on without Redis: an ETag or a budget reading is only a saving."""
    try:
        yield
    except redis.RedisError as exc:
        log.debug("%s skipped: Redis unreachable (%s)", what, exc)


@dataclass(frozen=True)
class Caller:
    """Whom a client acts as: an installation (its id and where its tokens come from) or the App.

    An installation client asks `token` before every request, so a job that has run
    longer than one token's life still sends a valid one.
    """

    installation_id: int | None = None
    token: Callable[[], Awaitable[CachedToken]] | None = None
    on_budget: Callable[[RateBudget], None] | None = None
    on_refused: Callable[[], None] | None = None  # GitHub refused the token for good: 401
    # Until when GitHub asked every request of the installation to wait, shared by all
    # processes; and how a secondary-limit answer is made known to them.
    stopped_until: Callable[[], float | None] | None = None
    on_stop: Callable[[float], None] | None = None
    # Count one more secondary-limit answer; return how many came in a row, over processes.
    limits_in_a_row: Callable[[], int] | None = None
    # The installation's next write slot, taken if it is at most the given seconds away,
    # at the pace of writes that give way when the second argument says so.
    take_write: Callable[[float, bool], WriteSlot] | None = None

    @property
    def series(self) -> str:
        """Return the metric series the caller's rate limit is shown under."""
        return str(self.installation_id) if self.installation_id is not None else "app"


class GitHubClient(GitHubAPI):
    """gidgethub's aiohttp client: retries what is worth it, reads lists whole, tallies calls."""

    retry_base_s = 0.5

    def __init__(
        self,
        session: aiohttp.ClientSession,
        requester: str,
        *,
        tally: Tally,
        caller: Caller | None = None,
        **options: Any,
    ) -> None:
        super().__init__(session, requester, **options)
        self._tally = tally
        self._caller = caller or Caller()
        self._minted_at: float | None = None  # of the token the last request carried
        self._renewed = False  # a refused token was swapped for a fresh one, not yet accepted
        self._answer_headers: Mapping[str, str] = {}  # the last answer's: GraphQL errors drop them

    def getiter(
        self,
        url: str,
        url_vars: Mapping[str, Any] | None = {},
        *,
        accept: str = sansio.accept_format(),
        jwt: str | None = None,
        oauth_token: str | None = None,
        extra_headers: dict[str, str] | None = None,
        iterable_key: str | None = "items",
    ) -> AsyncGenerator[Any, None]:
        """Iterate over every item of a list, read in pages of PER_PAGE."""
        filled = with_page_size(sansio.format_url(url, url_vars, base_url=self.base_url))
        return super().getiter(
            filled,
            {},
            accept=accept,
            jwt=jwt,
            oauth_token=oauth_token,
            extra_headers=extra_headers,
            iterable_key=iterable_key,
        )

    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, Mapping[str, str], bytes]:
        """Make one HTTP request with a valid token, counting it by method and status class.

        A request of an installation that GitHub asked to wait waits first, however
        that was learnt (by this process or another); a write then waits for its slot
        in the installation's pace, and for any stop that began while it waited.
        """
        await self._wait_for_stop()
        if method in WRITE_METHODS:
            await self._wait_for_write_slot()
            await self._wait_for_stop()  # another process may have been told to stop meanwhile
        if self._caller.token is not None:
            token = await self._caller.token()
            self._minted_at = token.minted_at
            headers = {**headers, "authorization": f"token {token.token}"}
        try:
            status, response_headers, data = await super()._request(method, url, headers, body)
        except (aiohttp.ClientError, TimeoutError):
            self._tally.count(GITHUB_API_CALLS, method, "error")
            raise
        self._tally.count(GITHUB_API_CALLS, method, f"{status // 100}xx")
        self._answer_headers = response_headers
        if status < HTTPStatus.BAD_REQUEST:
            self._renewed = False
        budget = budget_from_headers(response_headers, time.time())
        if budget is not None and status != 304:  # a 304 reports no fresher budget
            self._tally.set(GITHUB_RATE_LIMIT_REMAINING, budget.remaining, self._caller.series)
            if self._caller.on_budget is not None:
                with _best_effort("a rate-limit reading"):
                    self._caller.on_budget(budget)
        return status, response_headers, data

    async def graphql(
        self, query: str, *, endpoint: str = "https://api.github.com/graphql", **variables: Any
    ) -> Any:
        """Query GraphQL, retrying what a REST call would retry: server errors, limits, tokens.

        gidgethub sends a GraphQL query once; its errors carry the status but not the
        headers, so the last answer's headers stand in for them (Retry-After above all).
        """
        attempt = 0
        while True:
            attempt += 1
            try:
                return await super().graphql(query, endpoint=endpoint, **variables)
            except (GitHubBroken, BadGraphQLRequest) as exc:
                answer = HTTPException(
                    HTTPStatus(int(exc.status_code)), str(exc), headers=self._answer_headers
                )
                retried = await self.handle_rate_limit_error(
                    method="POST", url=endpoint, exception=answer, attempt=attempt
                )
                if not retried:
                    raise

    async def _wait_for_stop(self) -> None:
        """Wait out the installation's secondary-limit stop; give the worker back if it is long."""
        if self._caller.stopped_until is None:
            return
        until = None
        with _best_effort("a secondary-limit stop read"):
            until = self._caller.stopped_until()
        if until is None or (wait := until - time.time()) <= 0:
            return
        if reschedules(wait):
            raise WritesPaused(self._caller.installation_id, until)
        await self.sleep(wait)

    async def _wait_for_write_slot(self) -> None:
        """Wait for the installation's next write slot; give the worker back if it is far off.

        Without Redis the write goes unpaced: GitHub's own answer still stops it.
        """
        if self._caller.take_write is None:
            return
        lane = _LANE.get() or WriteLane()
        slot = None
        with _best_effort("a write slot"):
            slot = self._caller.take_write(HOLD_WORKER_S, lane.gives_way)
        if slot is None:
            return
        if not slot.taken:
            raise WritesPaused(self._caller.installation_id, slot.at)
        if slot.wait_s > 0:
            await self.sleep(slot.wait_s)
        if lane.current is not None and not lane.current():
            raise WriteOvertaken(self._caller.installation_id)

    async def handle_rate_limit_error(
        self, *, method: str, url: str, exception: HTTPException, attempt: int
    ) -> bool:
        minted_at = self._minted_at
        delay = retry_delay(
            int(exception.status_code),
            exception.headers,
            str(exception),
            attempt,
            self.retry_base_s,
            token_age_s=time.time() - minted_at if minted_at is not None else None,
        )
        if delay is None:
            if (
                refuses_token(int(exception.status_code), str(exception))
                and self._caller.on_refused
            ):
                return self._renew_refused_token()
            return False
        secondary = is_secondary_limit(
            int(exception.status_code), exception.headers, str(exception)
        )
        if secondary:
            delay = max(delay, self._stop_in_a_row(exception.headers))
        until = time.time() + delay
        if secondary and self._stop(until):
            raise WritesPaused(self._caller.installation_id, until) from exception
        log.warning(
            "GitHub answered %s to %s %s; retry %d in %.1fs",
            int(exception.status_code),
            method,
            url,
            attempt,
            delay,
        )
        await self.sleep(delay)
        return True

    def _stop_in_a_row(self, headers: Mapping[str, str]) -> float:
        """Return the stop a secondary limit asks for, counted with the answers before it.

        Without Retry-After the stop doubles with each answer in a row, whichever job or
        process got the one before; this request's own retries alone would restart at a
        minute each time a job is put back.
        """
        in_a_row = 1
        if self._caller.limits_in_a_row is not None:
            with _best_effort("a secondary-limit count"):
                in_a_row = self._caller.limits_in_a_row()
        return secondary_stop_s(retry_after_header(headers), in_a_row)

    def _stop(self, until: float) -> bool:
        """Make a secondary-limit stop known to every process; tell whether it is too long to sleep.

        The App's own calls (no installation) share no stop, and sleep it out.
        """
        if self._caller.on_stop is None:
            return False
        with _best_effort("a secondary-limit stop kept"):
            self._caller.on_stop(until)
        return reschedules(until - time.time())

    def _renew_refused_token(self) -> bool:
        """Drop a refused token; retry once with a fresh one, never again if it too is refused."""
        if self._caller.on_refused is None or self._caller.token is None:
            return False  # the App's own JWT: nothing to renew
        with _best_effort("dropping a refused token"):
            self._caller.on_refused()
        if self._renewed:
            return False  # revoked or suspended: GitHub's 401 is the caller's to see
        self._renewed = True
        return True


@dataclass(frozen=True)
class WriteLane:
    """How the writes of a task go: giving way to the others, and while they are current."""

    gives_way: bool = False
    current: Callable[[], bool] | None = None  # asked once a write's slot has come


_LANE: ContextVar[WriteLane | None] = ContextVar("baton_write_lane", default=None)


@contextmanager
def status_edits(current: Callable[[], bool]) -> Iterator[None]:
    """Send the writes within as status edits: after the writes that matter more, and only
    while current() says no newer edit of the same comments has been asked for since."""
    token = _LANE.set(WriteLane(gives_way=True, current=current))
    try:
        yield
    finally:
        _LANE.reset(token)


class WriteOvertaken(Exception):
    """A status edit's turn came after a newer edit of the same comments was asked for.

    It is dropped, not sent: the newer one, waiting its turn, says more.
    """

    def __init__(self, installation_id: int | None) -> None:
        super().__init__(f"installation {installation_id}: a status edit was overtaken")


class WritesPaused(BadRequest):
    """GitHub asked the installation to wait longer than a job should hold its worker.

    The job is put back in the queue for the instant the wait ends (jobs.job); where
    it is caught as a failed call, what it did so far is kept and retried later.
    """

    def __init__(self, installation_id: int | None, until: float) -> None:
        super().__init__(
            HTTPStatus.FORBIDDEN,
            f"installation {installation_id} waits for GitHub's secondary rate limit until "
            f"{datetime.fromtimestamp(until, UTC).isoformat(timespec='seconds')}",
        )
        self.installation_id = installation_id
        self.until = until


class InstallationGone(BadRequest):
    """GitHub has no such installation of the App (uninstalled, or never was): 404."""

    def __init__(self, installation_id: int, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(
            HTTPStatus.NOT_FOUND,
            f"the App has no installation {installation_id}",
            headers=headers,
        )
        self.installation_id = installation_id


class InstallationSuspended(BadRequest):
    """GitHub mints no token for the installation (suspended by its owner or GitHub): 403."""

    def __init__(self, installation_id: int, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(
            HTTPStatus.FORBIDDEN,
            f"installation {installation_id} is suspended: GitHub mints it no token",
            headers=headers,
        )
        self.installation_id = installation_id


class GitHubApp:
    """One GitHub App: its JWT, its installations' tokens and clients."""

    def __init__(
        self, settings: Settings, store: Store, session: aiohttp.ClientSession, tally: Tally
    ) -> None:
        self._settings = settings
        self._store = store
        self._session = session
        self._tally = tally

    @property
    def identity(self) -> str:
        """Return which App on which GitHub this is, e.g. `1234@https://api.github.com`."""
        self._settings.app_id  # noqa: B018 - raises naming the variable when it is unset
        identity = self._settings.app_identity
        assert identity is not None
        return identity

    def _client(self, caller: Caller, scope: str, **auth: Any) -> GitHubClient:
        return GitHubClient(
            self._session,
            USER_AGENT,
            tally=self._tally,
            caller=caller,
            cache=ConditionalReads(self._store, f"{self.identity}:{scope}"),
            base_url=self._settings.github_api_url.rstrip("/"),
            **auth,
        )

    def app_client(self) -> GitHubClient:
        """Return a client authenticated as the App itself (JWT)."""
        return self._client(
            Caller(), "app", app_id=self._settings.app_id, private_key=self._settings.private_key
        )

    async def installation_token(self, installation_id: int) -> str:
        """Return a valid installation token, minting one when the cached one nears expiry."""
        return (await self._token(installation_id)).token

    async def _token(self, installation_id: int) -> CachedToken:
        cached = self._store.installation_token(self.identity, installation_id)
        if cached is not None:
            return cached
        try:
            data = await apps.get_installation_access_token(
                self.app_client(),
                installation_id=str(installation_id),
                app_id=self._settings.app_id,
                private_key=self._settings.private_key,
            )
        except BadRequest as exc:
            if exc.status_code == HTTPStatus.NOT_FOUND:
                raise InstallationGone(installation_id, exc.headers) from exc
            if exc.status_code == HTTPStatus.FORBIDDEN:
                raise InstallationSuspended(installation_id, exc.headers) from exc
            raise
        minted = CachedToken(str(data["token"]), time.time())
        expires_at = datetime.fromisoformat(str(data["expires_at"]).replace("Z", "+00:00"))
        ttl = int((expires_at - utcnow()).total_seconds()) - TOKEN_SAFETY_MARGIN_S
        self._store.cache_installation_token(
            self.identity, installation_id, minted.token, ttl, minted.minted_at
        )
        return minted

    async def for_installation(self, installation_id: int) -> GitHubClient:
        """Return a client acting as the App's installation, with a valid token on every call.

        A token is minted now, so a gone or suspended installation is known at once.
        """
        await self._token(installation_id)

        def record(budget: RateBudget) -> None:
            self._store.record_rate_limit(self.identity, installation_id, budget)

        def refused() -> None:
            log.warning(
                "GitHub refused installation %d's token; it is minted again", installation_id
            )
            self._store.forget_installation_token(self.identity, installation_id)

        async def token() -> CachedToken:
            return await self._token(installation_id)

        def stopped_until() -> float | None:
            return self._store.installation_stopped_until(self.identity, installation_id)

        def stop(until: float) -> None:
            log.warning(
                "GitHub asked installation %d to wait %.0fs (secondary rate limit)",
                installation_id,
                until - time.time(),
            )
            self._store.stop_installation(self.identity, installation_id, until)

        pace = WritePace(
            interval_s=self._settings.write_interval_seconds,
            per_minute=self._settings.write_per_minute,
            per_hour=self._settings.write_per_hour,
        )

        def take_write(hold_s: float, gives_way: bool) -> WriteSlot:
            paced = pace.giving_way() if gives_way else pace
            return self._store.take_write_slot(self.identity, installation_id, paced, hold_s)

        def limits_in_a_row() -> int:
            return self._store.secondary_limits_in_a_row(self.identity, installation_id)

        caller = Caller(
            installation_id,
            token,
            record,
            refused,
            stopped_until,
            stop,
            limits_in_a_row,
            take_write,
        )
        return self._client(caller, str(installation_id), oauth_token=LIVE_TOKEN)

    async def learn_bot_login(self) -> str:
        """Return the App's bot login, fetching it once from GET /app."""
        known = self._settings.bot_login or self._store.bot_login()
        if known is not None:
            return known
        app = await self.app_client().getitem("/app")
        login = f"{app['slug']}[bot]"
        self._store.set_bot_login(login)
        return login


@asynccontextmanager
async def github_app(settings: Settings, store: Store) -> AsyncIterator[GitHubApp]:
    """Open an HTTP session for the duration of one job and yield the App on it.

    Its API calls are counted in memory and written to the metrics once, as it ends.
    """
    timeout = aiohttp.ClientTimeout(total=60, connect=10)
    tally = Tally()
    try:
        async with aiohttp.ClientSession(timeout=timeout) as session:
            yield GitHubApp(settings, store, session, tally)
    finally:
        store.add_metrics(tally)
