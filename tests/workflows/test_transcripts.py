"""An attempt's transcript kept when it ends (masked, capped, never through a symlink), its
page behind the operator token, and the status page's link to it."""

from __future__ import annotations

import html
import json
import logging
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from bot.domain.model import AgentResult, IssueRef, Run, RunState, utcnow
from bot.domain.transcript import KEPT_BYTES, Message, Notice, ToolCall, view_of
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from bot.edges.store.transcripts import TranscriptDirectory
from bot.ops.settings import Settings
from bot.web.app import create_app
from bot.web.status_page import render_transcript_page, transcript_url
from bot.workflows.services import Services
from bot.workflows.transcripts import keep_transcript
from handlers import router
from tests.conftest import OPERATOR_TOKEN
from tests.ops.test_cli import baton

ISSUE = IssueRef(installation_id=1, repo="octo/widgets", number=12)
TRANSCRIPTS = Path(__file__).parents[1] / "fixtures" / "agent-transcripts"
GITHUB_TOKEN = "ghs_" + "k3Y" * 10
BEARER = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}


def run_dir(settings: Settings, attempt: int = 1) -> Path:
    return settings.data_dir / "runs" / ISSUE.repo / str(ISSUE.number) / str(attempt)


def finished(settings: Settings, attempt: int = 1, **fields: Any) -> Run:
    """Return an attempt of ISSUE whose agent has ended, its files where Baton puts them."""
    now = utcnow()
    result = AgentResult(
        agent="claude",
        status="failed",
        stop_reason="cli_error",
        started_at=now - timedelta(minutes=3),
        ended_at=now,
        transcript_path=run_dir(settings, attempt) / "transcript.log",
        stderr_path=run_dir(settings, attempt) / "stderr.log",
        **fields,
    )
    run = Run.claimed(ISSUE, attempt, "baton/issue-12", now - timedelta(minutes=5))
    return run.moved(RunState.FAILED, now).model_copy(update={"agent_result": result})


def printed(settings: Settings, data: bytes, attempt: int = 1) -> None:
    """Write what the agent printed, as Baton's capture does."""
    run_dir(settings, attempt).mkdir(parents=True, exist_ok=True)
    (run_dir(settings, attempt) / "transcript.log").write_bytes(data)


def services(settings: Settings, store: Store, dispatch: Dispatcher) -> Services:
    return Services(settings, store, dispatch)


def test_an_ended_attempts_transcript_is_kept_masked(
    settings: Settings,
    store: Store,
    dispatch: Dispatcher,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PROVIDER_KEY", "handed-to-the-agent-by-name")
    settings = settings.model_copy(update={"agent_passthrough_env": ["PROVIDER_KEY"]})
    printed(
        settings,
        b"cloning with " + GITHUB_TOKEN.encode() + b"\n"
        b"key handed-to-the-agent-by-name, and sk-ant-api03-" + b"Q" * 40 + b"\n",
    )
    keep_transcript(services(settings, store, dispatch), finished(settings))
    assert store.transcript(ISSUE, 1) == "cloning with ***\nkey ***, and ***\n"


def test_a_long_transcript_keeps_its_last_megabyte(
    settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    lines = b"".join(b"line %07d\n" % n for n in range(200_000))  # 2.4 MB
    printed(settings, lines)
    keep_transcript(services(settings, store, dispatch), finished(settings))
    kept = store.transcript(ISSUE, 1)
    assert kept is not None
    first, _, rest = kept.partition("\n")
    assert first.startswith("[baton: the transcript's first ") and "bytes were cut" in first
    assert len(rest.encode()) <= KEPT_BYTES and rest.endswith("line 0199999\n")
    assert rest.startswith("line ") and lines.endswith(rest.encode())


def test_a_transcript_the_agent_swapped_for_a_symlink_is_not_followed(
    settings: Settings,
    store: Store,
    dispatch: Dispatcher,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("the worker's own secret\n")
    run_dir(settings).mkdir(parents=True)
    (run_dir(settings) / "transcript.log").symlink_to(secret)
    with caplog.at_level(logging.WARNING):
        keep_transcript(services(settings, store, dispatch), finished(settings))
    assert store.transcript(ISSUE, 1) is None
    assert "attempt 1's transcript was not kept" in caplog.text and "symbolic link" in caplog.text


def test_an_attempt_whose_agent_never_printed_keeps_nothing(
    settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    keep_transcript(services(settings, store, dispatch), finished(settings))
    claimed = Run.claimed(ISSUE, 2, "baton/issue-12", utcnow())  # no agent result at all
    keep_transcript(services(settings, store, dispatch), claimed)
    assert store.transcript(ISSUE, 1) is None and store.transcript(ISSUE, 2) is None


def test_a_deployment_that_names_a_directory_keeps_transcripts_there(
    settings: Settings, store: Store, dispatch: Dispatcher, tmp_path: Path
) -> None:
    shared = tmp_path / "shared"
    settings = settings.model_copy(update={"transcript_store": f"dir:{shared}"})
    printed(settings, b"said\n")
    keep_transcript(services(settings, store, dispatch), finished(settings))
    assert TranscriptDirectory(shared).transcript(ISSUE, 1) == "said\n"
    assert store.transcript(ISSUE, 1) is None


# --- The page -----------------------------------------------------------------------------------


HOSTILE = "\n".join(
    [
        json.dumps(
            {
                "type": "assistant",
                "message": {
                    "content": [
                        {"type": "text", "text": "<script>alert('said')</script>"},
                        {
                            "type": "tool_use",
                            "id": "t1",
                            "name": "<b>Bash</b>",
                            "input": {"command": "echo '<img src=x onerror=alert(1)>'"},
                        },
                    ]
                },
            }
        ),
        json.dumps(
            {
                "type": "user",
                "message": {
                    "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "</pre><i>"}
                    ]
                },
            }
        ),
        "</ol><script>plain</script>",
    ]
)


def test_the_page_escapes_everything_the_agent_wrote(settings: Settings) -> None:
    page = render_transcript_page(finished(settings), view_of(HOSTILE), 14)
    for written in ("<script>", "<b>Bash</b>", "<img", "</pre><i>", "</ol><script>"):
        assert written not in page
    for shown in ("<script>alert('said')</script>", "<b>Bash</b>", "</pre><i>"):
        assert html.escape(shown) in page


def test_the_page_folds_tool_calls_and_highlights_denials_and_errors(settings: Settings) -> None:
    entries = (
        Message(author="agent", text="Running the tests."),
        ToolCall(key="t1", name="Bash", summary="pytest", detail="pytest", output="1 passed"),
        ToolCall(key="t2", name="Bash", summary="rm -rf /", detail="rm -rf /", denied=True),
        Notice(tone="denial", text="Denied Bash: rm -rf /"),
        Notice(tone="error", text="Ended (api_error): overloaded"),
    )
    run = finished(settings, denials=["Bash: rm -rf /"])
    page = render_transcript_page(run, entries, 14)
    assert "<h1>Transcript of octo/widgets#12, attempt 1</h1>" in page
    assert (
        '<details class="tool "><summary><span class="tool-name">Bash</span> <code>pytest' in page
    )
    assert "<details open" not in page  # every call starts folded
    assert '<details class="tool denied">' in page and ">denied</span></summary>" in page
    assert '<li class="entry notice denial">Denied Bash: rm -rf /</li>' in page
    assert '<li class="entry notice error">error: Ended (api_error): overloaded</li>' in page
    assert "2 tool calls · 1 error · 1 denial" in page
    assert 'aria-labelledby="denied"' in page  # the denials the run recorded, above it all


async def client_for(aiohttp_client: Any, settings: Settings, store: Store) -> TestClient:
    dispatch = Dispatcher.from_url(settings.redis_url, settings)
    return await aiohttp_client(create_app(settings, store, dispatch, router))  # type: ignore[no-any-return]


def record(store: Store, run: Run) -> None:
    claim = store.claim(run.issue) or pytest.fail(f"{run.issue} could not be claimed")
    assert store.next_attempt(claim) == run.attempt
    store.save_run(run, claim)
    store.release(claim)


async def test_the_operator_reads_a_kept_transcript_from_redis(
    aiohttp_client: Any, operator_settings: Settings, store: Store
) -> None:
    record(store, finished(operator_settings))
    store.keep_transcript(ISSUE, 1, (TRANSCRIPTS / "claude-success.jsonl").read_text(), days=14)
    client = await client_for(aiohttp_client, operator_settings, store)
    url = transcript_url(ISSUE.repo, ISSUE.number, 1)
    assert url == "/status/transcripts/octo/widgets/12/1"

    refused = await client.get(url)
    assert refused.status == 401 and "/status?token=<token>" in await refused.text()

    response = await client.get(url, headers=BEARER)
    assert response.status == 200
    assert response.headers["Content-Security-Policy"].startswith("default-src 'none'")
    page = await response.text()
    assert page.count('<details class="tool') == 4
    assert "I&#x27;ll reproduce the failing test first." in page
    assert "Finished: 6 turns, $0.0873" in page


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("/status/transcripts/octo/widgets/12/2", "octo/widgets#12 has no attempt 2 on record"),
        (
            "/status/transcripts/octo/widgets/99/1",
            "Baton has no record of a run of octo/widgets#99",
        ),
        (
            "/status/transcripts/octo/widgets/12/1",
            "no transcript of octo/widgets#12 attempt 1 is kept",
        ),
    ],
)
async def test_a_transcript_that_is_not_there_is_explained(
    aiohttp_client: Any, operator_settings: Settings, store: Store, path: str, said: str
) -> None:
    record(store, finished(operator_settings))
    client = await client_for(aiohttp_client, operator_settings, store)
    response = await client.get(path, headers=BEARER)
    assert response.status == 404
    assert said in html.unescape(await response.text())


async def test_the_status_page_links_each_run_to_its_transcript(
    aiohttp_client: Any, operator_settings: Settings, store: Store
) -> None:
    record(store, finished(operator_settings))
    client = await client_for(aiohttp_client, operator_settings, store)
    page = await (await client.get("/status", headers=BEARER)).text()
    assert '1 <a href="/status/transcripts/octo/widgets/12/1">transcript</a>' in page


# --- baton transcript ---------------------------------------------------------------------------


def test_baton_transcript_prints_the_latest_attempts_or_the_one_named(
    redis_url: str, settings: Settings, store: Store
) -> None:
    record(store, finished(settings, 1))
    record(store, finished(settings, 2))
    store.keep_transcript(ISSUE, 1, "attempt one said\n", days=14)
    store.keep_transcript(ISSUE, 2, '{"type":"result"}\nattempt two said\n', days=14)
    latest = baton("transcript", "octo/widgets#12", REDIS_URL=redis_url)
    assert latest.returncode == 0, latest.stderr
    assert latest.stdout == '{"type":"result"}\nattempt two said\n'
    assert latest.stderr == "octo/widgets#12 attempt 2 (claude, failed)\n"
    named = baton("transcript", "octo/widgets#12", "--attempt", "1", REDIS_URL=redis_url)
    assert (named.returncode, named.stdout) == (0, "attempt one said\n")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("octo/widgets#99",), "Baton has no record of a run of octo/widgets#99"),
        (
            ("octo/widgets#12", "--attempt", "5"),
            "octo/widgets#12 has no attempt 5 on record (its attempts: 1)",
        ),
        (("octo/widgets",), "'octo/widgets' is not an issue: name it as OWNER/REPO#N"),
    ],
)
def test_baton_transcript_says_in_one_line_why_there_is_none(
    redis_url: str, settings: Settings, store: Store, args: tuple[str, ...], said: str
) -> None:
    record(store, finished(settings))
    result = baton("transcript", *args, REDIS_URL=redis_url)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == f"baton transcript: {said}\n"


def test_baton_transcript_says_when_one_has_expired(
    redis_url: str, settings: Settings, store: Store
) -> None:
    run = finished(settings)
    assert run.agent_result is not None
    ended = run.agent_result.ended_at - timedelta(days=3)
    aged = run.agent_result.model_copy(update={"ended_at": ended})
    record(store, run.model_copy(update={"agent_result": aged}))
    result = baton("transcript", "octo/widgets#12", REDIS_URL=redis_url, BATON_TRANSCRIPT_DAYS="2")
    assert result.returncode == 2
    assert result.stderr.startswith(
        "baton transcript: octo/widgets#12 attempt 1's transcript has expired: "
        "transcripts are kept 2 days (BATON_TRANSCRIPT_DAYS)"
    )


def test_baton_transcript_reads_the_directory_the_deployment_names(
    redis_url: str, settings: Settings, store: Store, tmp_path: Path
) -> None:
    record(store, finished(settings))
    TranscriptDirectory(tmp_path / "shared").keep_transcript(ISSUE, 1, "from the share\n", 14)
    result = baton(
        "transcript",
        "octo/widgets#12",
        REDIS_URL=redis_url,
        BATON_TRANSCRIPT_STORE=f"dir:{tmp_path / 'shared'}",
    )
    assert (result.returncode, result.stdout) == (0, "from the share\n")
