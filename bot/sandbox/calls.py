"""Count REST API calls per caller kind and endpoint, and derive rate-limit figures."""

from __future__ import annotations

import time
from collections import Counter, defaultdict

RATE_LIMIT = 15000
WINDOW = 3600


class CallCounter:
    """REST calls by actor kind ("installation", "admin", "app", "anonymous") and endpoint."""

    def __init__(self) -> None:
        self.by_kind: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self._window_start = self._window()
        self._used: Counter[str] = Counter()

    def count(self, kind: str, method: str, template: str) -> None:
        """Record one call."""
        self.by_kind[kind][f"{method} {template}"] += 1
        if self._window() != self._window_start:
            self._window_start = self._window()
            self._used.clear()
        self._used[kind] += 1

    def reset(self) -> None:
        """Forget every recorded call (rate-limit usage is kept)."""
        self.by_kind.clear()

    def snapshot(self) -> dict[str, dict[str, object]]:
        """Return the counts per kind: a total and the calls per endpoint."""
        return {
            kind: {"total": c.total(), "calls": dict(sorted(c.items()))}
            for kind, c in self.by_kind.items()
        }

    def rate(self, kind: str) -> dict[str, int]:
        """Return the rate-limit figures for a caller kind."""
        used = self._used[kind]
        return {
            "limit": RATE_LIMIT,
            "remaining": max(RATE_LIMIT - used, 0),
            "reset": self._window_start + WINDOW,
            "used": used,
        }

    @staticmethod
    def _window() -> int:
        now = int(time.time())
        return now - now % WINDOW
