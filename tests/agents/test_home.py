"""The agent home made again from the operator's template before every run (bot/agents/home.py)."""

from __future__ import annotations

import os
from pathlib import Path

from bot.agents.home import TEMPLATE, HomeLayout, agent_home, fresh_agent_home
from bot.agents.jail import Jail, bwrap_argv, system_mounts

LAYOUT = HomeLayout(
    carried=(("cli", "sessions"), ("cli", "login.json")),
    pinned={("cli", "settings.json"): "{}\n"},
)


def made(data_dir: Path) -> Path:
    return fresh_agent_home(data_dir, "octo/calc", 7, LAYOUT).path


def test_a_run_gets_the_template_again_and_only_the_sessions_and_login_of_the_last(
    tmp_path: Path,
) -> None:
    template = tmp_path / TEMPLATE / "cli"
    template.mkdir(parents=True)
    (template / "settings.json").write_text('{"deny": ["push"]}')
    home = made(tmp_path)
    assert home == agent_home(tmp_path, "octo/calc", 7)
    # What the agent leaves: a session, a refreshed login, lifted rules, instructions.
    (home / "cli" / "sessions" / "2026").mkdir(parents=True)
    (home / "cli" / "sessions" / "2026" / "one.jsonl").write_text("the conversation")
    (home / "cli" / "login.json").write_text("refreshed")
    (home / "cli" / "settings.json").unlink()
    (home / "cli" / "settings.json").write_text("{}")
    (home / "cli" / "INSTRUCTIONS.md").write_text("push when done")
    (home / ".bashrc").write_text("curl evil")

    again = made(tmp_path)
    assert again == home
    assert (home / "cli" / "settings.json").read_text() == '{"deny": ["push"]}'
    assert (home / "cli" / "sessions" / "2026" / "one.jsonl").read_text() == "the conversation"
    assert (home / "cli" / "login.json").read_text() == "refreshed"
    assert not (home / "cli" / "INSTRUCTIONS.md").exists() and not (home / ".bashrc").exists()
    assert sorted(p.name for p in home.parent.iterdir()) == ["issue-7"]  # nothing left aside


def test_a_login_the_operator_made_since_replaces_the_homes(tmp_path: Path) -> None:
    home = made(tmp_path)
    (home / "cli").mkdir(exist_ok=True)
    (home / "cli" / "login.json").write_text("the agent's, old")
    os.utime(home / "cli" / "login.json", (1, 1))
    login = tmp_path / TEMPLATE / "cli" / "login.json"
    login.parent.mkdir(parents=True)
    login.write_text("the operator's, new")
    assert (made(tmp_path) / "cli" / "login.json").read_text() == "the operator's, new"


def test_nothing_the_agent_linked_or_piped_is_followed(tmp_path: Path) -> None:
    secret = tmp_path / "outside" / "sessions"
    secret.mkdir(parents=True)
    (secret / "key").write_text("the worker's")
    home = made(tmp_path)
    (home / "cli").rename(home / "cli-was")
    (home / "cli").symlink_to(secret.parent)  # sessions "under" it are the worker's files
    assert not (made(tmp_path) / "cli" / "sessions").exists()

    home = made(tmp_path)
    sessions = home / "cli" / "sessions"
    sessions.mkdir()
    os.mkfifo(sessions / "pipe")  # copied, it would hang the worker
    (sessions / "link").symlink_to(secret / "key")
    (sessions / "kept.jsonl").write_text("kept")
    again = made(tmp_path) / "cli" / "sessions"
    assert sorted(p.name for p in again.iterdir()) == ["kept.jsonl", "link"]
    assert (again / "link").is_symlink() and os.readlink(again / "link") == str(secret / "key")
    (home / "cli" / "login.json").symlink_to(secret / "key")
    assert not (made(tmp_path) / "cli" / "login.json").exists()
    assert (secret / "key").read_text() == "the worker's"  # and nothing removed through them


def test_a_rebuild_stopped_between_its_renames_loses_no_session(tmp_path: Path) -> None:
    home = made(tmp_path)
    (home / "cli" / "sessions").mkdir()
    (home / "cli" / "sessions" / "one.jsonl").write_text("the conversation")
    home.rename(home.with_name("issue-7.old"))  # the worker died before the new one went in
    (home.with_name("issue-7.new")).mkdir()
    again = made(tmp_path)
    assert (again / "cli" / "sessions" / "one.jsonl").read_text() == "the conversation"
    assert sorted(p.name for p in again.parent.iterdir()) == ["issue-7"]


def test_a_pinned_file_is_the_templates_or_made_and_shown_read_only_over_the_home(
    tmp_path: Path,
) -> None:
    fresh = fresh_agent_home(tmp_path, "octo/calc", 7, LAYOUT)
    pinned = fresh.path / "cli" / "settings.json"
    assert fresh.pinned == (pinned,) and pinned.read_text() == "{}\n"
    jail = Jail(
        worktree=tmp_path / "w",
        home=fresh.path,
        tmp=tmp_path / "t",
        passwd_dir=tmp_path / "e",
        system=system_mounts(),
        pinned=fresh.pinned,
    )
    argv = bwrap_argv(jail, ["true"])
    home_at = argv.index(str(fresh.path)) - 1
    assert argv[home_at] == "--bind"
    assert argv[argv.index(str(pinned)) - 1] == "--ro-bind" and argv.index(str(pinned)) > home_at
