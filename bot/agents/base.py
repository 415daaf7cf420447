"""What Baton hands an agent adapter, and the environment an agent runs in."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

from bot.agents.jail import Jail
from bot.domain.model import AgentResult

# Never handed to an agent, whatever an operator lists for pass-through: the
# agent must not be able to act as the App or forge webhooks.
FORBIDDEN_ENV = frozenset(
    {
        "GITHUB_PRIVATE_KEY",
        "GITHUB_PRIVATE_KEY_PATH",
        "GITHUB_WEBHOOK_SECRET",
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "GITHUB_APP_ID",
        "REDIS_URL",
        "SANDBOX_ADMIN_TOKEN",
    }
)


class AgentConfigError(Exception):
    """The agent is not configured well enough to start."""


@dataclass(frozen=True)
class AgentRequest:
    """One agent invocation: where, with which brief, under which caps."""

    run_id: str
    issue_number: int
    attempt: int
    worktree: Path
    brief_path: Path
    run_dir: Path
    deadline: datetime
    home: Path
    passthrough_env: tuple[str, ...] = ()
    held_env: Mapping[str, str] = field(default_factory=dict)  # placeholders the proxy fills
    extra_env: dict[str, str] = field(default_factory=dict)
    resume_session_id: str | None = None  # continue this CLI session if it exists on this worker
    jail: Jail | None = None  # where its processes run; None only with BATON_AGENT_SANDBOX=off

    @property
    def transcript_path(self) -> Path:
        """Return where the agent's stdout is captured."""
        return self.run_dir / "transcript.log"

    @property
    def stderr_path(self) -> Path:
        """Return where the agent's stderr is captured."""
        return self.run_dir / "stderr.log"

    @property
    def reports_sealed(self) -> bool:
        """Return whether the CLI's report comes on the pipe no tool can write."""
        return self.jail is not None and self.jail.reports_sealed

    def contain(self, argv: list[str], env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
        """Return the command line and environment that run argv in the request's jail."""
        if self.jail is None:
            return argv, env
        return self.jail.command(argv), self.jail.environment(env)

    @property
    def io_dir(self) -> Path:
        """Return the one directory of the run's that the agent sees: its brief and result."""
        return self.run_dir / "io"

    @property
    def result_path(self) -> Path:
        """Return where an agent may write its own result as JSON."""
        return self.io_dir / "agent-result.json"


class Adapter(Protocol):
    """Runs one agent CLI and turns what it printed into an AgentResult."""

    name: str

    async def run(self, request: AgentRequest) -> AgentResult:
        """Run the agent to completion (or its caps) and report."""
        ...


def agent_environment(request: AgentRequest) -> dict[str, str]:
    """Return the agent's whole environment, built from scratch: no credential to GitHub."""
    env = {
        "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
        "HOME": str(request.home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        "NO_COLOR": "1",
        "TZ": "UTC",
        "BATON_RUN_ID": request.run_id,
        "BATON_ISSUE": str(request.issue_number),
        "BATON_ATTEMPT": str(request.attempt),
        "BATON_WORKTREE": str(request.worktree),
        "BATON_BRIEF": str(request.brief_path),
        "BATON_DEADLINE": request.deadline.isoformat(),
        "BATON_RESULT": str(request.result_path),
    }
    for name in request.passthrough_env:
        if name not in FORBIDDEN_ENV and name in os.environ:
            env[name] = os.environ[name]
    env.update(request.held_env)  # the keys the proxy holds: only their placeholders here
    env.update({k: v for k, v in request.extra_env.items() if k not in FORBIDDEN_ENV})
    return env
