"""An attempt's transcript: what Baton keeps of it, and the view of it a person reads.

What is kept is the agent CLI's own output (Claude Code's stream-json, codex's
`exec --json` events, aider's or any command's text), cut to its last
`KEPT_BYTES` from a line's start, with every credential masked. The view reads it
line by line: a line one of the CLIs' JSON shapes Baton knows becomes a message, a
tool call (its output attached), a denial or an error; any other line is shown as
the text it is. Nothing in a transcript makes reading it fail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from bot.domain.model import IssueRef, Run

KEPT_BYTES = 1024 * 1024
SUMMARY_CHARS = 160  # a tool call's one-line summary: what it acted on
MASK = "***"

Event = Mapping[str, Any]
Tone = Literal["info", "warning", "error", "denial"]

# Credentials an agent's output may carry besides what Baton's log lines already mask
# (GitHub tokens, JWTs, private keys, credentials in URLs): the providers' API keys,
# bearer tokens and the values of variables named for a secret.
_CREDENTIALS = (
    # Anthropic (sk-ant-api03-…), OpenAI (sk-…, sk-proj-…, sk-svcacct-…), OpenRouter (sk-or-…).
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}"),  # Google AI (Gemini)
    re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"),  # AWS access key ids (Bedrock)
)
_BEARER = re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/-]{16,}=*")
# Quotes may come escaped (`\"`): the CLIs' JSON lines carry what a tool printed as a string.
_HEADER = re.compile(
    r"(?i)\b((?:proxy-)?authorization|x-api-key|api[-_]key)"
    r"((?:\\?\")?\s*[:=]\s*(?:\\?\")?(?:(?:basic|bearer|token)\s+)?)[^\s\"',;\\]+"
)
_NAMED_SECRET = re.compile(
    r"\b([A-Z][A-Z0-9_]*(?:API_KEY|TOKEN|SECRET|PASSWORD|ACCESS_KEY)\b"
    r"(?:\\?[\"'])?\s*[=:]\s*(?:\\?[\"'])?)"
    r"[^\s\"'\\]+"
)

_CLAUDE_TYPES = frozenset({"system", "assistant", "user", "result", "rate_limit_event"})
_CODEX_TYPES = frozenset({"thread.started", "turn.completed", "turn.failed", "error"})
_CODEX_ITEMS = frozenset({"item.started", "item.updated", "item.completed"})
_QUIET_TYPES = frozenset({"stream_event", "turn.started"})  # nothing a reader needs
_SYNTHETIC_MODEL = "<synthetic>"  # the model name on replies Claude Code makes up for errors
_TARGETS = ("command", "file_path", "notebook_path", "path", "url", "pattern", "query")
_BATON_NOTE = re.compile(r"^\[baton: .*\]$")
_TEXT_ERROR = re.compile(
    r"^(?:Traceback \(most recent call last\)"
    r"|(?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\b:"
    r"|(?:error|Error|ERROR|fatal|FATAL)(?:\[\w+\])?: "
    r"|The API provider\b)"
)
_ISSUE_NAME = re.compile(r"^(?P<repo>[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+)#(?P<number>[1-9][0-9]*)$")


class NoTranscript(Exception):
    """There is no transcript to show; the message says why, in a sentence."""


# --- What is kept ----------------------------------------------------------------------------


def masked(text: str) -> str:
    """Return text with the providers' API keys, bearer tokens and named secrets masked.

    A header or variable keeps its name (`Authorization: Bearer ***`, `OPENAI_API_KEY=***`):
    a reader sees that a credential was there, never what it was.
    """
    for pattern in _CREDENTIALS:
        text = pattern.sub(MASK, text)
    text = _BEARER.sub(rf"\g<1>{MASK}", text)
    text = _HEADER.sub(rf"\g<1>\g<2>{MASK}", text)
    return _NAMED_SECRET.sub(rf"\g<1>{MASK}", text)


def cut_note(cut: int, kept: int) -> str:
    """Return the first line of a transcript whose beginning was cut: how much, and what is left."""
    return f"[baton: the transcript's first {cut} bytes were cut; its last {kept} are kept]\n"


def kept_transcript(data: bytes, redact: Callable[[str], str], limit: int = KEPT_BYTES) -> str:
    """Return what Baton keeps of a transcript: its end, credentials masked.

    Past `limit` bytes only the last ones are kept, from the first line that starts
    among them (so no credential is kept cut in half; a line running through the cut is
    masked before it is cut), under a first line saying how much was cut. redact is
    Baton's masking of its log lines (GitHub tokens, JWTs, private keys, URL credentials,
    the deployment's secrets); `masked` then takes the providers' keys and bearer tokens.
    """
    cut = 0
    if len(data) > limit:
        start = len(data) - limit
        newline = data.find(b"\n", start - 1)
        if 0 <= newline < len(data) - 1:
            cut = newline + 1
        else:  # one line runs through the cut: masked whole first, no half credential is kept
            data = masked(redact(data.decode(errors="replace"))).encode()
            cut = max(len(data) - limit, 0)
        data = data[cut:]
    text = masked(redact(data.decode(errors="replace")))
    return cut_note(cut, len(data)) + text if cut else text


# --- Which transcript ------------------------------------------------------------------------


def issue_named(name: str) -> IssueRef:
    """Return the issue `OWNER/REPO#N` names.

    The name does not say through which installation the issue is reached; a run's
    records are found by repository and number alone, so none is needed here.
    """
    found = _ISSUE_NAME.match(name)
    if found is None or {".", ".."} & set(found["repo"].split("/")):
        raise NoTranscript(f"{name!r} is not an issue: name it as OWNER/REPO#N")
    return IssueRef(installation_id=0, repo=found["repo"], number=int(found["number"]))


def chosen_run(issue: IssueRef, runs: Sequence[Run], attempt: int | None) -> Run:
    """Return the run whose transcript is asked for: the attempt named, else the latest."""
    if not runs:
        raise NoTranscript(f"Baton has no record of a run of {issue}")
    if attempt is None:
        return max(runs, key=lambda run: run.attempt)
    for run in runs:
        if run.attempt == attempt:
            return run
    known = ", ".join(str(run.attempt) for run in sorted(runs, key=lambda run: run.attempt))
    raise NoTranscript(f"{issue} has no attempt {attempt} on record (its attempts: {known})")


def missing_reason(run: Run, days: int, now: datetime) -> str:
    """Say why no transcript of the run is kept."""
    which = f"{run.issue} attempt {run.attempt}"
    result = run.agent_result
    if result is None:
        if run.state.is_live:
            return f"{which} is still running: its transcript is kept when its agent ends"
        return (
            f"{which} ended {run.state.value} with no agent result: its agent never ran, "
            "or its worker stopped before the agent ended, so no transcript was kept"
        )
    if result.ended_at + timedelta(days=days) <= now:
        return (
            f"{which}'s transcript has expired: transcripts are kept {days} days "
            f"(BATON_TRANSCRIPT_DAYS), and its agent ended on {result.ended_at:%Y-%m-%d}"
        )
    return (
        f"no transcript of {which} is kept: its worker kept none where this process looks "
        "(BATON_TRANSCRIPT_STORE), or stopped before the attempt ended"
    )


# --- The view --------------------------------------------------------------------------------


class Message(BaseModel):
    """What the agent (or the user's side of the conversation) said."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["message"] = "message"
    author: Literal["agent", "user"]
    text: str


class Reasoning(BaseModel):
    """The agent's thinking, where its CLI prints it."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["reasoning"] = "reasoning"
    text: str


class ToolCall(BaseModel):
    """One tool the agent called, with what came back."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["tool"] = "tool"
    key: str  # the CLI's id of the call, which its result names
    name: str
    summary: str  # what it acted on, in one line
    detail: str  # everything it was given
    output: str | None = None
    failed: bool = False
    denied: bool = False


class Notice(BaseModel):
    """Something the CLI or Baton said about the run: a start, a retry, an error, a denial."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["notice"] = "notice"
    tone: Tone
    text: str


class Text(BaseModel):
    """Lines shown as they were printed."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["text"] = "text"
    text: str


Entry = Message | Reasoning | ToolCall | Notice | Text


def view_of(transcript: str) -> tuple[Entry, ...]:
    """Return the entries a person reads a transcript as, in order."""
    reader = _Reader()
    for line in transcript.splitlines():
        reader.take(line)
    return reader.entries()


def counts(entries: Iterable[Entry]) -> dict[Tone, int]:
    """Return how many errors and denials the entries show (a denied call counts as one)."""
    found: dict[Tone, int] = {"error": 0, "denial": 0}
    for entry in entries:
        if isinstance(entry, Notice) and entry.tone in found:
            found[entry.tone] += 1
    return found


class _Reader:
    """Turns a transcript's lines into entries; a tool's result finds its call by id."""

    def __init__(self) -> None:
        self._entries: list[Entry] = []
        self._at: dict[str, int] = {}  # a tool call's (or codex item's) index in _entries
        self._lines: list[str] = []  # plain lines not yet made one Text

    def entries(self) -> tuple[Entry, ...]:
        self._flush()
        return tuple(self._entries)

    def take(self, line: str) -> None:
        event = _event(line)
        kind = event.get("type") if event is not None else None
        if event is None or not isinstance(kind, str):
            self._plain(line)
        elif kind in _QUIET_TYPES:
            return
        elif kind in _CLAUDE_TYPES:
            self._add(_claude(event, self), line)
        elif kind in _CODEX_TYPES:
            self._add(_codex_event(event), line)
        elif kind in _CODEX_ITEMS:
            self._item(event, line)
        else:
            self._plain(line)

    def _add(self, entries: list[Entry] | None, line: str) -> None:
        if entries is None:
            self._plain(line)
            return
        for entry in entries:
            self._put(entry)

    def _put(self, entry: Entry, key: str | None = None) -> None:
        self._flush()
        key = key or (entry.key if isinstance(entry, ToolCall) else None)
        if key is not None and key in self._at:
            self._entries[self._at[key]] = entry
            return
        if key is not None:
            self._at[key] = len(self._entries)
        self._entries.append(entry)

    def call(self, key: str) -> ToolCall | None:
        """Return the tool call of that id, if one was seen."""
        at = self._at.get(key)
        entry = self._entries[at] if at is not None else None
        return entry if isinstance(entry, ToolCall) else None

    def update(self, call: ToolCall) -> None:
        """Put the call back where it was first seen, now with its result."""
        self._entries[self._at[call.key]] = call

    def _item(self, event: Event, line: str) -> None:
        item = _obj(event.get("item"))
        entry = _codex_item(item)
        if entry is None:
            self._plain(line)
        else:
            self._put(entry, key=f"item:{_str(item.get('id'))}" if item.get("id") else None)

    def _plain(self, line: str) -> None:
        if _BATON_NOTE.match(line):
            self._put(Notice(tone="info", text=line))
        elif _TEXT_ERROR.match(line):
            self._put(Notice(tone="error", text=line))
        else:
            self._lines.append(line)

    def _flush(self) -> None:
        if self._lines:
            text = "\n".join(self._lines).strip("\n")
            self._lines = []
            if text:
                self._entries.append(Text(text=text))


# --- Claude Code's stream-json ----------------------------------------------------------------


def _claude(event: Event, reader: _Reader) -> list[Entry] | None:
    kind = event.get("type")
    if kind == "assistant":
        return _assistant(event)
    if kind == "user":
        return _user(event, reader)
    if kind == "result":
        return _result(event, reader)
    if kind == "rate_limit_event":
        return _rate_limit(_obj(event.get("rate_limit_info")))
    return _system(event)


def _system(event: Event) -> list[Entry] | None:
    subtype = event.get("subtype")
    if subtype == "init":
        parts = [
            f"Claude Code {_str(event.get('claude_code_version'))}".strip(),
            f"model {_str(event.get('model'))}" if event.get("model") else "",
            f"permission mode {_str(event.get('permissionMode'))}"
            if event.get("permissionMode")
            else "",
        ]
        return [Notice(tone="info", text="Started: " + ", ".join(p for p in parts if p))]
    if subtype == "api_retry":
        why = _str(event.get("error")) or "an error"
        if (status := event.get("error_status")) is not None:
            why += f" (HTTP {status})"
        tries = f"{_str(event.get('attempt'))} of {_str(event.get('max_retries'))}"
        return [Notice(tone="warning", text=f"API call retried ({tries}): {why}")]
    return None


def _rate_limit(info: Event) -> list[Entry]:
    status, kind = info.get("status"), _str(info.get("rateLimitType")) or "usage"
    if status == "rejected":
        return [Notice(tone="error", text=f"Rate limit reached: the {kind} limit is spent")]
    if status == "allowed_warning":
        used = info.get("utilization")
        share = f" ({used:.0%} used)" if isinstance(used, int | float) else ""
        return [Notice(tone="warning", text=f"Rate limit near: the {kind} limit{share}")]
    return []


def _assistant(event: Event) -> list[Entry] | None:
    message = _obj(event.get("message"))
    content = message.get("content")
    if not isinstance(content, list):
        return None
    synthetic = message.get("model") == _SYNTHETIC_MODEL or event.get("is_api_error_message")
    entries: list[Entry] = []
    for block in map(_obj, content):
        kind = block.get("type")
        if kind == "text" and (text := _str(block.get("text"))):
            entries.append(
                Notice(tone="error", text=text) if synthetic else Message(author="agent", text=text)
            )
        elif kind == "thinking" and (thought := _str(block.get("thinking"))):
            entries.append(Reasoning(text=thought))
        elif kind == "tool_use":
            entries.append(_tool_use(block))
    if event.get("error") and not synthetic:
        entries.append(Notice(tone="error", text=f"API error: {_str(event.get('error'))}"))
    return entries


def _tool_use(block: Event) -> ToolCall:
    given = _obj(block.get("input"))
    return ToolCall(
        key=_str(block.get("id")),
        name=_str(block.get("name")) or "tool",
        summary=_summary(given),
        detail=json.dumps(given, indent=2, ensure_ascii=False) if given else "",
    )


def _user(event: Event, reader: _Reader) -> list[Entry] | None:
    content = _obj(event.get("message")).get("content")
    if isinstance(content, str):
        return [Message(author="user", text=content)] if content else []
    if not isinstance(content, list):
        return None
    entries: list[Entry] = []
    for block in map(_obj, content):
        if block.get("type") == "tool_result":
            key = _str(block.get("tool_use_id"))
            output = _output(block.get("content"))
            failed = block.get("is_error") is True
            call = reader.call(key)
            if call is None:
                entries.append(
                    ToolCall(
                        key=key, name="tool", summary="", detail="", output=output, failed=failed
                    )
                )
            else:
                reader.update(call.model_copy(update={"output": output, "failed": failed}))
        elif block.get("type") == "text" and (text := _str(block.get("text"))):
            entries.append(Message(author="user", text=text))
    return entries


def _result(event: Event, reader: _Reader) -> list[Entry]:
    entries: list[Entry] = []
    denials = event.get("permission_denials")
    for denial in map(_obj, denials if isinstance(denials, list) else []):
        tool = _str(denial.get("tool_name")) or "a tool"
        target = _summary(_obj(denial.get("tool_input")))
        entries.append(
            Notice(tone="denial", text=f"Denied {tool}" + (f": {target}" if target else ""))
        )
        call = reader.call(_str(denial.get("tool_use_id")))
        if call is not None:
            reader.update(call.model_copy(update={"denied": True}))
    entries.append(_ending(event))
    return entries


def _ending(event: Event) -> Notice:
    turns, cost = event.get("num_turns"), event.get("total_cost_usd")
    facts = []
    if isinstance(turns, int):
        facts.append(f"{turns} turn" + ("" if turns == 1 else "s"))
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        facts.append(f"${cost:.4f}")
    if event.get("is_error") is False:
        return Notice(tone="info", text="Finished: " + ", ".join(facts) if facts else "Finished")
    errors = event.get("errors")
    why = _str(event.get("result")) or "; ".join(
        map(_str, errors if isinstance(errors, list) else [])
    )
    how = _str(event.get("terminal_reason")) or _str(event.get("subtype")) or "error"
    ended = f"Ended ({', '.join([how, *facts])})"
    return Notice(tone="error", text=f"{ended}: {why}" if why else ended)


# --- codex's exec --json events ---------------------------------------------------------------


def _codex_event(event: Event) -> list[Entry]:
    kind = event.get("type")
    if kind == "thread.started":
        return [Notice(tone="info", text=f"Started: codex thread {_str(event.get('thread_id'))}")]
    if kind == "turn.completed":
        usage = _obj(event.get("usage"))
        tokens = [
            f"{usage[name]} {label}"
            for name, label in (
                ("input_tokens", "input tokens"),
                ("cached_input_tokens", "cached"),
                ("output_tokens", "output tokens"),
            )
            if name in usage
        ]
        return [Notice(tone="info", text="Finished" + (f": {', '.join(tokens)}" if tokens else ""))]
    message = _str(event.get("message")) or _str(_obj(event.get("error")).get("message"))
    return [Notice(tone="error", text=message or f"codex: {kind}")]


def _codex_item(item: Event) -> Entry | None:
    kind, key = item.get("type"), f"item:{_str(item.get('id'))}"
    status = item.get("status")
    if kind == "agent_message":
        return Message(author="agent", text=_str(item.get("text")))
    if kind == "reasoning":
        return Reasoning(text=_str(item.get("text")))
    if kind == "error":
        return Notice(tone="warning", text=_str(item.get("message")))
    if kind == "command_execution":
        command = _str(item.get("command"))
        code = item.get("exit_code")
        return ToolCall(
            key=key,
            name="command",
            summary=_line(command),
            detail=command,
            output=_str(item.get("aggregated_output")) or None,
            failed=status == "failed" or (isinstance(code, int) and code != 0),
            denied=status == "declined",
        )
    return _codex_tool(kind, key, item)


def _codex_tool(kind: object, key: str, item: Event) -> ToolCall | None:
    failed = item.get("status") == "failed"
    if kind == "file_change":
        changes = item.get("changes")
        said = [
            f"{_str(change.get('kind'))} {_str(change.get('path'))}".strip()
            for change in map(_obj, changes if isinstance(changes, list) else [])
        ]
        return ToolCall(
            key=key,
            name="file change",
            summary=_line(", ".join(said)),
            detail="\n".join(said),
            failed=failed,
        )
    if kind == "mcp_tool_call":
        name = ".".join(_str(item.get(part)) for part in ("server", "tool") if item.get(part))
        error = _str(_obj(item.get("error")).get("message"))
        result = item.get("result")
        return ToolCall(
            key=key,
            name=name or "tool",
            summary=_summary(_obj(item.get("arguments"))),
            detail=json.dumps(item.get("arguments"), indent=2, ensure_ascii=False),
            output=error or (json.dumps(result, indent=2, ensure_ascii=False) if result else None),
            failed=failed or bool(error),
        )
    if kind == "web_search":
        query = _str(item.get("query"))
        return ToolCall(key=key, name="web search", summary=_line(query), detail=query)
    return None


# --- Small readers of JSON --------------------------------------------------------------------


def _event(line: str) -> Event | None:
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _obj(value: object) -> Event:
    return value if isinstance(value, dict) else {}


def _str(value: object) -> str:
    if isinstance(value, str):
        return value
    return "" if value is None or isinstance(value, dict | list) else str(value)


def _output(content: object) -> str:
    """Return a tool result's content as text: a string, or its blocks of text."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in map(_obj, content):
        parts.append(_str(block.get("text")) if block.get("type") == "text" else "[image]")
    return "\n".join(parts)


def _summary(given: Event) -> str:
    """Return what a tool call acted on: its command, file, URL or pattern, else its input."""
    target = next((text for key in _TARGETS if (text := _str(given.get(key)))), None)
    return _line(
        target if target is not None else json.dumps(given, ensure_ascii=False) if given else ""
    )


def _line(text: str) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= SUMMARY_CHARS else flat[: SUMMARY_CHARS - 1] + "…"
