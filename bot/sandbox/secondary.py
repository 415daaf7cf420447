"""GitHub's secondary rate limits, kept per installation: content writes and concurrency.

GitHub ("Rate limits for the REST API", About secondary rate limits): "In general, no
more than 80 content-generating requests per minute and no more than 500
content-generating requests per hour are allowed", and "No more than 100 concurrent
requests are allowed. This limit is shared across the REST API and GraphQL API."

Here every installation token's POST, PATCH, PUT and DELETE REST request is a content
write, and so is a GraphQL request whose operation is a mutation; git pushes are not
REST requests and are not counted. The windows slide: a write is refused while the last
60 s (or 3600 s) already hold `per_minute` (or `per_hour`) writes, and so is any request
beyond `concurrent` already being served. A refused request is not served and is no
write. `PATCH /_sandbox/config` sets the three limits for every installation;
`GET /_sandbox/limits` shows, per installation, its refusals and its peaks in any
minute and any hour; `DELETE /_sandbox/rate-limits` empties the windows (the figures
stay).
"""

from __future__ import annotations

import bisect
import math
import secrets
import time
from dataclasses import dataclass, field

from bot.sandbox.rest import ApiError

DEFAULT_PER_MINUTE = 80
DEFAULT_PER_HOUR = 500
DEFAULT_CONCURRENT = 100
MINUTE = 60.0
HOUR = 3600.0
CONTENT_METHODS = frozenset({"POST", "PATCH", "PUT", "DELETE"})
SECONDARY_DOCS = (
    "https://docs.github.com/rest/overview/rate-limits-for-the-rest-api#about-secondary-rate-limits"
)
SECONDARY_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try "
    "again. If you reach out to GitHub Support for help, please include the request ID {}."
)
REQUEST_ID_HEADER = "X-GitHub-Request-Id"


def new_request_id() -> str:
    """Return a request ID shaped like GitHub's (`C0A8:3B4F:1A2B3C:1D2E3F:65F0A1B2`)."""
    widths = (4, 4, 6, 6, 8)
    return ":".join(secrets.token_hex(w)[:w].upper() for w in widths)


@dataclass
class Usage:
    """One installation's content writes of the last hour, requests in flight, and figures."""

    writes: list[float] = field(default_factory=list)  # times, oldest first
    in_flight: int = 0
    answers: int = 0
    content_writes: int = 0
    peak_per_minute: int = 0
    peak_per_hour: int = 0
    concurrent_peak: int = 0

    def _trim(self, now: float) -> None:
        del self.writes[: bisect.bisect_right(self.writes, now - HOUR)]

    def _within(self, now: float, span: float) -> list[float]:
        return self.writes[bisect.bisect_right(self.writes, now - span) :]

    def wait(self, now: float, per_minute: int, per_hour: int) -> float:
        """Return the seconds until one more write fits both windows (0: it fits now)."""
        self._trim(now)
        wait = 0.0
        for span, limit in ((MINUTE, per_minute), (HOUR, per_hour)):
            held = self._within(now, span)
            if len(held) >= limit:
                # The oldest writes leave the window until one fewer than the limit remain.
                wait = max(wait, held[len(held) - limit] + span - now)
        return wait

    def write(self, now: float) -> None:
        """Record one content write and the peaks it makes."""
        self.writes.append(now)
        self.content_writes += 1
        self.peak_per_minute = max(self.peak_per_minute, len(self._within(now, MINUTE)))
        self.peak_per_hour = max(self.peak_per_hour, len(self._within(now, HOUR)))

    def figures(self) -> dict[str, int]:
        """Return what GET /_sandbox/limits shows of this installation."""
        return {
            "secondary_limit_answers": self.answers,
            "peak_per_minute": self.peak_per_minute,
            "peak_per_hour": self.peak_per_hour,
            "content_writes": self.content_writes,
            "concurrent_peak": self.concurrent_peak,
        }


class SecondaryLimits:
    """Every installation's secondary limits; see the module docstring."""

    def __init__(self) -> None:
        self.per_minute = DEFAULT_PER_MINUTE
        self.per_hour = DEFAULT_PER_HOUR
        self.concurrent = DEFAULT_CONCURRENT
        self.usage: dict[int, Usage] = {}

    def admit(
        self, installation_id: int, content: bool, request_id: str, now: float | None = None
    ) -> Usage:
        """Let one request of an installation in, or raise GitHub's 403 if a limit refuses it.

        An admitted request is in flight until `release`; a content write is counted at
        once, so concurrent writes cannot overdraw a window.
        """
        now = time.time() if now is None else now
        usage = self.usage.setdefault(installation_id, Usage())
        wait = usage.wait(now, self.per_minute, self.per_hour) if content else 0.0
        if usage.in_flight >= self.concurrent:
            wait = max(wait, 1.0)
        if wait > 0:
            usage.answers += 1
            raise secondary_limited(wait, request_id)
        usage.in_flight += 1
        usage.concurrent_peak = max(usage.concurrent_peak, usage.in_flight)
        if content:
            usage.write(now)
        return usage

    @staticmethod
    def release(usage: Usage) -> None:
        """End an admitted request."""
        usage.in_flight = max(usage.in_flight - 1, 0)

    def reset(self) -> None:
        """Empty every installation's windows; its figures and requests in flight stay."""
        for usage in self.usage.values():
            usage.writes.clear()

    def snapshot(self) -> dict[str, dict[str, dict[str, int]]]:
        """Return GET /_sandbox/limits: each installation's figures."""
        return {
            "installations": {
                str(inst): usage.figures() for inst, usage in sorted(self.usage.items())
            }
        }


def secondary_limited(wait: float, request_id: str) -> ApiError:
    """Return GitHub's 403 for a secondary rate limit, asking to wait `wait` seconds."""
    return ApiError(
        403,
        SECONDARY_MESSAGE.format(request_id),
        headers={"Retry-After": str(max(1, math.ceil(wait)))},
        documentation_url=SECONDARY_DOCS,
    )
