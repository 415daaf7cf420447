"""Count REST API calls, and keep and enforce GitHub's primary rate limits.

Calls are counted by caller kind ("installation", "admin", "app", "anonymous") and
`METHOD path-template`, and for each installation on its own; a 304 Not Modified answer
is counted apart (`not_modified`), never in a `total`.

Rate limits, as GitHub keeps them: each installation has its own budget of `rate_limit`
requests an hour (GitHub's default, 5,000; `PATCH /_sandbox/config {"rate_limit": N}`
sets it for every installation), and each App's JWT calls have a budget of their own.
The window opens with a budget's first counted call and closes an hour later. The admin
token is a maintainer's tool, not a client under test, and anonymous calls come from the
sandbox's own git and web clients: neither is limited. `GET /rate_limit` and 304 answers
cost nothing, as on GitHub; `DELETE /_sandbox/rate-limits` gives every budget back.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from bot.sandbox.auth import Actor
from bot.sandbox.rest import DOCS, ApiError

DEFAULT_RATE_LIMIT = 5000
WINDOW = 3600
RATE_LIMIT_DOCS = f"{DOCS}/using-the-rest-api/rate-limits-for-the-rest-api"


@dataclass
class Tally:
    """The calls of one caller kind or one installation."""

    calls: Counter[str] = field(default_factory=Counter)
    not_modified: int = 0

    def add(self, call: str, not_modified: bool) -> None:
        """Record one call; a 304 is counted apart."""
        if not_modified:
            self.not_modified += 1
        else:
            self.calls[call] += 1

    def snapshot(self) -> dict[str, object]:
        """Return a total, the calls per endpoint and the 304s."""
        return {
            "total": self.calls.total(),
            "calls": dict(sorted(self.calls.items())),
            "not_modified": self.not_modified,
        }


class CallCounter:
    """REST calls by actor kind and endpoint, and by installation."""

    def __init__(self) -> None:
        self.by_kind: defaultdict[str, Tally] = defaultdict(Tally)
        self.by_installation: defaultdict[int, Tally] = defaultdict(Tally)

    def count(
        self,
        kind: str,
        installation_id: int | None,
        method: str,
        template: str,
        not_modified: bool = False,
    ) -> None:
        """Record one call."""
        call = f"{method} {template}"
        self.by_kind[kind].add(call, not_modified)
        if installation_id is not None:
            self.by_installation[installation_id].add(call, not_modified)

    def reset(self) -> None:
        """Forget every recorded call (rate-limit usage is kept)."""
        self.by_kind.clear()
        self.by_installation.clear()

    def snapshot(self) -> dict[str, dict[str, object]]:
        """Return the counts per kind; the installation kind also lists each installation."""
        found = {kind: tally.snapshot() for kind, tally in self.by_kind.items()}
        if "installation" in found:
            found["installation"]["installations"] = {
                str(inst): tally.snapshot() for inst, tally in sorted(self.by_installation.items())
            }
        return found


@dataclass
class Budget:
    """One rate-limit budget: an installation's, or an App's JWT calls."""

    limit: int
    window_start: float | None = None
    used: int = 0

    def _roll(self, now: float) -> None:
        if self.window_start is not None and now >= self.window_start + WINDOW:
            self.window_start, self.used = None, 0

    def exhausted(self) -> bool:
        """Tell whether the window's requests are all spent."""
        self._roll(time.time())
        return self.used >= self.limit

    def spend(self) -> None:
        """Count one request against the budget, opening a window if none is open."""
        now = time.time()
        self._roll(now)
        if self.window_start is None:
            self.window_start = now
        self.used += 1

    def refund(self) -> None:
        """Give back a request that turned out free (a 304)."""
        self.used = max(self.used - 1, 0)

    def figures(self) -> dict[str, int]:
        """Return GitHub's figures: limit, remaining, reset (epoch seconds), used."""
        self._roll(time.time())
        start = self.window_start if self.window_start is not None else time.time()
        return {
            "limit": self.limit,
            "remaining": max(self.limit - self.used, 0),
            "reset": int(start + WINDOW),
            "used": self.used,
        }

    def headers(self) -> dict[str, str]:
        """Return the x-ratelimit-* headers GitHub sends with every answer."""
        headers = {f"X-RateLimit-{name.title()}": str(v) for name, v in self.figures().items()}
        headers["X-RateLimit-Resource"] = "core"
        return headers


class RateLimits:
    """The budgets of installations and Apps; see the module docstring."""

    def __init__(self) -> None:
        self.installation_limit = DEFAULT_RATE_LIMIT
        self._budgets: dict[tuple[str, int], Budget] = {}

    def budget_of(self, actor: Actor | None) -> Budget | None:
        """Return the budget a caller spends, None for one that is not limited."""
        if actor is None:
            return None
        if actor.kind == "installation" and actor.installation_id is not None:
            key, limit = ("installation", actor.installation_id), self.installation_limit
        elif actor.kind == "app" and actor.app_id is not None:
            key, limit = ("app", actor.app_id), DEFAULT_RATE_LIMIT
        else:
            return None
        budget = self._budgets.setdefault(key, Budget(limit))
        if key[0] == "installation":
            budget.limit = self.installation_limit
        return budget

    def reset(self) -> None:
        """Give every budget its full limit back."""
        self._budgets.clear()


def rate_limited(actor: Actor, budget: Budget) -> ApiError:
    """Return GitHub's 403 for a caller whose primary rate limit is spent."""
    subject = (
        f"installation ID {actor.installation_id}"
        if actor.kind == "installation"
        else f"app ID {actor.app_id}"
    )
    return ApiError(
        403,
        f"API rate limit exceeded for {subject}.",
        headers=budget.headers(),
        documentation_url=RATE_LIMIT_DOCS,
    )
