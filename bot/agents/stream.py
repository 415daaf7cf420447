"""What the CLI adapters share: reading a transcript, counting turns live, building the result."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any, Literal, Protocol

from bot.agents.base import AgentRequest
from bot.agents.output import Unreadable, read_capped
from bot.agents.process import STDOUT_CAP, ProcessOutcome, run_process
from bot.agents.resets import zone_named
from bot.domain.model import LONGEST_WINDOW, AgentResult

StopReason = Literal[
    "completed",
    "max_turns",
    "max_budget",
    "cancelled",
    "provider_window",
    "provider_credit",
    "provider_transient",
    "auth",
    "resume_miss",
    "no_result",
    "cli_error",
]
Event = dict[str, Any]
Clock = Callable[[], datetime]

# The longest each kind of window keeps an account shut, with clocks an hour apart (a
# five-hour window, a quarter of an hour): a later "reset" is not a window of that kind.
FIVE_HOUR_HORIZON = timedelta(hours=5, minutes=15)


def window_horizon(kind: str | None) -> timedelta:
    """Return how far off a window of this kind can reopen: five hours, else a week."""
    if kind is not None and kind.startswith("five_hour"):
        return FIVE_HOUR_HORIZON
    return LONGEST_WINDOW


_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")

_HINTS: dict[str, str] = {
    "max_turns": "turn-cap",
    "max_budget": "cost-cap",
    "wall_clock": "wall-clock-cap",
    "provider_window": "provider-window",
    "provider_credit": "provider-credit",
    "provider_transient": "provider-transient",
    "auth": "provider-auth",
    "cli_missing": "env-start-failure",
    "resume_miss": "agent-error",
    "no_result": "agent-error",
    "cli_error": "agent-error",
}


@dataclass(frozen=True)
class Reading:
    """What one transcript says, before Baton's own knowledge of the process is added."""

    stop_reason: StopReason
    turns: int | None = None
    cost_usd: float | None = None
    session_id: str | None = None
    result_text: str | None = None
    evidence: tuple[str, ...] = ()
    resets_at: datetime | None = None
    reset_source: str | None = None
    limit_kind: str | None = None
    tokens: dict[str, int] | None = None
    parse_failures: int = 0
    denials: tuple[str, ...] = ()  # tool calls the CLI's permission rules refused


class Reader(Protocol):
    """A pure transcript parser: the CLI's stdout and exit code in, a Reading out."""

    def __call__(
        self, text: str, exit_code: int | None, observed_at: datetime, child_tz: tzinfo | None
    ) -> Reading: ...


@dataclass(frozen=True)
class Window:
    """A usage limit the CLI reported, and when (if it said) it reopens."""

    resets_at: datetime | None
    source: str | None
    kind: str | None
    evidence: str


def window_reading(window: Window, observed_at: datetime) -> Reading:
    """Return a provider-window reading, or provider-credit when there is no reset to wait for."""
    resets_at = window.resets_at
    if resets_at is None or resets_at > observed_at + window_horizon(window.kind):
        # A usage limit with no reopening in sight cannot be waited out: a human decides.
        return Reading("provider_credit", evidence=(window.evidence,), limit_kind=window.kind)
    return Reading(
        "provider_window",
        resets_at=resets_at,
        reset_source=window.source,
        limit_kind=window.kind,
        evidence=(
            window.evidence,
            f"usage window {window.kind or '?'} reopens at {resets_at.isoformat()}"
            f" (read from the {window.source})",
        ),
    )


def safe_session_id(value: str | None) -> str | None:
    """Return a session id fit for argv and file names, or None."""
    return value if value is not None and _SESSION_ID.fullmatch(value) else None


def events(text: str) -> tuple[list[Event], int]:
    """Return the JSON objects of a JSONL text and how many non-blank lines were not one."""
    found: list[Event] = []
    failures = 0
    for line in text.split("\n"):
        if not line.strip():
            continue
        event = event_of(line)
        if event is None:
            failures += 1
        else:
            found.append(event)
    return found, failures


def event_of(line: str) -> Event | None:
    """Return one JSONL line as an object, or None if it is not one."""
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def text_of(value: object) -> str | None:
    """Return a value if it is a non-empty string."""
    return value if isinstance(value, str) and value else None


def number_of(value: object) -> float | None:
    """Return a JSON number as a float (a bool is not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def mapping(value: object) -> Mapping[str, Any]:
    """Return a JSON object, or an empty one for anything else."""
    return value if isinstance(value, dict) else {}


def strings(value: object) -> Iterator[str]:
    """Yield the non-empty strings of a JSON array."""
    if isinstance(value, list):
        yield from (item for item in value if isinstance(item, str) and item)


class TurnLimit:
    """Stop a run once more distinct turns than allowed have shown up in its stdout."""

    def __init__(self, turn_key: Callable[[Event], str | None], limit: int) -> None:
        self.turn_key = turn_key
        self.limit = limit
        self.seen: set[str] = set()

    def __call__(self, line: str) -> bool:
        """Count the line's turn, if it is one; return whether the run is now over its limit."""
        event = event_of(line)
        key = self.turn_key(event) if event is not None else None
        if key is not None:
            self.seen.add(key)
        return len(self.seen) > self.limit


def interpret(
    agent: str, reading: Reading, outcome: ProcessOutcome, request: AgentRequest
) -> AgentResult:
    """Combine what the transcript says with how the process ended into an AgentResult."""
    facts: dict[str, Any] = {
        "agent": agent,
        "turns": reading.turns,
        "cost_usd": reading.cost_usd,
        "session_id": reading.session_id,
        "exit_code": outcome.exit_code,
        "started_at": outcome.started_at,
        "ended_at": outcome.ended_at,
        "transcript_path": request.transcript_path,
        "stderr_path": request.stderr_path,
        "denials": list(reading.denials),
    }
    # Baton's own knowledge of how the process ended outranks anything it printed.
    if outcome.spawn_error is not None:
        text = f"the {agent} CLI could not start: {outcome.spawn_error}"
        return _result(facts, "cli_missing", text, [text])
    if outcome.timed_out:
        text = "the agent was stopped at its wall-clock cap"
        return _result(facts, "wall_clock", text, [text, *outcome.tail])
    if outcome.turn_capped:
        text = "the agent was stopped past its turn cap"
        return _result(facts, "max_turns", text, [text, *outcome.tail])
    return _result(
        {**facts, "resets_at": reading.resets_at},
        reading.stop_reason,
        reading.result_text,
        [*reading.evidence, *_notes(reading), *outcome.tail],
    )


def _notes(reading: Reading) -> list[str]:
    """Return, as evidence, the facts AgentResult has no field for."""
    notes = []
    if reading.parse_failures:
        notes.append(f"{reading.parse_failures} line(s) of the transcript were not JSON")
    if reading.tokens:
        notes.append("tokens: " + ", ".join(f"{k} {v}" for k, v in reading.tokens.items()))
    return notes


def _result(
    facts: dict[str, Any], stop_reason: str, result_text: str | None, evidence: list[str]
) -> AgentResult:
    return AgentResult.model_validate(
        {
            **facts,
            "status": "success" if stop_reason == "completed" else "failed",
            "stop_reason": stop_reason,
            "failure_class": _HINTS.get(stop_reason),
            "result_text": result_text,
            "evidence": evidence,
        }
    )


async def run_cli(
    agent: str,
    read: Reader,
    request: AgentRequest,
    argv: list[str],
    env: dict[str, str],
    *,
    stdin: Path,
    turn_limit: TurnLimit | None,
    clock: Clock | None,
) -> AgentResult:
    """Run an agent CLI, then read what it printed into an AgentResult."""
    jailed_argv, jailed_env = request.contain(argv, env)
    outcome = await run_process(
        jailed_argv,
        cwd=request.worktree,
        env=jailed_env,
        stdin=stdin,
        transcript=request.transcript_path,
        stderr=request.stderr_path,
        deadline=request.deadline,
        stop_on=turn_limit,
        sealed_report=request.reports_sealed,
    )
    observed_at = clock() if clock is not None else outcome.ended_at
    child_tz = zone_named(env.get("TZ"), None)
    text, problem = transcript_text(request)
    reading = read(text, outcome.exit_code, observed_at, child_tz)
    if problem is not None:
        reading = replace(reading, evidence=(*reading.evidence, problem))
    return interpret(agent, reading, outcome, request)


def transcript_text(request: AgentRequest) -> tuple[str, str | None]:
    """Return the run's transcript as text, and what kept Baton from reading it, if anything.

    Baton wrote the file within its caps, but it sits where the agent could replace
    it; whatever is there now is read only as a regular file and never past the caps.
    """
    limit = STDOUT_CAP.on_disk
    try:
        found = read_capped(request.transcript_path, limit, within=request.run_dir)
    except Unreadable as exc:
        return "", f"the transcript was not read: {exc}"
    if found is None:
        return "", None
    problem = (
        f"the transcript is over {limit} bytes: only its start was read" if found.cut else None
    )
    return found.text(), problem
