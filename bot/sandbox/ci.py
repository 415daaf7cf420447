"""Run a repository's `.sandbox/ci` in a fresh checkout of one commit, once per check.

A commit without `.sandbox/ci` has no CI. With it, `.sandbox/checks` (one check name per
line; blank lines and `#` comments ignored) names a matrix: the script runs once per name
with SANDBOX_CHECK=<name>, every run in the same checkout. Without that file the commit
has one check, `ci`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import re
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass

from bot.sandbox.git_backend import GitRepo, run_git

CI_PATH = ".sandbox/ci"
CHECKS_PATH = ".sandbox/checks"
DEFAULT_CHECK = "ci"
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


# GitHub runs no workflow for a push whose head commit's message holds one of these
# ("Skipping workflow runs"), nor any check for a `skip-checks: true` trailer.
SKIP_DIRECTIVES = ("[skip ci]", "[ci skip]", "[no ci]", "[skip actions]", "[actions skip]")
SKIP_TRAILER = re.compile(r"^skip-checks: ?true$", re.MULTILINE)


def skips_ci(message: str) -> bool:
    """Tell whether a commit message asks GitHub to run no workflow and no check for it."""
    return any(d in message for d in SKIP_DIRECTIVES) or SKIP_TRAILER.search(message) is not None


async def planned_checks(git: GitRepo, sha: str) -> list[str]:
    """Name the checks CI runs for a commit: none without a CI script, or if it says skip.

    Mirrors https://docs.github.com/en/actions/managing-workflow-runs-and-deployments/managing-workflow-runs/skipping-workflow-runs.
    """
    if skips_ci((await git.commit(sha)).message):
        return []
    script = await git.entry(sha, CI_PATH)
    if script is None or script.type != "blob":
        return []
    listing = await git.entry(sha, CHECKS_PATH)
    if listing is None or listing.type != "blob":
        return [DEFAULT_CHECK]
    lines = (await git.blob(listing.sha)).decode(errors="replace").splitlines()
    names = [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]
    return list(dict.fromkeys(names)) or [DEFAULT_CHECK]


@contextlib.asynccontextmanager
async def checkout(git: GitRepo, sha: str) -> AsyncIterator[pathlib.Path]:
    """Check `sha` out into a temporary directory for the duration of the block.

    Raises GitError when the commit cannot be checked out.
    """
    with tempfile.TemporaryDirectory(prefix="sandbox-ci-", ignore_cleanup_errors=True) as tmp:
        work = pathlib.Path(tmp) / "checkout"
        await run_git(
            pathlib.Path(tmp), "clone", "--quiet", "--no-checkout", str(git.path), str(work)
        )
        await run_git(work, "checkout", "--quiet", "--detach", sha)
        yield work


def checkout_failed(reason: str) -> CiResult:
    """Return the result of a run whose commit could not be checked out."""
    return CiResult("failure", "CI could not start", "Checking out the commit failed.", reason)


async def run_check(
    work: pathlib.Path, name: str, time_limit: float, secrets: Mapping[str, str]
) -> CiResult:
    """Run the CI script of a checkout for one check, with a home of its own and the
    repository's secrets in its environment, masked in its log as Actions masks them."""
    with tempfile.TemporaryDirectory(prefix="sandbox-ci-home-", ignore_cleanup_errors=True) as home:
        env = {
            **secrets,
            "PATH": os.environ.get("PATH", os.defpath),
            "HOME": home,
            "LANG": "C.UTF-8",
            "CI": "true",
            "SANDBOX_CHECK": name,
        }
        return await _execute(work, env, time_limit, name, secrets)


def masked(log: bytes, secrets: Mapping[str, str]) -> bytes:
    """Return log with each secret's value, line by line, shown as `***` (GitHub: "Using
    secrets in GitHub Actions"; a value printed any other way, encoded say, shows)."""
    for value in secrets.values():
        for line in value.splitlines():
            if line.strip():
                log = log.replace(line.encode(), b"***")
    return log


async def _execute(
    work: pathlib.Path,
    env: dict[str, str],
    time_limit: float,
    name: str,
    secrets: Mapping[str, str],
) -> CiResult:
    script = f"`{CI_PATH}`" if name == DEFAULT_CHECK else f"`SANDBOX_CHECK={name} {CI_PATH}`"
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
    text = _tail(masked(bytes(log), secrets))
    elapsed = time.monotonic() - started
    if code is None:
        return CiResult(
            "timed_out", "CI timed out", f"{script} was stopped after {time_limit:g} s.", text
        )
    if code == 0:
        return CiResult("success", "CI passed", f"{script} exited 0 after {elapsed:.1f} s.", text)
    return CiResult("failure", "CI failed", f"{script} exited {code} after {elapsed:.1f} s.", text)


async def _collect(proc: asyncio.subprocess.Process, log: bytearray) -> None:
    assert proc.stdout is not None
    while chunk := await proc.stdout.read(65536):
        log.extend(chunk)
        del log[: max(len(log) - LOG_LIMIT, 0)]


def _tail(log: bytes) -> str:
    text = log.decode(errors="replace")
    return text[-LOG_LIMIT:]
