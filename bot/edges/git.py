"""All of Baton's git: one wrapper, argv lists only, tokens passed per command and masked."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import logging
import os
import re
import shutil
import signal
import tempfile
import unicodedata
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO
from urllib.parse import urlsplit

from bot.agents.jail import Jails
from bot.domain.inert import inert, no_skip_directives
from bot.ops.logs import redact

log = logging.getLogger(__name__)

GIT_TIMEOUT_S = 600.0
OUTPUT_CAP = 1024 * 1024  # what Baton reads of a git command run in the agent's checkout
CHECKOUT_GIT_TIMEOUT_S = 120.0  # the agent's own filters run in them: bounded tightly
BUNDLE_HEADER_CAP = 1024 * 1024
BUNDLE_CAP = 2 * 1024**3  # the most the agent's commits of one attempt may weigh
MIRROR_CONFIG = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = true\n"
BRANCH_PREFIX = "baton/"
SALVAGE_CAP = 16 * 1024**2  # the most a salvage kept for another machine may weigh
SALVAGE_STORED_CAP = 4 * SALVAGE_CAP  # past this, its objects cannot bundle under the cap
SALVAGE_INDEX = "baton-salvage-index"  # in the checkout's git directory: the agent's own index
SALVAGE_REF = "refs/baton/salvage"  # in the checkout: names the snapshot for its bundle
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


def salvage_ref(number: int) -> str:
    """Return the mirror's ref of an issue's uncommitted work, saved at each checkpoint."""
    return f"{SALVAGE_REF}/issue-{number}"


@dataclass(frozen=True)
class Salvage:
    """The agent's uncommitted work, saved as a commit on top of what it had committed."""

    sha: str
    key: str  # the snapshot's tree and the agent's HEAD it was taken on: equal keys, same work


@dataclass(frozen=True)
class Salvaged:
    """A salvage an earlier attempt kept that a continuation starts from."""

    sha: str
    saved_at: datetime
    files: tuple[str, ...]


def auth_header(token: str) -> str:
    """Return the http.extraheader value that authenticates git as an installation."""
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    return f"AUTHORIZATION: basic {basic}"


@dataclass(frozen=True)
class Identity:
    """Who Baton's commits are by."""

    name: str
    email: str

    @classmethod
    def of(
        cls,
        name: str | None,
        email: str | None,
        bot_login: str | None,
        bot_user_id: int | None,
        api_url: str,
    ) -> Identity:
        """Return the configured identity, or the App's bot and its noreply address (pure).

        GitHub links a commit to the App when its email is the bot's noreply address,
        `<id>+<login>@users.noreply.<host>`; until the bot is known, Baton's own name.
        """
        login = bot_login or "baton[bot]"
        host = urlsplit(api_url).hostname or "github.com"
        host = "github.com" if host == "api.github.com" else host
        noreply = (
            f"{bot_user_id}+{login}@users.noreply.{host}"
            if bot_user_id is not None
            else f"{login}@users.noreply.{host}"
        )
        return cls(name or login, email or noreply)

    def config(self) -> list[str]:
        """Return the `-c` options every git of Baton's runs with: who, unsigned, no hooks."""
        return [
            "-c",
            f"user.name={self.name}",
            "-c",
            f"user.email={self.email}",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.hooksPath=/dev/null",
        ]


class Git:
    """Run git commands against one directory at a time."""

    def __init__(self, identity: Identity) -> None:
        self.identity = identity

    async def run(
        self, cwd: Path, *args: str, token: str | None = None, stdin: BinaryIO | None = None
    ) -> str:
        """Run `git -C cwd args`, returning stdout; raise GitError with secrets masked.

        No system or global configuration is read: a filter, LFS or URL rewrite set up
        for the worker's own user never applies to trees the agent wrote.
        """
        return (await self.run_bytes(cwd, *args, token=token, stdin=stdin)).decode(errors="replace")

    async def run_bytes(
        self, cwd: Path, *args: str, token: str | None = None, stdin: BinaryIO | None = None
    ) -> bytes:
        """Run `git -C cwd args` as run does, returning stdout as git wrote it."""
        argv = ["-C", str(cwd), *self.identity.config(), *args]
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": os.environ.get("HOME", "/"),
            "LANG": "C.UTF-8",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_LFS_SKIP_SMUDGE": "1",
        }
        secrets: list[str] = []
        if token is not None:
            # Through git's environment, so the token is in no process's argv.
            header = auth_header(token)
            env |= {
                "GIT_CONFIG_COUNT": "1",
                "GIT_CONFIG_KEY_0": "http.extraheader",
                "GIT_CONFIG_VALUE_0": header,
            }
            secrets = [token, header.split()[-1]]
        proc = await asyncio.create_subprocess_exec(
            "git",
            *argv,
            env=env,
            stdin=stdin if stdin is not None else asyncio.subprocess.DEVNULL,
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
        return out


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


@dataclass(frozen=True)
class TrialMerge:
    """What merging a base branch into a head would do: tried in the mirror, pushed nowhere."""

    parents: tuple[str, ...]  # the head's own parents, first parent first
    behind: bool  # the base has commits the head lacks
    conflicts: tuple[str, ...]  # the files the merge conflicts in


class CheckoutGit:
    """Git in the agent's checkout: only ever inside the agent's jail, never with a credential.

    The checkout's config, hooks, attributes and fsmonitor are the agent's to write, so
    whatever they make git run runs where the agent itself runs. Output is read under a cap.
    """

    def __init__(self, identity: Identity, jails: Jails | None) -> None:
        self.identity = identity
        self.jails = jails

    async def run(
        self,
        checkout: Path,
        objects: Path,
        *args: str,
        check: bool = True,
        stdout_to: Path | None = None,
        extra_env: Mapping[str, str] | None = None,
    ) -> Done:
        """Run `git args` in checkout; objects is the mirror's store its alternates name.

        With stdout_to, what git prints goes to that file (outside the jail's view), up
        to BUNDLE_CAP bytes. extra_env adds to git's environment.
        """
        config = [*self.identity.config(), "-c", "core.fsmonitor=false"]
        with tempfile.TemporaryDirectory(prefix="baton-git-") as scratch_dir:
            scratch = Path(scratch_dir)
            env = {
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": str(scratch / "home"),
                "LANG": "C.UTF-8",
                "GIT_TERMINAL_PROMPT": "0",
                "GIT_CONFIG_NOSYSTEM": "1",
                **(extra_env or {}),
            }
            argv = ["git", *config, *args]
            jail = None
            if self.jails is not None:
                jail = self.jails.make(
                    worktree=checkout,
                    home=scratch / "home",
                    scratch=scratch,
                    readable=(objects,),
                )
            if jail is not None:
                argv, env = jail.command(argv), jail.environment(env)
            else:
                (scratch / "home").mkdir()
            done = await _run_capped(argv, checkout, env, stdout_to)
        if check and done.returncode != 0:
            raise GitError(list(args), done.returncode, done.stderr)
        return done


@dataclass(frozen=True)
class Done:
    """A finished command: its exit code and what it printed, each read under a cap."""

    returncode: int
    stdout: str
    stderr: str


async def _run_capped(
    argv: list[str], cwd: Path, env: dict[str, str], stdout_to: Path | None = None
) -> Done:
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    out = _read_capped(proc.stdout) if stdout_to is None else _stream_to(proc.stdout, stdout_to)
    try:
        said, err, _ = await asyncio.wait_for(
            asyncio.gather(out, _read_capped(proc.stderr), proc.wait()), CHECKOUT_GIT_TIMEOUT_S
        )
    except (TimeoutError, asyncio.CancelledError, GitError):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise
    return Done(proc.returncode or 0, said, err)


async def _read_capped(stream: asyncio.StreamReader) -> str:
    """Read a stream to its end, keeping at most OUTPUT_CAP bytes of it."""
    kept = bytearray()
    while chunk := await stream.read(65536):
        if len(kept) < OUTPUT_CAP:
            kept += chunk[: OUTPUT_CAP - len(kept)]
    return kept.decode(errors="replace")


async def _stream_to(stream: asyncio.StreamReader, path: Path) -> str:
    """Write a stream to path, refusing it past BUNDLE_CAP bytes."""
    written = 0
    with path.open("wb") as sink:
        while chunk := await stream.read(1024 * 1024):
            written += len(chunk)
            if written > BUNDLE_CAP:
                raise GitError(
                    ["bundle", "create"],
                    1,
                    f"the agent's commits are over {BUNDLE_CAP // 2**20} MiB",
                )
            sink.write(chunk)
    return ""


def inert_commit(raw: bytes, renamed: dict[str, str]) -> bytes:
    """Return a raw commit with its message made inert and its parents renamed (pure).

    A signature no longer matches a changed commit, so it is dropped with the change.
    """
    header, _, message = raw.partition(b"\n\n")
    lines: list[bytes] = []
    in_signature = False
    changed = False
    for line in header.split(b"\n"):
        if in_signature and line.startswith(b" "):
            continue
        in_signature = False
        if line.startswith(b"parent "):
            parent = line[7:].decode()
            if parent in renamed:
                line, changed = f"parent {renamed[parent]}".encode(), True
        elif line.startswith(b"gpgsig"):
            in_signature = True
            continue
        lines.append(line)
    # Bytes that are not UTF-8 pass through unchanged, so nothing but the joiners differs.
    text = no_skip_directives(inert(message.decode(errors="surrogateescape")))
    quiet = text.encode(errors="surrogateescape")
    if quiet == message and not changed:
        return raw
    return b"\n".join(lines) + b"\n\n" + quiet


def bundle_pack_offset(head: bytes) -> tuple[dict[str, str], int]:
    """Return a bundle's references and where its pack begins, from its first bytes (pure).

    Accepts git's v2 and v3 bundles: a signature line, v3's capabilities, prerequisite
    lines (`-sha`), reference lines (`sha refname`), then an empty line and the pack.
    """
    signature, _, rest = head.partition(b"\n")
    if signature not in (b"# v2 git bundle", b"# v3 git bundle"):
        raise ValueError("not a git bundle")
    offset = len(signature) + 1
    refs: dict[str, str] = {}
    for line in rest.split(b"\n"):
        offset += len(line) + 1
        if not line:
            return refs, offset
        text = line.decode("ascii", errors="replace")
        if text.startswith(("@", "-")):
            continue
        sha, _, name = text.partition(" ")
        if not _SHA.match(sha) or not name:
            raise ValueError(f"a bundle reference line is malformed: {text[:80]!r}")
        refs[name] = sha
    raise ValueError("the bundle's header does not end")


_SHA = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


class Workspace:
    """Per-repository bare mirrors, Baton's own, and per-issue checkouts, the agent's.

    The mirror is trusted: only Baton writes it, and only it is ever fetched or pushed
    with a token. Each issue's checkout is a repository of its own whose objects
    borrow the mirror's store (read-only to the agent), so nothing the agent writes to
    its git directory reaches the mirror. The agent's commits come back as a bundle.
    """

    def __init__(self, git: Git, data_dir: Path, jails: Jails | None = None) -> None:
        self.git = git
        self.data_dir = data_dir
        self.checkout_git = CheckoutGit(git.identity, jails)

    def mirror_path(self, repo: str) -> Path:
        """Return where a repository's bare mirror lives."""
        return self.data_dir / "mirrors" / f"{repo}.git"

    def worktree_path(self, repo: str, number: int) -> Path:
        """Return where the agent's checkout for one issue lives."""
        return self.data_dir / "worktrees" / repo / f"issue-{number}"

    def work_ref(self, number: int) -> str:
        """Return the mirror's ref that holds the agent's last collected commit for an issue."""
        return f"refs/baton/work/issue-{number}"

    async def refresh_mirror(
        self, repo: str, clone_url: str, token: str, fork: tuple[str, str] | None = None
    ) -> Path:
        """Create the mirror if needed and fetch every branch into refs/remotes/origin.

        fork is where Baton's own branches live instead, in fork mode (its clone URL and
        a token for it): they are fetched from there, and the repository's branches of
        the same names are left out, so refs/remotes/origin/baton/… is always the branch
        a pull request's head is.
        """
        mirror = self.mirror_path(repo)
        async with _file_lock(mirror.with_suffix(".lock")):
            if not (mirror / "HEAD").exists():
                mirror.mkdir(parents=True, exist_ok=True)
                await self.git.run(mirror, "init", "--quiet", "--bare", "--template=")
            # Baton's own config, whatever an older layout let a worktree write there.
            (mirror / "config").write_text(MIRROR_CONFIG)
            # Fetch into remote-tracking refs: a branch checked out in a worktree
            # can never be a fetch target. A negative refspec also keeps --prune off them.
            branches = ["+refs/heads/*:refs/remotes/origin/*"]
            if fork is not None:
                branches.append(f"^refs/heads/{BRANCH_PREFIX}*")
            await self._fetch(mirror, clone_url, token, branches)
            if fork is not None:
                own = f"+refs/heads/{BRANCH_PREFIX}*:refs/remotes/origin/{BRANCH_PREFIX}*"
                await self._fetch(mirror, fork[0], fork[1], [own])
        return mirror

    async def _fetch(self, mirror: Path, url: str, token: str, refspecs: list[str]) -> None:
        await self.git.run(
            mirror, "fetch", "--quiet", "--prune", "--no-tags", url, *refspecs, token=token
        )

    async def provision(
        self, repo: str, number: int, branch: str, start: str, base: tuple[str, str] | None = None
    ) -> Path:
        """Return a fresh checkout for the issue on branch at start; base is (name, sha).

        A repository of its own, made by Baton from nothing: no config, hook or
        attribute of a previous attempt's agent survives into it.
        """
        mirror = self.mirror_path(repo)
        path = self.worktree_path(repo, number)
        async with _file_lock(mirror.with_suffix(".lock")):
            await asyncio.to_thread(_remove_tree, path)
            await self.git.run(mirror, "worktree", "prune")  # checkouts of an older layout
        path.parent.mkdir(parents=True, exist_ok=True)
        await self.git.run(path.parent, "init", "--quiet", "--template=", str(path))
        info = path / ".git" / "objects" / "info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "alternates").write_text(f"{mirror / 'objects'}\n")
        await self.git.run(path, "update-ref", f"refs/heads/{branch}", start)
        if base is not None:
            await self.git.run(path, "update-ref", f"refs/remotes/origin/{base[0]}", base[1])
        await self.git.run(path, "symbolic-ref", "HEAD", f"refs/heads/{branch}")
        await self.git.run(path, "config", "user.name", self.git.identity.name)
        await self.git.run(path, "config", "user.email", self.git.identity.email)
        await self.git.run(path, "reset", "--quiet", "--hard")
        return path

    def worktree_issues(self, repo: str) -> list[int]:
        """Return the issues of the repository that have a checkout on this machine."""
        names = (path.name for path in (self.data_dir / "worktrees" / repo).glob("issue-*"))
        return sorted(int(n) for name in names if (n := name.removeprefix("issue-")).isdigit())

    async def remove(self, repo: str, number: int) -> None:
        """Remove the issue's checkout, if it exists."""
        mirror = self.mirror_path(repo)
        if not mirror.exists():
            return  # this machine never worked on the repository: nothing of it is here
        path = self.worktree_path(repo, number)
        async with _file_lock(mirror.with_suffix(".lock")):
            await asyncio.to_thread(_remove_tree, path)
            await self.git.run(mirror, "worktree", "prune")

    async def rev_parse(self, cwd: Path, rev: str) -> str:
        """Return the sha rev names in a repository of Baton's own (the mirror)."""
        return (await self.git.run(cwd, "rev-parse", "--verify", f"{rev}^{{commit}}")).strip()

    async def collect(self, repo: str, number: int, start: str, leftovers: str | None) -> str:
        """Bring the agent's HEAD into the mirror and return its sha.

        With a message in leftovers, whatever the agent left uncommitted is committed
        first. Both happen inside the agent's jail; its commits cross into the mirror
        as a bundle written to a file only Baton sees, indexed with every object
        checked, never by reading the agent's repository.
        """
        checkout = self.worktree_path(repo, number)
        mirror = self.mirror_path(repo)
        objects = mirror / "objects"
        run = self.checkout_git.run
        if leftovers is not None:
            await run(checkout, objects, "add", "--all")
            staged = await run(checkout, objects, "diff", "--cached", "--quiet", check=False)
            if staged.returncode == 1:
                await run(checkout, objects, "commit", "--quiet", "--no-verify", "-m", leftovers)
        said = (await run(checkout, objects, "rev-parse", "--verify", "HEAD^{commit}")).stdout
        head = said.strip()
        if not _SHA.match(head):
            raise GitError(
                ["rev-parse", "HEAD"], 1, f"the checkout's HEAD is not a commit: {head[:80]!r}"
            )
        if head == start:
            return head
        await self._import(repo, checkout, "HEAD", head, start)
        head = await self._inert_history(mirror, start, head)
        await self.git.run(mirror, "update-ref", self.work_ref(number), head)
        return head

    async def salvage(
        self, repo: str, number: int, start: str, since: Salvage | None, message: str
    ) -> Salvage | None:
        """Save what the agent left uncommitted as a commit on its HEAD, in the mirror.

        The agent's checkout is left as it is: the snapshot is staged in an index of its
        own, inside the agent's jail (the checkout's filters run where the agent runs),
        and crosses into the mirror as collect's commits do. None when nothing is
        uncommitted; since, when nothing changed since that salvage.
        """
        checkout = self.worktree_path(repo, number)
        objects = self.mirror_path(repo) / "objects"
        index = checkout / ".git" / SALVAGE_INDEX
        own_index = {"GIT_INDEX_FILE": str(index)}

        async def run(*args: str) -> str:
            done = await self.checkout_git.run(checkout, objects, *args, extra_env=own_index)
            return done.stdout.strip()

        # Written afresh by git in the jail (never touched on the host: it is the agent's).
        await run("read-tree", "HEAD")
        await run("add", "--all")
        tree, head = await run("write-tree"), await run("rev-parse", "--verify", "HEAD^{commit}")
        committed = await run("rev-parse", "--verify", "HEAD^{tree}")
        if not (_SHA.match(tree) and _SHA.match(head)):
            raise GitError(["write-tree"], 1, f"not a tree and a commit: {tree[:80]!r}")
        if tree == committed:
            return None
        key = f"{tree} {head}"
        if since is not None and since.key == key:
            return since
        sha = await run("commit-tree", tree, "-p", head, "-m", message)
        await run("update-ref", SALVAGE_REF, sha)
        await self._import(repo, checkout, SALVAGE_REF, sha, start)
        mirror = self.mirror_path(repo)
        sha = await self._inert_history(mirror, start, sha)
        await self.git.run(mirror, "update-ref", salvage_ref(number), sha)
        return Salvage(sha, key)

    async def salvage_bundle(self, repo: str, number: int, since: tuple[str, ...]) -> bytes | None:
        """Return the issue's salvage in the mirror as a bundle of what since lacks.

        For another machine to continue from: since is on GitHub, so any mirror has it.
        None when it weighs more than SALVAGE_CAP.
        """
        mirror, ref = self.mirror_path(repo), salvage_ref(number)
        excluded = [f"^{sha}" for sha in since]
        # What the objects weigh stored one by one bounds the bundle (a pack of them, in
        # deltas), so a salvage far over the cap is never written out to be weighed.
        stored = await self.git.run(
            mirror, "rev-list", "--objects", "--disk-usage", ref, *excluded, "--"
        )
        if int(stored.strip() or 0) > SALVAGE_STORED_CAP:
            return None
        with tempfile.TemporaryDirectory(prefix="baton-salvage-") as scratch:
            path = Path(scratch) / "salvage.bundle"  # weighed on disk, read only when small
            await self.git.run(mirror, "bundle", "create", "--quiet", str(path), ref, *excluded)
            return path.read_bytes() if path.stat().st_size <= SALVAGE_CAP else None

    async def salvaged(self, repo: str, number: int, start: str, bundle: bytes) -> Salvaged | None:
        """Bring a kept salvage into the mirror and return it, if it builds on start.

        A salvage taken before the branch moved on is stale: its edits were committed
        since, or given up. So is one whose history this mirror lacks (the branch was
        rewritten since).
        """
        sha = await self._unbundle(repo, salvage_ref(number), bundle)
        if sha is None:
            return None
        mirror = self.mirror_path(repo)
        try:
            await self.git.run(mirror, "merge-base", "--is-ancestor", start, sha)
        except GitError as exc:
            if exc.returncode == 1:
                return None
            raise
        when = await self.git.run(mirror, "log", "-1", "--format=%cI", sha)
        files = await self.git.run_bytes(mirror, "diff", "--name-only", "-z", start, sha)
        return Salvaged(
            sha=sha,
            saved_at=datetime.fromisoformat(when.strip()).astimezone(UTC),
            files=tuple(name.decode(errors="replace") for name in files.split(b"\0") if name),
        )

    async def _unbundle(self, repo: str, ref: str, bundle: bytes) -> str | None:
        """Index a bundle's objects into the mirror, every one checked; set ref to its tip.

        None when the bundle is not one of ref, or its prerequisites are not here.
        """
        try:
            refs, offset = bundle_pack_offset(bundle[:BUNDLE_HEADER_CAP])
        except ValueError:
            return None
        sha = refs.get(ref)
        if sha is None:
            return None
        mirror = self.mirror_path(repo)
        with tempfile.TemporaryFile(prefix="baton-salvage-") as pack:
            pack.write(bundle[offset:])
            pack.seek(0)
            try:
                await self.git.run(
                    mirror, "index-pack", "--stdin", "--fix-thin", "--strict", stdin=pack
                )
            except GitError as exc:
                log.warning("%s: a kept salvage does not apply here: %s", repo, exc)
                return None
        await self.git.run(mirror, "update-ref", ref, sha)
        return sha

    async def restore(self, repo: str, number: int, sha: str) -> None:
        """Make a salvage's tree the checkout's uncommitted state, as the agent left it."""
        path = self.worktree_path(repo, number)
        await self.git.run(path, "read-tree", "--reset", "-u", sha)
        await self.git.run(path, "reset", "--quiet")  # the index back to HEAD: edits unstaged

    async def _import(self, repo: str, checkout: Path, ref: str, sha: str, start: str) -> None:
        """Bring the commits from start to ref (at sha) of the agent's checkout into the mirror.

        As a bundle written by git inside the jail to a file only Baton sees, indexed
        with every object checked, never by reading the agent's repository.
        """
        mirror = self.mirror_path(repo)
        run = self.checkout_git.run
        with tempfile.TemporaryDirectory(prefix="baton-bundle-") as kept_dir:
            bundle = Path(kept_dir) / "work.bundle"  # never in the jail's view
            await run(
                checkout,
                mirror / "objects",
                "bundle",
                "create",
                "--quiet",
                "-",
                ref,
                f"^{start}",
                stdout_to=bundle,
            )
            with bundle.open("rb") as pack:
                try:
                    refs, offset = bundle_pack_offset(pack.read(BUNDLE_HEADER_CAP))
                except ValueError as exc:
                    raise GitError(["bundle", "create"], 1, str(exc)) from exc
                if refs.get(ref) != sha:
                    raise GitError(
                        ["bundle", "create"], 1, f"the bundle's {ref} is not the checkout's"
                    )
                pack.seek(offset)
                # Every object checked as it is indexed: a bundle fetch does not fsck.
                await self.git.run(
                    mirror, "index-pack", "--stdin", "--fix-thin", "--strict", stdin=pack
                )

    async def _inert_history(self, mirror: Path, start: str, head: str) -> str:
        """Return head with every commit message since start made inert on GitHub.

        A closing keyword in a commit message closes the issue it names once the commit
        reaches the default branch, a mention notifies, and a skip directive (`[skip
        ci]`, `skip-checks: true`) keeps CI from running: the agent's messages are
        rewritten where they hold any, keeping their trees, authors and dates, so the
        same commits always give the same shas.
        """
        listed = await self.git.run(
            mirror, "rev-list", "--reverse", "--parents", f"{start}..{head}"
        )
        renamed: dict[str, str] = {}
        with tempfile.TemporaryDirectory(prefix="baton-commit-") as scratch:
            for sha in listed.split():
                raw = await self.git.run_bytes(mirror, "cat-file", "commit", sha)
                rewritten = inert_commit(raw, renamed)
                if rewritten == raw:
                    continue
                staged = Path(scratch) / "commit"
                staged.write_bytes(rewritten)
                written = await self.git.run(
                    mirror, "hash-object", "-t", "commit", "-w", str(staged)
                )
                renamed[sha] = written.strip()
        return renamed.get(head, head)

    async def unpublished_diff(self, repo: str, head: str) -> str:
        """Return what every commit up to head that GitHub lacks adds, as `git log -p -U0`.

        Each commit on its own, since a push publishes the history, not only its end:
        a line added and deleted again is still in it. A merge shows what it brings
        against its first parent, so nothing hides in one.
        """
        return await self.git.run(
            self.mirror_path(repo),
            "log",
            "--patch",
            "--diff-merges=first-parent",
            "--unified=0",
            "--format=",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--no-renames",
            head,
            "--not",
            "--remotes=origin",
        )

    async def commits_since(self, repo: str, base: str, head: str) -> int:
        """Return how many commits head has that base does not, in the mirror."""
        out = await self.git.run(self.mirror_path(repo), "rev-list", "--count", f"{base}..{head}")
        return int(out.strip())

    async def has_diff(self, repo: str, base: str, head: str) -> bool:
        """Return whether head's tree differs from base's, in the mirror."""
        out = await self.git.run(self.mirror_path(repo), "diff", "--name-only", base, head)
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
        """Return whether the issue's checkout on this machine holds uncommitted work."""
        path = self.worktree_path(repo, number)
        if not (path / ".git").is_dir():
            return False
        objects = self.mirror_path(repo) / "objects"
        done = await self.checkout_git.run(path, objects, "status", "--porcelain")
        return bool(done.stdout.strip())

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
        async with self._scratch(repo, "rebases", branch, tip) as path:
            upstream = (await self.git.run(path, "merge-base", "HEAD", built_on)).strip()
            try:
                await self.git.run(path, "rebase", "--quiet", "--onto", onto, upstream)
            except GitError:
                conflicts = await self.git.run(path, "diff", "--name-only", "--diff-filter=U")
                await self.git.run(path, "rebase", "--abort")
                return Rebased(tip=None, conflicts=tuple(conflicts.split()))
            new_tip = await self.rev_parse(path, "HEAD")
            if new_tip != tip:
                await self.push(repo, clone_url, branch, new_tip, token, tip)
            return Rebased(tip=new_tip, conflicts=())

    async def trial_merge(self, repo: str, branch: str, head: str, base: str) -> TrialMerge:
        """Try merging base, as last fetched, into branch at head, and push nothing.

        The mirror is Baton's own, so what the merge names comes from Baton's git alone.
        It runs in a worktree of its own, only when the base has commits head lacks.
        """
        mirror = self.mirror_path(repo)
        onto = f"refs/remotes/origin/{base}"
        listed = await self.git.run(mirror, "rev-list", "--parents", "--max-count=1", head)
        behind_by = int(await self.git.run(mirror, "rev-list", "--count", f"{head}..{onto}"))
        conflicts: tuple[str, ...] = ()
        if behind_by:
            async with self._scratch(repo, "merges", branch, head) as path:
                try:
                    await self.git.run(path, "merge", "--quiet", "--no-commit", "--no-ff", onto)
                except GitError:
                    named = await self.git.run(path, "diff", "--name-only", "-z", "--diff-filter=U")
                    conflicts = tuple(name for name in named.split("\0") if name)
                    if not conflicts:  # a merge that failed without conflicting tried nothing
                        raise
        return TrialMerge(
            parents=tuple(listed.split()[1:]), behind=behind_by > 0, conflicts=conflicts
        )

    async def merge_base_in(self, repo: str, branch: str, head: str, base: str) -> str | None:
        """Merge base, as last fetched, into branch at head, as GitHub's "Update branch"
        does (its message, head the first parent), and push nothing; return the merge's
        sha, or None when it conflicts. For a branch GitHub cannot update: a fork's."""
        onto = f"refs/remotes/origin/{base}"
        async with self._scratch(repo, "merges", branch, head) as path:
            message = f"Merge branch '{base}' into {branch}"
            try:
                await self.git.run(path, "merge", "--quiet", "--no-ff", "-m", message, onto)
            except GitError:
                return None
            return await self.rev_parse(path, "HEAD")

    @asynccontextmanager
    async def _scratch(self, repo: str, kind: str, branch: str, commit: str) -> AsyncIterator[Path]:
        """Check commit out, detached, in a scratch worktree of the mirror: Baton's git alone.

        One per kind of work and branch, used by one job at a time on this machine, and
        removed again afterwards however the work ended.
        """
        mirror = self.mirror_path(repo)
        path = self.data_dir / kind / repo / branch.replace("/", "-")
        path.parent.mkdir(parents=True, exist_ok=True)
        async with _file_lock(path.parent / f"{path.name}.lock"):
            async with _file_lock(mirror.with_suffix(".lock")):
                if path.exists():
                    await self.git.run(mirror, "worktree", "remove", "--force", str(path))
                await self.git.run(mirror, "worktree", "prune")
                await self.git.run(
                    mirror, "worktree", "add", "--quiet", "--detach", str(path), commit
                )
            try:
                yield path
            finally:
                async with _file_lock(mirror.with_suffix(".lock")):
                    await self.git.run(mirror, "worktree", "remove", "--force", str(path))

    async def push(
        self,
        repo: str,
        clone_url: str,
        branch: str,
        sha: str,
        token: str,
        expected: str | None,
    ) -> None:
        """Push sha from the mirror to branch, replacing it only if it is still at expected.

        Baton owns its branches, so a new attempt may replace an old one; the
        lease keeps it from overwriting anything a human pushed since the fetch.
        """
        lease = f"--force-with-lease=refs/heads/{branch}:{expected or ''}"
        await self.git.run(
            self.mirror_path(repo),
            "push",
            "--quiet",
            lease,
            clone_url,
            f"{sha}:refs/heads/{branch}",
            token=token,
        )


def _remove_tree(path: Path) -> None:
    """Remove a checkout the agent wrote: its links are removed, never followed.

    The agent owns what it made, so a directory it closed to everyone (mode 000) is
    opened again for its owner and the removal goes on.
    """
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, onerror=_reopen_and_retry)


def _reopen_and_retry(func: Callable[..., object], failed: str, _exc: object) -> None:
    for directory in {os.path.dirname(failed), failed}:
        if not os.path.islink(directory) and os.path.isdir(directory):
            os.chmod(directory, 0o700)
    if func is os.rmdir or func is os.unlink:
        func(failed)
    else:
        shutil.rmtree(failed, onerror=_reopen_and_retry)
