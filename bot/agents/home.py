"""Each issue's agent home, made again from the operator's template before every run.

The agent writes its home, and what a CLI reads there steers it: Claude Code's
`settings.json` (hooks, env, permission rules) and `CLAUDE.md` (instructions it is told
override its defaults), codex's `config.toml` (model providers, MCP servers, notify) and
`AGENTS.md`. Kept from one run to the next, they would let an injected agent lift the
operator's rules or point the next run's CLI at a provider of its own. So each run starts
from `$BATON_DATA_DIR/agent-home` again, and only what a continuation needs comes across
from the run before (`HomeLayout.carried`): the CLI's sessions, and a login the CLI
refreshes itself. During the run the CLI's settings file is shown read-only
(`HomeLayout.pinned`), so it stays the operator's while the agent works, too.

The new home is made beside the old one and swapped in, so a worker that stops halfway
leaves the previous home whole; nothing the agent left is followed: a carried entry is
taken only when it and every directory above it is what it claims to be, and a link or
a special file inside it is copied as a link or left behind, never read.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

TEMPLATE = "agent-home"  # under BATON_DATA_DIR: the operator's, copied into every run's home

RelativePath = tuple[str, ...]


@dataclass(frozen=True)
class HomeLayout:
    """What of an agent home one CLI needs from the run before, and what it must not change.

    carried: entries (a directory of sessions, a login file) the next run keeps.
    pinned: files shown read-only in the jail, each with the text it gets when the
    template has none.
    """

    carried: tuple[RelativePath, ...] = ()
    pinned: Mapping[RelativePath, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FreshHome:
    """A run's agent home, and its files the jail shows read-only."""

    path: Path
    pinned: tuple[Path, ...]


def agent_home(data_dir: Path, repo: str, number: int) -> Path:
    """Return where the issue's own agent home is (pure).

    One home per issue: a continuation finds its CLI session again, and nothing one
    issue's agent leaves in its home reaches another issue's.
    """
    return data_dir / "homes" / repo / f"issue-{number}"


def fresh_agent_home(data_dir: Path, repo: str, number: int, layout: HomeLayout) -> FreshHome:
    """Make the issue's agent home again for a run: the template, what layout carries from
    the home as the last run left it, and the pinned files; return it."""
    home = agent_home(data_dir, repo, number)
    new, old = home.with_name(f"{home.name}.new"), home.with_name(f"{home.name}.old")
    if old.is_dir() and not home.exists():  # a rebuild stopped between its two renames
        old.rename(home)
    for leftover in (new, old):
        shutil.rmtree(leftover, ignore_errors=True)
    template = data_dir / TEMPLATE
    if template.is_dir():
        shutil.copytree(template, new, symlinks=True)
    else:
        new.mkdir(parents=True)
    if home.is_dir():
        for parts in layout.carried:
            _carry(home, new, parts)
    for parts, text in layout.pinned.items():
        _ensure_file(new, parts, text)
    if home.exists():
        home.rename(old)
    new.rename(home)
    shutil.rmtree(old, ignore_errors=True)
    return FreshHome(home, tuple(home.joinpath(*parts) for parts in layout.pinned))


def _carry(old: Path, new: Path, parts: RelativePath) -> None:
    """Bring one entry of the old home into the new one, linked, not copied."""
    found = _plain_entry(old, parts)
    if found is None:
        return
    source, made = found
    target = new.joinpath(*parts)
    if target.is_file() and target.stat().st_mtime > made.st_mtime:
        return  # the operator logged in again since: the template's login is newer
    _remove(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    if stat.S_ISDIR(made.st_mode):
        shutil.copytree(source, target, symlinks=True, copy_function=os.link, ignore=_special)
    else:
        os.link(source, target, follow_symlinks=False)


def _plain_entry(root: Path, parts: RelativePath) -> tuple[Path, os.stat_result] | None:
    """Return root/parts and its lstat when every directory on the way is a directory and
    it is a directory or a regular file; None otherwise (a link, a pipe, nothing)."""
    path = root
    for depth, part in enumerate(parts):
        path = path / part
        try:
            found = os.lstat(path)
        except FileNotFoundError:
            return None
        last = depth == len(parts) - 1
        if not (stat.S_ISDIR(found.st_mode) or (last and stat.S_ISREG(found.st_mode))):
            return None
    return path, found


def _special(directory: str, names: list[str]) -> set[str]:
    """Return the names in directory that are neither files, directories nor links."""
    return {
        name
        for name in names
        if not (
            stat.S_ISREG(mode := os.lstat(os.path.join(directory, name)).st_mode)
            or stat.S_ISDIR(mode)
            or stat.S_ISLNK(mode)
        )
    }


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        path.unlink()


def _ensure_file(home: Path, parts: RelativePath, text: str) -> None:
    """Give the new home a file at parts, the template's or one holding text."""
    path = home.joinpath(*parts)
    if path.is_symlink() or path.exists():
        return  # the operator's own, from the template
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
