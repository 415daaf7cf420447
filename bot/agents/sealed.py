"""The CLI's report reaches Baton on a pipe that no tool in the jail can write.

Every process in the jail runs as the same user, and a process may open another's
`/proc/PID/fd/N` when it may trace it. The kernel forbids that for a process that is
not dumpable, and it makes a process non-dumpable when it executes a file that its user
cannot read (`would_dump` in fs/exec.c). So Baton runs the CLI from an execute-only
copy of its native executable, bound over the original inside the jail, and hands it
the report pipe as its stdout while nothing else in the jail holds that pipe:

- bubblewrap's own first process keeps only stdin, stdout and stderr and closes the
  rest, so Baton gives bwrap a stdout of /dev/null and the pipe as another descriptor,
  named by REPORT_FD_ENV;
- HANDOVER_SOURCE, the jail's first command, moves that descriptor to stdout and
  becomes the next command (the network bridge or the CLI), before any tool exists;
- the network bridge gives its stdout up once it has started the CLI.

A tool can still kill the CLI; then the report ends early, and Baton reads a run that
ended without its result, never a result the tool wrote.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path

REPORT_FD_ENV = "BATON_REPORT_FD"
EXECUTE_ONLY = 0o111
# A copy no jail was made with for a week is removed when another is made: a CLI's old
# version, or what a worker that died while copying left aside.
UNUSED_COPY_S = 7 * 24 * 3600
ELF_MAGIC = b"\x7fELF"

# Run as `python -I -S -c HANDOVER_SOURCE COMMAND...`. A command run in the jail without
# a report (a repository's setup command, say) has no REPORT_FD_ENV and keeps its stdout.
HANDOVER_SOURCE = f"""\
import os, sys
fd = os.environ.pop({REPORT_FD_ENV!r}, None)
if fd is not None:
    os.dup2(int(fd), 1)
    os.close(int(fd))
os.execvp(sys.argv[1], sys.argv[1:])
"""


def is_native(program: Path) -> bool:
    """Return whether program is an executable the kernel runs itself (ELF), not a script.

    A script's interpreter must read it, so a script cannot be made execute-only.
    """
    try:
        with program.open("rb") as file:
            return file.read(len(ELF_MAGIC)) == ELF_MAGIC
    except OSError:
        return False


def execute_only_copy(program: Path, into: Path) -> Path:
    """Return an execute-only copy of program under into, made once per version of it.

    A copy is named by the program's path, size and modification time, and appears
    whole or not at all (made aside, then renamed), so workers sharing into never see a
    partial one. Each use marks it used; making one removes those unused for a week.
    """
    real = Path(os.path.realpath(program))
    facts = real.stat()
    key = hashlib.sha256(f"{real}\0{facts.st_size}\0{facts.st_mtime_ns}".encode()).hexdigest()
    home = into / key[:32]
    copy = home / real.name
    if copy.is_file() and (copy.stat().st_mode & 0o777) == EXECUTE_ONLY:
        os.utime(home)
        return copy
    into.mkdir(parents=True, exist_ok=True)
    remove_unused(into, time.time() - UNUSED_COPY_S)
    aside = Path(tempfile.mkdtemp(prefix=".making-", dir=into))
    try:
        shutil.copyfile(real, aside / real.name)
        (aside / real.name).chmod(EXECUTE_ONLY)
        aside.chmod(0o755)
        try:
            aside.rename(home)
        except OSError:  # another worker made it first
            if not copy.is_file():
                raise
    finally:
        shutil.rmtree(aside, ignore_errors=True)
    if (copy.stat().st_mode & 0o777) != EXECUTE_ONLY:  # a filesystem that ignores chmod
        raise OSError(f"{copy} is not execute-only: its filesystem keeps no modes")
    return copy


def remove_unused(into: Path, before: float) -> None:
    """Remove the copies (and leftovers of copying) under into last used before then."""
    for entry in into.iterdir():
        with contextlib.suppress(FileNotFoundError):  # another worker's removal
            if entry.lstat().st_mtime < before:
                shutil.rmtree(entry, ignore_errors=True)
