"""A repository's setup commands, run in the worktree before its agent starts."""

from __future__ import annotations

import os
import shlex
from collections.abc import Sequence
from pathlib import Path

from bot.agents.base import AgentRequest, agent_environment
from bot.agents.process import run_process
from bot.domain.model import AgentResult


async def run_setup(
    commands: Sequence[str], request: AgentRequest, agent: str
) -> AgentResult | None:
    """Run each command in order; return a failed result for the first that fails, else None.

    Each runs as its own process, no shell, with the agent's environment: a
    repository's file can no more reach Baton's credentials than its agent can.
    """
    for number, command in enumerate(commands, 1):
        output = request.run_dir / f"setup-{number}.log"
        stderr = request.run_dir / f"setup-{number}.stderr"
        argv, env = request.contain(shlex.split(command), agent_environment(request))
        outcome = await run_process(
            argv,
            cwd=request.worktree,
            env=env,
            stdin=Path(os.devnull),
            transcript=output,
            stderr=stderr,
            deadline=request.deadline,
        )
        if outcome.spawn_error is not None:
            why = f"could not start: {outcome.spawn_error}"
        elif outcome.timed_out:
            why = "ran past the attempt's wall clock"
        elif outcome.exit_code != 0:
            why = f"exited with {outcome.exit_code}"
        else:
            continue
        return AgentResult(
            agent=agent,
            status="failed",
            stop_reason="setup_failed",
            exit_code=outcome.exit_code,
            started_at=outcome.started_at,
            ended_at=outcome.ended_at,
            result_text=f"setup command `{command}` {why}",
            evidence=outcome.tail,
            transcript_path=output,
            stderr_path=stderr,
        )
    return None
