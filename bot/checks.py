"""Decide what a head's check results mean, from GitHub's own check suites and statuses."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

from bot.render import CheckSummary

_PASSING = frozenset({"success", "neutral", "skipped"})


class Verdict(enum.StrEnum):
    """What the checks on one head say so far."""

    PENDING = "pending"
    GREEN = "green"
    RED = "red"


def checks_verdict(
    suites: Iterable[Mapping[str, Any]], combined_status: Mapping[str, Any] | None
) -> Verdict:
    """Return the verdict for a head from its check suites and combined commit status.

    Any completed suite that did not pass makes it red at once; it is green only
    when every suite has completed and passed and no commit status is pending or
    failing. A suite GitHub created but no app ever started (status queued, no
    runs) does not hold the head pending forever.
    """
    states = [state for suite in suites if (state := _suite_state(suite)) is not None]
    status_state = (combined_status or {}).get("state")
    status_count = int((combined_status or {}).get("total_count", 0))
    if Verdict.RED in states or (status_count and status_state in ("failure", "error")):
        return Verdict.RED
    if Verdict.PENDING in states or (status_count and status_state == "pending"):
        return Verdict.PENDING
    if not states and not status_count:
        return Verdict.PENDING
    return Verdict.GREEN


def _suite_state(suite: Mapping[str, Any]) -> Verdict | None:
    if suite.get("status") != "completed":
        if suite.get("status") == "queued" and not suite.get("latest_check_runs_count"):
            return None
        return Verdict.PENDING
    return Verdict.GREEN if suite.get("conclusion") in _PASSING else Verdict.RED


def failing_checks(
    check_runs: Iterable[Mapping[str, Any]], combined_status: Mapping[str, Any] | None
) -> list[CheckSummary]:
    """Return what failed on a head: its failing check runs and commit statuses."""
    failing = [
        CheckSummary(
            name=str(run.get("name", "check")),
            conclusion=str(run.get("conclusion")),
            title=str((run.get("output") or {}).get("title") or ""),
            summary=str((run.get("output") or {}).get("summary") or ""),
            text=str((run.get("output") or {}).get("text") or ""),
        )
        for run in check_runs
        if run.get("status") == "completed" and run.get("conclusion") not in _PASSING
    ]
    failing += [
        CheckSummary(
            name=str(status.get("context", "status")),
            conclusion=str(status.get("state")),
            title=str(status.get("description") or ""),
        )
        for status in (combined_status or {}).get("statuses", [])
        if status.get("state") in ("failure", "error")
    ]
    return failing
