"""Mirrors, worktrees and pushes with real git; tokens never leak into errors."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

import pytest

import bot.edges.git as git_module
from bot.agents.jail import jails_for
from bot.domain.model import IssueRef, Run, RunState, utcnow
from bot.edges.git import Git, GitError, Identity, Workspace, auth_header, inert_commit
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from bot.ops.settings import Settings
from bot.workflows.attempt import remove_finished_worktrees
from bot.workflows.services import Services

TOKEN = "ghs_SeCrEtInstallationToken"


def sh(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), "-c", "user.name=T", "-c", "user.email=t@e", *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


@pytest.fixture
def origin(tmp_path: Path) -> Path:
    """A bare repository with one commit on main, standing in for GitHub."""
    seed = tmp_path / "seed"
    seed.mkdir()
    sh(seed, "init", "-q", "-b", "main")
    (seed / "app.py").write_text("print('hi')\n")
    sh(seed, "add", "-A")
    sh(seed, "commit", "-q", "-m", "init")
    bare = tmp_path / "origin.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(bare)], check=True)
    return bare


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    jails = jails_for(Settings(BATON_DATA_DIR=tmp_path / "data"))
    return Workspace(Git(Identity("Baton", "baton@example.invalid")), tmp_path / "data", jails)


async def commit_leftovers(workspace: Workspace, number: int, start: str, message: str) -> str:
    """Commit what the checkout holds, as Baton does after its agent, and collect it."""
    return await workspace.collect("octo/app", number, start, leftovers=message)


async def test_worktree_from_mirror_commit_and_push(workspace: Workspace, origin: Path) -> None:
    url = str(origin)
    mirror = await workspace.refresh_mirror("octo/app", url, TOKEN)
    base = await workspace.rev_parse(mirror, "refs/remotes/origin/main")
    assert base == sh(origin, "rev-parse", "main")
    assert await workspace.remote_branch("octo/app", "baton/issue-1") is None

    tree = await workspace.provision("octo/app", 1, "baton/issue-1", base)
    assert tree == workspace.worktree_path("octo/app", 1)
    assert await commit_leftovers(workspace, 1, base, "nothing") == base
    (tree / "app.py").write_text("print('fixed')\n")
    head = await commit_leftovers(workspace, 1, base, "Fix the greeting")
    assert head != base
    assert await workspace.has_diff("octo/app", base, head)
    assert await workspace.commits_since("octo/app", base, head) == 1
    await workspace.push("octo/app", url, "baton/issue-1", head, TOKEN, expected=None)
    assert sh(origin, "rev-parse", "baton/issue-1") == head == sh(tree, "rev-parse", "HEAD")
    assert sh(origin, "log", "-1", "--format=%an <%ae>", "baton/issue-1") == (
        "Baton <baton@example.invalid>"
    )
    assert TOKEN not in (mirror / "config").read_text()


async def test_a_new_attempt_reprovisions_and_replaces_only_what_it_saw(
    workspace: Workspace, origin: Path, tmp_path: Path
) -> None:
    url = str(origin)
    mirror = await workspace.refresh_mirror("octo/app", url, TOKEN)
    base = await workspace.rev_parse(mirror, "refs/remotes/origin/main")
    tree = await workspace.provision("octo/app", 1, "baton/issue-1", base)
    (tree / "a.txt").write_text("one\n")
    head = await commit_leftovers(workspace, 1, base, "attempt 1")
    await workspace.push("octo/app", url, "baton/issue-1", head, TOKEN, expected=None)

    await workspace.refresh_mirror("octo/app", url, TOKEN)
    seen = await workspace.remote_branch("octo/app", "baton/issue-1")
    assert seen == sh(origin, "rev-parse", "baton/issue-1")
    tree = await workspace.provision("octo/app", 1, "baton/issue-1", base)
    assert not (tree / "a.txt").exists(), "a fresh attempt starts from the base"
    (tree / "b.txt").write_text("two\n")
    head = await commit_leftovers(workspace, 1, base, "attempt 2")

    # Someone pushes to the branch after Baton fetched it: the lease refuses to overwrite.
    human = tmp_path / "human"
    subprocess.run(
        ["git", "clone", "-q", "-b", "baton/issue-1", str(origin), str(human)], check=True
    )
    (human / "c.txt").write_text("human\n")
    sh(human, "add", "-A")
    sh(human, "commit", "-q", "-m", "human fixup")
    sh(human, "push", "-q", "origin", "baton/issue-1")
    with pytest.raises(GitError):
        await workspace.push("octo/app", url, "baton/issue-1", head, TOKEN, expected=seen)
    assert sh(origin, "log", "-1", "--format=%s", "baton/issue-1") == "human fixup"


async def test_errors_mask_the_token(workspace: Workspace, tmp_path: Path) -> None:
    with pytest.raises(GitError) as failure:
        await workspace.refresh_mirror("octo/app", "http://127.0.0.1:9/octo/app.git", TOKEN)
    message = str(failure.value)
    assert TOKEN not in message
    assert auth_header(TOKEN).split()[-1] not in message


async def test_the_token_is_in_no_argv_only_in_gits_environment(
    workspace: Workspace, origin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A git on PATH that records how it was started, then runs the real one.
    real_git = subprocess.run(["which", "git"], capture_output=True, text=True).stdout.strip()
    recorder = tmp_path / "bin"
    recorder.mkdir()
    log = tmp_path / "git-calls.log"
    (recorder / "git").write_text(
        f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\nenv >> {log}\nexec {real_git} "$@"\n'
    )
    (recorder / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{recorder}:{os.environ['PATH']}")
    await workspace.refresh_mirror("octo/app", str(origin), TOKEN)
    calls = log.read_text()
    header = auth_header(TOKEN)
    assert f"GIT_CONFIG_VALUE_0={header}" in calls
    argv_lines = [line for line in calls.splitlines() if line.startswith("-C ")]
    assert argv_lines and not any(TOKEN in line or header in line for line in argv_lines)


async def test_remove_deletes_the_worktree(workspace: Workspace, origin: Path) -> None:
    mirror = await workspace.refresh_mirror("octo/app", str(origin), TOKEN)
    base = await workspace.rev_parse(mirror, "refs/remotes/origin/main")
    tree = await workspace.provision("octo/app", 2, "baton/issue-2", base)
    await workspace.remove("octo/app", 2)
    assert not tree.exists()
    assert "issue-2" not in sh(mirror, "worktree", "list")


async def test_removing_on_a_machine_that_never_fetched_the_repository_does_nothing(
    workspace: Workspace,
) -> None:
    # A merge is settled by whichever worker takes the job, often not the one that ran it.
    await workspace.remove("octo/elsewhere", 2)
    assert not workspace.mirror_path("octo/elsewhere").exists()


async def test_worktrees_of_closed_pull_requests_are_cleared_when_the_repository_is_next_worked_on(
    origin: Path, settings: Settings, store: Store, redis_url: str
) -> None:
    services = Services(settings, store, Dispatcher.from_url(redis_url, settings))
    workspace = services.workspace
    mirror = await workspace.refresh_mirror("octo/app", str(origin), TOKEN)
    base = await workspace.rev_parse(mirror, "refs/remotes/origin/main")
    ended = {1: RunState.MERGED, 2: RunState.PUSHED_GREEN, 3: RunState.CLOSED}
    for number in (1, 2, 3, 4):  # 4 has no run here: another deployment's, or a stray
        await workspace.provision("octo/app", number, f"baton/issue-{number}", base)
        if number in ended:
            issue = IssueRef(installation_id=5, repo="octo/app", number=number)
            claim = store.claim(issue)
            assert claim is not None
            attempt = store.next_attempt(claim)
            run = Run.claimed(issue, attempt, f"baton/issue-{number}", utcnow())
            store.save_run(run.moved(ended[number], utcnow()), claim)
            store.release(claim)
    assert workspace.worktree_issues("octo/app") == [1, 2, 3, 4]

    await remove_finished_worktrees(
        services, IssueRef(installation_id=5, repo="octo/app", number=9)
    )
    assert workspace.worktree_issues("octo/app") == [2, 4]
    assert "issue-1" not in sh(mirror, "worktree", "list")
    assert workspace.worktree_issues("octo/elsewhere") == []


async def test_the_agents_commit_messages_close_nothing_and_mention_nobody(
    workspace: Workspace, origin: Path
) -> None:
    mirror = await workspace.refresh_mirror("octo/app", str(origin), TOKEN)
    base = await workspace.rev_parse(mirror, "refs/remotes/origin/main")
    tree = await workspace.provision("octo/app", 1, "baton/issue-1", base)
    (tree / "a.txt").write_text("one\n")
    sh(tree, "add", "-A")
    sh(tree, "commit", "-q", "-m", "Fixes #1, cc @octo/team")
    (tree / "b.txt").write_text("two\n")
    sh(tree, "add", "-A")
    sh(tree, "commit", "-q", "-m", "Tidy up")
    head = await commit_leftovers(workspace, 1, base, "leftovers")
    first = sh(mirror, "log", "-1", "--format=%B", f"{head}~1")
    assert "Fixes #1" not in first and "@octo/team" not in first
    assert first.replace("\u200d", "") == "Fixes #1, cc @octo/team"
    assert sh(mirror, "log", "-1", "--format=%B", head) == "Tidy up"
    assert sh(mirror, "log", "-1", "--format=%an", f"{head}~1") == "T"
    # The same commits always come out the same, so a checkpoint and the final push agree.
    assert await commit_leftovers(workspace, 1, base, "leftovers") == head
    assert sh(mirror, "rev-parse", f"{head}^{{tree}}") == sh(tree, "rev-parse", "HEAD^{tree}")


def test_commits_are_by_the_apps_bot_unless_the_deployment_names_someone() -> None:
    assert Identity.of(None, None, "baton[bot]", 41898282, "https://api.github.com") == Identity(
        "baton[bot]", "41898282+baton[bot]@users.noreply.github.com"
    )
    on_enterprise = Identity.of(None, None, "baton[bot]", 7, "https://ghe.example.com/api/v3")
    assert on_enterprise.email == "7+baton[bot]@users.noreply.ghe.example.com"
    assert Identity.of("Ops", "ops@example.com", "baton[bot]", 7, "https://api.github.com") == (
        Identity("Ops", "ops@example.com")
    )


def test_a_rewritten_commit_keeps_every_byte_but_the_joiners() -> None:
    tree = b"tree " + b"a" * 40
    raw = (
        tree
        + b"\nauthor J\xe9r\xf4me <j@e> 1 +0000\ncommitter J <j@e> 1 +0000\n\nFixes #1 caf\xe9\n"
    )
    quiet = inert_commit(raw, {})
    assert b"Fixes #1" not in quiet
    assert quiet.replace("\u200d".encode(), b"") == raw  # latin-1 bytes pass through as they were
    assert inert_commit(tree + b"\n\nTidy up\n", {}) == tree + b"\n\nTidy up\n"


async def test_a_salvage_too_heavy_to_keep_is_never_bundled(
    workspace: Workspace, origin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Uncommitted edits that cannot bundle under the cap are not written out to be
    weighed: their objects' stored size says so first."""
    mirror = await workspace.refresh_mirror("octo/app", str(origin), TOKEN)
    base = await workspace.rev_parse(mirror, "refs/remotes/origin/main")
    tree = await workspace.provision("octo/app", 4, "baton/issue-4", base)
    (tree / "data.bin").write_bytes(os.urandom(256 * 1024))  # does not compress
    salvage = await workspace.salvage("octo/app", 4, base, None, "Work on #4 (Baton)")
    assert salvage is not None
    bundle = await workspace.salvage_bundle("octo/app", 4, (base,))
    assert bundle is not None and len(bundle) > 256 * 1024
    written: list[str] = []
    monkeypatch.setattr(git_module, "SALVAGE_STORED_CAP", 128 * 1024)
    monkeypatch.setattr(tempfile, "TemporaryDirectory", spy(written))
    assert await workspace.salvage_bundle("octo/app", 4, (base,)) is None
    assert written == []


def spy(written: list[str]) -> type[tempfile.TemporaryDirectory[str]]:
    """Return a TemporaryDirectory that notes each directory made."""

    class Noted(tempfile.TemporaryDirectory[str]):
        def __enter__(self) -> str:
            written.append(self.name)
            return super().__enter__()

    return Noted
