"""Run an agent process: its own process group, captured output, a wall-clock cap."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bot.model import utcnow

KILL_GRACE_S = 10.0
EVIDENCE_LINES = 20
MAX_LINE = 4 * 1024 * 1024


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
) -> ProcessOutcome:
    """Run argv until it exits, the deadline passes or stop_on flags a stdout line."""
    started = utcnow()
    transcript.parent.mkdir(parents=True, exist_ok=True)
    tail: deque[str] = deque(maxlen=EVIDENCE_LINES)
    with stdin.open("rb") as stdin_file, stderr.open("wb") as stderr_file:
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=cwd,
                env=env,
                stdin=stdin_file,
                stdout=asyncio.subprocess.PIPE,
                stderr=stderr_file,
                start_new_session=True,  # its own process group, so the cap kills its children too
                limit=MAX_LINE,
            )
        except OSError as exc:
            return ProcessOutcome(None, False, started, utcnow(), [], spawn_error=str(exc))
        assert proc.stdout is not None
        timeout = max((deadline - started).total_seconds(), 0.0)
        timed_out = turn_capped = False
        try:
            turn_capped = await asyncio.wait_for(
                _stream(proc.stdout, transcript, tail, stop_on), timeout
            )
            if turn_capped:
                await _terminate(proc)
            else:
                await proc.wait()
        except TimeoutError:
            timed_out = True
            await _terminate(proc)
        except asyncio.CancelledError:
            # An operator stopped the run: take the agent and its children down with it.
            await asyncio.shield(_terminate(proc))
            raise
    tail.extend(_last_lines(stderr))
    return ProcessOutcome(
        proc.returncode, timed_out, started, utcnow(), list(tail), turn_capped=turn_capped
    )


async def _stream(
    stdout: asyncio.StreamReader,
    transcript: Path,
    tail: deque[str],
    stop_on: Callable[[str], bool] | None,
) -> bool:
    with transcript.open("wb") as out:
        while True:
            try:
                line = await stdout.readline()
            except ValueError:  # a line over MAX_LINE: keep what fits, carry on
                line = await stdout.read(MAX_LINE)
            if not line:
                return False
            out.write(line)
            out.flush()
            text = line.decode(errors="replace").rstrip("\n")
            tail.append(text)
            if stop_on is not None and stop_on(text):
                return True


async def _terminate(proc: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(proc.wait(), KILL_GRACE_S)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()


def _last_lines(path: Path) -> list[str]:
    try:
        with path.open("rb") as f:
            f.seek(max(path.stat().st_size - 8192, 0))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return []
    return [f"stderr: {line}" for line in lines[-EVIDENCE_LINES:]]
