"""The `codex` adapter: `codex exec --json`, its thread events read into a result."""

from __future__ import annotations

import fnmatch
import re
from dataclasses import replace
from datetime import datetime, tzinfo
from pathlib import Path

from bot.agents.base import AgentRequest, agent_environment
from bot.agents.output import find_file
from bot.agents.resets import codex_reset
from bot.agents.stream import (
    Clock,
    Event,
    Reading,
    StopReason,
    TurnLimit,
    Window,
    events,
    mapping,
    number_of,
    run_cli,
    safe_session_id,
    text_of,
    window_reading,
)
from bot.model import AgentResult

TOOL_ITEMS = frozenset({"command_execution", "file_change", "mcp_tool_call", "web_search"})

_USAGE_LIMIT = re.compile(r"hit your usage limit", re.IGNORECASE)
_CREDIT = re.compile(
    r"out of credits|spend cap|quota exceeded|upgrade to plus|insufficient_quota", re.IGNORECASE
)
_AUTH = re.compile(r"status 401|unauthorized|refresh token|not logged in", re.IGNORECASE)
_TRANSIENT = re.compile(
    r"\b429\b|too many requests|stream disconnected|high demand|at capacity|unexpected status 5\d\d"
    r"|connection failed|timed out",
    re.IGNORECASE,
)
_TEXT_CLASSES: tuple[tuple[re.Pattern[str], StopReason], ...] = (
    (_CREDIT, "provider_credit"),
    (_AUTH, "auth"),
    (_TRANSIENT, "provider_transient"),
)
_TOKENS = {
    "input_tokens": "input",
    "cached_input_tokens": "cached_input",
    "output_tokens": "output",
}


class CodexAdapter:
    """Run `codex exec --json` with the brief on stdin and read its JSONL events."""

    name = "codex"

    def __init__(
        self,
        binary: str = "codex",
        *,
        max_turns: int | None = None,
        model: str | None = None,
        sandbox: str = "workspace-write",
        extra_flags: tuple[str, ...] = (),
        clock: Clock | None = None,
    ) -> None:
        self.binary = binary
        self.max_turns = max_turns  # codex has no flag for it: Baton counts tool calls live
        self.model = model
        self.sandbox = sandbox
        self.extra_flags = extra_flags
        self.clock = clock

    def argv(self, request: AgentRequest) -> list[str]:
        """Return the command line; the brief goes on stdin ('-'), never here."""
        argv = [
            self.binary,
            "exec",
            "--json",
            "--cd",
            str(request.worktree),
            "--sandbox",
            self.sandbox,
        ]
        if self.model is not None:
            argv += ["--model", self.model]
        argv += self.extra_flags
        if resume := safe_session_id(request.resume_session_id):
            argv += ["resume", resume]  # a subcommand: the flags above must come before it
        return [*argv, "-"]

    def environment(self, request: AgentRequest) -> dict[str, str]:
        """Return the agent environment with codex's home (login, sessions) under the agent home."""
        return {**agent_environment(request), "CODEX_HOME": str(codex_home(request))}

    async def run(self, request: AgentRequest) -> AgentResult:
        """Run codex in the worktree and report what it said."""
        codex_home(request).mkdir(parents=True, exist_ok=True)  # codex refuses a missing home
        if not session_exists(request):
            request = replace(request, resume_session_id=None)
        return await run_cli(
            self.name,
            read,
            request,
            self.argv(request),
            self.environment(request),
            stdin=request.brief_path,
            turn_limit=TurnLimit(turn_key, self.max_turns) if self.max_turns is not None else None,
            clock=self.clock,
        )


def codex_home(request: AgentRequest) -> Path:
    """Return CODEX_HOME under the agent home."""
    return request.home / "codex"


def session_exists(request: AgentRequest) -> bool:
    """Return whether the thread to resume has a rollout file on this worker."""
    thread = safe_session_id(request.resume_session_id)
    if thread is None:
        return False
    # Codex files rollouts by date (sessions/YYYY/MM/DD/); the agent can write the tree,
    # so the search follows no symlink and stops at a depth and a count of entries.
    pattern = f"rollout-*{thread}.jsonl"  # a safe session id holds no glob character
    found = find_file(
        codex_home(request) / "sessions",
        lambda name: fnmatch.fnmatchcase(name, pattern),
        within=request.home,
    )
    return found is not None


def turn_key(event: Event) -> str | None:
    """Return the id of a completed tool call (codex's unit of work), else None."""
    item = mapping(event.get("item"))
    if event.get("type") != "item.completed" or item.get("type") not in TOOL_ITEMS:
        return None
    return text_of(item.get("id"))


def read(
    text: str, exit_code: int | None, observed_at: datetime, child_tz: tzinfo | None
) -> Reading:
    """Read codex's events: success only from turn.completed, no fatal error and exit 0."""
    found, failures = events(text)
    completed = [e for e in found if e.get("type") == "turn.completed"]
    messages = _item_texts(found, "agent_message", "text")
    verdict = _verdict(bool(completed), _fatal(found), exit_code, observed_at, child_tz)
    return replace(
        verdict,
        turns=len({key for e in found if (key := turn_key(e))}),
        session_id=next(
            (
                t
                for e in found
                if e.get("type") == "thread.started" and (t := text_of(e.get("thread_id")))
            ),
            None,
        ),
        result_text=messages[-1] if messages else None,
        tokens=_tokens(completed[-1]) if completed else None,
        parse_failures=failures,
        evidence=(
            *verdict.evidence,
            *(f"warning: {text}" for text in _item_texts(found, "error", "message")),
        ),
    )


def _fatal(found: list[Event]) -> list[str]:
    """Return the fatal error texts: top-level errors and failed turns (error items only warn)."""
    texts = []
    for event in found:
        if event.get("type") == "error":
            texts.append(text_of(event.get("message")) or "error")
        elif event.get("type") == "turn.failed":
            texts.append(text_of(mapping(event.get("error")).get("message")) or "turn failed")
    return texts


def _item_texts(found: list[Event], item_type: str, key: str) -> list[str]:
    """Return a text field of every completed item of one type."""
    items = [mapping(e.get("item")) for e in found if e.get("type") == "item.completed"]
    return [
        text for item in items if item.get("type") == item_type and (text := text_of(item.get(key)))
    ]


def _verdict(
    completed: bool,
    fatal: list[str],
    exit_code: int | None,
    observed_at: datetime,
    child_tz: tzinfo | None,
) -> Reading:
    if completed and not fatal and exit_code == 0:
        return Reading("completed")
    if not fatal:
        if completed:
            return Reading(
                "cli_error", evidence=(f"the turn completed but codex exited {exit_code}",)
            )
        return Reading("no_result", evidence=("codex ended without a terminal turn event",))
    message = fatal[-1]
    if _USAGE_LIMIT.search(message):
        reset = codex_reset(message, observed_at, child_tz)
        resets_at, source = reset if reset else (None, None)
        return window_reading(Window(resets_at, source, None, message), observed_at)
    for pattern, stop_reason in _TEXT_CLASSES:
        if pattern.search(message):
            return Reading(stop_reason, evidence=(message,))
    return Reading("cli_error", evidence=(message,))


def _tokens(event: Event) -> dict[str, int]:
    usage = mapping(event.get("usage"))
    return {
        name: int(value)
        for key, name in _TOKENS.items()
        if (value := number_of(usage.get(key))) is not None
    }
