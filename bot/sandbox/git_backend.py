"""Bare repositories on disk and the git plumbing the sandbox needs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import re
from dataclasses import dataclass, field

ZERO_SHA = "0" * 40
_SHA = re.compile(r"[0-9a-f]{4,40}")
_REF_NAME = re.compile(r"[A-Za-z0-9._/-]+")
_FIELD = "\x1f"
_RECORD = "\x1e"
_LOG_FORMAT = (
    _RECORD
    + _FIELD.join(["%H", "%T", "%P", "%an", "%ae", "%aI", "%cn", "%ce", "%cI", "%B"])
    + _FIELD
)


class GitError(Exception):
    """A git command failed."""


@dataclass(frozen=True)
class Identity:
    """Who git records as author and committer."""

    name: str
    email: str


@dataclass(frozen=True)
class CommitInfo:
    """One commit as read from `git log`."""

    sha: str
    tree: str
    parents: tuple[str, ...]
    author_name: str
    author_email: str
    author_date: str
    committer_name: str
    committer_email: str
    committer_date: str
    message: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class FileChange:
    """One file of a diff, with its patch text (None for binary files)."""

    filename: str
    status: str
    sha: str | None
    additions: int
    deletions: int
    patch: str | None
    previous_filename: str | None = None


@dataclass(frozen=True)
class TreeEntry:
    """One entry of a tree: a blob (file), a tree (directory) or something else."""

    mode: str
    type: str
    sha: str
    size: int | None
    path: str


_STATUS = {
    "A": "added",
    "D": "removed",
    "M": "modified",
    "R": "renamed",
    "C": "copied",
    "T": "changed",
}


def valid_ref_name(name: str) -> bool:
    """Tell whether a branch or tag name is safe and well-formed."""
    return (
        bool(_REF_NAME.fullmatch(name))
        and not name.startswith(("-", "/"))
        and not name.endswith(("/", ".lock", "."))
        and ".." not in name
        and "//" not in name
    )


def git_env() -> dict[str, str]:
    """Return the environment for git: the host's, without its global or system config."""
    env = dict(os.environ)
    env.update(
        {
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_LITERAL_PATHSPECS": "1",
            "LC_ALL": "C",
        }
    )
    return env


async def run_git(
    cwd: pathlib.Path,
    *args: str,
    stdin: bytes | None = None,
    identity: Identity | None = None,
    ok: tuple[int, ...] = (0,),
) -> tuple[int, bytes]:
    """Run `git -C cwd args...`; return exit code and stdout; raise on unexpected codes."""
    config: list[str] = []
    if identity is not None:
        config = ["-c", f"user.name={identity.name}", "-c", f"user.email={identity.email}"]
    proc = await asyncio.create_subprocess_exec(
        "git",
        "-C",
        str(cwd),
        *config,
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=git_env(),
    )
    try:
        out, err = await proc.communicate(stdin)
    except BaseException:
        # Cancelled (say, at shutdown): leave no git behind writing into a directory.
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise
    code = proc.returncode if proc.returncode is not None else -1
    if code not in ok:
        raise GitError(
            f"git {' '.join(args)} exited {code}: {err.decode(errors='replace').strip()}"
        )
    return code, out


class GitRepo:
    """One bare repository and the operations the API performs on it."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path

    async def git(
        self, *args: str, stdin: bytes | None = None, identity: Identity | None = None
    ) -> str:
        """Run git in this repository and return its stdout as text."""
        _, out = await run_git(self.path, *args, stdin=stdin, identity=identity)
        return out.decode(errors="replace")

    async def init(self, branch: str) -> None:
        """Create the bare repository with `branch` as its HEAD."""
        self.path.mkdir(parents=True, exist_ok=True)
        await self.git("init", "--quiet", "--bare", f"--initial-branch={branch}")
        await self.git("config", "http.receivepack", "true")
        await self.git("config", "uploadpack.allowAnySHA1InWant", "true")
        await self.git("config", "receive.autogc", "false")

    async def initial_commit(self, branch: str, readme: str, identity: Identity) -> str:
        """Commit a README.md as the first commit of `branch` (GitHub's auto_init)."""
        blob = (await self.git("hash-object", "-w", "--stdin", stdin=readme.encode())).strip()
        tree = (await self.git("mktree", stdin=f"100644 blob {blob}\tREADME.md\n".encode())).strip()
        sha = (
            await self.git("commit-tree", tree, "-m", "Initial commit", identity=identity)
        ).strip()
        await self.update_ref(branch, sha, ZERO_SHA)
        return sha

    async def fetch_from(self, other: GitRepo, *refspecs: str) -> None:
        """Fetch refs of another repository of the network (a fork's, or its parent's)."""
        await self.git("fetch", "--quiet", "--no-tags", str(other.path), *refspecs)

    async def set_pull_head(self, number: int, sha: str) -> None:
        """Point `refs/pull/<number>/head` at a pull request's head, as GitHub keeps it."""
        await self.git("update-ref", f"refs/pull/{number}/head", sha)

    async def set_head(self, branch: str) -> None:
        """Point HEAD (the default branch) at `branch`."""
        await self.git("symbolic-ref", "HEAD", f"refs/heads/{branch}")

    async def branches(self) -> dict[str, str]:
        """Return every branch and its tip."""
        out = await self.git("for-each-ref", "--format=%(objectname) %(refname)", "refs/heads/")
        tips: dict[str, str] = {}
        for line in out.splitlines():
            sha, ref = line.split(" ", 1)
            tips[ref.removeprefix("refs/heads/")] = sha
        return tips

    async def branch_tip(self, branch: str) -> str | None:
        """Return the tip of a branch, or None if it does not exist."""
        if not valid_ref_name(branch):
            return None
        return await self._rev_parse(f"refs/heads/{branch}")

    async def resolve(self, ref: str) -> str | None:
        """Resolve a branch, tag or (abbreviated) commit sha to a full commit sha."""
        if not valid_ref_name(ref):
            return None
        for candidate in (
            f"refs/heads/{ref}",
            f"refs/tags/{ref}",
            ref if _SHA.fullmatch(ref) else "",
        ):
            if candidate and (sha := await self._rev_parse(candidate)):
                return sha
        return None

    async def _rev_parse(self, rev: str) -> str | None:
        code, out = await run_git(
            self.path, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", ok=(0, 1, 128)
        )
        return out.decode().strip() if code == 0 else None

    async def is_ancestor(self, ancestor: str, descendant: str) -> bool:
        """Tell whether `ancestor` is reachable from `descendant`."""
        code, _ = await run_git(
            self.path, "merge-base", "--is-ancestor", ancestor, descendant, ok=(0, 1)
        )
        return code == 0

    async def merge_base(self, a: str, b: str) -> str | None:
        """Return the best common ancestor of two commits, if any."""
        code, out = await run_git(self.path, "merge-base", a, b, ok=(0, 1))
        return out.decode().strip() if code == 0 else None

    async def count(self, include: str, exclude: str) -> int:
        """Count the commits reachable from `include` but not from `exclude`."""
        return int(await self.git("rev-list", "--count", include, f"^{exclude}"))

    async def log(
        self, include: str, exclude: list[str], limit: int, with_files: bool = False
    ) -> list[CommitInfo]:
        """Return up to `limit` newest commits of include ^exclude..., oldest first."""
        args = [
            "-c",
            "core.quotepath=false",
            "log",
            f"--max-count={limit}",
            f"--format={_LOG_FORMAT}",
        ]
        if with_files:
            args += ["--name-status", "--no-renames", "--diff-merges=first-parent"]
        out = await self.git(*args, include, *(f"^{sha}" for sha in exclude), "--")
        return list(reversed([_parse_commit(chunk) for chunk in out.split(_RECORD)[1:]]))

    async def commit(self, sha: str) -> CommitInfo:
        """Return one commit."""
        return (await self.log(sha, [], 1))[0]

    async def diff(self, base: str, head: str) -> list[FileChange]:
        """Return the file changes from `base` to `head`, with rename detection."""
        raw = await self.git(
            "-c", "core.quotepath=false", "diff", "--raw", "-z", "-M", "--no-abbrev", base, head
        )
        text = await self.diff_text(base, head)
        sections = re.split(r"^diff --git .*$\n?", text, flags=re.MULTILINE)[1:]
        fields = raw.split("\0")
        changes: list[FileChange] = []
        i = 0
        while i + 1 < len(fields) and fields[i].startswith(":"):
            _, _, old_sha, new_sha, status = fields[i][1:].split(" ")
            if status[0] in "RC":
                old, new = fields[i + 1], fields[i + 2]
                i += 3
            else:
                old = new = fields[i + 1]
                i += 2
            changes.append(
                _file_change(status[0], old, new, old_sha, new_sha, sections[len(changes)])
            )
        return changes

    async def diff_text(self, base: str, head: str) -> str:
        """Return the unified diff from `base` to `head`."""
        return await self.git("diff", "--no-color", "--no-ext-diff", "-M", base, head)

    async def merge_tree(self, ours: str, theirs: str) -> str | None:
        """Merge two commits without a worktree; return the tree, or None on conflict."""
        code, out = await run_git(self.path, "merge-tree", "--write-tree", ours, theirs, ok=(0, 1))
        return out.decode().splitlines()[0] if code == 0 else None

    async def commit_tree(
        self, tree: str, parents: list[str], message: str, identity: Identity
    ) -> str:
        """Create a commit object."""
        parent_args = [arg for sha in parents for arg in ("-p", sha)]
        return (
            await self.git(
                "commit-tree",
                tree,
                *parent_args,
                "-F",
                "-",
                stdin=message.encode(),
                identity=identity,
            )
        ).strip()

    async def update_ref(self, branch: str, new: str, old: str) -> None:
        """Move a branch from `old` to `new` atomically (ZERO_SHA old means create)."""
        await self.git("update-ref", f"refs/heads/{branch}", new, old)

    async def delete_branch(self, branch: str, old: str) -> None:
        """Delete a branch whose tip is `old`."""
        await self.git("update-ref", "-d", f"refs/heads/{branch}", old)

    async def entry(self, commit: str, path: str) -> TreeEntry | None:
        """Look up one path in a commit's tree ('' is the root directory)."""
        if not path:
            tree = (await self.git("rev-parse", f"{commit}^{{tree}}")).strip()
            return TreeEntry("040000", "tree", tree, None, "")
        entries = _parse_tree(
            await self.git("ls-tree", "-z", "-l", "--full-tree", commit, "--", path)
        )
        return next((e for e in entries if e.path == path), None)

    async def list_dir(self, commit: str, path: str) -> list[TreeEntry]:
        """List a directory of a commit's tree."""
        spec = ["--", f"{path}/"] if path else []
        return _parse_tree(await self.git("ls-tree", "-z", "-l", "--full-tree", commit, *spec))

    async def blob(self, sha: str) -> bytes:
        """Read a blob's bytes."""
        _, out = await run_git(self.path, "cat-file", "blob", sha)
        return out


def _parse_commit(chunk: str) -> CommitInfo:
    parts = chunk.split(_FIELD)
    files = parts[10] if len(parts) > 10 else ""
    added: list[str] = []
    removed: list[str] = []
    modified: list[str] = []
    for line in files.strip("\n").splitlines():
        if "\t" in line:
            status, path = line.split("\t", 1)
            {"A": added, "D": removed}.get(status[0], modified).append(path)
    return CommitInfo(
        sha=parts[0],
        tree=parts[1],
        parents=tuple(parts[2].split()),
        author_name=parts[3],
        author_email=parts[4],
        author_date=parts[5],
        committer_name=parts[6],
        committer_email=parts[7],
        committer_date=parts[8],
        message=parts[9].rstrip("\n"),
        added=added,
        removed=removed,
        modified=modified,
    )


def _file_change(
    status: str, old: str, new: str, old_sha: str, new_sha: str, section: str
) -> FileChange:
    hunks = re.search(r"^@@", section, flags=re.MULTILINE)
    patch = section[hunks.start() :].rstrip("\n") if hunks else None
    lines = patch.splitlines() if patch else []
    return FileChange(
        filename=new,
        status=_STATUS.get(status, "modified"),
        sha=old_sha if status == "D" else new_sha,
        additions=sum(1 for ln in lines if ln.startswith("+")),
        deletions=sum(1 for ln in lines if ln.startswith("-")),
        patch=patch,
        previous_filename=old if status in "RC" else None,
    )


def _parse_tree(out: str) -> list[TreeEntry]:
    entries: list[TreeEntry] = []
    for record in out.split("\0"):
        if not record:
            continue
        meta, path = record.split("\t", 1)
        mode, kind, sha, size = meta.split()
        entries.append(TreeEntry(mode, kind, sha, None if size == "-" else int(size), path))
    return entries
