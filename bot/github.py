"""GitHub access: App JWTs, installation tokens, a client that retries what is worth it."""

from __future__ import annotations

import logging
import random
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import aiohttp
from gidgethub import HTTPException, apps
from gidgethub.aiohttp import GitHubAPI

from bot.metrics import GITHUB_API_CALLS, GITHUB_RATE_LIMIT_REMAINING, Tally
from bot.model import utcnow
from bot.settings import Settings
from bot.store import Store

log = logging.getLogger(__name__)

USER_AGENT = "baton-github-app"
TOKEN_SAFETY_MARGIN_S = 5 * 60  # stop using a token this long before GitHub expires it
MAX_ATTEMPTS = 5
MAX_WAIT_S = 120.0


def retry_delay(
    status: int, headers: Mapping[str, str], message: str, attempt: int, base_s: float = 0.5
) -> float | None:
    """Return how long to wait before retrying a failed request, or None not to retry.

    Server errors back off exponentially with jitter; secondary rate limits
    (403 or 429) wait as long as GitHub's Retry-After says. A primary rate limit
    or any other client error is not retried: waiting an hour belongs to a
    scheduler, not to a request.
    """
    if attempt >= MAX_ATTEMPTS:
        return None
    retry_after = headers.get("retry-after") or headers.get("Retry-After")
    if status in (403, 429) and retry_after is not None:
        try:
            return min(max(float(retry_after), 0.0), MAX_WAIT_S)
        except ValueError:
            return None
    if status in (403, 429) and "secondary rate limit" in message.lower():
        # GitHub asks for at least a minute when it gives no Retry-After.
        return min(60.0 * attempt, MAX_WAIT_S)
    if status >= 500:
        backoff = base_s * 2 ** (attempt - 1)
        return float(min(backoff + random.uniform(0, backoff / 2), MAX_WAIT_S))  # noqa: S311
    return None


class GitHubClient(GitHubAPI):
    """gidgethub's aiohttp client, retrying 5xx and secondary rate limits, its calls tallied."""

    retry_base_s = 0.5

    def __init__(
        self, session: aiohttp.ClientSession, requester: str, *, tally: Tally, **options: Any
    ) -> None:
        super().__init__(session, requester, **options)
        self._tally = tally

    async def _request(
        self, method: str, url: str, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, Mapping[str, str], bytes]:
        """Make one HTTP request, counting it by method and status class (in memory)."""
        try:
            status, response_headers, data = await super()._request(method, url, headers, body)
        except (aiohttp.ClientError, TimeoutError):
            self._tally.count(GITHUB_API_CALLS, method, "error")
            raise
        self._tally.count(GITHUB_API_CALLS, method, f"{status // 100}xx")
        remaining = response_headers.get("x-ratelimit-remaining", "")
        if remaining.isdigit():
            self._tally.set(GITHUB_RATE_LIMIT_REMAINING, int(remaining))
        return status, response_headers, data

    async def handle_rate_limit_error(
        self, *, method: str, url: str, exception: HTTPException, attempt: int
    ) -> bool:
        delay = retry_delay(
            int(exception.status_code),
            exception.headers,
            str(exception),
            attempt,
            self.retry_base_s,
        )
        if delay is None:
            return False
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
        return f"{self._settings.app_id}@{self._settings.github_api_url.rstrip('/')}"

    def _client(self, **auth: Any) -> GitHubClient:
        return GitHubClient(
            self._session,
            USER_AGENT,
            tally=self._tally,
            base_url=self._settings.github_api_url.rstrip("/"),
            **auth,
        )

    def app_client(self) -> GitHubClient:
        """Return a client authenticated as the App itself (JWT)."""
        return self._client(app_id=self._settings.app_id, private_key=self._settings.private_key)

    async def installation_token(self, installation_id: int) -> str:
        """Return a valid installation token, minting one when the cached one nears expiry."""
        cached = self._store.installation_token(self.identity, installation_id)
        if cached is not None:
            return cached
        data = await apps.get_installation_access_token(
            self.app_client(),
            installation_id=str(installation_id),
            app_id=self._settings.app_id,
            private_key=self._settings.private_key,
        )
        token = str(data["token"])
        expires_at = datetime.fromisoformat(str(data["expires_at"]).replace("Z", "+00:00"))
        ttl = int((expires_at - utcnow()).total_seconds()) - TOKEN_SAFETY_MARGIN_S
        self._store.cache_installation_token(self.identity, installation_id, token, ttl)
        return token

    async def for_installation(self, installation_id: int) -> GitHubClient:
        """Return a client acting as the App's installation."""
        return self._client(oauth_token=await self.installation_token(installation_id))

    async def learn_bot_login(self) -> str:
        """Return the App's bot login, fetching it once from GET /app."""
        known = self._settings.bot_login or self._store.bot_login()
        if known is not None:
            return known
        app = await self.app_client().getitem("/app")
        login = f"{app['slug']}[bot]"
        self._store.set_bot_login(login)
        return login

    async def learn_bot_user_id(self, installation_id: int) -> int:
        """Return the bot account's id, fetching it once from GET /users/{login}."""
        known = self._store.bot_user_id()
        if known is not None:
            return known
        login = await self.learn_bot_login()
        gh = await self.for_installation(installation_id)
        user = await gh.getitem("/users/{login}", {"login": login})
        self._store.set_bot_user_id(int(user["id"]))
        return int(user["id"])


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
