"""Baton's own check run, named `Baton`, on each head Baton pushes: what it shows, and when.

Pure. The check run is one more view of where an issue's work stands, like its status
comments: bot/workflows/conclude.py writes it wherever it reports a run, rendered here
from the stored runs. It is `in_progress` while the agent works from the head and while
Baton waits on the head's CI, `success` once the head settles green, `neutral` while
nothing runs (halted by a usage window, waiting to try again, stopped, withdrawn, or
superseded by a later push) and `action_required` when the issue escalates, linked to
the escalation comment. Baton's own check run never counts towards a head's verdict
(bot/domain/checks.py reads check suites and runs of other apps only).

GitHub keeps a completed check run as it is: its status and conclusion never change
again. A head whose check run completed gets a new one when the work on it starts anew
(a retry, a resumption), and GitHub shows the newest check run of a name.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bot.domain.inert import inert
from bot.domain.model import Recovery, Run, RunState
from bot.domain.render import attempt_table, audit_section, fit_utf8, state_words

CHECK_RUN_NAME = "Baton"
OUTPUT_LIMIT = 65535  # GitHub's cap on a check run's summary, and on its text, in UTF-8 bytes


class CheckPhase(enum.StrEnum):
    """Where the work on a head stands, as Baton's check run on it shows it."""

    WORKING = "working"  # the agent works from this head, or is about to
    CHECKING = "checking"  # Baton waits on the head's CI
    GREEN = "green"
    HALTED = "halted"  # a usage window halted the issue until it reopens
    WAITING = "waiting"  # nothing runs: a backoff, a stop, a withdrawal
    ESCALATED = "escalated"  # a maintainer decides
    SUPERSEDED = "superseded"  # a later attempt pushed another head
    ENDED = "ended"  # the pull request was merged or closed before the head settled


Conclusion = Literal["success", "neutral", "action_required"]

_CONCLUSIONS: Mapping[CheckPhase, Conclusion | None] = {
    CheckPhase.WORKING: None,
    CheckPhase.CHECKING: None,
    CheckPhase.GREEN: "success",
    CheckPhase.HALTED: "neutral",
    CheckPhase.WAITING: "neutral",
    CheckPhase.ESCALATED: "action_required",
    CheckPhase.SUPERSEDED: "neutral",
    CheckPhase.ENDED: "neutral",
}

# The phases that only close a check run under way: they never start one of their own.
_CLOSING = frozenset({CheckPhase.SUPERSEDED, CheckPhase.ENDED})

_PHASE_WORDS = {
    CheckPhase.WORKING: "The agent is working",
    CheckPhase.CHECKING: "Waiting on CI",
    CheckPhase.GREEN: "Green",
    CheckPhase.HALTED: "Halted",
    CheckPhase.WAITING: "Waiting",
    CheckPhase.ESCALATED: "Escalated",
    CheckPhase.SUPERSEDED: "Superseded",
    CheckPhase.ENDED: "Ended",
}

_NEXT = {
    CheckPhase.WORKING: "the agent's push, which gets a check run of its own",
    CheckPhase.CHECKING: "the checks' verdict: green awaits a maintainer's review, red goes "
    "back to the agent",
    CheckPhase.GREEN: "a maintainer's review; requested changes come back to the agent",
    CheckPhase.HALTED: "resuming when the usage window reopens",
    CheckPhase.WAITING: "nothing, until a maintainer retries it",
    CheckPhase.ESCALATED: "a maintainer decides",
    CheckPhase.SUPERSEDED: "nothing here: the later head's check run follows the work",
    CheckPhase.ENDED: "nothing: Baton's work on this pull request ended",
}

_RETRY_HINT = (
    "Re-run this check to retry: Baton takes a re-run as `/baton retry` from whoever asks, "
    "if their role lets them steer Baton."
)

_HANDED_BACK = frozenset({Recovery.CONTINUE, Recovery.REQUEUE, Recovery.RETRY})


def phase_of(run: Run, withdrawn: bool = False) -> CheckPhase | None:
    """Return the phase of the work a run's state shows; None while its end is undecided.

    An escalated run's phase is ESCALATED; a run whose recovery hands the issue back to
    the agent is WORKING, since the next attempt follows at once, unless a maintainer
    withdrew the issue since the run started (withdrawn): then nothing follows.
    """
    if run.state.is_live:
        return CheckPhase.WORKING
    by_state = {
        RunState.PUSHED_PENDING: CheckPhase.CHECKING,
        RunState.PUSHED_GREEN: CheckPhase.GREEN,
        RunState.HALTED: CheckPhase.HALTED,
        RunState.MERGED: CheckPhase.ENDED,
        RunState.CLOSED: CheckPhase.ENDED,
    }
    if run.state in by_state:
        return by_state[run.state]
    if run.escalated:
        return CheckPhase.ESCALATED
    if run.classification is None:
        return None
    if run.classification.recovery in _HANDED_BACK and not withdrawn:
        return CheckPhase.WORKING
    return CheckPhase.WAITING


def head_of(runs: Sequence[Run], run: Run) -> str | None:
    """Return the head the run's work stands on: its own push, else the one it continues.

    None for an attempt that pushed nothing and continues no attempt that did.
    """
    by_attempt = {r.attempt: r for r in runs}
    current: Run | None = run
    while current is not None:
        if current.head_sha:
            return current.head_sha
        earlier = current.continuation_of
        current = (
            by_attempt.get(earlier) if earlier is not None and earlier < current.attempt else None
        )
    return None


def replaced_head(runs: Sequence[Run], run: Run) -> str | None:
    """Return the head the run's own push replaced on its branch, if another attempt pushed it."""
    if run.head_sha is None:
        return None
    earlier = [r for r in runs if r.attempt < run.attempt and r.branch == run.branch]
    heads = [r.head_sha for r in sorted(earlier, key=lambda r: r.attempt) if r.head_sha]
    return heads[-1] if heads and heads[-1] != run.head_sha else None


class CheckRunView(BaseModel):
    """Baton's check run as it is written: what a create or an update sends GitHub."""

    model_config = ConfigDict(frozen=True)

    phase: CheckPhase
    title: str
    summary: str
    text: str
    details_url: str | None = None

    @property
    def status(self) -> Literal["in_progress", "completed"]:
        """Return the check run's status: completed once the phase has a conclusion."""
        return "in_progress" if self.conclusion is None else "completed"

    @property
    def conclusion(self) -> Conclusion | None:
        """Return the check run's conclusion, None while the work is under way."""
        return _CONCLUSIONS[self.phase]

    @property
    def key(self) -> str:
        """Return what the check run says, as a key: it is written again only when this changes.

        The durations in its table of attempts, shown in passing, do not count.
        """
        said = [self.status, self.conclusion, self.title, self.summary, self.details_url]
        return hashlib.sha256(json.dumps(said).encode()).hexdigest()


class CheckRunRecord(BaseModel):
    """Baton's check run on one head, as recorded: its id, its conclusion, what it says."""

    model_config = ConfigDict(frozen=True)

    id: int
    conclusion: Conclusion | None = None  # None: still in progress
    said: str


Write = Literal["create", "update"]


def write_for(record: CheckRunRecord | None, view: CheckRunView) -> Write | None:
    """Return how a head's check run comes to show view: a new one, an update, or neither.

    A check run under way is updated until it completes. A completed one stays as it
    is (GitHub changes it no more): a phase of new work on the head starts a new one,
    and a view with the completed one's own conclusion, or one that only closes a
    check run under way (superseded, ended), writes nothing.
    """
    if record is None:
        return None if view.phase in _CLOSING else "create"
    if record.conclusion is None:
        return None if record.said == view.key else "update"
    if view.phase in _CLOSING or view.conclusion == record.conclusion:
        return None
    return "create"


def check_run_view(
    phase: CheckPhase,
    run: Run,
    runs: Sequence[Run],
    max_runs: int,
    now: datetime,
    next_step: str | None = None,
    escalation_url: str | None = None,
) -> CheckRunView:
    """Return the check run that shows a run's phase, with the attempts of its pull request.

    runs are the issue's, oldest first: the table lists those on the run's pull request
    up to it. The summary says the phase, the attempt ("2 of 4") and what comes next;
    the text holds the table and what the run's settlement audit flagged. An escalated
    run links its escalation comment (escalation_url), as the check run's details too.
    """
    attempt = _attempt_shown(phase, run)
    title = f"{_PHASE_WORDS[phase]}: attempt {attempt} of {max_runs}"
    lines = [f"**{title}**", "", state_words(run)]
    lines += ["", f"Next: {inert(next_step or _NEXT[phase])}"]
    if escalation_url is not None:
        lines += ["", f"Why, and what you can do: [the escalation comment]({escalation_url})."]
    if phase in (CheckPhase.HALTED, CheckPhase.WAITING, CheckPhase.ESCALATED):
        lines += ["", _RETRY_HINT]
    shown = [r for r in runs if r.attempt <= run.attempt and r.pr_number in (None, run.pr_number)]
    table = ["### Attempts", "", *attempt_table(shown or [run], now), *audit_section(run)]
    pointer = f"Baton's status page (run `{run.run_id}`)"
    return CheckRunView(
        phase=phase,
        title=title,
        summary=fit_utf8("\n".join(lines), OUTPUT_LIMIT, pointer=pointer, what="This summary"),
        text=fit_utf8("\n".join(table), OUTPUT_LIMIT, pointer=pointer, what="This table"),
        details_url=escalation_url,
    )


def _attempt_shown(phase: CheckPhase, run: Run) -> int:
    """Return the attempt a phase is about: a recovery's WORKING is about the next one."""
    if phase is CheckPhase.WORKING and not run.state.is_live:
        return run.attempt + 1
    return run.attempt
