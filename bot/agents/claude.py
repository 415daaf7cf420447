"""The `claude` adapter: Claude Code in print mode, its stream-json output read into a result."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import datetime, tzinfo
from pathlib import Path
from typing import Any

from bot.agents.base import AgentRequest, agent_environment
from bot.agents.home import HomeLayout
from bot.agents.resets import claude_reset, from_epoch
from bot.agents.stream import (
    Clock,
    Event,
    Reading,
    TurnLimit,
    Window,
    events,
    mapping,
    number_of,
    run_cli,
    safe_session_id,
    strings,
    text_of,
    window_reading,
)
from bot.domain.model import AgentResult, bounded_denials

SYNTHETIC_MODEL = "<synthetic>"  # the model name on replies the CLI makes up for API errors
# --max-turns has been seen to fail open; past this many extra turns Baton stops the run itself.
TURN_SLACK = 2

# Claude Code talks to its provider and nothing else: no telemetry, error reports, update
# checks, feedback surveys or other "nonessential" traffic (which covers the rest).
QUIET_ENV = {
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY": "1",
    "DO_NOT_TRACK": "1",
    "BROWSER": "true",  # a URL the CLI would open goes nowhere
    "CLAUDE_CODE_MAX_RETRIES": "3",  # a few retries of a 429/5xx, then Baton classifies
}
UNSET_ENV = (
    "CLAUDECODE",  # a nested run must not think it runs inside Claude Code
    "CLAUDE_CODE_RETRY_WATCHDOG",  # it would wait out a closed window forever
    "CLAUDE_CODE_ENABLE_TELEMETRY",  # OpenTelemetry export to a collector
)
# What a run keeps of the last one's home: its sessions, and a Claude login, which the CLI
# refreshes itself. Its settings (hooks, env, permission rules) are the operator's alone.
HOME = HomeLayout(
    carried=(("claude", "projects"), ("claude", ".credentials.json")),
    pinned={("claude", "settings.json"): "{}\n"},
)
_DENIAL_TARGETS = ("command", "file_path", "notebook_path", "path", "url", "pattern")

_WINDOW_KINDS = re.compile(r"^(?:five_hour|seven_day)")
# What a rejected rate_limit_event carries when one of the account's limits closed: Claude
# Code reads a 429 without a claim or overage state as a throttle, and so does Baton.
_LIMIT_KEYS = ("errorCode", "overageStatus", "overageDisabledReason", "unifiedWindows")
_LIMIT_TEXT = re.compile(
    r"usage limit reached"
    r"|\b(?P<kind>(?!rate\b)[\w-]+) limit reached"  # "rate limit reached" is a throttle
    r"|hit your (?:(?P<kind2>(?!context\b)[\w-]+) )?limit\b",
    re.IGNORECASE,
)
_BILLING_TEXT = re.compile(
    r"credit balance|add funds|billing_error|grace_daily_limit_reached|specified API usage limits",
    re.IGNORECASE,
)
_AUTH_TEXT = re.compile(
    r"not logged in|invalid api key|authentication_error|please run /login", re.IGNORECASE
)
_TRANSIENT_TEXT = re.compile(
    r"API Error: (?:429|5\d\d)|rate.limit|overloaded|stream idle timeout", re.IGNORECASE
)
_TRANSIENT_ERRORS = frozenset({"rate_limit", "server_error", "overloaded"})


class ClaudeAdapter:
    """Run `claude -p` with the brief on stdin and read its stream-json output."""

    name = "claude"

    def __init__(
        self,
        binary: str = "claude",
        *,
        max_turns: int | None = None,
        model: str | None = None,
        permission_mode: str | None = None,
        extra_flags: tuple[str, ...] = (),
        clock: Clock | None = None,
    ) -> None:
        self.binary = binary
        self.max_turns = max_turns
        self.model = model
        self.permission_mode = permission_mode  # None: what the request's containment allows
        self.extra_flags = extra_flags
        self.clock = clock

    def argv(self, request: AgentRequest) -> list[str]:
        """Return the command line; the brief goes on stdin, never here."""
        argv = [
            self.binary,
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",  # stream-json in print mode refuses to run without it
            *self._permissions(request),
            # Only the agent home's own settings: a repository's .claude/ and .mcp.json must
            # not grant itself tools or start servers.
            "--setting-sources=user",
            "--strict-mcp-config",
        ]
        if self.max_turns is not None:
            argv += ["--max-turns", str(self.max_turns)]
        if self.model is not None:
            argv += ["--model", self.model]
        if resume := safe_session_id(request.resume_session_id):
            argv.append(f"--resume={resume}")  # equals form: the flag's value is optional
        return [*argv, *self.extra_flags]

    def _permissions(self, request: AgentRequest) -> list[str]:
        """Return what the agent may do unasked: in -p mode nobody is there to approve.

        In Baton's jail every tool is the agent's (`bypassPermissions`): the jail is what
        contains it, and the CLI's own bubblewrap sandbox cannot start inside it, so it is
        kept off. Uncontained (BATON_AGENT_SANDBOX=off) the CLI refuses that mode to root;
        there edits and shell commands are granted by name instead. Deny rules in the
        agent home's settings.json hold in either case.
        """
        if self.permission_mode is not None:
            return ["--permission-mode", self.permission_mode]
        if request.jail is not None:
            return [
                "--permission-mode",
                "bypassPermissions",
                "--settings",
                json.dumps({"sandbox": {"enabled": False}}),
            ]
        return ["--permission-mode", "acceptEdits", "--allowedTools", "Bash"]

    def environment(self, request: AgentRequest) -> dict[str, str]:
        """Return the agent environment plus Claude Code's own settings."""
        env = agent_environment(request)
        for name in UNSET_ENV:
            env.pop(name, None)
        return {**env, "CLAUDE_CONFIG_DIR": str(config_dir(request)), **QUIET_ENV}

    async def run(self, request: AgentRequest) -> AgentResult:
        """Run Claude Code in the worktree and report what it said."""
        config_dir(request).mkdir(parents=True, exist_ok=True)
        if not session_exists(request):
            request = replace(request, resume_session_id=None)
        limit = None if self.max_turns is None else self.max_turns + TURN_SLACK
        return await run_cli(
            self.name,
            read,
            request,
            self.argv(request),
            self.environment(request),
            stdin=request.brief_path,
            turn_limit=TurnLimit(turn_key, limit) if limit is not None else None,
            clock=self.clock,
        )


def config_dir(request: AgentRequest) -> Path:
    """Return Claude Code's config directory under the agent home."""
    return request.home / "claude"


def session_exists(request: AgentRequest) -> bool:
    """Return whether the session to resume is stored here, for this worktree."""
    session = safe_session_id(request.resume_session_id)
    if session is None:
        return False
    # Claude Code keys sessions by working directory, every non-alphanumeric made a dash.
    project = re.sub(r"[^A-Za-z0-9]", "-", str(request.worktree.resolve()))
    return (config_dir(request) / "projects" / project / f"{session}.jsonl").is_file()


def turn_key(event: Event) -> str | None:
    """Return the message id of a top-level model reply (a turn), else None."""
    if event.get("type") != "assistant" or event.get("parent_tool_use_id") is not None:
        return None
    message = mapping(event.get("message"))
    if message.get("model") == SYNTHETIC_MODEL:
        return None
    return text_of(message.get("id"))


def read(
    text: str, exit_code: int | None, observed_at: datetime, child_tz: tzinfo | None
) -> Reading:
    """Read a stream-json transcript: success only from a clean result line and exit 0."""
    found, failures = events(text)
    result = next((e for e in reversed(found) if e.get("type") == "result"), None)
    final = mapping(result)
    return replace(
        _verdict(found, result, exit_code, observed_at, child_tz),
        turns=_turns(found, final),
        cost_usd=number_of(final.get("total_cost_usd")),
        session_id=text_of(final.get("session_id"))
        or next((s for e in found if (s := text_of(e.get("session_id")))), None),
        result_text=text_of(final.get("result")),
        parse_failures=failures,
        denials=bounded_denials(_denials(final)),
    )


def _denials(result: Mapping[str, Any]) -> Iterator[str]:
    """Yield one line per tool call the CLI's permission rules refused: tool and target."""
    denied = result.get("permission_denials")
    for entry in denied if isinstance(denied, list) else []:
        denial = mapping(entry)
        tool = text_of(denial.get("tool_name")) or "a tool"
        given = mapping(denial.get("tool_input"))
        target = next(
            (t for key in _DENIAL_TARGETS if (t := text_of(given.get(key)))),
            json.dumps(given, sort_keys=True) if given else "",
        )
        line = f"{tool}: {' '.join(target.split())}" if target else tool
        yield line


def _turns(found: list[Event], result: Mapping[str, Any]) -> int:
    """Return the CLI's turn count, else the model replies Baton saw complete."""
    reported = number_of(result.get("num_turns"))
    if reported is not None and reported.is_integer():
        return int(reported)
    return len({key for event in found if (key := turn_key(event))})


def _verdict(
    found: list[Event],
    result: Event | None,
    exit_code: int | None,
    observed_at: datetime,
    child_tz: tzinfo | None,
) -> Reading:
    final = mapping(result)
    errors = tuple(strings(final.get("errors")))
    if final.get("subtype") == "success" and final.get("is_error") is False:
        if exit_code == 0:
            return Reading("completed")
        return Reading("cli_error", evidence=(f"a clean result, but the CLI exited {exit_code}",))
    if final.get("subtype") == "error_max_turns" or final.get("terminal_reason") == "max_turns":
        return Reading("max_turns", evidence=errors)
    if final.get("subtype") == "error_max_budget_usd":
        return Reading("max_budget", evidence=errors)
    if provider := _provider(found, final, observed_at, child_tz):
        return provider
    if result is None:
        return Reading("no_result", evidence=("the CLI ended without a result message",))
    if any("no conversation found" in error.lower() for error in errors):
        return Reading("resume_miss", evidence=errors)
    if str(final.get("terminal_reason", "")).startswith("aborted"):
        return Reading("cancelled", evidence=errors)
    return Reading("cli_error", evidence=errors or (f"result: {final.get('subtype')}",))


def _provider(
    found: list[Event], result: Mapping[str, Any], observed_at: datetime, child_tz: tzinfo | None
) -> Reading | None:
    """Read provider trouble from event fields and the CLI's own error texts, never tool output."""
    if rejected := _rejected(found, observed_at):
        return rejected
    texts = list(_cli_texts(found, result))
    errors = {
        error for e in found if e.get("type") == "assistant" and (error := text_of(e.get("error")))
    }
    status = number_of(result.get("api_error_status"))
    if "billing_error" in errors or _matches(_BILLING_TEXT, texts):
        return Reading("provider_credit", evidence=_cited(_BILLING_TEXT, texts))
    if window := _text_window(texts, observed_at, child_tz):
        return window_reading(window, observed_at)
    if "authentication_failed" in errors or status in (401, 403) or _matches(_AUTH_TEXT, texts):
        return Reading("auth", evidence=_cited(_AUTH_TEXT, texts))
    statuses = (status, _retrying_status(found))
    throttled = any(s is not None and (s == 429 or s >= 500) for s in statuses)
    if throttled or errors & _TRANSIENT_ERRORS or _matches(_TRANSIENT_TEXT, texts):
        return Reading("provider_transient", evidence=_cited(_TRANSIENT_TEXT, texts))
    return None


def _rejected(found: list[Event], observed_at: datetime) -> Reading | None:
    """Read the last rejected rate_limit_event: a waitable window, or a wallet that is empty."""
    rejected = [
        e for e in found if e.get("type") == "rate_limit_event" and _status(e) == "rejected"
    ]
    if not rejected:
        return None
    info = mapping(rejected[-1].get("rate_limit_info"))
    evidence = f"rate limit rejected: {json.dumps(info, sort_keys=True)}"
    kind, resets_at = _closed_limit(info)
    if kind is None and not any(info.get(key) for key in _LIMIT_KEYS):
        # A 429 that names no limit: Claude Code itself calls it "temporarily limiting
        # requests (not your usage limit)", a throttle read from the rest of the run.
        return None
    # A five-hour or weekly window that reopens is waitable even with overage out of credits;
    # anything else (or credits required outright) is not.
    if info.get("errorCode") == "credits_required" or not _WINDOW_KINDS.match(kind or ""):
        return Reading("provider_credit", evidence=(evidence,), limit_kind=kind)
    window = Window(from_epoch(resets_at, observed_at), "event", kind, evidence)
    return window_reading(window, observed_at)


def _status(event: Event) -> object:
    return mapping(event.get("rate_limit_info")).get("status", event.get("status"))


def _closed_limit(info: Mapping[str, Any]) -> tuple[str | None, object]:
    """Return which limit closed and its resetsAt, from the flat or the unifiedWindows shape."""
    if kind := text_of(info.get("rateLimitType")):
        return kind, info.get("resetsAt")
    for name, value in mapping(info.get("unifiedWindows")).items():
        window = mapping(value)
        utilization = number_of(window.get("utilization"))
        if utilization is not None and utilization >= 1:
            return str(name), window.get("resetsAt")
    return None, None


def _text_window(texts: list[str], observed_at: datetime, child_tz: tzinfo | None) -> Window | None:
    for line in texts:
        if limit := _LIMIT_TEXT.search(line):
            reset = claude_reset(line, observed_at, child_tz)
            resets_at, source = reset if reset else (None, None)
            return Window(resets_at, source, _kind(limit["kind"] or limit["kind2"]), line)
    return None


def _kind(word: str | None) -> str | None:
    return {"5-hour": "five_hour"}.get(word.lower(), word.lower()) if word else None


def _cli_texts(found: list[Event], result: Mapping[str, Any]) -> Iterator[str]:
    """Yield the texts the CLI itself wrote about an error: synthetic replies, a failed result."""
    for event in found:
        message = mapping(event.get("message"))
        synthetic = message.get("model") == SYNTHETIC_MODEL or event.get("is_api_error_message")
        if event.get("type") == "assistant" and synthetic:
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if mapping(block).get("type") == "text" and (text := text_of(block.get("text"))):
                    yield text
    if result.get("is_error") is True and (text := text_of(result.get("result"))):
        yield text


def _retrying_status(found: list[Event]) -> float | None:
    """Return the HTTP status the CLI was still retrying when the run ended, if it was."""
    status = None
    for event in found:
        if turn_key(event):
            status = None
        elif event.get("type") == "system" and event.get("subtype") == "api_retry":
            status = number_of(event.get("error_status"))
    return status


def _matches(pattern: re.Pattern[str], texts: list[str]) -> bool:
    return any(pattern.search(text) for text in texts)


def _cited(pattern: re.Pattern[str], texts: list[str]) -> tuple[str, ...]:
    """Return the text that matched the pattern, else the CLI's last error text."""
    matched = [text for text in texts if pattern.search(text)]
    return tuple((matched or texts)[-1:])
