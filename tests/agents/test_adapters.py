"""The claude, codex and aider adapters: recorded transcripts replayed through fake CLIs."""

from __future__ import annotations

import json
import re
import stat
import sys
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.agents import AgentConfigError, aider, build_adapter, claude, codex
from bot.agents.base import FORBIDDEN_ENV
from bot.agents.jail import Jail
from bot.agents.resets import (
    after_reset,
    claude_reset,
    codex_reset,
    duration,
    from_epoch,
    resolve_wall_clock,
    zone_named,
)
from bot.agents.stream import Reader, Reading
from bot.domain.model import AgentResult
from tests.agents.test_command import SECRETS, request_for

TRANSCRIPTS = Path(__file__).parents[1] / "fixtures" / "agent-transcripts"
EXPECTED: list[dict[str, Any]] = json.loads((TRANSCRIPTS / "expected.json").read_text())[
    "transcripts"
]
OBSERVED = datetime(2026, 9, 14, 3, 12, 40, tzinfo=UTC)
READERS: dict[str, Reader] = {"claude": claude.read, "codex": codex.read, "aider": aider.read}
BRIEF_MARKER = "do the thing"  # in the brief request_for writes: issue text


def at(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def fake_cli(tmp_path: Path, stdout: bytes, exit_code: int = 0, *, then_sleep: float = 0) -> Path:
    """Write a fake agent CLI: it records what it was given, prints stdout as is, and exits."""
    (tmp_path / "stdout.bin").write_bytes(stdout)
    script = tmp_path / "fake-cli"
    script.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys, time\n"
        "stdin = sys.stdin.read()\n"
        f"seen = {{'argv': sys.argv[1:], 'env': dict(os.environ), 'stdin': stdin}}\n"
        f"open({str(tmp_path / 'seen.json')!r}, 'w').write(json.dumps(seen))\n"
        f"sys.stdout.buffer.write(open({str(tmp_path / 'stdout.bin')!r}, 'rb').read())\n"
        "sys.stdout.flush()\n"
        f"time.sleep({then_sleep})\n"
        f"sys.exit({exit_code})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def seen(tmp_path: Path) -> dict[str, Any]:
    """Return what the fake CLI was given: argv, environment, stdin."""
    data: dict[str, Any] = json.loads((tmp_path / "seen.json").read_text())
    return data


def clock() -> datetime:
    return OBSERVED


def jsonl(*events: dict[str, Any]) -> str:
    return "".join(json.dumps(event) + "\n" for event in events)


# --- every recorded transcript, replayed through the adapter's real run() ---------------


def test_every_transcript_has_an_expectation() -> None:
    files = {path.name for path in TRANSCRIPTS.iterdir()} - {"expected.json"}
    assert files == {case["file"] for case in EXPECTED}


@pytest.mark.parametrize("case", EXPECTED, ids=[case["file"] for case in EXPECTED])
async def test_transcript_replays_to_its_expected_result(
    tmp_path: Path, case: dict[str, Any]
) -> None:
    fixture = (TRANSCRIPTS / case["file"]).read_bytes()
    binary = fake_cli(tmp_path, fixture, case["exit_code"])
    options = {k: v for k, v in case["invocation"].items() if k == "max_turns"}
    adapter = build_adapter(case["agent"], binary=str(binary), clock=clock, **options)
    request = request_for(tmp_path)

    result = await adapter.run(request)

    assert request.transcript_path.read_bytes() == fixture  # captured as received
    env = seen(tmp_path)["env"]
    assert env["TZ"] == case["child_tz"]
    assert case["invocation"].get("env", {}).items() <= env.items()
    assert result.agent == case["agent"] and result.exit_code == case["exit_code"]
    assert (result.status == "success") == (result.stop_reason == "completed")
    reading = READERS[case["agent"]](
        request.transcript_path.read_text(), result.exit_code, OBSERVED, zone_named(env["TZ"])
    )
    for field, expected in case["expect"].items():
        check_field(field, expected, result, reading)


def check_field(field: str, expected: Any, result: AgentResult, reading: Reading) -> None:
    if field == "note":
        return
    if field == "resets_at":
        assert result.resets_at == (at(expected) if expected else None)
    elif field == "cost_usd":
        assert result.cost_usd == (pytest.approx(expected) if expected is not None else None)
    elif field == "result_text_startswith":
        assert result.result_text is not None and result.result_text.startswith(expected)
    elif field == "evidence_contains":
        assert any(expected in line for line in result.evidence), result.evidence
    elif field in ("reset_source", "limit_kind", "tokens", "parse_failures"):
        # Not AgentResult fields: the adapter's reading of the same captured transcript.
        assert getattr(reading, field) == expected, field
    else:
        assert getattr(result, field) == expected, field


# --- generated cases ------------------------------------------------------------------------

CLAUDE_TEXT = (TRANSCRIPTS / "claude-usage-limit-text.jsonl").read_text()
CLAUDE_LIMIT = "You've hit your session limit · resets 7am (America/New_York)"


@pytest.mark.parametrize(
    ("text", "stop_reason", "resets_at"),
    [
        (
            "You've hit your session limit · resets 7am (UTC)",
            "provider_window",
            "2026-09-14T07:00Z",
        ),
        (CLAUDE_LIMIT, "provider_window", "2026-09-14T11:00Z"),
        # Observed at 03:12: a five-hour window cannot reopen at 2am tomorrow, 23 hours off.
        ("5-hour limit reached ∙ resets 2am", "provider_credit", None),
        ("5-hour limit reached ∙ resets 3am", "provider_window", "2026-09-14T03:12:40Z"),
        (
            "You've hit your limit · resets 4pm (Asia/Kuala_Lumpur)",
            "provider_window",
            "2026-09-14T08:00Z",
        ),
        (
            "You've hit your session limit · resets 12:50am (America/Los_Angeles)",
            "provider_window",
            "2026-09-14T07:50Z",
        ),
        (
            "You've hit your weekly limit · resets Sep 15 at 7pm",
            "provider_window",
            "2026-09-15T19:00Z",
        ),
        (
            "You've hit your weekly limit · resets Mon 12:00am",
            "provider_window",
            "2026-09-21T00:00Z",
        ),
        (
            "Claude usage limit reached. Your limit will reset at 3pm (America/Bogota).",
            "provider_window",
            "2026-09-14T20:00Z",
        ),
        ("Claude AI usage limit reached|1789369200", "provider_window", "2026-09-14T07:00Z"),
        # Too far off to wait for, no reset at all, or a zone that cannot be trusted: escalate.
        ("Opus weekly limit reached ∙ resets Oct 31, 9am", "provider_credit", None),
        ("Weekly limit reached · resets Dec 2, 7pm (Europe/Moscow) ·", "provider_credit", None),
        ("You've hit your limit · resets Apr 23 at 4pm (America/Recife)", "provider_credit", None),
        ("You've hit your session limit · resets 4am (Nowhere/Zone)", "provider_credit", None),
        ("You've hit your Opus limit", "provider_credit", None),
        ("Claude AI usage limit reached|1700000000", "provider_credit", None),  # long past
        # Not a usage limit at all.
        ("You've hit your context limit. Start a new session.", "cli_error", None),
    ],
)
def test_every_claude_limit_text_variant(
    text: str, stop_reason: str, resets_at: str | None
) -> None:
    old, new = (json.dumps(t, ensure_ascii=False)[1:-1] for t in (CLAUDE_LIMIT, text))
    transcript = CLAUDE_TEXT.replace(old, new)
    assert new in transcript
    reading = claude.read(transcript, 1, OBSERVED, UTC)
    assert reading.stop_reason == stop_reason
    assert reading.resets_at == (at(resets_at) if resets_at else None)


CLAUDE_SUCCESS = (TRANSCRIPTS / "claude-success.jsonl").read_text()
INTERRUPTED = {
    "type": "user",
    "message": {
        "role": "user",
        "content": [{"type": "text", "text": "[Request interrupted by user]"}],
    },
}


@pytest.mark.parametrize(
    ("stdout", "exit_code"),
    [
        ("".join(CLAUDE_SUCCESS.splitlines(keepends=True)[:-1]), 0),  # result line lost
        ("".join(CLAUDE_SUCCESS.splitlines(keepends=True)[:-1]) + jsonl(INTERRUPTED), 0),  # SIGINT
        ("", 0),
        ("Error: When using --print, --output-format=stream-json requires --verbose\n", 1),
    ],
    ids=["no-result-line", "sigint-exit-0", "silent", "usage-error"],
)
async def test_claude_without_a_result_line_is_never_a_success(
    tmp_path: Path, stdout: str, exit_code: int
) -> None:
    binary = fake_cli(tmp_path, stdout.encode(), exit_code)
    result = await claude.ClaudeAdapter(str(binary), clock=clock).run(request_for(tmp_path))
    assert (result.status, result.stop_reason, result.failure_class) == (
        "failed",
        "no_result",
        "agent-error",
    )
    assert result.evidence


async def test_a_stream_baton_kills_at_its_deadline_is_wall_clock(tmp_path: Path) -> None:
    head = "".join(CLAUDE_SUCCESS.splitlines(keepends=True)[:3])
    binary = fake_cli(tmp_path, head.encode(), 0, then_sleep=30)
    result = await claude.ClaudeAdapter(str(binary), clock=clock).run(
        request_for(tmp_path, seconds=1)
    )
    assert (result.status, result.stop_reason, result.failure_class) == (
        "failed",
        "wall_clock",
        "wall-clock-cap",
    )
    assert result.session_id == "3f6c1a2e-8b4d-4e7a-9c15-2d7e6b0a4f91"  # kept for a continuation


def codex_tool_item(n: int) -> dict[str, Any]:
    return {
        "type": "item.completed",
        "item": {
            "id": f"item_{n}",
            "type": "command_execution",
            "command": "ls",
            "status": "completed",
        },
    }


async def test_codex_is_stopped_live_past_its_turn_cap(tmp_path: Path) -> None:
    stdout = jsonl({"type": "thread.started", "thread_id": "t-1"}, *map(codex_tool_item, range(3)))
    binary = fake_cli(tmp_path, stdout.encode(), 0, then_sleep=30)
    request = request_for(tmp_path)
    result = await codex.CodexAdapter(str(binary), max_turns=2, clock=clock).run(request)
    assert (result.status, result.stop_reason, result.failure_class) == (
        "failed",
        "max_turns",
        "turn-cap",
    )
    assert "turn.completed" not in request.transcript_path.read_text()


def test_codex_same_day_reset_is_read_in_the_childs_zone() -> None:
    message = "You've hit your usage limit. Upgrade to Plus to continue, or try again at 7:04 AM."
    transcript = jsonl(
        {"type": "thread.started", "thread_id": "t-2"},
        {"type": "error", "message": message},
        {"type": "turn.failed", "error": {"message": message}},
    )
    reading = codex.read(transcript, 1, OBSERVED, UTC)
    assert (reading.stop_reason, reading.resets_at, reading.reset_source) == (
        "provider_window",
        at("2026-09-14T07:04Z"),
        "text-clock",
    )
    in_new_york = codex.read(transcript, 1, OBSERVED, zone_named("America/New_York"))
    assert in_new_york.resets_at == at("2026-09-14T11:04Z")  # 7:04 EDT, the next one


def rate_limit(info: dict[str, Any]) -> dict[str, Any]:
    return {"type": "rate_limit_event", "rate_limit_info": info}


def claude_failure(*events: dict[str, Any], **result: Any) -> str:
    """Return a Claude transcript that ends in an is_error result after the given events."""
    init = {"type": "system", "subtype": "init", "session_id": "s-1"}
    final = {"type": "result", "subtype": "success", "is_error": True, "num_turns": 1, **result}
    return jsonl(init, *events, final)


FUTURE = int(at("2026-09-14T07:00Z").timestamp())


@pytest.mark.parametrize(
    ("transcript", "stop_reason", "resets_at"),
    [
        (
            claude_failure(
                rate_limit(
                    {
                        "status": "rejected",
                        "unifiedWindows": {
                            "five_hour": {"utilization": 1.0, "resetsAt": FUTURE},
                            "seven_day": {"utilization": 0.4, "resetsAt": FUTURE + 86400},
                        },
                    }
                )
            ),
            "provider_window",
            "2026-09-14T07:00Z",
        ),
        (
            claude_failure(
                rate_limit(
                    {"status": "rejected", "rateLimitType": "five_hour", "resetsAt": FUTURE * 1000}
                )
            ),
            "provider_window",
            "2026-09-14T07:00Z",
        ),
        (
            claude_failure(
                rate_limit({"status": "rejected", "rateLimitType": "overage", "resetsAt": FUTURE})
            ),
            "provider_credit",
            None,
        ),
        (
            claude_failure(
                rate_limit(
                    {
                        "status": "rejected",
                        "rateLimitType": "five_hour",
                        "resetsAt": FUTURE,
                        "errorCode": "credits_required",
                    }
                )
            ),
            "provider_credit",
            None,
        ),
        (
            claude_failure(
                rate_limit(
                    {"status": "rejected", "rateLimitType": "five_hour", "resetsAt": 1700000000}
                )
            ),
            "provider_credit",
            None,
        ),
        (
            claude_failure(
                rate_limit(
                    {"status": "allowed_warning", "rateLimitType": "five_hour", "resetsAt": FUTURE}
                ),
                result="API Error: 529 Overloaded. This is a server-side issue, usually temporary.",
                api_error_status=529,
            ),
            "provider_transient",
            None,
        ),
        (
            claude_failure(result="API Error: Stream idle timeout - no chunks received"),
            "provider_transient",
            None,
        ),
        (claude_failure(result="API Error: Rate limit reached"), "provider_transient", None),
        (
            claude_failure(
                {
                    "type": "assistant",
                    "error": "authentication_failed",
                    "message": {"model": "<synthetic>"},
                },
                result="Invalid API key · Please run /login",
                api_error_status=401,
            ),
            "auth",
            None,
        ),
        (
            claude_failure(
                subtype="error_during_execution",
                errors=["No conversation found with session ID: 5b7e9d1c"],
            ),
            "resume_miss",
            None,
        ),
        (
            claude_failure(
                subtype="error_max_budget_usd", errors=["Reached maximum budget ($0.5)"]
            ),
            "max_budget",
            None,
        ),
        (
            claude_failure(subtype="error_during_execution", terminal_reason="aborted_tools"),
            "cancelled",
            None,
        ),
    ],
    ids=[
        "unified-windows",
        "resets-at-in-ms",
        "overage-is-credit",
        "credits-required",
        "stale-window",
        "overloaded",
        "stream-idle",
        "rate-limit-reached-is-a-throttle",
        "auth",
        "resume-miss",
        "budget",
        "aborted",
    ],
)
def test_claude_failure_shapes(transcript: str, stop_reason: str, resets_at: str | None) -> None:
    reading = claude.read(transcript, 1, OBSERVED, UTC)
    assert reading.stop_reason == stop_reason
    assert reading.resets_at == (at(resets_at) if resets_at else None)


def tool_round_trip(text: str) -> list[dict[str, Any]]:
    """Return a model turn whose tool output (the agent's world, not the CLI's) says text."""
    return [
        {"type": "assistant", "message": {"id": "m1", "model": "claude-sonnet", "content": []}},
        {"type": "user", "message": {"content": [{"type": "tool_result", "content": text}]}},
    ]


def test_limit_texts_in_tool_output_are_not_provider_evidence() -> None:
    said = tool_round_trip(
        "You've hit your session limit · resets 7am (UTC); Credit balance too low"
    )
    failed = claude.read(claude_failure(*said, subtype="error_during_execution"), 1, OBSERVED, UTC)
    assert (failed.stop_reason, failed.resets_at) == ("cli_error", None)


def test_a_rejected_window_does_not_undo_a_success() -> None:
    rejected = rate_limit({"status": "rejected", "rateLimitType": "five_hour", "resetsAt": FUTURE})
    success = CLAUDE_SUCCESS.replace("\n", "\n" + json.dumps(rejected) + "\n", 1)
    assert claude.read(success, 0, OBSERVED, UTC).stop_reason == "completed"
    # ...but a clean result is no success when the CLI itself exited non-zero.
    assert claude.read(CLAUDE_SUCCESS, 1, OBSERVED, UTC).stop_reason == "cli_error"


CODEX_SUCCESS = (TRANSCRIPTS / "codex-success.jsonl").read_text()


@pytest.mark.parametrize(
    ("transcript", "exit_code", "stop_reason"),
    [
        ("".join(CODEX_SUCCESS.splitlines(keepends=True)[:-1]), 0, "no_result"),
        (CODEX_SUCCESS, 1, "cli_error"),
        (
            CODEX_SUCCESS.replace(
                '{"type":"turn.completed"',
                '{"type":"error","message":"stream disconnected before completion: eof"}\n'
                '{"type":"turn.completed"',
            ),
            1,
            "provider_transient",
        ),
        (
            jsonl(
                {
                    "type": "turn.failed",
                    "error": {"message": "You've hit your usage limit. Try again later."},
                }
            ),
            1,
            "provider_credit",
        ),
        (
            jsonl(
                {"type": "turn.failed", "error": {"message": "Your workspace is out of credits."}}
            ),
            1,
            "provider_credit",
        ),
        (
            jsonl(
                {
                    "type": "turn.failed",
                    "error": {
                        "message": "exceeded retry limit, last status: 429 Too Many Requests"
                    },
                }
            ),
            1,
            "provider_transient",
        ),
        (
            jsonl(
                {"type": "turn.failed", "error": {"message": "unexpected status 401 Unauthorized"}}
            ),
            1,
            "auth",
        ),
        (jsonl({"type": "turn.failed", "error": {}}), 1, "cli_error"),
    ],
    ids=[
        "no-terminal-event",
        "completed-but-exit-1",
        "fatal-error-is-sticky",
        "limit-without-time",
        "out-of-credits",
        "retry-limit",
        "auth",
        "bare-failure",
    ],
)
def test_codex_failure_shapes(transcript: str, exit_code: int, stop_reason: str) -> None:
    assert codex.read(transcript, exit_code, OBSERVED, UTC).stop_reason == stop_reason


AIDER_HEADER = "Aider v0.86.1\nMain model: anthropic/claude-sonnet-4-5 with diff edit format\n"
AIDER_RATE_LIMIT = (TRANSCRIPTS / "aider-rate-limit.txt").read_text()


@pytest.mark.parametrize(
    ("output", "exit_code", "stop_reason", "cost_usd"),
    [
        (
            AIDER_HEADER
            + "Applied edit to src/widgets/pager.py\n"
            + "Tokens: 12k sent, 1.2k received. Cost: $0.05 message, $0.11 session.\n",
            0,
            "completed",
            0.11,
        ),
        (
            AIDER_RATE_LIMIT
            + "Retrying in 0.2 seconds...\n"
            + "Applied edit to src/a.py\nTokens: 1k sent, 90 received.\n",
            0,
            "completed",
            None,
        ),
        (
            AIDER_HEADER
            + "litellm.RateLimitError: OpenAIException - insufficient_quota\n"
            + "The API provider has rate limited you. Try again later or check your quotas.\n",
            0,
            "provider_credit",
            None,
        ),
        (
            AIDER_HEADER
            + "litellm.AuthenticationError: AnthropicException - invalid x-api-key\n"
            + "The API provider is not able to authenticate you. Check your API key.\n",
            0,
            "auth",
            None,
        ),
        ("Error: Unable to read message file brief.md\n", 1, "cli_error", None),
        ("", 0, "no_result", None),
    ],
    ids=["edited", "recovered-after-retries", "quota", "auth", "startup-error", "silent"],
)
def test_aider_outcomes(
    output: str, exit_code: int, stop_reason: str, cost_usd: float | None
) -> None:
    reading = aider.read(output, exit_code, OBSERVED, UTC)
    assert (reading.stop_reason, reading.cost_usd) == (stop_reason, cost_usd)


GARBAGE = [
    "",
    "\x00\ufffd\n\n",
    "null\n[1, 2]\n42\n",
    jsonl({"type": "result"}),
    jsonl({"type": "result", "subtype": "success", "is_error": "false", "num_turns": "x"}),
    jsonl(
        {"type": "result", "subtype": [], "errors": "x", "session_id": 7, "total_cost_usd": True}
    ),
    jsonl(
        {"type": "rate_limit_event", "rate_limit_info": []},
        {"type": "rate_limit_event", "status": "rejected"},
    ),
    jsonl(rate_limit({"status": "rejected", "rateLimitType": "five_hour", "resetsAt": 1e300})),
    jsonl(
        {"type": "assistant", "message": "x", "error": ["a"]},
        {"type": "assistant", "message": {"content": "x", "model": "<synthetic>"}},
    ),
    jsonl({"type": "thread.started", "thread_id": ["x"]}, {"type": "item.completed", "item": None}),
    jsonl({"type": "turn.failed", "error": "x"}, {"type": "turn.completed", "usage": {"x": "y"}}),
    jsonl(
        {"type": "error", "message": "You've hit your usage limit. try again at Feb 30th, 2026."}
    ),
    "litellm.\nThe API provider\n",
    '{"type": "result", "subtype": "success", "is_error": false',
]


@pytest.mark.parametrize("agent", sorted(READERS))
@pytest.mark.parametrize("text", GARBAGE)
def test_unknown_or_broken_output_fails_closed_and_never_raises(agent: str, text: str) -> None:
    reading = READERS[agent](text, 0, OBSERVED, UTC)
    assert reading.stop_reason != "completed"
    assert reading.stop_reason != "provider_window" or reading.resets_at is not None


# --- how each CLI is started --------------------------------------------------------------

ADAPTERS: dict[str, Callable[..., Any]] = {
    "claude": claude.ClaudeAdapter,
    "codex": codex.CodexAdapter,
    "aider": aider.AiderAdapter,
}


@pytest.mark.parametrize("agent", sorted(ADAPTERS))
def test_no_issue_text_reaches_argv(tmp_path: Path, agent: str) -> None:
    request = request_for(tmp_path)
    argv = ADAPTERS[agent](model="sonnet").argv(request)
    assert argv[0] == agent
    assert not [arg for arg in argv if BRIEF_MARKER in arg or "octo/widgets#3" in arg]
    assert argv[argv.index("--model") + 1] == "sonnet"


def test_claude_argv_asks_for_stream_json_and_the_turn_cap(tmp_path: Path) -> None:
    argv = claude.ClaudeAdapter(max_turns=7, extra_flags=("--allowedTools", "Read")).argv(
        request_for(tmp_path)
    )
    assert argv[:2] == ["claude", "-p"]
    assert {"--verbose", "--strict-mcp-config"} <= set(argv)
    assert argv[argv.index("--output-format") + 1] == "stream-json"
    assert argv[argv.index("--max-turns") + 1] == "7"
    assert argv[-2:] == ["--allowedTools", "Read"]


def test_claude_may_use_every_tool_in_the_jail_and_edits_and_shell_outside_it(
    tmp_path: Path,
) -> None:
    def permissions(argv: list[str]) -> list[str]:
        at = argv.index("--permission-mode")
        return argv[at : at + 4]

    outside = claude.ClaudeAdapter().argv(request_for(tmp_path))  # BATON_AGENT_SANDBOX=off
    assert permissions(outside) == ["--permission-mode", "acceptEdits", "--allowedTools", "Bash"]
    jail = Jail(tmp_path, tmp_path, tmp_path, tmp_path, system=())
    inside = claude.ClaudeAdapter().argv(replace(request_for(tmp_path), jail=jail))
    assert permissions(inside)[:3] == ["--permission-mode", "bypassPermissions", "--settings"]
    assert json.loads(permissions(inside)[3]) == {"sandbox": {"enabled": False}}
    chosen = claude.ClaudeAdapter(permission_mode="plan").argv(
        replace(request_for(tmp_path), jail=jail)
    )
    assert permissions(chosen)[:2] == ["--permission-mode", "plan"]


def test_codex_and_aider_argv_take_the_brief_from_stdin_or_a_file(tmp_path: Path) -> None:
    request = request_for(tmp_path)
    codex_argv = codex.CodexAdapter().argv(request)
    assert codex_argv[:3] == ["codex", "exec", "--json"] and codex_argv[-1] == "-"
    assert codex_argv[codex_argv.index("--cd") + 1] == str(request.worktree)
    aider_argv = aider.AiderAdapter().argv(request)
    assert aider_argv[aider_argv.index("--message-file") + 1] == str(request.brief_path)
    # Not --yes-always: under it aider refuses every shell command its model proposes.
    assert "--yes-always" not in aider_argv


@pytest.mark.parametrize("agent", ["claude", "codex"])
async def test_brief_arrives_on_stdin(tmp_path: Path, agent: str) -> None:
    binary = fake_cli(tmp_path, b"", 0)
    request = request_for(tmp_path)
    await ADAPTERS[agent](str(binary), clock=clock).run(request)
    assert seen(tmp_path)["stdin"] == request.brief_path.read_text()


async def test_claude_resumes_only_a_session_stored_for_this_worktree(tmp_path: Path) -> None:
    session = "5b7e9d1c-2a4f-4c6e-8d0b-1f3a5c7e9b20"
    binary = fake_cli(tmp_path, b"", 0)
    request = request_for(tmp_path, resume_session_id=session)
    adapter = claude.ClaudeAdapter(str(binary), clock=clock)

    await adapter.run(request)
    assert not [arg for arg in seen(tmp_path)["argv"] if arg.startswith("--resume")]

    project = re.sub(r"[^A-Za-z0-9]", "-", str(request.worktree.resolve()))  # Claude's own rule
    stored = request.home / "claude" / "projects" / project / f"{session}.jsonl"
    stored.parent.mkdir(parents=True)
    stored.write_text("{}\n")
    await adapter.run(request)
    assert f"--resume={session}" in seen(tmp_path)["argv"]


async def test_codex_resumes_a_thread_with_a_local_rollout(tmp_path: Path) -> None:
    thread = "0199b8e2-4c6a-7d10-9e3f-5a7c9e1b3d50"
    binary = fake_cli(tmp_path, b"", 0)
    request = request_for(tmp_path, resume_session_id=thread)
    rollout = (
        request.home / "codex" / "sessions" / "2026" / "09" / "14" / f"rollout-x-{thread}.jsonl"
    )
    rollout.parent.mkdir(parents=True)
    rollout.write_text("{}\n")
    await codex.CodexAdapter(str(binary), clock=clock).run(request)
    assert seen(tmp_path)["argv"][-3:] == ["resume", thread, "-"]


@pytest.mark.parametrize("session", ["--dangerously-skip-permissions", "../../etc/passwd", "a b"])
def test_a_session_id_that_is_not_one_never_reaches_argv(tmp_path: Path, session: str) -> None:
    request = request_for(tmp_path, resume_session_id=session)
    for adapter in (claude.ClaudeAdapter(), codex.CodexAdapter()):
        assert not [arg for arg in adapter.argv(request) if session in arg]


@pytest.mark.parametrize("agent", ["claude", "codex"])
async def test_agent_environment_holds_no_github_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, agent: str
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CLAUDECODE", "1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-provider")
    binary = fake_cli(tmp_path, b"", 0)
    request = request_for(
        tmp_path,
        passthrough_env=("ANTHROPIC_API_KEY", "CLAUDECODE", *SECRETS),
        extra_env={"GITHUB_TOKEN": "x"},
    )
    await ADAPTERS[agent](str(binary), clock=clock).run(request)
    env = seen(tmp_path)["env"]
    assert not set(env) & FORBIDDEN_ENV
    assert not [v for v in env.values() for secret in SECRETS.values() if secret in v]
    assert env["ANTHROPIC_API_KEY"] == "sk-provider"  # what the operator passes through
    assert (env["TZ"], env["HOME"]) == ("UTC", str(request.home))
    if agent == "claude":
        assert "CLAUDECODE" not in env
        assert env["CLAUDE_CONFIG_DIR"] == str(request.home / "claude")
        assert (env["CLAUDE_CODE_MAX_RETRIES"], env["DISABLE_AUTOUPDATER"]) == ("3", "1")
        assert env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == env["DISABLE_TELEMETRY"] == "1"
    else:
        assert Path(env["CODEX_HOME"]).is_dir()


async def test_a_cli_that_is_not_installed_is_an_env_start_failure(tmp_path: Path) -> None:
    adapter = claude.ClaudeAdapter(str(tmp_path / "no-such-claude"))
    result = await adapter.run(request_for(tmp_path))
    assert (result.status, result.stop_reason, result.failure_class) == (
        "failed",
        "cli_missing",
        "env-start-failure",
    )


def test_build_adapter_refuses_unknown_agents_and_options() -> None:
    assert build_adapter("codex", model="gpt-5.1-codex").name == "codex"
    assert build_adapter("command", command="true").name == "command"
    with pytest.raises(AgentConfigError, match="gemini"):
        build_adapter("gemini")
    with pytest.raises(AgentConfigError, match="max_turns"):
        build_adapter("aider", max_turns=3)


# --- reset times ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("You've hit your session limit · resets 7am (UTC)", "2026-09-14T07:00Z"),
        ("You've hit your session limit · resets 7am (America/New_York)", "2026-09-14T11:00Z"),
        ("5-hour limit reached ∙ resets 2am", "2026-09-15T02:00Z"),
        ("5-hour limit reached ∙ resets 3am", "2026-09-14T03:12:40Z"),  # just passed: now
        ("You've hit your limit · resets 4pm (Asia/Kuala_Lumpur)", "2026-09-14T08:00Z"),
        ("… · resets Apr 23 at 4pm (America/Recife)", "2027-04-23T19:00Z"),
        ("Opus weekly limit reached ∙ resets Oct 31, 9am", "2026-10-31T09:00Z"),
        ("Weekly limit reached · resets Dec 2, 7pm (Europe/Moscow) ·", "2026-12-02T16:00Z"),
        ("You've hit your weekly limit · resets Mon 12:00am", "2026-09-21T00:00Z"),
        ("Your limit will reset at 3pm (America/Bogota).", "2026-09-14T20:00Z"),
        ("Claude AI usage limit reached|1789369200", "2026-09-14T07:00Z"),
        ("Claude AI usage limit reached|1789369200000|five_hour", "2026-09-14T07:00Z"),
        ("You've hit your limit · resets 12pm", "2026-09-14T12:00Z"),
        ("You've hit your limit · resets 12am", "2026-09-15T00:00Z"),
        ("You've hit your limit · resets 4am (Nowhere/Zone)", None),
        ("You've hit your limit · resets whenever", None),
        ("You've hit your limit", None),
    ],
)
def test_claude_reset_texts(text: str, expected: str | None) -> None:
    found = claude_reset(text, OBSERVED, UTC)
    assert (found[0] if found else None) == (at(expected) if expected else None)


def test_a_wall_clock_reset_without_a_zone_is_read_in_the_childs_zone() -> None:
    found = claude_reset("5-hour limit reached ∙ resets 2am", OBSERVED, zone_named("Europe/Berlin"))
    assert found == (at("2026-09-15T00:00Z"), "text-clock")  # 02:00 CEST
    assert claude_reset("5-hour limit reached ∙ resets 2am", OBSERVED, None) is None


@pytest.mark.parametrize(
    ("text", "expected", "source"),
    [
        ("… or try again at Sep 15th, 2026 7:04 AM.", "2026-09-15T07:04Z", "text-datetime"),
        ("… or try again at Oct 1st, 2026 12:30 PM.", "2026-10-01T12:30Z", "text-datetime"),
        ("… try again at 7:04 AM.", "2026-09-14T07:04Z", "text-clock"),
        ("… try again at 3:04 AM.", "2026-09-14T03:12:40Z", "text-clock"),
        ("… try again at 1:04 AM.", "2026-09-15T01:04Z", "text-clock"),
    ],
)
def test_codex_reset_texts(text: str, expected: str, source: str) -> None:
    assert codex_reset(text, OBSERVED, UTC) == (at(expected), source)


@pytest.mark.parametrize(
    "text",
    [
        "Try again later.",
        "try again at Sep 13th, 2026 7:04 AM.",
        "try again at Feb 30th, 2026 1:00 PM.",
    ],
)
def test_codex_reset_texts_without_a_usable_time(text: str) -> None:
    assert codex_reset(text, OBSERVED, UTC) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1h49m8s", timedelta(hours=1, minutes=49, seconds=8)),
        ("45m", timedelta(minutes=45)),
        ("12.5s", timedelta(seconds=12.5)),
        ("2h", timedelta(hours=2)),
        ("soon", None),
        ("", None),
        ("150ms", None),
    ],
)
def test_durations(text: str, expected: timedelta | None) -> None:
    assert duration(text) == expected


def test_a_relative_reset_counts_from_the_observation() -> None:
    text = "You have exhausted your capacity on this model. Your quota will reset after 1h49m8s."
    assert after_reset(text, OBSERVED) == at("2026-09-14T05:01:48Z")
    assert after_reset("Your quota will reset soon.", OBSERVED) is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1789369200, "2026-09-14T07:00Z"),
        (1789369200000, "2026-09-14T07:00Z"),
        (1789369200.5, "2026-09-14T07:00:00.5Z"),
        (1789354800, "2026-09-14T03:12:40Z"),  # 03:00, inside the grace: now
        (1700000000, None),
        (0, None),
        (-5, None),
        (True, None),
        ("1789369200", None),
        (float("nan"), None),
        (1e300, None),
    ],
)
def test_epochs(value: object, expected: str | None) -> None:
    assert from_epoch(value, OBSERVED) == (at(expected) if expected else None)


def test_a_wall_time_in_a_dst_gap_still_resolves() -> None:
    spring_forward = datetime(2027, 3, 14, 5, 0, tzinfo=UTC)  # 01:00 EST, an hour before the gap
    found = resolve_wall_clock("2:30am", zone_named("America/New_York"), spring_forward)
    assert found is not None and found >= spring_forward


def test_zone_names() -> None:
    assert zone_named("America/New_York") is not None
    assert str(zone_named(":UTC")) == "UTC"
    assert zone_named("Nowhere/Zone") is None
    assert zone_named(None, UTC) is UTC
