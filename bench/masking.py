"""How long masking a log line or a transcript takes, on text built to make it backtrack.

Every log line and every kept transcript is masked (bot/ops/logs.py `redact`). The
baseline is the patterns Baton had before, which looked at each start of a run of
token-like text to its end: quadratic. Both are timed on the same 120 KB here (the
baseline grows too slowly past that), and today's on 10 MB (goal: under a second).

    python -m bench.masking
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable

from bot.ops.logs import MASK, redact

BASELINE_PATTERNS = (
    re.compile(r"eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"),
    re.compile(r"x-access-token:[^@\s]+@"),
)
GOAL_S = 1.0
SHAPES = {
    "JWT starts (eyJeyJ...)": "eyJ",
    "URL credential starts": "x-access-token:",
    "a transcript's JSON lines": '{"type":"assistant","text":"ran pytest: 12 passed"}\n',
}


def baseline(text: str) -> str:
    for pattern in BASELINE_PATTERNS:
        text = pattern.sub(MASK, text)
    return text


def timed(mask: Callable[[str], str], text: str) -> float:
    began = time.perf_counter()
    mask(text)
    return time.perf_counter() - began


def main() -> None:
    print(f"{'text':28s} {'120 KB before':>14s} {'120 KB now':>11s} {'10 MB now':>10s}")
    for name, unit in SHAPES.items():
        small = unit * (120_000 // len(unit))
        large = unit * (10_000_000 // len(unit))
        before, now = timed(baseline, small), timed(redact, small)
        large_s = timed(redact, large)
        verdict = "met" if large_s < GOAL_S else "MISSED"
        print(
            f"{name:28s} {before:13.3f}s {now:10.3f}s {large_s:9.3f}s"
            f"   [goal 10 MB < {GOAL_S:.0f}s: {verdict}]"
        )


if __name__ == "__main__":
    main()
