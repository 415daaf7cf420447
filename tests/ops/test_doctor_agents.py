"""`baton doctor` checks every agent the deployment runs, each by its own binary."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.ops.doctor import check_agents, check_other_agents, ok
from bot.ops.settings import Settings


def fake_cli(directory: Path, name: str, says: str) -> Path:
    cli = directory / name
    cli.write_text(f"#!/bin/sh\necho '{says}'\n")
    cli.chmod(0o755)
    return cli


def test_each_agent_the_deployment_runs_is_checked_and_a_missing_one_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    installs = tmp_path / "opt"
    installs.mkdir()
    claude = fake_cli(installs, "claude", "2.1.197 (Claude Code)")
    aider = fake_cli(installs, "aider", "aider 0.86.2")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    settings = Settings(
        BATON_DATA_DIR=tmp_path / "data",
        BATON_AGENT="claude",
        BATON_AGENT_BINARY=str(claude),
        BATON_AGENTS="claude,aider,codex",
        BATON_AGENT_BINARIES=f"aider={aider}",
    )
    found_claude, found_aider, missing_codex = check_agents(settings)
    assert found_claude == ok(
        "agent", f"claude 2.1.197: {claude} (tested with 2.1.197, accepted 2.1.x)"
    )
    assert found_aider == ok(
        "agent", f"aider 0.86.2: {aider} (tested with 0.86.2, accepted 0.86.x)"
    )
    assert missing_codex.status == "FAIL"
    assert "the codex CLI codex is not on PATH" in missing_codex.detail
    assert "BATON_AGENT_BINARIES=codex=PATH" in missing_codex.detail
    # What it runs is checked above, not again as a CLI a repository may pick.
    assert check_other_agents(settings) == []
