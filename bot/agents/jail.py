"""The agent's sandbox: bubblewrap around every process Baton starts on the agent's behalf.

The agent CLI, the `command` adapter, a repository's setup commands and Baton's own git
in the agent's checkout all run in a jail: their own user, PID, IPC, UTS and network
namespaces, and a filesystem that shows the system and the agent's toolchain read-only
and, writable, only the checkout, a private home and tmp, and the operator's extra
paths. Nothing of Baton's data directory, the App's key, `.env` or the worker's home and
environment is there to see. Network, when the policy gives any, is a bridge inside the
jail to a proxy Baton runs outside it (`bot.agents.egress`).

Building the command line is pure (`bwrap_argv`); finding what the toolchain needs to
be visible reads the filesystem once per process (`toolchain_paths`).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from bot.agents.sealed import HANDOVER_SOURCE, execute_only_copy, is_native
from bot.ops.settings import Settings

log = logging.getLogger(__name__)

Network = Literal["allowlist", "open", "none"]

AGENT_UID = 1000
AGENT_GID = 1000
AGENT_USER = "agent"
HOSTNAME = "baton-agent"
PROXY_PORT = 3128
EGRESS_DIR_INSIDE = Path("/run/baton")  # where the proxy's socket directory appears
EGRESS_SOCKET_NAME = "egress.sock"

# The system is read-only and whole; merged-/usr links are kept as links.
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Of /etc only what programs need to run and speak TLS: no shadow, no ssh keys, no
# system git or credential configuration.
ETC_ENTRIES = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "crypto-policies",
    "debian_version",
    "gai.conf",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "pki",
    "protocols",
    "services",
    "ssl",
    "timezone",
)
# Credential files a toolchain's directory may hold; shown as empty files if present.
MASKED_NAMES = (
    ".credentials.json",
    ".env",
    ".git-credentials",
    ".netrc",
    ".npmrc",
    ".pypirc",
    "auth.json",
    "credentials",
    "credentials.json",
    "credentials.toml",
    "hosts.yml",
    "npmrc",
    "pip.conf",
)
MASK_DEPTH = 3  # how far below a shown directory credential files are looked for
MASK_ENTRIES = 20_000  # and how many entries of it are looked at
BWRAP_PROBE_TIMEOUT_S = 10.0
# The jail's own temporary directories, backed by a directory of the run's: private to it.
JAIL_TMP = ("/tmp", "/var/tmp")  # noqa: S108


@dataclass(frozen=True)
class Mount:
    """One thing the jail shows: `ro` and `rw` bind a host path, `link` makes a symlink."""

    kind: Literal["ro", "link"]
    source: str
    dest: str


@dataclass(frozen=True)
class Jail:
    """What one sandboxed process may see and reach."""

    worktree: Path
    home: Path
    tmp: Path
    passwd_dir: Path  # holds the jail's own passwd and group files
    system: tuple[Mount, ...]
    readable: tuple[Path, ...] = ()
    masked: tuple[Path, ...] = ()  # credential files inside what readable shows
    # Files in the home shown read-only over it: the CLI's settings stay the operator's.
    pinned: tuple[Path, ...] = ()
    writable: tuple[Path, ...] = ()
    # Writable directories shown elsewhere: a repository's own caches, each at the path
    # of the operator's cache it belongs to (source, where the jail shows it).
    shown_at: tuple[tuple[Path, Path], ...] = ()
    network: Network = "none"
    egress_dir: Path | None = None  # the host directory holding the proxy's socket
    python: str = field(default_factory=lambda: bridge_python())
    # Execute-only copies of the CLI, each shown over the program it copies (copy, shown
    # at): the CLI then reports on a pipe no tool can write (bot.agents.sealed).
    sealed: tuple[tuple[Path, Path], ...] = ()

    @property
    def reports_sealed(self) -> bool:
        """Return whether the command's stdout is handed over from the report descriptor."""
        return bool(self.sealed)

    @property
    def egress_socket(self) -> Path | None:
        """Return where the proxy listens on the host, when the jail has network."""
        if self.egress_dir is None or self.network == "none":
            return None
        return self.egress_dir / EGRESS_SOCKET_NAME

    def command(self, argv: Sequence[str]) -> list[str]:
        """Return the bwrap command line that runs argv in this jail."""
        return bwrap_argv(self, argv)

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """Return env as the jailed process sees it: its proxy, and no other way out."""
        # The jail's own tmp; an adapter may name the other one of the two (both private).
        tmp = env["TMPDIR"] if env.get("TMPDIR") in JAIL_TMP else JAIL_TMP[0]
        jailed = {**env, "TMPDIR": tmp, "USER": AGENT_USER, "LOGNAME": AGENT_USER}
        if self.egress_socket is None:
            return jailed
        proxy = f"http://127.0.0.1:{PROXY_PORT}"
        for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
            jailed[name] = proxy
        jailed["NO_PROXY"] = jailed["no_proxy"] = ""
        return jailed


def bwrap_argv(jail: Jail, argv: Sequence[str]) -> list[str]:
    """Return the bubblewrap command line that runs argv inside jail (pure)."""
    args = [
        "bwrap",
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-net",
        "--unshare-cgroup-try",
        "--uid",
        str(AGENT_UID),
        "--gid",
        str(AGENT_GID),
        "--hostname",
        HOSTNAME,
        "--die-with-parent",
        "--cap-drop",
        "ALL",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
    ]
    for mount in jail.system:
        args += _mount_args(mount)
    args += ["--ro-bind", str(jail.passwd_dir / "passwd"), "/etc/passwd"]
    args += ["--ro-bind", str(jail.passwd_dir / "group"), "/etc/group"]
    for tmp in JAIL_TMP:  # first: what follows may live under the host's /tmp
        args += ["--bind", str(jail.tmp), tmp]
    for path in jail.readable:
        args += ["--ro-bind", str(path), str(path)]
    args += ["--bind", str(jail.home), str(jail.home)]
    for path in jail.pinned:
        args += ["--ro-bind", str(path), str(path)]
    for path in jail.writable:
        args += ["--bind", str(path), str(path)]
    for source, shown in jail.shown_at:
        args += ["--bind", str(source), str(shown)]
    for copy, shown in jail.sealed:
        args += ["--ro-bind", str(copy), str(shown)]
    args += ["--bind", str(jail.worktree), str(jail.worktree)]
    for path in jail.masked:  # last: over every directory shown, writable ones too
        args += ["--ro-bind", "/dev/null", str(path)]
    socket = jail.egress_socket
    if socket is not None:
        args += ["--ro-bind", str(socket.parent), str(EGRESS_DIR_INSIDE)]
    args += ["--chdir", str(jail.worktree), "--"]
    return [*args, *_inside(jail, argv)]


def _inside(jail: Jail, argv: Sequence[str]) -> list[str]:
    """Return what the jail runs: argv, behind the handover and the bridge when it has them."""
    # First of all the report descriptor becomes stdout; then the bridge, then argv.
    handover = [jail.python, "-I", "-S", "-c", HANDOVER_SOURCE] if jail.reports_sealed else []
    if jail.egress_socket is None:
        return [*handover, *argv]
    from bot.agents.egress import bridge_argv

    inside = EGRESS_DIR_INSIDE / EGRESS_SOCKET_NAME
    return [*handover, *bridge_argv(jail.python, inside, PROXY_PORT, argv)]


def _mount_args(mount: Mount) -> list[str]:
    if mount.kind == "link":
        return ["--symlink", mount.source, mount.dest]
    return ["--ro-bind", mount.source, mount.dest]


def passwd_lines(home: Path) -> tuple[str, str]:
    """Return the jail's /etc/passwd and /etc/group: one user, the agent."""
    passwd = f"{AGENT_USER}:x:{AGENT_UID}:{AGENT_GID}:Baton agent:{home}:/bin/sh\n"
    group = f"{AGENT_USER}:x:{AGENT_GID}:\n"
    return passwd, group


def jail_scratch(home: Path, scratch: Path) -> tuple[Path, Path]:
    """Make the jail's home, and in scratch its tmp and its passwd files; return tmp and
    the directory holding those files."""
    tmp, etc = scratch / "tmp", scratch / "etc"
    for directory in (home, tmp, etc):
        directory.mkdir(parents=True, exist_ok=True)
    passwd, group = passwd_lines(home)
    (etc / "passwd").write_text(passwd)
    (etc / "group").write_text(group)
    return tmp, etc


# -- what the jail shows of the host -----------------------------------------------------


@functools.cache
def system_mounts() -> tuple[Mount, ...]:
    """Return the system directories and the few /etc entries every jail shows, read-only."""
    mounts: list[Mount] = []
    for name in SYSTEM_DIRS:
        path = Path(name)
        if path.is_symlink():
            mounts.append(Mount("link", os.readlink(path), name))
        elif path.is_dir():
            mounts.append(Mount("ro", name, name))
    for entry in ETC_ENTRIES:
        path = Path("/etc") / entry
        if path.exists():
            mounts.append(Mount("ro", str(path), str(path)))
    return tuple(mounts)


def _is_system(path: Path) -> bool:
    return any(path == Path(d) or Path(d) in path.parents for d in SYSTEM_DIRS)


def install_roots(target: Path, home: Path) -> tuple[Path, ...]:
    """Return the directories a program needs to be visible to run: where it was installed.

    A file inside `node_modules` needs its whole package; one under some `prefix/bin`
    needs the prefix (its `lib`, its site-packages). A virtualenv is shown whole. A
    prefix inside the worker's home (`~/.local`, `~/.pyenv/versions/X`) shows only its
    `bin` and `lib`, never what else lives beside them (keyrings, history, state); one
    that would show the whole home, or more, narrows to the program's own directory.
    """
    parts = target.parts
    if "node_modules" in parts:
        at = len(parts) - 1 - parts[::-1].index("node_modules")
        end = at + 2 if at + 1 < len(parts) and not parts[at + 1].startswith("@") else at + 3
        return (Path(*parts[: min(end, len(parts))]),)
    for ancestor in target.parents:
        if ancestor.name != "bin":
            continue
        prefix = ancestor.parent
        if prefix == home or prefix in home.parents or prefix == Path(prefix.anchor):
            return (ancestor,)
        if home in prefix.parents and not (prefix / "pyvenv.cfg").exists():
            return (
                ancestor,
                *(prefix / lib for lib in ("lib", "lib64") if (prefix / lib).is_dir()),
            )
        return (prefix,)
    return (target.parent,)


def _venv_home(root: Path) -> Path | None:
    """Return the base interpreter's bin directory a virtualenv at root was made from."""
    try:
        text = (root / "pyvenv.cfg").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return Path(value.strip())
    return None


def toolchain_paths(
    path_dirs: Sequence[str], programs: Sequence[str], home: Path
) -> tuple[Path, ...]:
    """Return what the jail must show read-only for the PATH's tools and the programs to run.

    Each PATH directory outside the system, the install root of every link in it that
    leads elsewhere, each program's own install root, and the base interpreter of every
    virtualenv among them. home is the worker's home: never shown whole.
    """
    shown = _Toolchain(home)
    for entry in path_dirs:
        shown.add_path_dir(entry)
    search = os.pathsep.join(path_dirs)
    for program in programs:
        located = program if "/" in program else shutil.which(program, path=search)
        if located:
            shown.add_program(Path(located))
    return tuple(shown.found)


class _Toolchain:
    """The directories a jail shows for a toolchain, gathered one by one, none inside another."""

    def __init__(self, home: Path) -> None:
        self.home = home  # the worker's: never shown whole
        self.found: list[Path] = []

    def add(self, path: Path) -> None:
        """Show path, unless the system or a directory already shown holds it; a virtualenv
        brings its base interpreter."""
        if not path.exists() or _is_system(path) or self._covered(path):
            return
        self.found[:] = [seen for seen in self.found if path not in seen.parents]
        self.found.append(path)
        venv_bin = _venv_home(path)
        if venv_bin is not None:
            self.add_install_of(Path(os.path.realpath(venv_bin / "python3")))

    def _covered(self, path: Path) -> bool:
        return any(path == seen or seen in path.parents for seen in self.found)

    def add_install_of(self, target: Path) -> None:
        """Show where the program at target was installed."""
        for root in install_roots(target, self.home):
            self.add(root)

    def add_path_dir(self, entry: str) -> None:
        """Show a PATH directory (a virtualenv's whole), and where the links in it lead."""
        directory = Path(entry)
        if not entry or not directory.is_dir():
            return
        real = Path(os.path.realpath(directory))
        self.add(real.parent if (real.parent / "pyvenv.cfg").exists() else real)
        if real.name == "shims" and (real.parent / "versions").is_dir():
            self.add(real.parent / "versions")  # pyenv, rbenv, nodenv: shims run a version
        if real != directory:
            self.add(directory)
        for child in _links_in(real):
            self.add_install_of(Path(os.path.realpath(child)))

    def add_program(self, path: Path) -> None:
        """Show a program found at path, the link's directory too, and where it was installed."""
        self.add(path if not path.is_symlink() else path.parent)
        real = Path(os.path.realpath(path))
        if real.parent.name == "bin" and (real.parent.parent / "pyvenv.cfg").exists():
            self.add(real.parent.parent)
        self.add_install_of(real)


def _links_in(directory: Path) -> Iterable[Path]:
    try:
        with os.scandir(directory) as entries:
            return [Path(e.path) for e in entries if e.is_symlink()]
    except OSError:
        return []


def without_secrets(
    paths: Iterable[Path], holders: Iterable[Path], inside: Iterable[Path] = ()
) -> tuple[Path, ...]:
    """Return paths less any that is or holds one of holders, or lies inside one of inside.

    holders are never shown whole (the data directory, the key, `.env`, the worker's
    home); nothing of inside is shown at all (the data directory, the key, `.env`),
    whatever a PATH entry or a program's location points at.
    """
    held = [Path(os.path.realpath(s)) for s in holders]
    within = [Path(os.path.realpath(s)) for s in inside]
    kept = []
    for path in paths:
        real = Path(os.path.realpath(path))
        leaks = [s for s in held if s == real or real in s.parents]
        leaks += [s for s in within if s in real.parents]
        if leaks:
            log.warning("not showing %s to the agent: it holds or is inside %s", path, leaks[0])
            continue
        kept.append(path)
    return tuple(kept)


def masked_in(roots: Iterable[Path]) -> Iterable[Path]:
    """Yield the credential files found in each shown directory, a few levels down."""
    for root in roots:
        seen = 0
        for directory, subdirs, files in os.walk(root, followlinks=False):
            depth = len(Path(directory).relative_to(root).parts)
            seen += len(subdirs) + len(files)
            if depth >= MASK_DEPTH or seen > MASK_ENTRIES:
                subdirs.clear()
            for name in files:
                if name in MASKED_NAMES and not Path(directory, name).is_symlink():
                    yield Path(directory, name)


def bridge_python() -> str:
    """Return the interpreter that runs the jail's network bridge: Baton's own, resolved."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


# -- jails for one worker ---------------------------------------------------------------


class Jails:
    """Builds the jails of one worker process from its settings; None everywhere when off."""

    def __init__(
        self,
        *,
        enabled: bool,
        path: str,
        extra_paths: Sequence[Path] = (),
        secrets: Sequence[Path] = (),
        sealed_dir: Path | None = None,
    ) -> None:
        self.enabled = enabled
        self.path = path
        self.extra_paths = tuple(extra_paths)
        self.secrets = tuple(secrets)
        self.sealed_dir = sealed_dir  # where execute-only copies of the CLIs are kept

    def make(
        self,
        *,
        worktree: Path,
        home: Path,
        scratch: Path,
        pinned: Sequence[Path] = (),
        readable: Sequence[Path] = (),
        writable: Sequence[Path] = (),
        network: Network = "none",
        egress_dir: Path | None = None,
        programs: Sequence[str] = (),
        caches_of: str | None = None,
        reporters: Sequence[str] = (),
    ) -> Jail | None:
        """Return a jail over worktree with home and a scratch directory of its own.

        scratch holds the jail's tmp and its passwd files; readable and writable are
        shown at their own paths, after the toolchain the PATH and programs need, and
        pinned (files in home) read-only over the writable home. An
        agent's jail (caches_of: its repository) shows each of the operator's extra
        paths as that repository's own part of it, so no agent leaves a wheel or a
        package there for another repository's agent to install. Each of reporters (the
        CLI's native executable) runs from an execute-only copy, so that its report
        cannot be forged from inside.
        """
        if not self.enabled:
            return None
        tmp, etc = jail_scratch(home, scratch)
        sealed = self._sealed(reporters)
        if sealed or (egress_dir is not None and network != "none"):
            programs = (*programs, bridge_python())  # the handover and bridge run on it
        toolchain, toolchain_masks = self._toolchain(tuple(programs))
        extra, extra_masks = self._extra_paths() if caches_of is not None else ((), ())
        shown_at = tuple((repo_cache(path, caches_of), path) for path in extra if caches_of)
        return Jail(
            worktree=worktree,
            home=home,
            tmp=tmp,
            passwd_dir=etc,
            system=system_mounts(),
            readable=(*toolchain, *readable),
            masked=(*toolchain_masks, *extra_masks),
            pinned=tuple(pinned),
            writable=tuple(writable),
            shown_at=shown_at,
            network=network,
            egress_dir=egress_dir,
            sealed=sealed,
        )

    def _sealed(self, reporters: Sequence[str]) -> tuple[tuple[Path, Path], ...]:
        """Return an execute-only copy of each native reporter, with where it is shown."""
        sealed = []
        for program in reporters:
            located = program if "/" in program else shutil.which(program, path=self.path)
            real = Path(os.path.realpath(located)) if located else None
            if real is None or self.sealed_dir is None or not is_native(real):
                log.warning("%s is no native executable: its report could be forged", program)
                continue
            try:
                sealed.append((execute_only_copy(real, self.sealed_dir), real))
            except OSError as exc:
                log.warning("%s not sealed, so its report could be forged: %s", program, exc)
        return tuple(sealed)

    @functools.cache  # noqa: B019 -- one per worker process: a jail is made per git command
    def _extra_paths(self) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
        """Return the operator's extra paths, made and less secrets, and the credentials in them."""
        extra = without_secrets(self.extra_paths, self.secrets, self.secrets)
        for path in extra:
            path.mkdir(parents=True, exist_ok=True)
        return extra, tuple(masked_in(extra))

    @functools.lru_cache(maxsize=64)  # noqa: B019 -- one per worker process, a few programs
    def _toolchain(self, programs: tuple[str, ...]) -> tuple[tuple[Path, ...], tuple[Path, ...]]:
        """Return the toolchain's directories, less secrets, and the credential files in them."""
        found = toolchain_paths(self.path.split(os.pathsep), programs, Path.home())
        shown = without_secrets(found, (*self.secrets, Path.home()), self.secrets)
        return shown, tuple(masked_in(shown))


def repo_cache(cache: Path, repo: str) -> Path:
    """Return a repository's own part of an operator's cache directory, made if need be."""
    own = cache / ".baton-repos" / hashlib.sha256(repo.encode()).hexdigest()[:32]
    own.mkdir(parents=True, exist_ok=True)
    return own


def jails_for(settings: Settings) -> Jails:
    """Return the jail builder for a worker with these settings (one per settings and PATH)."""
    key_path = settings.github_private_key_path
    secrets = [settings.data_dir.resolve(), Path(".env").resolve()]
    if key_path is not None:
        secrets.append(key_path.resolve())
    return _jails(
        settings.agent_sandbox == "bwrap",
        os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        tuple(settings.agent_extra_paths),
        tuple(secrets),
        settings.data_dir.resolve() / "sealed",
    )


@functools.cache
def _jails(
    enabled: bool,
    path: str,
    extra_paths: tuple[Path, ...],
    secrets: tuple[Path, ...],
    sealed_dir: Path,
) -> Jails:
    return Jails(
        enabled=enabled,
        path=path,
        extra_paths=extra_paths,
        secrets=secrets,
        sealed_dir=sealed_dir,
    )


# -- whether the sandbox works on this machine -------------------------------------------


def sandbox_problem() -> str | None:
    """Return why this machine cannot build the agent's sandbox, or None when it can."""
    if shutil.which("bwrap") is None:
        return (
            "bwrap is not installed: install bubblewrap (apt-get install bubblewrap), "
            "or set BATON_AGENT_SANDBOX=off to run agents uncontained"
        )
    for knob, fix in (
        (
            "/proc/sys/kernel/unprivileged_userns_clone",
            "sysctl -w kernel.unprivileged_userns_clone=1",
        ),
        ("/proc/sys/user/max_user_namespaces", "sysctl -w user.max_user_namespaces=15000"),
    ):
        if _reads_zero(knob) and os.geteuid() != 0:
            return f"user namespaces are disabled: set {fix}"
    try:
        with tempfile.TemporaryDirectory(prefix="baton-sandbox-check-") as temp:
            done = subprocess.run(
                _check_argv(Path(temp)),
                capture_output=True,
                timeout=BWRAP_PROBE_TIMEOUT_S,
                stdin=subprocess.DEVNULL,
            )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap cannot start: {exc}"
    if done.returncode == 0:
        return None
    said = done.stderr.decode(errors="replace").strip().splitlines()
    reason = said[-1] if said else f"exited {done.returncode}"
    if "setting up uid map" in reason or "Operation not permitted" in reason:
        return (
            f"user namespaces are not available to this worker ({reason}): allow "
            "unprivileged user namespaces (on Ubuntu: sysctl "
            "kernel.apparmor_restrict_unprivileged_userns=0), or give the container the "
            "privileges bubblewrap needs"
        )
    return f"bwrap cannot build the sandbox: {reason}"


def _check_argv(root: Path) -> list[str]:
    """Return the command line that runs `true` in a throwaway jail under root, built as
    an agent's is: every flag Baton gives bubblewrap, so a platform refusing one fails here."""
    worktree, home = root / "worktree", root / "home"
    worktree.mkdir()
    tmp, etc = jail_scratch(home, root / "scratch")
    jail = Jail(worktree=worktree, home=home, tmp=tmp, passwd_dir=etc, system=system_mounts())
    return jail.command(["true"])


def _reads_zero(path: str) -> bool:
    try:
        return Path(path).read_text().strip() == "0"
    except OSError:
        return False
