"""Decide what a head's check results mean, from GitHub's own check suites and statuses."""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from bot.domain.render import CheckSummary

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
    failing. A suite that holds no run says nothing (holds_runs): one GitHub made
    that no App ever started does not hold the head pending for ever. One whose
    workflows wait for a maintainer's approval holds it pending (awaits_approval).
    """
    suites = list(suites)
    states = [_suite_state(suite) for suite in suites if holds_runs(suite)]
    states += [Verdict.PENDING for suite in suites if awaits_approval(suite)]
    status_state = (combined_status or {}).get("state")
    status_count = int((combined_status or {}).get("total_count", 0))
    if Verdict.RED in states or (status_count and status_state in ("failure", "error")):
        return Verdict.RED
    if Verdict.PENDING in states or (status_count and status_state == "pending"):
        return Verdict.PENDING
    if not states and not status_count:
        return Verdict.PENDING
    return Verdict.GREEN


def reported_by_baton(entry: Mapping[str, Any], own_app_id: int | None) -> bool:
    """Tell whether a check suite or check run is Baton's own: its App is Baton's.

    Baton's own check run (bot/domain/check_run.py), and the suite GitHub makes for it,
    show where Baton's work stands: counted, they would hold the head pending on Baton
    itself and fail it when the issue escalates. GitHub names each one's App by its
    numeric id, which no other App shares (GET /app tells Baton its own, whatever
    GITHUB_APP_ID says); own_app_id None (the App's id unknown) takes none for Baton's.
    """
    app_id = (entry.get("app") or {}).get("id")
    return own_app_id is not None and app_id == own_app_id


def reported_by_others(
    reported: Iterable[Mapping[str, Any]], own_app_id: int | None
) -> list[Mapping[str, Any]]:
    """Return the check suites or check runs of a head that Apps other than Baton reported."""
    return [entry for entry in reported if not reported_by_baton(entry, own_app_id)]


def holds_runs(suite: Mapping[str, Any]) -> bool:
    """Tell whether a check suite holds any check run.

    GitHub makes a queued suite on every push for every App with `checks: write`; many
    never start a run in it, and it stays queued for ever. Such a suite says nothing.
    """
    return suite.get("latest_check_runs_count") != 0


def awaits_approval(suite: Mapping[str, Any]) -> bool:
    """Tell whether a check suite's workflows wait for a maintainer's approval.

    GitHub ("Approving workflow runs from public forks") holds an outside contributor's
    workflow runs, a fork mode pull request's among them, until a maintainer approves
    them: their suite is completed as `action_required`, with no run started. That is
    CI not yet run, neither a failure nor the silence of a head no CI looks at.
    """
    return (
        suite.get("status") == "completed"
        and suite.get("conclusion") == "action_required"
        and not holds_runs(suite)
    )


def ci_suites(
    suites: Iterable[Mapping[str, Any]], own_app_id: int | None
) -> list[Mapping[str, Any]]:
    """Return the check suites of a head that are CI: another App's, holding runs or waiting
    for a maintainer's approval to start them."""
    return [
        suite
        for suite in reported_by_others(suites, own_app_id)
        if holds_runs(suite) or awaits_approval(suite)
    ]


def needs_check_runs(
    suites: Iterable[Mapping[str, Any]],
    combined_status: Mapping[str, Any] | None,
    required: Collection[str],
) -> bool:
    """Tell whether a head's verdict needs its check runs read: required checks, or a red head.

    Required checks are judged run by run; a red head's failing runs are what the
    continuation is briefed with.
    """
    return bool(required) or checks_verdict(suites, combined_status) is Verdict.RED


def head_verdict(
    suites: Collection[Mapping[str, Any]],
    combined_status: Mapping[str, Any] | None,
    check_runs: Iterable[Mapping[str, Any]],
    required: Collection[str],
) -> tuple[Verdict, tuple[CheckSummary, ...]]:
    """Return a head's verdict, with what passed or, for a red head, what failed.

    With required checks named, they alone decide (required_checks_verdict) and
    they are what passed; without, every check suite and commit status does.
    check_runs need only be read where needs_check_runs says so.
    """
    runs = list(check_runs)
    if required:
        verdict = required_checks_verdict(runs, combined_status, required)
        if verdict is Verdict.RED:
            return verdict, tuple(failing_checks(runs, combined_status, required))
        return verdict, tuple(CheckSummary(name=name, conclusion="success") for name in required)
    verdict = checks_verdict(suites, combined_status)
    if verdict is Verdict.RED:
        return verdict, tuple(failing_checks(runs, combined_status))
    return verdict, tuple(
        CheckSummary(name=str(suite["app"]["name"]), conclusion=str(suite["conclusion"]))
        for suite in suites
        if suite.get("status") == "completed" and suite.get("app")
    )


def combined_state(statuses: Iterable[Mapping[str, Any]]) -> str:
    """Return GitHub's combined state of a head's latest statuses, one per context.

    failure if any is an error or failure, pending if there are none or any is
    pending, success otherwise: the combined status endpoint's own rule, applied to
    every page of its statuses rather than the first page's figure alone.
    """
    states = {str(status.get("state")) for status in statuses}
    if states & {"error", "failure"}:
        return "failure"
    if not states or "pending" in states:
        return "pending"
    return "success"


def nothing_reported(
    suites: Iterable[Mapping[str, Any]], combined_status: Mapping[str, Any]
) -> bool:
    """Tell whether no CI has said anything about a head: no suite holding a run, no status.

    suites are those of ci_suites; a suite no App started a run in is silence too.
    """
    reported = any(holds_runs(s) or awaits_approval(s) for s in suites)
    return not reported and not int(combined_status.get("total_count", 0))


def no_ci_due(pushed_at: datetime, now: datetime, wait_s: float) -> datetime | None:
    """Return when a head with no CI reported counts as green; None once it does.

    GitHub reports nothing at all for a head no workflow or app runs on (no suite,
    a pending combined status with no statuses), so silence is only an answer after
    a wait long enough for any CI to have registered itself.
    """
    due = pushed_at + timedelta(seconds=wait_s)
    return due if now < due else None


def required_checks_verdict(
    check_runs: Iterable[Mapping[str, Any]],
    combined_status: Mapping[str, Any] | None,
    required: Collection[str],
) -> Verdict:
    """Return the verdict for a head from its required checks alone.

    Each required name is a check run's name or a commit status's context; the
    latest run of a name counts. Red as soon as one required check fails, green
    once every one has passed; a required check not reported yet keeps it pending.
    """
    latest: dict[str, Mapping[str, Any]] = {}
    for run in check_runs:
        name = str(run.get("name"))
        if name in required and int(run.get("id", 0)) >= int(latest.get(name, {}).get("id", 0)):
            latest[name] = run
    states = {name: _run_state(run) for name, run in latest.items()}
    for status in (combined_status or {}).get("statuses", []):
        context = str(status.get("context"))
        if context in required and context not in states:
            states[context] = _STATUS_STATES.get(str(status.get("state")), Verdict.PENDING)
    if Verdict.RED in states.values():
        return Verdict.RED
    if set(required) <= set(states) and all(v is Verdict.GREEN for v in states.values()):
        return Verdict.GREEN
    return Verdict.PENDING


_STATUS_STATES = {"success": Verdict.GREEN, "failure": Verdict.RED, "error": Verdict.RED}


def _run_state(run: Mapping[str, Any]) -> Verdict:
    if run.get("status") != "completed":
        return Verdict.PENDING
    return Verdict.GREEN if run.get("conclusion") in _PASSING else Verdict.RED


def _suite_state(suite: Mapping[str, Any]) -> Verdict:
    if suite.get("status") != "completed":
        return Verdict.PENDING
    return Verdict.GREEN if suite.get("conclusion") in _PASSING else Verdict.RED


def failing_checks(
    check_runs: Iterable[Mapping[str, Any]],
    combined_status: Mapping[str, Any] | None,
    required: Collection[str] = (),
) -> list[CheckSummary]:
    """Return what failed on a head: its failing check runs and commit statuses.

    With required checks named, only those count: an optional check's failure is
    not the agent's to fix.
    """
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
    return [check for check in failing if not required or check.name in required]
