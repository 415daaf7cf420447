"""The `codex` adapter: `codex exec --json`, its thread events read into a result."""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import platform
import re
import shutil
import tomllib
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bot.agents.base import AgentRequest, agent_environment
from bot.agents.egress import CODEX_ENDPOINT_ENV, HostPort
from bot.agents.home import HomeLayout
from bot.agents.jail import JAIL_TMP
from bot.agents.output import Unreadable, find_file, read_capped
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
from bot.domain.model import AgentResult, bounded_denials

TOOL_ITEMS = frozenset({"command_execution", "file_change", "mcp_tool_call", "web_search"})

# Baton's jail is what contains the agent. Codex's own sandbox, nested inside it, would
# only take away what the agent needs (workspace-write mounts the checkout's .git
# read-only: `git commit` fails), so codex runs without it, within the jail.
SANDBOX = "danger-full-access"

# What Baton sets in CODEX_HOME/config.toml before every run, over whatever the agent
# home held: no approval prompt (exec mode cannot answer one) and no traffic but the
# provider's: no update check, no analytics events or metrics (ab.chatgpt.com), no
# plugin marketplace sync (github.com, chatgpt.com), no ChatGPT apps' MCP server
# (chatgpt.com/backend-api/ps/mcp, with a ChatGPT login), no feedback uploads, no
# OpenTelemetry export.
QUIET_CONFIG: dict[str, Any] = {
    "approval_policy": "never",
    "check_for_update_on_startup": False,
    "features": {"plugins": False, "apps": False},
    "analytics": {"enabled": False},
    "feedback": {"enabled": False},
    "otel": {
        "exporter": "none",
        "trace_exporter": "none",
        "metrics_exporter": "none",
        "log_user_prompt": False,
    },
}
CODEX_DIR = "codex"  # CODEX_HOME, in the agent home
CONFIG_CAP = 1024 * 1024  # the most of an existing config.toml Baton reads back
# What a run keeps of the last one's home: its sessions, and a ChatGPT login, which codex
# refreshes itself. Its config.toml is the template's with Baton's settings over it.
HOME = HomeLayout(
    carried=((CODEX_DIR, "sessions"), (CODEX_DIR, "auth.json")),
    pinned={(CODEX_DIR, "config.toml"): ""},
)
_FRESH_CONFIG = ".config.toml.baton"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
ROLLOUT_CAP = 16 * 1024 * 1024  # the most of a session's rollout Baton reads for its windows
STDERR_CAP = 4 * 1024 * 1024  # the most of codex's log Baton reads for refused tool calls

_USAGE_LIMIT = re.compile(r"hit your usage limit", re.IGNORECASE)
_CREDIT = re.compile(
    r"out of credits|spend cap|quota exceeded|upgrade to plus|insufficient_quota", re.IGNORECASE
)
_AUTH = re.compile(r"status 401|unauthorized|refresh token|not logged in", re.IGNORECASE)
_TRANSIENT = re.compile(
    r"\b429\b|too many requests|stream disconnected|high demand|at capacity|unexpected status 5\d\d"
    r"|connection failed|timed out|error while reading the server response",
    re.IGNORECASE,
)
# Codex retries a dropped stream or a 5xx by itself and says so with a top-level `error`
# event; a notice, not the end of the turn. `Reconnecting... 2/5 (stream disconnected ...)`
_RETRY_NOTICE = re.compile(r"^\s*Reconnecting\.\.\.\s*\d+/\d+\b")
# `ERROR codex_core::tools::router: error=exec_command failed: CreateProcess { message:
# "Rejected(\"`git push` rejected: <the rule's justification>\")" }`
_REJECTED = re.compile(
    r"\btools::router: error=(?P<tool>[\w.-]+) failed: .*?\bRejected\(\\\"(?P<why>.*?)\\\"\)"
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
# The windows codex's rate-limit snapshots name, by their length in minutes.
_WINDOW_KINDS = {300: "five_hour", 10080: "seven_day"}
# The text's reset is shown to the minute; the snapshot's must agree with it this closely.
_RESET_AGREEMENT = timedelta(seconds=90)

# npm's `codex` is a Node launcher for a native executable in a per-platform package.
_NPM_TARGETS = {
    ("Linux", "x86_64"): ("linux-x64", "x86_64-unknown-linux-musl"),
    ("Linux", "aarch64"): ("linux-arm64", "aarch64-unknown-linux-musl"),
    ("Darwin", "x86_64"): ("darwin-x64", "x86_64-apple-darwin"),
    ("Darwin", "arm64"): ("darwin-arm64", "aarch64-apple-darwin"),
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
        sandbox: str = SANDBOX,
        base_url: str | None = None,
        extra_flags: tuple[str, ...] = (),
        clock: Clock | None = None,
    ) -> None:
        self.binary = binary
        self.max_turns = max_turns  # codex has no flag for it: Baton counts tool calls live
        self.model = model
        self.sandbox = sandbox
        self.base_url = base_url  # a proxy, a gateway or a local server speaking Responses
        self.extra_flags = extra_flags
        self.clock = clock

    def argv(self, request: AgentRequest) -> list[str]:
        """Return the command line; the brief goes on stdin ('-'), never here."""
        argv = [
            native_executable(self.binary),
            "exec",
            "--json",
            "--color",
            "never",
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
        home = codex_home(request)
        return {
            **agent_environment(request),
            "CODEX_HOME": str(home),
            # Codex puts its helpers (`apply_patch` on PATH) in its home, and refuses to when
            # that home is under the temporary directory: name the tmp it is not under.
            "TMPDIR": next((t for t in JAIL_TMP if not home.is_relative_to(t)), JAIL_TMP[0]),
            "BROWSER": "true",  # a URL opened runs `true`: nothing opens
        }

    def configure(self, request: AgentRequest) -> None:
        """Write Baton's settings into CODEX_HOME/config.toml, keeping the rest of the file."""
        wanted: dict[str, Any] = dict(QUIET_CONFIG)
        # With its key held by the proxy, codex speaks plain HTTP to the proxy's view of
        # its endpoint, which the proxy continues over TLS with the key in place.
        base_url = request.held_env.get(CODEX_ENDPOINT_ENV) or self.base_url
        if base_url is not None:
            wanted["openai_base_url"] = base_url
        path = codex_home(request) / "config.toml"
        kept = existing_config(path, request.home)
        # No project is trusted: a repository's own .codex/ (settings, rules, hooks) stays
        # unread, whatever an earlier run of the agent wrote here.
        kept.pop("projects", None)
        write_config(request.home, toml_text(merged(kept, wanted)))

    async def run(self, request: AgentRequest) -> AgentResult:
        """Run codex in the worktree and report what it said."""
        self.configure(request)
        missing = request.resume_session_id is not None and not session_exists(request)
        if missing:
            request = replace(request, resume_session_id=None)
        result = await run_cli(
            self.name,
            read,
            request,
            self.argv(request),
            self.environment(request),
            stdin=request.brief_path,
            turn_limit=TurnLimit(turn_key, self.max_turns) if self.max_turns is not None else None,
            clock=self.clock,
        )
        if result.stop_reason == "provider_window":
            result = with_window_snapshot(result, request)
        evidence = result.evidence
        if missing:
            evidence = [
                "the session to resume is not on this worker: codex started afresh",
                *evidence,
            ]
        return result.model_copy(update={"denials": denials(request), "evidence": evidence})


def codex_home(request: AgentRequest) -> Path:
    """Return CODEX_HOME under the agent home."""
    return request.home / CODEX_DIR


def native_executable(binary: str) -> str:
    """Return the executable npm's `codex` launcher would run, or binary when it is not one.

    The launcher is a Node script that finds its platform's package beside its own; run
    directly, the executable needs no Node and only its own package to be visible.
    """
    located = binary if os.sep in binary else shutil.which(binary)
    if located is None:
        return binary
    launcher = Path(os.path.realpath(located))
    target = _NPM_TARGETS.get((platform.system(), platform.machine()))
    if launcher.name != "codex.js" or launcher.parent.name != "bin" or target is None:
        return binary
    package = launcher.parent.parent  # node_modules/@openai/codex
    suffix, triple = target
    for root in (
        package.parent / f"codex-{suffix}",
        package / "node_modules" / "@openai" / f"codex-{suffix}",
        package,
    ):
        executable = root / "vendor" / triple / "bin" / "codex"
        if executable.is_file() and os.access(executable, os.X_OK):
            return str(executable)
    return binary


def programs(binary: str) -> tuple[str, ...]:
    """Return the programs a jail must show to run codex: the one named, and what it runs."""
    return tuple(dict.fromkeys((binary, native_executable(binary))))


def endpoint(base_url: str) -> HostPort:
    """Return the host:port a base URL names (80 for http, 443 for https by default)."""
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{base_url!r} is not an http(s) URL")
    return HostPort(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))


def write_config(home: Path, text: str) -> None:
    """Write text as CODEX_HOME/config.toml, never through a link the agent left there.

    The agent home is the agent's to write: a `codex` that is not a directory is
    replaced by one (codex refuses a missing home), and the file is renamed into place
    over whatever entry holds its name.
    """
    home.mkdir(parents=True, exist_ok=True)  # Baton's own path: the agent cannot swap it
    top = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            directory = os.open(CODEX_DIR, _DIR_FLAGS, dir_fd=top)
        except FileNotFoundError:
            os.mkdir(CODEX_DIR, 0o700, dir_fd=top)
            directory = os.open(CODEX_DIR, _DIR_FLAGS, dir_fd=top)
        except OSError:  # a symlink, a file, a FIFO: not a home codex may use
            os.unlink(CODEX_DIR, dir_fd=top)
            os.mkdir(CODEX_DIR, 0o700, dir_fd=top)
            directory = os.open(CODEX_DIR, _DIR_FLAGS, dir_fd=top)
    finally:
        os.close(top)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(_FRESH_CONFIG, dir_fd=directory)
        fd = os.open(_FRESH_CONFIG, _NEW_FILE_FLAGS, 0o600, dir_fd=directory)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(_FRESH_CONFIG, "config.toml", src_dir_fd=directory, dst_dir_fd=directory)
    finally:
        os.close(directory)


def existing_config(path: Path, home: Path) -> dict[str, Any]:
    """Return the settings of the config.toml already in codex's home, {} if none is usable."""
    try:
        found = read_capped(path, CONFIG_CAP, within=home)
    except Unreadable:
        return {}
    if found is None or found.cut:
        return {}
    try:
        return tomllib.loads(found.text())
    except tomllib.TOMLDecodeError:
        return {}  # the agent's, or broken: Baton's settings alone


def merged(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Return base with over's settings laid on it, table by table."""
    out = dict(base)
    for key, value in over.items():
        below = out.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            out[key] = merged(below, value)
        else:
            out[key] = value
    return out


def toml_text(settings: Mapping[str, Any]) -> str:
    """Return settings as TOML: plain keys first, then each table under its own header."""
    lines: list[str] = []
    _toml_table(settings, (), lines)
    return "\n".join(lines).lstrip("\n") + "\n"


def _toml_table(table: Mapping[str, Any], path: tuple[str, ...], lines: list[str]) -> None:
    tables = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    plain = {k: v for k, v in table.items() if k not in tables}
    if path and (plain or not tables):
        lines += ["", f"[{'.'.join(_toml_key(part) for part in path)}]"]
    lines += [f"{_toml_key(key)} = {_toml_value(value)}" for key, value in plain.items()]
    for key, value in tables.items():
        _toml_table(value, (*path, key), lines)


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a JSON string is a TOML basic string
    if isinstance(value, datetime | date | time):
        return value.isoformat()  # a TOML date-time, date or time, unquoted
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    if isinstance(value, Mapping):
        inner = ", ".join(f"{_toml_key(k)} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    return json.dumps(str(value))


def session_exists(request: AgentRequest) -> bool:
    """Return whether the thread to resume has a rollout file on this worker."""
    return _rollout(request, request.resume_session_id) is not None


def _rollout(request: AgentRequest, thread_id: str | None) -> Path | None:
    thread = safe_session_id(thread_id)
    if thread is None:
        return None
    # Codex files rollouts by date (sessions/YYYY/MM/DD/); the agent can write the tree,
    # so the search follows no symlink and stops at a depth and a count of entries.
    pattern = f"rollout-*{thread}.jsonl"  # a safe session id holds no glob character
    return find_file(
        codex_home(request) / "sessions",
        lambda name: fnmatch.fnmatchcase(name, pattern),
        within=request.home,
    )


def with_window_snapshot(result: AgentResult, request: AgentRequest) -> AgentResult:
    """Return result with the window codex's own rate-limit snapshot names, when it agrees.

    Codex prints the reset to the minute, in its own zone, and not which window closed;
    the session's rollout keeps the provider's snapshot (window length, exact reset).
    It is the agent's to write, so it is believed only where it agrees with the text.
    """
    path = _rollout(request, result.session_id)
    if path is None or result.resets_at is None:
        return result
    try:
        found = read_capped(path, ROLLOUT_CAP, within=request.home)
    except Unreadable:
        return result
    if found is None:
        return result
    for kind, resets_at in reversed(spent_windows(found.text())):
        if abs(resets_at - result.resets_at) <= _RESET_AGREEMENT:
            note = f"codex's rate-limit snapshot: the {kind} window, reset {resets_at.isoformat()}"
            return result.model_copy(
                update={
                    "resets_at": max(resets_at, result.resets_at),
                    "evidence": [*result.evidence, note],
                }
            )
    return result


def spent_windows(rollout: str) -> list[tuple[str, datetime]]:
    """Return each spent window a rollout's rate-limit snapshots name, with its reset."""
    found: list[tuple[str, datetime]] = []
    for event in events(rollout)[0]:
        payload = mapping(event.get("payload"))
        if payload.get("type") != "token_count":
            continue
        limits = mapping(payload.get("rate_limits"))
        for name in ("primary", "secondary"):
            window = mapping(limits.get(name))
            used = number_of(window.get("used_percent"))
            minutes = number_of(window.get("window_minutes"))
            reset = number_of(window.get("resets_at"))
            if used is None or used < 100 or reset is None or minutes is None:
                continue
            kind = _WINDOW_KINDS.get(int(minutes), f"{int(minutes)}-minute")
            try:
                found.append((kind, datetime.fromtimestamp(reset, UTC)))
            except (OverflowError, OSError, ValueError):
                continue
    return found


def denials(request: AgentRequest) -> list[str]:
    """Return the tool calls codex refused the agent, as its log on stderr names them.

    Codex's `--json` events leave a refused call out (the model is told, in its tool
    output); its log says `... exec_command failed: ... Rejected("<why>")` once for each.
    """
    try:
        found = read_capped(request.stderr_path, STDERR_CAP, within=request.run_dir)
    except Unreadable:
        return []
    if found is None:
        return []
    refused = []
    for line in found.text().splitlines():
        match = _REJECTED.search(line)
        if match is not None:
            why = match["why"].replace('\\"', '"').replace("\\'", "'").replace("\\\\", "\\")
            refused.append(f"{match['tool']}: {why}")
    return list(bounded_denials(refused))


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
    warnings = [*_retry_notices(found), *_item_texts(found, "error", "message")]
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
        evidence=(*verdict.evidence, *(f"warning: {text}" for text in warnings)),
    )


def _fatal(found: list[Event]) -> list[str]:
    """Return the fatal error texts: top-level errors and failed turns.

    Error items only warn, and so does a top-level error that announces a retry.
    """
    texts = []
    for event in found:
        if event.get("type") == "error":
            message = text_of(event.get("message")) or "error"
            if not _RETRY_NOTICE.match(message):
                texts.append(message)
        elif event.get("type") == "turn.failed":
            texts.append(text_of(mapping(event.get("error")).get("message")) or "turn failed")
    return texts


def _retry_notices(found: list[Event]) -> list[str]:
    messages = (text_of(e.get("message")) for e in found if e.get("type") == "error")
    return [m for m in messages if m and _RETRY_NOTICE.match(m)]


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
