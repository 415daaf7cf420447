"""The command adapter: real processes, a minimal environment, caps and result files."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from bot.agents import AgentConfigError, adapter_for
from bot.agents.base import FORBIDDEN_ENV, AgentRequest
from bot.agents.command import CommandAdapter
from bot.domain.model import utcnow
from bot.ops.settings import Settings

SECRETS = {
    "GITHUB_PRIVATE_KEY": "-----BEGIN RSA PRIVATE KEY-----\nsecret\n",
    "GITHUB_PRIVATE_KEY_PATH": "/etc/baton/key.pem",
    "GITHUB_WEBHOOK_SECRET": "hook-secret",
    "GITHUB_TOKEN": "ghs_installation",
    "GH_TOKEN": "ghs_other",
    "REDIS_URL": "redis://:password@db:6379/0",
    "SANDBOX_ADMIN_TOKEN": "admin",
}


def request_for(tmp_path: Path, seconds: float = 30, **kwargs: object) -> AgentRequest:
    worktree = tmp_path / "worktree"
    worktree.mkdir(exist_ok=True)
    brief = tmp_path / "brief.md"
    brief.write_text("# Issue octo/widgets#3: do the thing\n")
    (tmp_path / "run" / "io").mkdir(parents=True, exist_ok=True)  # made by the runner
    return AgentRequest(
        run_id="octo/widgets#3/1",
        issue_number=3,
        attempt=1,
        worktree=worktree,
        brief_path=brief,
        run_dir=tmp_path / "run",
        deadline=utcnow() + timedelta(seconds=seconds),
        home=tmp_path / "home",
        **kwargs,  # type: ignore[arg-type]
    )


def python(code: str) -> str:
    return f"{shlex.quote(sys.executable)} -c {shlex.quote(code)}"


async def test_agent_environment_holds_no_secret(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-provider")
    dump = python("import json, os; print(json.dumps(dict(os.environ)))")
    request = request_for(
        tmp_path, passthrough_env=("ANTHROPIC_API_KEY", *SECRETS), extra_env={"GITHUB_TOKEN": "x"}
    )
    result = await CommandAdapter(dump).run(request)
    env = json.loads(request.transcript_path.read_text())
    assert result.status == "success"
    assert not set(env) & FORBIDDEN_ENV
    assert not [v for v in env.values() for secret in SECRETS.values() if secret in v]
    assert env["ANTHROPIC_API_KEY"] == "sk-provider"  # what the operator passes through
    assert env["BATON_BRIEF"] == str(request.brief_path)
    assert env["BATON_ISSUE"] == "3"
    assert env["TZ"] == "UTC"
    assert env["HOME"] == str(request.home)


async def test_brief_arrives_on_stdin_and_cwd_is_the_worktree(tmp_path: Path) -> None:
    request = request_for(tmp_path)
    command = python("import os, sys; print(os.getcwd()); print(sys.stdin.read())")
    result = await CommandAdapter(command).run(request)
    out = request.transcript_path.read_text()
    assert result.status == "success" and result.stop_reason == "completed"
    assert out.splitlines()[0] == str(request.worktree)
    assert "do the thing" in out


async def test_non_zero_exit_is_an_agent_error_with_evidence(tmp_path: Path) -> None:
    command = python("import sys; print('working'); print('boom', file=sys.stderr); sys.exit(3)")
    result = await CommandAdapter(command).run(request_for(tmp_path))
    assert (result.status, result.stop_reason, result.failure_class) == (
        "failed",
        "cli_error",
        "agent-error",
    )
    assert result.exit_code == 3
    assert "working" in result.evidence and "stderr: boom" in result.evidence


async def test_wall_clock_cap_kills_the_whole_process_group(tmp_path: Path) -> None:
    marker = tmp_path / "child-survived"
    # The agent starts a child that would write a marker after the cap; killing the
    # group must take the child too.
    command = f"(sleep 3; touch {shlex.quote(str(marker))}) & sleep 30; echo finished"
    result = await CommandAdapter(command).run(request_for(tmp_path, seconds=0.5))
    assert (result.status, result.stop_reason, result.failure_class) == (
        "failed",
        "wall_clock",
        "wall-clock-cap",
    )
    assert "finished" not in result.transcript_path.read_text()
    await asyncio.sleep(3.5)
    assert not marker.exists()


async def test_result_file_is_authoritative_when_valid(tmp_path: Path) -> None:
    report = {
        "status": "failed",
        "stop_reason": "provider_window",
        "failure_class": "provider-window",
        "resets_at": "2026-12-01T07:00:00Z",
        "turns": 4,
        "cost_usd": 0.12,
    }
    command = python(
        f"import json, os; open(os.environ['BATON_RESULT'], 'w').write({json.dumps(report)!r})"
    )
    result = await CommandAdapter(command).run(request_for(tmp_path))
    assert (result.stop_reason, result.turns, result.cost_usd) == ("provider_window", 4, 0.12)
    assert (
        result.resets_at is not None and result.resets_at.isoformat() == "2026-12-01T07:00:00+00:00"
    )


async def test_a_result_files_claims_are_held_to_what_can_be_true(tmp_path: Path) -> None:
    """A forged report: a window shut until the year 9000, a cost of minus a trillion."""
    report = {
        "status": "failed",
        "stop_reason": "provider_window",
        "resets_at": "9000-01-01T00:00:00Z",
        "cost_usd": -1e12,
    }
    command = python(
        f"import json, os; open(os.environ['BATON_RESULT'], 'w').write({json.dumps(report)!r})"
    )
    result = await CommandAdapter(command).run(request_for(tmp_path))
    assert (result.stop_reason, result.resets_at, result.cost_usd) == (
        "provider_window",
        None,
        None,
    )
    said = [line for line in result.evidence if line.startswith("baton:")]
    assert said == [
        "baton: a reported cost of -1000000000000.0 USD is not credible",
        "baton: a usage window said to reopen at 9000-01-01T00:00:00+00:00 is not credible",
    ]


@pytest.mark.parametrize(
    "content",
    [
        '{"status": "success"}',
        "not json",
        "[1]",
        '{"status": "success", "stop_reason": "max_turns"}',
    ],
)
async def test_an_invalid_or_contradictory_result_file_never_succeeds(
    tmp_path: Path, content: str
) -> None:
    command = python(f"import os; open(os.environ['BATON_RESULT'], 'w').write({content!r})")
    result = await CommandAdapter(command).run(request_for(tmp_path))
    assert result.status == "failed"
    assert result.failure_class == "agent-error"


async def test_a_command_that_cannot_start_is_an_env_start_failure(tmp_path: Path) -> None:
    request = request_for(tmp_path)
    adapter = CommandAdapter("true")
    adapter.argv = [str(tmp_path / "no-such-shell")]
    result = await adapter.run(request)
    assert (result.stop_reason, result.failure_class) == ("cli_missing", "env-start-failure")


@pytest.mark.parametrize("command", [None, "", "   ", "echo 'unterminated"])
def test_missing_or_malformed_command_is_refused_clearly(command: str | None) -> None:
    with pytest.raises(AgentConfigError, match="BATON_AGENT_COMMAND"):
        CommandAdapter(command)


@pytest.mark.parametrize(
    ("agent", "flag"), [("claude", "--max-turns"), ("codex", None), ("aider", None)]
)
def test_settings_select_the_agent_and_its_options(
    tmp_path: Path, agent: str, flag: str | None
) -> None:
    settings = Settings(
        BATON_AGENT=agent,
        BATON_AGENT_MODEL="some-model",
        BATON_AGENT_MAX_TURNS=7,
        BATON_AGENT_BINARY="/opt/agents/bin/cli",
    )
    adapter = adapter_for(settings)
    assert adapter.name == agent
    argv = adapter.argv(request_for(tmp_path))  # type: ignore[attr-defined]
    assert argv[0] == "/opt/agents/bin/cli" and "some-model" in argv
    if flag is not None:
        assert argv[argv.index(flag) + 1] == "7"


def test_a_cli_named_without_a_path_runs_as_found_on_the_workers_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside the jail a bare name would be looked up again, where the agent may write."""
    found = tmp_path / "bin" / "claude"
    found.parent.mkdir()
    found.write_text("#!/bin/sh\n")
    found.chmod(0o755)
    monkeypatch.setenv("PATH", f"{found.parent}{os.pathsep}/usr/bin")
    adapter = adapter_for(Settings(BATON_AGENT="claude"))
    assert adapter.argv(request_for(tmp_path))[0] == str(found)  # type: ignore[attr-defined]
