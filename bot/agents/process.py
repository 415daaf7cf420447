"""Run an agent process: its own process group, capped captured output, a wall-clock cap."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import os
import signal
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from subprocess import DEVNULL, PIPE
from typing import Any, BinaryIO

from bot.agents.sealed import REPORT_FD_ENV
from bot.domain.model import utcnow

KILL_GRACE_S = 10.0
EVIDENCE_LINES = 20
EVIDENCE_LINE_CHARS = 2000  # one evidence line: what a person reads, not a whole dump
MAX_LINE = 4 * 1024 * 1024
MARKER_ROOM = 128  # what the marker line takes, with room to spare
STDERR_GRACE_S = 2.0  # after the process exits, how long its stderr may take to close
PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# Looked up once, before any fork: a child between fork and exec may only call it.
_PRCTL = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)


def die_with_parent(parent: int) -> None:
    """Make this process get SIGKILL when its parent dies; exit now if it already has.

    Called in a child just after fork: a parent that died before the request was made
    is seen as a new parent pid, and the child goes at once.
    """
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(1)


@dataclass(frozen=True)
class Cap:
    """How much of one output stream Baton keeps on disk: its head, and a rolling tail."""

    head: int  # the first bytes, written as they come (whole lines only)
    tail: int  # the last bytes, in whole lines where they fit, written when the stream ends

    @property
    def on_disk(self) -> int:
        """Return the most a capture under this cap writes: head, marker line and tail."""
        return self.head + self.tail + MARKER_ROOM


STDOUT_CAP = Cap(head=32 * 1024 * 1024, tail=8 * 1024 * 1024)
STDERR_CAP = Cap(head=4 * 1024 * 1024, tail=1024 * 1024)


def cut_marker(cut: int) -> bytes:
    """Return the line that stands in a capture for the bytes it did not keep."""
    return f"[baton: {cut} bytes of output cut here]\n".encode()


class Capture:
    """What of one output stream goes to disk; pure: chunks in, bytes to write out.

    The head is written as it comes, so the file can be watched while the agent
    runs; once it is full, only the last lines are kept, and on close they are
    written after one marker line that says how many bytes were cut between.
    """

    def __init__(self, cap: Cap) -> None:
        self.cap = cap
        self.head_bytes = 0
        self.in_head = True
        self.ends_line = True  # the head so far ends with a newline (or is empty)
        self.tail = bytearray()
        self.cut = 0

    def feed(self, chunk: bytes) -> bytes:
        """Take the next chunk of the stream; return what to write now."""
        if self.in_head and self.head_bytes + len(chunk) <= self.cap.head:
            self.head_bytes += len(chunk)
            if chunk:
                self.ends_line = chunk.endswith(b"\n")
            return chunk
        self.in_head = False
        self.tail += chunk
        if len(self.tail) > 2 * self.cap.tail:
            self._trim()  # only now and then: many short lines cost no more than a few long ones
        return b""

    def close(self) -> bytes:
        """Return what to write once the stream has ended: the marker if any was cut, the tail."""
        self._trim()
        tail = bytes(self.tail)
        self.tail.clear()
        if not self.cut:
            return tail
        return (b"" if self.ends_line else b"\n") + cut_marker(self.cut) + tail

    def _trim(self) -> None:
        """Keep at most the last cap.tail bytes of the tail, from a line's start where one is."""
        excess = len(self.tail) - self.cap.tail
        if excess <= 0:
            return
        newline = self.tail.find(b"\n", max(excess - 1, 0))
        drop = newline + 1 if 0 <= newline < len(self.tail) - 1 else excess
        del self.tail[:drop]
        self.cut += drop


@dataclass(frozen=True)
class ProcessOutcome:
    """How an agent process ended and what it last said."""

    exit_code: int | None
    timed_out: bool
    started_at: datetime
    ended_at: datetime
    tail: list[str]
    spawn_error: str | None = None
    turn_capped: bool = False


async def run_process(
    argv: list[str],
    *,
    cwd: Path,
    env: dict[str, str],
    stdin: Path,
    transcript: Path,
    stderr: Path,
    deadline: datetime,
    stop_on: Callable[[str], bool] | None = None,
    stdout_cap: Cap | None = None,
    stderr_cap: Cap | None = None,
    sealed_report: bool = False,
) -> ProcessOutcome:
    """Run argv until it exits, the deadline passes or stop_on flags a stdout line.

    Both output streams are pipes Baton drains into the transcript and stderr files,
    each kept to its cap (STDOUT_CAP, STDERR_CAP unless given): the child never
    writes a file itself. With sealed_report the child's stdout is /dev/null and its
    report comes on a pipe handed over as the descriptor REPORT_FD_ENV names, which a
    sealed jail makes the CLI's stdout (bot.agents.sealed).
    """
    started = utcnow()
    transcript.parent.mkdir(parents=True, exist_ok=True)
    stderr.parent.mkdir(parents=True, exist_ok=True)
    out_lines: deque[str] = deque(maxlen=EVIDENCE_LINES)
    err_lines: deque[str] = deque(maxlen=EVIDENCE_LINES)
    with (
        stdin.open("rb") as stdin_file,
        _created(transcript) as out_file,
        _created(stderr) as err_file,
    ):
        try:
            child = await _spawn(
                argv,
                cwd=cwd,
                env=env,
                stdin=stdin_file,
                start_new_session=True,  # its own process group, so the cap kills its children too
                # Never outliving the work horse: a jailed agent's bwrap takes everything in
                # its PID namespace down with it.
                preexec_fn=functools.partial(die_with_parent, os.getpid()),
                sealed_report=sealed_report,
            )
        except OSError as exc:
            return ProcessOutcome(None, False, started, utcnow(), [], spawn_error=str(exc))
        proc = child.process
        assert proc.stderr is not None
        stdout, errors = child.report, proc.stderr
        draining = asyncio.create_task(
            _drain(errors, err_file, stderr_cap or STDERR_CAP, err_lines, None)
        )

        async def until_exit() -> bool:
            capped = await _drain(stdout, out_file, stdout_cap or STDOUT_CAP, out_lines, stop_on)
            if not capped:
                await child.exited.wait()
            return capped

        timeout = max((deadline - started).total_seconds(), 0.0)
        timed_out = turn_capped = False
        try:
            turn_capped = await asyncio.wait_for(until_exit(), timeout)
            if turn_capped:
                await _terminate(child)
        except TimeoutError:
            timed_out = True
            await _terminate(child)
        except asyncio.CancelledError:
            # An operator stopped the run: take the agent and its children down with it.
            await asyncio.shield(_terminate(child))
            await _finish(child, draining)
            raise
        await _finish(child, draining)
    tail = [*out_lines, *(f"stderr: {line}" for line in err_lines)][-EVIDENCE_LINES:]
    return ProcessOutcome(
        proc.returncode,
        timed_out,
        started,
        utcnow(),
        [line[:EVIDENCE_LINE_CHARS] for line in tail],
        turn_capped=turn_capped,
    )


def _created(path: Path) -> BinaryIO:
    """Create path afresh for writing: whatever was there (a symlink, a hard link) is replaced."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    return os.fdopen(os.open(path, flags, 0o644), "wb")


async def _chunks(stream: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """Yield the stream's lines; a line over MAX_LINE comes in pieces, nothing lost."""
    while True:
        try:
            chunk = await stream.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            chunk = exc.partial  # the end of the stream
        except asyncio.LimitOverrunError:
            chunk = await stream.read(MAX_LINE)  # what is buffered: a piece of the long line
        if not chunk:
            return
        yield chunk


async def _drain(
    stream: asyncio.StreamReader,
    out: BinaryIO,
    cap: Cap,
    lines: deque[str],
    stop_on: Callable[[str], bool] | None,
) -> bool:
    """Copy a stream into out within its cap; return True once stop_on flags a line."""
    capture = Capture(cap)
    try:
        async for chunk in _chunks(stream):
            if head := capture.feed(chunk):
                out.write(head)
                out.flush()
            text = chunk.decode(errors="replace").rstrip("\n")
            lines.append(text)
            if stop_on is not None and stop_on(text):
                return True
        return False
    finally:
        out.write(capture.close())
        out.flush()


async def _finish(child: _Child, draining: asyncio.Task[bool]) -> None:
    """Let stderr reach its end, then close Baton's ends of the pipes.

    A child that outlived the agent may hold a pipe open; Baton stops waiting for
    it after STDERR_GRACE_S and closes its own ends, so nothing is left reading.
    """
    try:
        await _stop(draining, STDERR_GRACE_S)
    finally:
        child.transport.close()
        if child.report_transport is not None:
            child.report_transport.close()


async def _stop(task: asyncio.Task[bool], grace: float) -> None:
    """Give a draining task `grace` seconds to reach the end of its stream, then cancel it."""
    done, _ = await asyncio.wait({task}, timeout=grace)
    if not done:
        task.cancel()
        await asyncio.wait({task})
    if not task.cancelled() and (failure := task.exception()) is not None:
        raise failure


async def _terminate(child: _Child) -> None:
    pid = child.process.pid
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(child.exited.wait(), KILL_GRACE_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        await child.exited.wait()


class _Watched(asyncio.subprocess.SubprocessStreamProtocol):
    """asyncio's own protocol for a child's pipes, which also tells when the child exited.

    Process.wait() waits for every pipe to close as well, and a child that left the
    process group can hold one open for as long as it likes.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=MAX_LINE, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


@dataclass(frozen=True)
class _Child:
    process: asyncio.subprocess.Process
    transport: asyncio.SubprocessTransport
    exited: asyncio.Event
    report: asyncio.StreamReader  # its stdout, or the sealed report pipe
    report_transport: asyncio.ReadTransport | None = None


async def _spawn(
    argv: list[str], *, env: dict[str, str], sealed_report: bool, **options: Any
) -> _Child:
    """Start argv with its stdout and stderr piped to Baton, as create_subprocess_exec does.

    With sealed_report its stdout is /dev/null and its report a pipe of its own, passed
    at the descriptor number REPORT_FD_ENV says.
    """
    loop = asyncio.get_running_loop()
    if not sealed_report:
        transport, watched = await loop.subprocess_exec(
            lambda: _Watched(loop), *argv, env=env, stdout=PIPE, stderr=PIPE, **options
        )
        process = asyncio.subprocess.Process(transport, watched, loop)
        assert process.stdout is not None
        return _Child(process, transport, watched.exited, process.stdout)
    read_end, write_end = os.pipe()
    try:
        transport, watched = await loop.subprocess_exec(
            lambda: _Watched(loop),
            *argv,
            env={**env, REPORT_FD_ENV: str(write_end)},
            stdout=DEVNULL,
            stderr=PIPE,
            pass_fds=(write_end,),
            **options,
        )
    except BaseException:
        os.close(read_end)
        raise
    finally:
        os.close(write_end)
    report = asyncio.StreamReader(limit=MAX_LINE, loop=loop)
    pipe, _ = await loop.connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(report, loop=loop), os.fdopen(read_end, "rb", 0)
    )
    process = asyncio.subprocess.Process(transport, watched, loop)
    return _Child(process, transport, watched.exited, report, pipe)
