"""What the tests share: GitHub's own payload examples, and the Baton stacks of the
end-to-end tests (tests/test_e2e*.py), every part a real process."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from bot.devkit.devstack import LocalBaton, Process
from bot.domain.jobs import AGENTS, EVENTS

FIXTURES = Path(__file__).parent / "fixtures"
GITHUB_FIXTURES = FIXTURES / "github"
SCRIPTED_AGENT = Path(__file__).parent / "stand_ins" / "scripted_agent.py"
# An e2e stack's hour passes in about a minute: Baton's write pace and the sandbox's
# secondary limits are compressed sixty-fold. tests/edges/test_write_pace.py holds the
# pace at its defaults and tests/sandbox/test_limits.py the sandbox at GitHub's figures.
COMPRESSED_PACE = {
    "BATON_WRITE_INTERVAL_SECONDS": "0.0167",
    "BATON_WRITE_PER_MINUTE": "4800",
    "BATON_WRITE_PER_HOUR": "30000",
}

# What a stack of the scripted agent runs with: clocks short enough for a run to settle
# in seconds, and a lead to escalate to.
SCRIPTED_ENV = {
    "BATON_AGENT_WALL_CLOCK_MINUTES": "1",
    "BATON_MAX_CONTINUATIONS": "1",
    "BATON_BACKOFF_BASE_SECONDS": "0.2",
    "BATON_ESCALATION_MENTIONS": "octo-lead",
    "BATON_RESUME_BUFFER_SECONDS": "0",
    "BATON_NO_CHECKS_AFTER_SECONDS": "2",
    # Baton's own pace of writes, compressed as the sandbox's limits are (see below).
    **COMPRESSED_PACE,
}


def payload(name: str) -> dict[str, Any]:
    """Return one of GitHub's webhook payload examples, e.g. 'issues/labeled.json'."""
    data: dict[str, Any] = json.loads((GITHUB_FIXTURES / "payloads" / name).read_text())
    return data


@dataclass(frozen=True)
class StackSpec:
    """A test module's own Baton stack, as far as it differs from the others'.

    A module declares it as `STACK` (tests/conftest.py's `stack` starts it). Modules run
    one after another on a worker, sharing its redis-server: each names a database of
    its own. The agent runs with base_env, env over it; with machines, every worker
    stands for a machine of its own, its data directory on a disk no other worker shares.
    """

    database: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    machines: bool = False
    agent: Path = SCRIPTED_AGENT
    workers: int = 2
    base_env: Mapping[str, str] = field(default_factory=lambda: SCRIPTED_ENV)

    def redis_url(self, server_url: str) -> str:
        """Return the URL of the stack's own database on the server at server_url."""
        return server_url.rsplit("/", 1)[0] + f"/{self.database}"

    def start(self, redis_url: str, workdir: Path) -> LocalBaton:
        """Start the stack in workdir, on the Redis at redis_url; return once all answer."""
        baton = LocalBaton(
            workdir=workdir,
            redis_url=redis_url,
            agent_command=f"{sys.executable} {self.agent}",
            extra_env={**self.base_env, **self.env},
        )
        baton.start(workers=self.workers)
        compress_secondary_limits(baton)
        if self.machines:
            for name in [name for name in baton.processes if name.startswith("worker-")]:
                baton.processes[name].stop()
                start_machine(baton, name)
        return baton


# The sandbox's side of the compression; the soak (bench/soak.py) runs under GitHub's own.
COMPRESSED_SECONDARY = {"secondary_per_minute": 80 * 60, "secondary_per_hour": 500 * 60}


def compress_secondary_limits(baton: LocalBaton) -> None:
    """Lift the stack's sandbox's secondary limits by its compression of time."""
    request = urllib.request.Request(  # noqa: S310 - the local sandbox, over http
        f"{baton.sandbox_url}/_sandbox/config",
        data=json.dumps(COMPRESSED_SECONDARY).encode(),
        method="PATCH",
        headers={
            "Authorization": f"token {baton.admin_token}",
            "Content-Type": "application/json",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 - the local sandbox
        assert answer.status == 200, answer.status


def started(redis_url: str, workdir: Path, **env: str) -> LocalBaton:
    """Start a stack of the scripted agent on the Redis at redis_url, with env's settings."""
    return StackSpec(env=env).start(redis_url, workdir)


def disk(stack: LocalBaton, name: str) -> Path:
    """Return the data directory of the worker called name: its machine's own disk."""
    return stack.workdir / "machines" / name


def start_machine(
    stack: LocalBaton, name: str, queues: tuple[str, ...] = (EVENTS, AGENTS)
) -> Process:
    """Start the worker called name on its own disk, as on a machine of its own."""
    return stack.start_worker(name, queues, disk(stack, name))


def sweep(stack: LocalBaton) -> str:
    """Run `baton sweep` as an operator would; return what it printed."""
    return baton_command(stack, "sweep")


def baton_command(stack: LocalBaton, command: str) -> str:
    """Run `baton COMMAND` on the stack as an operator would; return what it printed."""
    result = subprocess.run(
        [sys.executable, "-m", "bot", command],
        env=stack.baton_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


async def post_signed(
    session: aiohttp.ClientSession,
    stack: LocalBaton,
    event: str,
    body: bytes,
    delivery: str | None = None,
) -> tuple[int, str]:
    """Post body to the stack's `baton web` as GitHub delivers an event, signed with its secret.

    Each delivery has a fresh id unless one is given. Returns the status and the answer.
    """
    signature = hmac.new(stack.webhook_secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": f"sha256={signature}",
        "Content-Type": "application/json",
    }
    async with session.post(f"{stack.web_url}/webhook", data=body, headers=headers) as response:
        return response.status, await response.text()
