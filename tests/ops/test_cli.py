"""The baton command: clear one-line errors for bad settings and an unreachable Redis."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.devkit.devstack import free_port
from bot.domain.model import Chain, IssueRef, Run
from bot.edges.store import Store


def baton(*args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "BATON_", "REDIS_"))
    }
    return subprocess.run(
        [sys.executable, "-m", "bot", *args],
        cwd=cwd,
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("env", [{}, {"BATON_DEMO": "1"}], ids=["plain", "BATON_DEMO=1"])
def test_web_without_a_webhook_secret_names_the_variable(
    redis_url: str, tmp_path: Path, env: dict[str, str]
) -> None:
    (tmp_path / ".env").write_text("BATON_DEMO=1\n")  # nothing there turns signatures off
    result = baton("web", REDIS_URL=redis_url, cwd=tmp_path, **env)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "baton web: GITHUB_WEBHOOK_SECRET must be set: Baton refuses unsigned webhooks"
    ]


def test_web_refuses_an_operator_token_short_enough_to_guess(redis_url: str) -> None:
    result = baton(
        "web",
        REDIS_URL=redis_url,
        GITHUB_WEBHOOK_SECRET="s" * 40,
        BATON_OPERATOR_TOKEN="x" * 31,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "baton web: BATON_OPERATOR_TOKEN is 31 characters: use 32 or more random ones "
        "(e.g. `openssl rand -hex 32`)"
    ]


def test_unreachable_redis_is_one_line() -> None:
    port = free_port()
    result = baton("status", REDIS_URL=f"redis://127.0.0.1:{port}/0")
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("baton status: Redis is unreachable: ") and str(port) in line
    assert "Traceback" not in result.stderr


def test_worker_without_app_credentials_names_them(redis_url: str) -> None:
    result = baton("worker", "--burst", REDIS_URL=redis_url)
    assert (result.returncode, result.stderr.strip()) == (
        2,
        "baton worker: GITHUB_APP_ID must be set",
    )
    result = baton(
        "worker",
        "--burst",
        REDIS_URL=redis_url,
        GITHUB_APP_ID="1",
        GITHUB_PRIVATE_KEY_PATH="/nonexistent/key.pem",
    )
    assert result.returncode == 2
    assert "GITHUB_PRIVATE_KEY_PATH=/nonexistent/key.pem cannot be read" in result.stderr


def test_worker_refuses_an_agent_it_cannot_run(redis_url: str, tmp_path: Path) -> None:
    key = tmp_path / "key.pem"
    key.write_text("not really a key")
    result = baton(
        "worker",
        "--burst",
        REDIS_URL=redis_url,
        GITHUB_APP_ID="1",
        GITHUB_PRIVATE_KEY_PATH=str(key),
    )
    assert result.returncode == 2
    assert "BATON_AGENT_COMMAND must be set" in result.stderr


def test_a_worker_whose_sandbox_cannot_start_refuses_to_run_agents(
    redis_url: str, tmp_path: Path
) -> None:
    key = tmp_path / "key.pem"
    key.write_text("not really a key")
    no_bwrap = tmp_path / "bin"  # a PATH with git, but no bubblewrap
    no_bwrap.mkdir()
    for tool in ("git", "true"):
        found = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        (no_bwrap / tool).symlink_to(found)
    result = baton(
        "worker",
        "--burst",
        REDIS_URL=redis_url,
        GITHUB_APP_ID="1",
        GITHUB_PRIVATE_KEY_PATH=str(key),
        BATON_AGENT_COMMAND="true",
        PATH=str(no_bwrap),
    )
    assert (result.returncode, result.stderr.strip()) == (
        2,
        "baton worker: this worker cannot contain its agents: bwrap is not installed: install "
        "bubblewrap (apt-get install bubblewrap), or set BATON_AGENT_SANDBOX=off to run agents "
        "uncontained",
    )


def test_a_worker_with_the_sandbox_off_says_so_when_it_starts(
    redis_url: str, tmp_path: Path
) -> None:
    key = tmp_path / "key.pem"
    key.write_text("not really a key")
    result = baton(
        "worker",
        "--burst",
        "--queues",
        "baton-agents",
        REDIS_URL=redis_url,
        GITHUB_APP_ID="1",
        GITHUB_PRIVATE_KEY_PATH=str(key),
        BATON_AGENT_COMMAND="true",
        BATON_AGENT_SANDBOX="off",
    )
    assert "BATON_AGENT_SANDBOX=off: agents run uncontained" in result.stderr
    # A status read on another machine, whose own sandbox is on, still names this worker.
    elsewhere = baton("status", REDIS_URL=redis_url)
    warning = next(line for line in elsewhere.stdout.splitlines() if line.startswith("warning:"))
    assert "Agents run without a sandbox (BATON_AGENT_SANDBOX=off)" in warning
    assert "Workers reporting it: " in warning


@pytest.mark.parametrize(("name", "value"), [("PORT", "eighty"), ("BATON_AGENT", "gpt")])
def test_malformed_settings_name_the_variable(redis_url: str, name: str, value: str) -> None:
    result = baton("status", REDIS_URL=redis_url, **{name: value})
    assert result.returncode == 2
    assert result.stderr.startswith(f"baton status: invalid settings: {name}:")


def test_status_lists_queues_and_says_when_there_are_no_runs(redis_url: str) -> None:
    result = baton("status", REDIS_URL=redis_url)
    assert result.returncode == 0, result.stderr
    assert "queues: baton-events 0, baton-agents 0" in result.stdout
    assert "no runs yet" in result.stdout


def test_status_warns_when_agents_run_without_a_sandbox(redis_url: str) -> None:
    result = baton("status", REDIS_URL=redis_url, BATON_AGENT_SANDBOX="off")
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first.startswith("warning: Agents run without a sandbox (BATON_AGENT_SANDBOX=off)")
    sandboxed = baton("status", REDIS_URL=redis_url)
    assert "warning:" not in sandboxed.stdout and "sandbox" not in sandboxed.stdout


def test_status_shows_halted_and_waiting_issues_with_their_times(
    redis_url: str, store: Store
) -> None:
    halted = IssueRef(installation_id=1, repo="octo/widgets", number=7)
    waiting = IssueRef(installation_id=1, repo="octo/widgets", number=8)
    store.record_halt(halted, datetime(2026, 12, 1, 7, 2, tzinfo=UTC))
    store.record_wait(waiting, datetime(2026, 12, 1, 7, 2, tzinfo=UTC))
    result = baton("status", REDIS_URL=redis_url)
    assert result.returncode == 0, result.stderr
    assert "halted until 2026-12-01 07:02 UTC: octo/widgets#7" in result.stdout
    assert "waiting until 2026-12-01 07:02 UTC: octo/widgets#8" in result.stdout


def test_status_lists_each_chain_with_its_links(redis_url: str, store: Store) -> None:
    chain = Chain(installation_id=1, repo="octo/widgets", head=9, tracking=True, links=(4, 5))
    store.save_chain(chain)
    result = baton("status", REDIS_URL=redis_url)
    assert result.returncode == 0, result.stderr
    assert "chain octo/widgets#9: #4 not started, #5 not started" in result.stdout


def test_status_lists_runs_by_repository_with_their_phase(redis_url: str, store: Store) -> None:
    issue = IssueRef(installation_id=1, repo="octo/widgets", number=3)
    store.save_run(
        Run.claimed(issue, 1, "baton/issue-3", datetime(2026, 12, 1, 7, tzinfo=UTC)),
        store.claim(issue) or pytest.fail("the issue could not be claimed"),
    )
    result = baton("status", REDIS_URL=redis_url)
    assert result.returncode == 0, result.stderr
    assert "octo/widgets: 1 live, recent runs:" in result.stdout
    assert "  #3 attempt 1   claimed" in result.stdout and "so far" in result.stdout
