"""All of Baton's git: one wrapper, argv lists only, tokens passed per command and masked."""

from __future__ import annotations

import asyncio
import base64
import fcntl
import logging
import os
import re
import unicodedata
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from bot.logs import redact

log = logging.getLogger(__name__)

GIT_TIMEOUT_S = 600.0
BRANCH_PREFIX = "baton/"
_NOT_SLUG = re.compile(r"[^a-z0-9]+")


class GitError(Exception):
    """A git command failed; the message is safe to log (tokens masked)."""

    def __init__(self, argv: list[str], returncode: int, stderr: str) -> None:
        self.argv = argv
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(f"git {' '.join(argv)} exited {returncode}: {stderr.strip()[-800:]}")


def branch_name(number: int, title: str) -> str:
    """Return Baton's branch for an issue: its number and a slug of its title.

    The slug keeps only lowercase ASCII letters and digits, so whatever the
    title holds (shell metacharacters, unicode, ref syntax) the name is a
    valid ref that every shell and tool treats literally.
    """
    ascii_title = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    slug = _NOT_SLUG.sub("-", ascii_title.lower()).strip("-")[:40].rstrip("-")
    return f"{BRANCH_PREFIX}issue-{number}-{slug}" if slug else f"{BRANCH_PREFIX}issue-{number}"


def auth_header(token: str) -> str:
    """Return the http.extraheader value that authenticates git as an installation."""
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return f"AUTHORIZATION: basic {basic}"


@dataclass(frozen=True)
class Identity:
    """Who Baton's commits are by."""

    name: str
    email: str


class Git:
    """Run git commands against one directory at a time."""

    def __init__(self, identity: Identity) -> None:
        self.identity = identity

    async def run(self, cwd: Path, *args: str, token: str | None = None) -> str:
        """Run `git -C cwd args`, returning stdout; raise GitError with secrets masked."""
        config = [
            "-c",
            f"user.name={self.identity.name}",
            "-c",
            f"user.email={self.identity.email}",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.hooksPath=/dev/null",
        ]
        secrets: list[str] = []
        if token is not None:
            header = auth_header(token)
            config += ["-c", f"http.extraheader={header}"]
            secrets = [token, header.split()[-1]]
        argv = ["-C", str(cwd), *config, *args]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/"),
            "LANG": "C.UTF-8",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        proc = await asyncio.create_subprocess_exec(
            "git",
            *argv,
            env=env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), GIT_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise GitError(_mask(argv, secrets), -9, "timed out") from None
        if proc.returncode != 0:
            raise GitError(
                _mask(argv, secrets),
                proc.returncode or 1,
                redact(err.decode(errors="replace"), secrets),
            )
        return out.decode(errors="replace")


def _mask(argv: list[str], secrets: list[str]) -> list[str]:
    return [redact(arg, secrets) for arg in argv]


@asynccontextmanager
async def _file_lock(path: Path) -> AsyncIterator[None]:
    """Hold an exclusive lock on path across this machine's workers."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


@dataclass(frozen=True)
class Rebased:
    """A branch replayed onto a new base: its new tip, or the files that conflicted."""

    tip: str | None
    conflicts: tuple[str, ...]


class Workspace:
    """Per-repository bare mirrors and per-issue worktrees under one data directory."""

    def __init__(self, git: Git, data_dir: Path) -> None:
        self.git = git
        self.data_dir = data_dir

    def mirror_path(self, repo: str) -> Path:
        """Return where a repository's bare mirror lives."""
        return self.data_dir / "mirrors" / f"{repo}.git"

    def worktree_path(self, repo: str, number: int) -> Path:
        """Return where the worktree for one issue lives."""
        return self.data_dir / "worktrees" / repo / f"issue-{number}"

    async def refresh_mirror(self, repo: str, clone_url: str, token: str) -> Path:
        """Create the mirror if needed and fetch every branch into refs/remotes/origin."""
        mirror = self.mirror_path(repo)
        async with _file_lock(mirror.with_suffix(".lock")):
            if not (mirror / "HEAD").exists():
                mirror.mkdir(parents=True, exist_ok=True)
                await self.git.run(mirror, "init", "--quiet", "--bare")
            # Fetch into remote-tracking refs: a branch checked out in a worktree
            # can never be a fetch target.
            await self.git.run(
                mirror,
                "fetch",
                "--quiet",
                "--prune",
                "--no-tags",
                clone_url,
                "+refs/heads/*:refs/remotes/origin/*",
                token=token,
            )
        return mirror

    async def provision(self, repo: str, number: int, branch: str, start: str) -> Path:
        """Return a fresh worktree for the issue on branch, starting at start."""
        mirror = self.mirror_path(repo)
        path = self.worktree_path(repo, number)
        async with _file_lock(mirror.with_suffix(".lock")):
            if path.exists():
                await self.git.run(mirror, "worktree", "remove", "--force", str(path))
            await self.git.run(mirror, "worktree", "prune")
            path.parent.mkdir(parents=True, exist_ok=True)
            await self.git.run(mirror, "worktree", "add", "--quiet", "-B", branch, str(path), start)
        return path

    def worktree_issues(self, repo: str) -> list[int]:
        """Return the issues of the repository that have a worktree on this machine."""
        names = (path.name for path in (self.data_dir / "worktrees" / repo).glob("issue-*"))
        return sorted(int(n) for name in names if (n := name.removeprefix("issue-")).isdigit())

    async def remove(self, repo: str, number: int) -> None:
        """Remove the issue's worktree, if it exists."""
        mirror = self.mirror_path(repo)
        if not mirror.exists():
            return  # this machine never worked on the repository: nothing of it is here
        path = self.worktree_path(repo, number)
        async with _file_lock(mirror.with_suffix(".lock")):
            if path.exists():
                await self.git.run(mirror, "worktree", "remove", "--force", str(path))
            await self.git.run(mirror, "worktree", "prune")

    async def rev_parse(self, cwd: Path, rev: str) -> str:
        """Return the sha rev names."""
        return (await self.git.run(cwd, "rev-parse", "--verify", f"{rev}^{{commit}}")).strip()

    async def commit_leftovers(self, worktree: Path, message: str) -> bool:
        """Commit whatever the agent left uncommitted; return whether there was any."""
        if not (await self.git.run(worktree, "status", "--porcelain")).strip():
            return False
        await self.git.run(worktree, "add", "--all")
        await self.git.run(worktree, "commit", "--quiet", "--no-verify", "-m", message)
        return True

    async def commits_since(self, worktree: Path, base: str) -> int:
        """Return how many commits HEAD has that base does not."""
        return int((await self.git.run(worktree, "rev-list", "--count", f"{base}..HEAD")).strip())

    async def has_diff(self, worktree: Path, base: str) -> bool:
        """Return whether HEAD's tree differs from base's."""
        out = await self.git.run(worktree, "diff", "--name-only", base, "HEAD")
        return bool(out.strip())

    async def remote_branch(self, repo: str, branch: str) -> str | None:
        """Return the sha the branch had on GitHub at the last fetch, if it existed."""
        out = await self.git.run(
            self.mirror_path(repo),
            "for-each-ref",
            "--format=%(objectname)",
            f"refs/remotes/origin/{branch}",
        )
        return out.strip() or None

    async def is_dirty(self, repo: str, number: int) -> bool:
        """Return whether the issue's worktree on this machine holds uncommitted work."""
        path = self.worktree_path(repo, number)
        if not path.exists():
            return False
        return bool((await self.git.run(path, "status", "--porcelain")).strip())

    async def rebase_branch(
        self, repo: str, branch: str, onto: str, built_on: str, clone_url: str, token: str
    ) -> Rebased:
        """Replay branch's own commits onto onto, and push it (leased on its tip).

        The branch's own commits are those since its merge base with built_on, the
        tip of what it was built on then. Runs in a worktree of its own, so an
        issue's worktree is never disturbed; a conflict leaves the branch as it
        was and names the conflicting files.
        """
        mirror = self.mirror_path(repo)
        tip = await self.rev_parse(mirror, f"refs/remotes/origin/{branch}")
        path = self.data_dir / "rebases" / repo / branch.replace("/", "-")
        async with _file_lock(mirror.with_suffix(".lock")):
            if path.exists():
                await self.git.run(mirror, "worktree", "remove", "--force", str(path))
            await self.git.run(mirror, "worktree", "prune")
            path.parent.mkdir(parents=True, exist_ok=True)
            await self.git.run(mirror, "worktree", "add", "--quiet", "--detach", str(path), tip)
        try:
            upstream = (await self.git.run(path, "merge-base", "HEAD", built_on)).strip()
            try:
                await self.git.run(path, "rebase", "--quiet", "--onto", onto, upstream)
            except GitError:
                conflicts = await self.git.run(path, "diff", "--name-only", "--diff-filter=U")
                await self.git.run(path, "rebase", "--abort")
                return Rebased(tip=None, conflicts=tuple(conflicts.split()))
            new_tip = await self.rev_parse(path, "HEAD")
            if new_tip != tip:
                await self.push(path, clone_url, branch, token, tip)
            return Rebased(tip=new_tip, conflicts=())
        finally:
            async with _file_lock(mirror.with_suffix(".lock")):
                await self.git.run(mirror, "worktree", "remove", "--force", str(path))

    async def push(
        self, worktree: Path, clone_url: str, branch: str, token: str, expected: str | None
    ) -> None:
        """Push HEAD to branch, replacing it only if it is still at expected.

        Baton owns its branches, so a new attempt may replace an old one; the
        lease keeps it from overwriting anything a human pushed since the fetch.
        """
        lease = f"--force-with-lease=refs/heads/{branch}:{expected or ''}"
        await self.git.run(
            worktree,
            "push",
            "--quiet",
            lease,
            clone_url,
            f"HEAD:refs/heads/{branch}",
            token=token,
        )
