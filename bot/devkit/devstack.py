"""A whole Baton on one machine: Redis, the sandbox GitHub, web and workers, as real processes.

`baton demo` and the end-to-end tests both run Baton through this, so what
they exercise is what an operator deploys.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import redis
from rq import Worker

from bot.domain.jobs import AGENTS, EVENTS, job_id
from bot.domain.model import IssueRef

# How long a part of the stack may take to start: a loaded 2-core machine once took over 30 s.
START_TIMEOUT_S = 90.0


class StackError(Exception):
    """A part of the local stack did not start; the message says which and where its log is."""


def free_port() -> int:
    """Return a TCP port on the loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(check: object, what: str, timeout: float = START_TIMEOUT_S) -> None:
    """Poll check() until it returns true, or raise StackError naming what did not happen."""
    assert callable(check)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            if check():
                return
        time.sleep(0.05)
    raise StackError(f"{what} did not happen within {timeout:.0f}s")


@dataclass
class Process:
    """One child process with its log file."""

    name: str
    popen: subprocess.Popen[bytes]
    log_path: Path

    def alive(self) -> bool:
        """Return whether the process is still running."""
        return self.popen.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Stop the process (and its group), escalating to SIGKILL after timeout."""
        if not self.alive():
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait()

    def log_tail(self, lines: int = 30) -> str:
        """Return the last lines of the process's log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def spawn(name: str, argv: list[str], log_dir: Path, env: dict[str, str]) -> Process:
    """Start argv in its own process group, stdout and stderr to log_dir/name.log.

    It runs in log_dir, never where it was started from: Baton reads a `.env` in its
    working directory, and a developer's own must not reach the local stack.
    """
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{name}.log"
    with log_path.open("ab") as log_file:
        popen = subprocess.Popen(
            argv,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=log_dir,
            start_new_session=True,
        )
    return Process(name, popen, log_path)


def redis_answers(url: str) -> bool:
    """Return whether a Redis answers at url."""
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


DATABASES = 32  # each end-to-end test module keeps a database of its own on one server


def start_redis_server(
    workdir: Path, appendonly: bool = False, binary: str | None = None, port: int | None = None
) -> tuple[str, Process]:
    """Start a private redis-server (on a free port unless given one), its files in workdir."""
    binary = binary or shutil.which("redis-server")
    if binary is None:
        raise StackError("redis-server is not installed (apt-get install redis-server)")
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    argv = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--dir",
        str(workdir),
        "--save",
        "",
        "--appendonly",
        "yes" if appendonly else "no",
        "--databases",
        str(DATABASES),
    ]
    process = spawn(f"redis-{port}", argv, workdir, dict(os.environ))
    url = f"redis://127.0.0.1:{port}/0"
    wait_until(lambda: redis_answers(url), f"redis-server on port {port} answering")
    return url, process


def read_env_file(path: Path) -> dict[str, str]:
    """Return the KEY=VALUE lines of an env file."""
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def http_ok(url: str) -> bool:
    """Return whether GET url answers 200."""
    try:
        with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback URL we built
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@dataclass
class LocalBaton:
    """Baton against the sandbox GitHub, every part a real process on this machine."""

    workdir: Path
    redis_url: str
    agent_command: str
    extra_env: dict[str, str] = field(default_factory=dict)
    processes: dict[str, Process] = field(default_factory=dict)
    sandbox_env: dict[str, str] = field(default_factory=dict)
    web_port: int = 0
    token_lifetime_s: float = 3600  # how long the sandbox's installation tokens live

    @property
    def log_dir(self) -> Path:
        """Return where every process logs."""
        return self.workdir / "logs"

    @property
    def sandbox_url(self) -> str:
        """Return the sandbox GitHub's base URL."""
        return self.sandbox_env["GITHUB_API_URL"]

    @property
    def admin_token(self) -> str:
        """Return the token that acts as a maintainer on every sandbox repository."""
        return self.sandbox_env["SANDBOX_ADMIN_TOKEN"]

    @property
    def webhook_secret(self) -> str:
        """Return the secret the sandbox signs webhooks with."""
        return self.sandbox_env["GITHUB_WEBHOOK_SECRET"]

    @property
    def web_url(self) -> str:
        """Return the URL of Baton's web process."""
        return f"http://127.0.0.1:{self.web_port}"

    def baton_env(self) -> dict[str, str]:
        """Return the environment Baton's processes run with."""
        # PYTHONPATH too: a checkout run from its own tree runs its own Baton, not an install.
        keep = ("PATH", "PYTHONPATH", "HOME", "LANG", "SYSTEMROOT", "TMPDIR", "VIRTUAL_ENV")
        env = {name: os.environ[name] for name in keep if name in os.environ}
        env.update({k: v for k, v in self.sandbox_env.items() if k != "SANDBOX_ADMIN_TOKEN"})
        env.update(
            {
                "REDIS_URL": self.redis_url,
                "BATON_DATA_DIR": str(self.workdir / "baton"),
                "PORT": str(self.web_port),
                "BATON_AGENT": "command",
                "BATON_AGENT_COMMAND": self.agent_command,
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def start(self, workers: int = 1) -> None:
        """Start the sandbox, the web process and the workers; return once all answer."""
        self.web_port = self.web_port or free_port()
        sandbox_dir = self.workdir / "sandbox"
        env_file = sandbox_dir / "app.env"
        env_file.unlink(missing_ok=True)
        self._spawn_baton(
            "sandbox",
            "sandbox",
            "--port",
            str(free_port()),
            "--data-dir",
            str(sandbox_dir),
            "--webhook-url",
            f"http://127.0.0.1:{self.web_port}/webhook",
            "--token-lifetime",
            str(self.token_lifetime_s),
            env=dict(os.environ),
        )
        wait_until(
            env_file.exists,
            "the sandbox GitHub writing app.env",
        )
        self.sandbox_env = read_env_file(env_file)
        self.start_web()
        for n in range(workers):
            self.start_worker(f"worker-{n + 1}")
        connection = redis.Redis.from_url(self.redis_url)
        wait_until(
            lambda: Worker.count(connection=connection) >= workers, f"{workers} workers listening"
        )

    def start_web(self) -> None:
        """Start `baton web` and wait for its health check."""
        self._spawn_baton("web", "web", "--host", "127.0.0.1")
        wait_until(lambda: http_ok(f"{self.web_url}/healthz"), "baton web answering /healthz")

    def start_worker(
        self,
        name: str,
        queues: tuple[str, ...] = (EVENTS, AGENTS),
        data_dir: Path | None = None,
    ) -> Process:
        """Start one `baton worker` on the given queues.

        data_dir stands for another machine's disk: the worker keeps its mirrors,
        worktrees and agent homes there instead of in the stack's shared directory.
        """
        env = self.baton_env()
        if data_dir is not None:
            env["BATON_DATA_DIR"] = str(data_dir)
        return self._spawn_baton(name, "worker", "--queues", *queues, env=env)

    def start_clock(self) -> Process:
        """Start `baton clock`: the sweep, RQ's scheduler and the takeover check."""
        return self._spawn_baton("clock", "clock")

    def _spawn_baton(self, name: str, *args: str, env: dict[str, str] | None = None) -> Process:
        argv = [sys.executable, "-m", "bot", *args]
        process = spawn(name, argv, self.log_dir, env if env is not None else self.baton_env())
        self.processes[name] = process
        time.sleep(0.05)
        if not process.alive():
            raise StackError(
                f"{name} exited at once; see {process.log_path}:\n{process.log_tail()}"
            )
        return process

    def check_alive(self) -> None:
        """Raise StackError naming any process of the stack that has exited."""
        for process in self.processes.values():
            if not process.alive():
                raise StackError(
                    f"{process.name} exited ({process.popen.returncode}); "
                    f"see {process.log_path}:\n{process.log_tail()}"
                )

    def stop(self) -> None:
        """Stop every process this stack started."""
        for process in reversed(list(self.processes.values())):
            process.stop()

    def logs(self) -> str:
        """Return the tail of every process's log, for a failure report."""
        return "\n".join(
            f"--- {p.name} ({p.log_path}) ---\n{p.log_tail()}" for p in self.processes.values()
        )


def descendants(pid: int) -> list[int]:
    """Return every process below pid, from /proc."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, frontier = [], [pid]
    while frontier:
        children = parents.get(frontier.pop(), [])
        found += children
        frontier += children
    return found


def worker_running(stack: LocalBaton, issue: IssueRef) -> Process | None:
    """Return the stack's live `baton worker` whose work horse runs the issue's attempt."""
    prefix = job_id("run", issue.repo, issue.number) + "-"
    live = {p.popen.pid: p for p in stack.processes.values() if p.alive()}
    for worker in Worker.all(connection=redis.Redis.from_url(stack.redis_url)):
        current = worker.get_current_job_id()
        if current and current.startswith(prefix) and worker.pid in live:
            return live[worker.pid]
    return None
