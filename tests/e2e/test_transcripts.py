"""Transcripts through real processes: kept by the worker that ran the attempt, read from
a web process and `baton transcript` on other disks.

The one worker here stands for a machine of its own: its data directory is not the web
process's. Once the attempt ends, its run directory is deleted from the worker's disk:
what the page and the command show can only have come from Redis.
"""

from __future__ import annotations

import html
import shutil
import subprocess
import sys
from pathlib import Path

import aiohttp

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.model import IssueRef, RunState
from bot.edges.store import Store
from bot.web.status_page import transcript_url
from tests.claude_stream import DENIED, claude_code_said
from tests.e2e.test_loop import GREETING_FIX, new_repo, queued_issue, run_state
from tests.support import StackSpec, disk

OPERATOR_TOKEN = "operator-token-of-the-transcripts-stack-long-enough"
STACK = StackSpec(
    database=15, env={"BATON_OPERATOR_TOKEN": OPERATOR_TOKEN}, machines=True, workers=1
)
PROVIDER_KEY = "sk-ant-api03-" + "e2eKeyNeverShown" * 3
CLIPBOARD = "\x1b]52;c;b3duZWQ=\x07"  # OSC 52: a terminal that obeys it sets the clipboard


def transcript_command(
    stack: LocalBaton, data_dir: Path, *args: str
) -> subprocess.CompletedProcess[str]:
    """Run `baton transcript` as an operator on another machine would: its own data directory."""
    env = {**stack.baton_env(), "BATON_DATA_DIR": str(data_dir)}
    return subprocess.run(
        [sys.executable, "-m", "bot", "transcript", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def test_a_transcript_is_read_on_machines_other_than_the_one_that_ran_it(
    stack: LocalBaton, maintainer: Maintainer, store: Store, tmp_path: Path
) -> None:
    repo = await new_repo(maintainer, stack)
    body = (
        f"{GREETING_FIX}\n{claude_code_said()}\nagent: say export ANTHROPIC_API_KEY={PROVIDER_KEY}"
        f"\nagent: say {CLIPBOARD}"
    )
    number = await queued_issue(maintainer, repo, "Greet, and try something refused", body)
    issue = IssueRef(installation_id=1, repo=repo, number=number)
    kept = await eventually(
        lambda: _kept(store, issue), "the worker keeping attempt 1's transcript", 90
    )
    assert PROVIDER_KEY not in kept and "ANTHROPIC_API_KEY=***" in kept
    await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the run going green", 90
    )

    # The machine that ran the attempt is gone, with everything on its disk.
    ran_on = disk(stack, "worker-1")
    assert (ran_on / "runs" / repo / str(number) / "1" / "transcript.log").is_file()
    shutil.rmtree(ran_on / "runs")
    assert not str(stack.baton_env()["BATON_DATA_DIR"]).startswith(str(ran_on))

    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    async with aiohttp.ClientSession() as session:
        status = await session.get(f"{stack.web_url}/status", headers=headers)
        link = transcript_url(repo, number, 1)
        assert f'<a href="{link}">transcript</a>' in await status.text()
        response = await session.get(f"{stack.web_url}{link}", headers=headers)
        assert response.status == 200
        page = html.unescape(await response.text())
    assert f"Transcript of {repo}#{number}, attempt 1" in page
    assert "I will greet." in page and "hi there" in page
    assert '<details class="tool denied">' in page and f">Denied Bash: {DENIED}<" in page
    assert PROVIDER_KEY not in page

    printed = transcript_command(stack, tmp_path / "elsewhere", f"{repo}#{number}")
    assert printed.returncode == 0, printed.stderr
    # What the agent printed is shown, never obeyed: no escape reaches the terminal.
    assert CLIPBOARD in kept and "\x1b" not in printed.stdout
    assert printed.stdout == kept.replace(CLIPBOARD, "\\x1b]52;c;b3duZWQ=\\x07")
    raw = transcript_command(stack, tmp_path / "elsewhere", f"{repo}#{number}", "--raw")
    assert raw.stdout == kept
    assert printed.stderr.startswith(f"{repo}#{number} attempt 1 (command, ")
    missing = transcript_command(
        stack, tmp_path / "elsewhere", f"{repo}#{number}", "--attempt", "7"
    )
    assert (missing.returncode, missing.stderr) == (
        2,
        f"baton transcript: {repo}#{number} has no attempt 7 on record (its attempts: 1)\n",
    )


async def _kept(store: Store, issue: IssueRef) -> str | None:
    return store.transcript(issue, 1)
