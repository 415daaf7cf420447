"""Transcripts: what Baton keeps of one (masked, its end) and the view of it; pure, no I/O."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.domain.model import AgentResult, IssueRef, Run, RunState
from bot.domain.transcript import (
    MASK,
    Entry,
    Message,
    Notice,
    NoTranscript,
    Reasoning,
    Text,
    ToolCall,
    chosen_run,
    counts,
    cut_note,
    issue_named,
    kept_transcript,
    masked,
    missing_reason,
    view_of,
)
from bot.ops.logs import redact

TRANSCRIPTS = Path(__file__).parents[1] / "fixtures" / "agent-transcripts"
NOW = datetime(2026, 12, 1, 7, tzinfo=UTC)
ISSUE = IssueRef(installation_id=1, repo="octo/widgets", number=12)
GITHUB_TOKEN = "ghs_" + "A1b2C3d4" * 5
ANTHROPIC_KEY = "sk-ant-api03-" + "x9Y8z7W6" * 8
OPENAI_KEY = "sk-proj-" + "Q1w2E3r4" * 6


# --- Masking -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("said", "kept"),
    [
        (f"export ANTHROPIC_API_KEY={ANTHROPIC_KEY}", f"export ANTHROPIC_API_KEY={MASK}"),
        (f"key: {OPENAI_KEY} ok", f"key: {MASK} ok"),
        ("sk-or-v1-" + "f" * 48, MASK),
        (
            "curl -H 'Authorization: Bearer abc.def-ghi_jkl~mno' x",
            f"curl -H 'Authorization: Bearer {MASK}' x",
        ),
        ('{"authorization": "Basic dXNlcjpwYXNz"}', f'{{"authorization": "Basic {MASK}"}}'),
        ("x-api-key: 0123456789abcdef", f"x-api-key: {MASK}"),
        ('"OPENAI_API_KEY": "hunter2hunter2"', f'"OPENAI_API_KEY": "{MASK}"'),
        ("DB_PASSWORD=swordfish make test", f"DB_PASSWORD={MASK} make test"),
        ("AIza" + "B" * 35, MASK),
        ("aws AKIAABCDEFGHIJKLMNOP here", f"aws {MASK} here"),
        # What only looks like one is left as it was.
        ('"input_tokens":4,"max_tokens":100', '"input_tokens":4,"max_tokens":100'),
        ("ask-me-anything sk-short", "ask-me-anything sk-short"),
        ("the bearer of bad news", "the bearer of bad news"),
        ("MAX_TOKENS=5", "MAX_TOKENS=5"),
    ],
)
def test_providers_keys_bearer_tokens_and_named_secrets_are_masked(said: str, kept: str) -> None:
    assert masked(said) == kept


@pytest.mark.parametrize(
    ("said", "hidden"),
    [
        (f"git push https://x-access-token:{GITHUB_TOKEN}@github.com/o/r", GITHUB_TOKEN),
        (f"GH_TOKEN={GITHUB_TOKEN}", GITHUB_TOKEN),
        ("pat github_pat_" + "Z" * 30, "github_pat_" + "Z" * 30),
        ("jwt eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOjF9.c2lnbmF0dXJl", "eyJpc3MiOjF9"),
        ("-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----", "MIIE"),
        (f'{{"type":"user","content":"{ANTHROPIC_KEY}"}}', ANTHROPIC_KEY),
        ("the secret is correct-horse-battery", "correct-horse-battery"),
    ],
)
def test_what_is_kept_masks_what_the_logs_mask_and_the_providers_keys(
    said: str, hidden: str
) -> None:
    kept = kept_transcript(said.encode(), lambda text: redact(text, ["correct-horse-battery"]))
    assert hidden not in kept and MASK in kept


def test_a_masked_stream_json_line_stays_json() -> None:
    line = json.dumps({"type": "user", "message": {"content": f"token {GITHUB_TOKEN}"}})
    assert json.loads(kept_transcript(line.encode(), redact))["message"]["content"] == (
        f"token {MASK}"
    )


# --- Capping -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "limit", "kept"),
    [
        (b"one\ntwo\n", 100, "one\ntwo\n"),
        (b"one\ntwo\n", 8, "one\ntwo\n"),
        # The end, from the first line that starts within it, under a line saying so.
        (b"first line\nsecond\nthird\n", 12, cut_note(18, 6) + "third\n"),
        (b"first line\nsecond\nthird\n", 13, cut_note(11, 13) + "second\nthird\n"),
        (b"first line\nsecond\nthird\n", 10, cut_note(18, 6) + "third\n"),
        # One long line: only its end can be kept.
        (b"x" * 30, 10, cut_note(20, 10) + "x" * 10),
        (b"0123456789\n", 5, cut_note(6, 5) + "6789\n"),
    ],
)
def test_only_the_end_is_kept_from_a_lines_start(data: bytes, limit: int, kept: str) -> None:
    assert kept_transcript(data, redact, limit) == kept


def test_a_token_cut_in_half_at_the_cut_is_not_kept() -> None:
    data = f"{GITHUB_TOKEN} leaked\nthen more\n".encode()
    kept = kept_transcript(data, redact, limit=len(data) - 5)
    assert kept == cut_note(len(GITHUB_TOKEN) + 8, 10) + "then more\n"


def test_the_note_says_how_much_was_cut() -> None:
    kept = kept_transcript(b"a" * 2048 + b"\nlast\n", redact, limit=1024)
    first, _, rest = kept.partition("\n")
    assert first == "[baton: the transcript's first 2049 bytes were cut; its last 5 are kept]"
    assert rest == "last\n"


# --- Which transcript ----------------------------------------------------------------------------


def test_an_issue_is_named_owner_repo_number() -> None:
    issue = issue_named("octo/widgets.js#12")
    assert (issue.repo, issue.number) == ("octo/widgets.js", 12)
    for name in ("octo/widgets", "octo#12", "octo/widgets#0", "octo/widgets#x", "a/b/c#1"):
        with pytest.raises(NoTranscript, match="OWNER/REPO#N"):
            issue_named(name)


def test_dot_names_are_no_repository() -> None:
    """GitHub refuses `.` and `..` as names; a path built from one would leave its folder."""
    for name in ("../x#1", "octo/..#1", "./.#1"):
        with pytest.raises(NoTranscript, match="OWNER/REPO#N"):
            issue_named(name)


def agent_result(ended: datetime) -> AgentResult:
    return AgentResult(
        agent="claude",
        status="failed",
        stop_reason="cli_error",
        started_at=ended - timedelta(minutes=5),
        ended_at=ended,
        transcript_path=Path("/data/runs/octo/widgets/12/1/transcript.log"),
        stderr_path=Path("/data/runs/octo/widgets/12/1/stderr.log"),
    )


def run(attempt: int, state: RunState = RunState.FAILED, **fields: Any) -> Run:
    claimed = Run.claimed(ISSUE, attempt, "baton/issue-12", NOW - timedelta(hours=1))
    return claimed.model_copy(update={"state": state, **fields})


def test_the_latest_attempt_is_chosen_unless_one_is_named() -> None:
    runs = [run(1), run(3), run(2)]
    assert chosen_run(ISSUE, runs, None).attempt == 3
    assert chosen_run(ISSUE, runs, 2).attempt == 2
    with pytest.raises(NoTranscript, match=r"^octo/widgets#12 has no attempt 4 .*: 1, 2, 3\)$"):
        chosen_run(ISSUE, runs, 4)
    with pytest.raises(NoTranscript, match=r"^Baton has no record of a run of octo/widgets#12$"):
        chosen_run(ISSUE, [], None)


@pytest.mark.parametrize(
    ("recorded", "why"),
    [
        (run(1, RunState.RUNNING), "attempt 1 is still running: its transcript is kept when"),
        (
            run(1, RunState.FAILED),
            "attempt 1 ended failed with no agent result: its agent never ran, or its worker",
        ),
        (
            run(1, agent_result=agent_result(NOW - timedelta(days=15))),
            "attempt 1's transcript has expired: transcripts are kept 14 days "
            "(BATON_TRANSCRIPT_DAYS), and its agent ended on 2026-11-16",
        ),
        (
            run(1, agent_result=agent_result(NOW - timedelta(days=1))),
            "no transcript of octo/widgets#12 attempt 1 is kept",
        ),
    ],
)
def test_a_missing_transcript_is_explained(recorded: Run, why: str) -> None:
    assert why in missing_reason(recorded, 14, NOW)


# --- The view of the CLIs' own output ------------------------------------------------------------


def shape(entry: Entry) -> str:
    """Return what kind of entry it is, in a word or two: what a reader would see first."""
    if isinstance(entry, ToolCall):
        marks = [mark for mark, on in (("failed", entry.failed), ("denied", entry.denied)) if on]
        return ":".join(["tool", entry.name, *marks])
    if isinstance(entry, Notice):
        return f"notice:{entry.tone}"
    if isinstance(entry, Message):
        return f"message:{entry.author}"
    return entry.kind


STARTED = "notice:info"
EXPECTED_SHAPES = {
    "claude-success.jsonl": [
        STARTED,
        "message:agent",
        "tool:Bash:failed",
        "tool:Read",
        "tool:Edit",
        "tool:Bash",
        "message:agent",
        "notice:info",
    ],
    "claude-max-turns.jsonl": [STARTED, *["tool:Bash"] * 4, "notice:error"],
    "claude-api-429.jsonl": [STARTED, *["notice:warning"] * 3, "notice:error", "notice:error"],
    "claude-credit.jsonl": [STARTED, "notice:error", "notice:error"],
    "claude-usage-limit.jsonl": [
        STARTED,
        "notice:warning",
        "tool:Bash",
        "notice:error",
        "notice:error",
        "notice:error",
    ],
    "claude-usage-limit-text.jsonl": [STARTED, "tool:Read", "notice:error", "notice:error"],
    # Cut mid-line: the cut line is shown as it is.
    "claude-truncated.jsonl": [STARTED, "tool:Bash", "text"],
    "codex-success.jsonl": [
        STARTED,
        "notice:warning",
        "reasoning",
        "tool:command",
        "tool:file change",
        "tool:command",
        "message:agent",
        "notice:info",
    ],
    "codex-rate-limit.jsonl": [STARTED, "notice:error", "notice:error"],
    "aider-rate-limit.txt": [
        "text",
        *["notice:error", "notice:error", "text"] * 8,
        *["notice:error"] * 2,
    ],
}


@pytest.mark.parametrize("name", sorted(EXPECTED_SHAPES))
def test_each_recorded_transcript_reads_as_what_its_agent_did(name: str) -> None:
    entries = view_of((TRANSCRIPTS / name).read_text())
    assert [shape(entry) for entry in entries] == EXPECTED_SHAPES[name]


def test_every_recorded_transcript_is_in_the_table() -> None:
    recorded = {path.name for path in TRANSCRIPTS.iterdir() if path.name != "expected.json"}
    assert recorded == set(EXPECTED_SHAPES)


def test_a_claude_tool_call_carries_its_input_and_its_output() -> None:
    entries = view_of((TRANSCRIPTS / "claude-success.jsonl").read_text())
    calls = [entry for entry in entries if isinstance(entry, ToolCall)]
    first = calls[0]
    assert (first.key, first.summary) == (
        "toolu_01SuccBash1",
        "python -m pytest tests/test_pager.py -q",
    )
    assert json.loads(first.detail)["description"] == "Run pager tests"
    assert first.output is not None and "1 failed, 1 passed" in first.output
    assert calls[2].summary.endswith("src/widgets/pager.py")
    assert entries[0] == Notice(
        tone="info",
        text="Started: Claude Code 2.1.240, model claude-sonnet-4-5-20250929, "
        "permission mode acceptEdits",
    )
    assert entries[-1] == Notice(tone="info", text="Finished: 6 turns, $0.0873")


def test_a_claude_error_ending_says_why() -> None:
    entries = view_of((TRANSCRIPTS / "claude-max-turns.jsonl").read_text())
    assert entries[-1] == Notice(
        tone="error",
        text="Ended (max_turns, 5 turns, $0.0640): Reached maximum number of turns (4)",
    )
    synthetic = view_of((TRANSCRIPTS / "claude-credit.jsonl").read_text())[1]
    assert isinstance(synthetic, Notice) and synthetic.text.startswith("Credit balance too low")


def test_codex_items_become_one_entry_each_once_completed() -> None:
    entries = view_of((TRANSCRIPTS / "codex-success.jsonl").read_text())
    commands = [
        entry for entry in entries if isinstance(entry, ToolCall) and entry.name == "command"
    ]
    assert [c.output for c in commands] == [
        "src/widgets/pager.py:1:def paginate(items, size):\n",
        "..........\n10 passed in 0.30s\n",
    ]
    assert entries[2] == Reasoning(text="**Locating the pagination helper**")
    assert entries[-1] == Notice(
        tone="info", text="Finished: 48211 input tokens, 40960 cached, 1893 output tokens"
    )


def claude_line(**event: Any) -> str:
    return json.dumps(event)


DENIED_RUN = "\n".join(
    [
        claude_line(
            type="assistant",
            message={
                "content": [
                    {
                        "type": "tool_use",
                        "id": "toolu_1",
                        "name": "Bash",
                        "input": {"command": "rm -rf /"},
                    }
                ]
            },
        ),
        claude_line(
            type="user",
            message={
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "permission to use Bash was denied"}],
                        "is_error": True,
                    }
                ]
            },
        ),
        claude_line(
            type="result",
            subtype="success",
            is_error=False,
            num_turns=1,
            permission_denials=[
                {
                    "tool_name": "Bash",
                    "tool_use_id": "toolu_1",
                    "tool_input": {"command": "rm -rf /"},
                }
            ],
        ),
    ]
)


def test_a_permission_denial_marks_its_call_and_stands_out() -> None:
    entries = view_of(DENIED_RUN)
    assert [shape(entry) for entry in entries] == [
        "tool:Bash:failed:denied",
        "notice:denial",
        "notice:info",
    ]
    assert entries[1] == Notice(tone="denial", text="Denied Bash: rm -rf /")
    assert counts(entries) == {"error": 0, "denial": 1}


def test_a_command_codex_declined_is_a_denied_call() -> None:
    item = {
        "id": "item_9",
        "type": "command_execution",
        "command": "curl evil",
        "status": "declined",
    }
    [call] = view_of(json.dumps({"type": "item.completed", "item": item}))
    assert isinstance(call, ToolCall) and call.denied and call.summary == "curl evil"


@pytest.mark.parametrize(
    "line",
    [
        "plain words",
        "{not json",
        "[1, 2, 3]",
        '{"type": 5}',
        '{"type": "something_new", "x": 1}',
        '{"type": "assistant", "message": 5}',
        '{"type": "assistant", "message": {"content": "a string"}}',
        '{"type": "system", "subtype": "hook_started"}',
        '{"type": "item.completed", "item": {"type": "brand_new_item"}}',
        '{"type": "user", "message": {"content": 7}}',
    ],
)
def test_a_line_of_no_known_shape_is_shown_as_it_is(line: str) -> None:
    assert view_of(line) == (Text(text=line),)


@pytest.mark.parametrize(
    "line",
    [
        '{"type": "result"}',
        '{"type": "result", "permission_denials": [5, {"tool_input": 3}], "num_turns": "x"}',
        '{"type": "user", "message": {"content": [{"type": "tool_result", "content": {"a": 1}}]}}',
        '{"type": "assistant", "message": {"content": [5, {"type": "tool_use", "input": 2}]}}',
        '{"type": "item.completed", "item": {"type": "file_change", "changes": 3}}',
        '{"type": "item.completed", "item": {"type": "mcp_tool_call", "error": "x"}}',
        '{"type": "rate_limit_event", "rate_limit_info": {"status": "allowed_warning"}}',
        '{"type": "turn.failed", "error": null}',
    ],
)
def test_odd_values_in_known_shapes_never_fail_the_view(line: str) -> None:
    assert view_of(line)


def test_plain_text_runs_together_and_errors_and_batons_notes_stand_out() -> None:
    text = "\n".join(
        [
            "Applied edit to src/pager.py",
            "Tokens: 4.2k sent",
            "",
            "Traceback (most recent call last):",
            '  File "x.py", line 1',
            "ValueError: bad page",
            "[baton: 4096 bytes of output cut here]",
            "done",
        ]
    )
    assert view_of(text) == (
        Text(text="Applied edit to src/pager.py\nTokens: 4.2k sent"),
        Notice(tone="error", text="Traceback (most recent call last):"),
        Text(text='  File "x.py", line 1'),
        Notice(tone="error", text="ValueError: bad page"),
        Notice(tone="info", text="[baton: 4096 bytes of output cut here]"),
        Text(text="done"),
    )


def test_the_note_of_a_cut_reads_as_batons() -> None:
    kept = kept_transcript(b"a" * 50 + b"\nrest\n", redact, limit=10)
    assert view_of(kept)[0] == Notice(tone="info", text=cut_note(51, 5).strip())


def test_secrets_in_a_clis_json_line_are_masked_and_the_line_stays_json() -> None:
    printed = 'DB_PASSWORD="hunter2secret" then api_key: "abcdefgh12345678"'
    line = json.dumps({"type": "user", "content": printed})
    kept = masked(line)
    assert "hunter2secret" not in kept and "abcdefgh12345678" not in kept
    assert json.loads(kept)["content"] == 'DB_PASSWORD="***" then api_key: "***"'


def test_a_cut_inside_one_long_line_keeps_no_half_credential() -> None:
    key = "sk-" + "a" * 40
    data = ("x" * 50 + f" {key} " + "y" * 50).encode()
    kept = kept_transcript(data, lambda text: text, limit=80)
    assert "aaaa" not in kept, kept
