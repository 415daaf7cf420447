"""Run a repository's `.sandbox/ci` in a fresh checkout of one commit."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal
import tempfile
import time
from dataclasses import dataclass

from bot.sandbox.git_backend import GitError, GitRepo, run_git

CI_PATH = ".sandbox/ci"
LOG_LIMIT = 60_000
# How long to keep reading output after the script exits (its children may hold the pipe).
DRAIN_SECONDS = 5.0


@dataclass(frozen=True)
class CiResult:
    """The outcome of one CI run, as a check run reports it."""

    conclusion: str
    title: str
    summary: str
    text: str


async def has_ci(git: GitRepo, sha: str) -> bool:
    """Tell whether a commit carries a CI script."""
    entry = await git.entry(sha, CI_PATH)
    return entry is not None and entry.type == "blob"


def no_ci() -> CiResult:
    """Return the result for a commit without a CI script."""
    return CiResult("success", "No CI", "No .sandbox/ci at this head", "")


async def run_ci(git: GitRepo, sha: str, time_limit: float) -> CiResult:
    """Check `sha` out into a temporary directory and run its CI script there."""
    with tempfile.TemporaryDirectory(prefix="sandbox-ci-", ignore_cleanup_errors=True) as tmp:
        root = pathlib.Path(tmp)
        work = root / "checkout"
        home = root / "home"
        home.mkdir()
        try:
            await run_git(root, "clone", "--quiet", "--no-checkout", str(git.path), str(work))
            await run_git(work, "checkout", "--quiet", "--detach", sha)
        except GitError as exc:
            return CiResult(
                "failure", "CI could not start", "Checking out the commit failed.", str(exc)
            )
        env = {
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "CI": "true",
        }
        return await _execute(work, env, time_limit)


async def _execute(work: pathlib.Path, env: dict[str, str], time_limit: float) -> CiResult:
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            str(work / CI_PATH),
            cwd=work,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        return CiResult(
            "failure", "CI could not start", f"`{CI_PATH}` could not be executed: {exc}", ""
        )
    log = bytearray()
    reader = asyncio.create_task(_collect(proc, log))
    code: int | None = None
    try:
        code = await asyncio.wait_for(proc.wait(), time_limit)
    except TimeoutError:
        pass
    finally:
        # The script runs in its own session; stop whatever of it is left (on timeout or cancel).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        if code is None:
            await proc.wait()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(reader, DRAIN_SECONDS)
    text = _tail(log)
    elapsed = time.monotonic() - started
    if code is None:
        return CiResult(
            "timed_out", "CI timed out", f"`{CI_PATH}` was stopped after {time_limit:g} s.", text
        )
    if code == 0:
        return CiResult(
            "success", "CI passed", f"`{CI_PATH}` exited 0 after {elapsed:.1f} s.", text
        )
    return CiResult(
        "failure", "CI failed", f"`{CI_PATH}` exited {code} after {elapsed:.1f} s.", text
    )


async def _collect(proc: asyncio.subprocess.Process, log: bytearray) -> None:
    assert proc.stdout is not None
    while chunk := await proc.stdout.read(65536):
        log.extend(chunk)
        del log[: max(len(log) - LOG_LIMIT, 0)]


def _tail(log: bytearray) -> str:
    text = log.decode(errors="replace")
    return text[-LOG_LIMIT:]
