"""Reading what an agent wrote: a regular file, inside its directory, and never all of it.

Everything under an agent's directories may have been put there by the agent: a
symlink to /dev/zero or to a secret, a FIFO no one writes, a file of many
gigabytes, a tree of a million directories. Every read here walks down from a
directory Baton trusts without following a symlink, refuses anything but a
regular file, never blocks on opening, and stops at a cap.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Callable, Generator
from dataclasses import dataclass
from pathlib import Path

# How a directory below the trusted one is opened: never through a symlink, never blocking.
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1024 * 1024
_SYMLINK = "is a symbolic link, which Baton does not follow"

# How far a search for a file in an agent-writable tree goes before it gives up.
FIND_MAX_DEPTH = 4
FIND_MAX_ENTRIES = 20_000


class Unreadable(Exception):
    """What is at a path is not a regular file Baton may read; the message says why."""


@dataclass(frozen=True)
class Capped:
    """The first bytes of a file, and whether there was more."""

    data: bytes
    cut: bool  # the file held more than the cap: only the first `limit` bytes are here
    size: int  # the file's size when it was opened

    def text(self) -> str:
        """Return the bytes read as text; undecodable bytes are replaced."""
        return self.data.decode(errors="replace")


def read_capped(path: Path, limit: int, *, within: Path) -> Capped | None:
    """Return at most `limit` bytes of the regular file at path, or None if nothing is there.

    path must lie inside `within` (a directory Baton trusts), and no part of it below
    `within` may be a symlink. Raises Unreadable, with the reason, for a symlink, a
    FIFO, a device, a directory, a hard link to another file, or a path outside
    `within`; opening never blocks and reading never goes past the cap.
    """
    parts = _parts_below(path, within)
    if not parts:
        raise Unreadable(f"{path}: is {within} itself, not a file inside it")
    try:
        parent = _open_dirs(within, parts[:-1])
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Unreadable(f"{path}: {within} {_why(exc)}") from exc
    try:
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise Unreadable(f"{path}: {_why(exc)}") from exc
    finally:
        os.close(parent)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise Unreadable(f"{path}: is {_kind(info.st_mode)}, not a regular file")
        if info.st_nlink != 1:
            raise Unreadable(f"{path}: is a hard link to another file")
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        data = _read_up_to(fd, limit + 1)
    except OSError as exc:
        raise Unreadable(f"{path}: {_why(exc)}") from exc
    finally:
        os.close(fd)
    return Capped(data[:limit], len(data) > limit, info.st_size)


def find_file(
    directory: Path,
    matches: Callable[[str], bool],
    *,
    within: Path,
    max_depth: int = FIND_MAX_DEPTH,
    max_entries: int = FIND_MAX_ENTRIES,
) -> Path | None:
    """Return a regular file whose name matches, in directory or below it, or None.

    The search follows no symlink (neither to directory nor below it, inside
    `within`), goes at most max_depth directories down and looks at no more than
    max_entries entries in all: an agent-made tree cannot lead it out or keep it busy.
    """
    try:
        root = _open_dirs(within, _parts_below(directory, within))
    except (OSError, Unreadable):
        return None
    found = _walk(root, directory, matches, max_depth, [max_entries])
    try:
        return next(found, None)
    finally:
        found.close()
        os.close(root)


def _walk(
    fd: int, where: Path, matches: Callable[[str], bool], depth: int, budget: list[int]
) -> Generator[Path, None, None]:
    try:
        with os.scandir(fd) as entries:
            listed = []
            for entry in entries:
                budget[0] -= 1
                if budget[0] < 0:
                    return
                listed.append(entry)
    except OSError:
        return
    below = []
    for entry in listed:
        try:
            if entry.is_file(follow_symlinks=False) and matches(entry.name):
                yield where / entry.name
            elif entry.is_dir(follow_symlinks=False) and depth > 0:
                below.append(entry.name)
        except OSError:
            continue
    for name in below:
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=fd)
        except OSError:
            continue
        try:
            yield from _walk(child, where / name, matches, depth - 1, budget)
        finally:
            os.close(child)


def _parts_below(path: Path, within: Path) -> tuple[str, ...]:
    """Return path's components below `within`; refuse a path that is not below it."""
    try:
        parts = Path(os.path.abspath(path)).relative_to(os.path.abspath(within)).parts
    except ValueError as exc:
        raise Unreadable(f"{path}: is not inside {within}") from exc
    return parts


def _open_dirs(within: Path, parts: tuple[str, ...]) -> int:
    """Open `within`, then each directory of parts below it without following a symlink."""
    fd = os.open(within, _DIR_FLAGS & ~os.O_NOFOLLOW)  # Baton's own directory
    for part in parts:
        try:
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
        except FileNotFoundError:
            os.close(fd)
            raise
        except OSError as exc:
            why = _SYMLINK if _is_symlink(part, fd) else _why(exc)
            os.close(fd)
            raise Unreadable(f"{within}: {part!r} below it {why}") from exc
        os.close(fd)
        fd = child
    return fd


def _is_symlink(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
    except OSError:
        return False


def _read_up_to(fd: int, count: int) -> bytes:
    chunks = []
    left = count
    while left > 0:
        chunk = os.read(fd, min(left, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _why(exc: OSError) -> str:
    if exc.errno == errno.ELOOP:
        return _SYMLINK
    if exc.errno == errno.ENOTDIR:
        return "is not a directory"
    return exc.strerror or str(exc)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a plain file"
