"""The `command` adapter: any program, run in the worktree with the brief on stdin."""

from __future__ import annotations

import json
import shlex

from pydantic import ValidationError

from bot.agents.base import AgentConfigError, AgentRequest, agent_environment
from bot.agents.output import Unreadable, read_capped
from bot.agents.process import ProcessOutcome, run_process
from bot.domain.model import AgentResult

RESULT_LIMIT = 1024 * 1024  # the agent's result file: a JSON object, never more than this


class CommandAdapter:
    """Run an operator-configured command line; its exit code (or result file) is the outcome."""

    name = "command"

    def __init__(self, command: str | None) -> None:
        if not command or not command.strip():
            raise AgentConfigError(
                "BATON_AGENT_COMMAND must be set for the command agent "
                "(a command line run in the worktree, e.g. 'my-agent --brief \"$BATON_BRIEF\"')"
            )
        try:
            shlex.split(command)
        except ValueError as exc:
            raise AgentConfigError(
                f"BATON_AGENT_COMMAND is not a valid command line: {exc}"
            ) from exc
        # The operator's own command line; nothing from an issue is ever part of it:
        # the issue reaches the agent only through the brief file.
        self.argv = ["/bin/sh", "-c", command]

    async def run(self, request: AgentRequest) -> AgentResult:
        """Run the command and report its outcome."""
        argv, env = request.contain(self.argv, agent_environment(request))
        outcome = await run_process(
            argv,
            cwd=request.worktree,
            env=env,
            stdin=request.brief_path,
            transcript=request.transcript_path,
            stderr=request.stderr_path,
            deadline=request.deadline,
        )
        return interpret(outcome, request)


def interpret(outcome: ProcessOutcome, request: AgentRequest) -> AgentResult:
    """Turn a finished command into an AgentResult; its own result file wins when valid."""
    facts: dict[str, object] = {
        "agent": CommandAdapter.name,
        "exit_code": outcome.exit_code,
        "started_at": outcome.started_at,
        "ended_at": outcome.ended_at,
        "evidence": outcome.tail,
        "transcript_path": request.transcript_path,
        "stderr_path": request.stderr_path,
    }

    def result(**fields: object) -> AgentResult:
        return AgentResult.model_validate({**facts, **fields})

    if outcome.spawn_error is not None:
        return result(
            status="failed",
            stop_reason="cli_missing",
            failure_class="env-start-failure",
            result_text=f"the agent command could not start: {outcome.spawn_error}",
        )
    if outcome.timed_out:
        return result(
            status="failed",
            stop_reason="wall_clock",
            failure_class="wall-clock-cap",
            result_text="the agent was stopped at its wall-clock cap",
        )
    # A result file that is not a plain file of a sane size is not the agent's report: it
    # is set aside unread, said in the evidence, and the exit code decides as if it were
    # absent (what the agent could claim in it, its exit code claims anyway).
    try:
        found = read_capped(request.result_path, RESULT_LIMIT, within=request.run_dir)
    except Unreadable as exc:
        found = None
        facts["evidence"] = [*outcome.tail, f"the result file was not read: {str(exc)[:300]}"]
    if found is not None and found.cut:
        found = None
        facts["evidence"] = [
            *outcome.tail,
            f"the result file is over {RESULT_LIMIT} bytes and was not read",
        ]
    if found is not None:
        # The agent's own report is authoritative once it validates; a report that
        # does not is kept as evidence and the run fails closed.
        try:
            return _checked(result(**{**_reported_fields(found.text()), **facts}))
        except (ValueError, ValidationError) as exc:
            return result(
                status="failed",
                stop_reason="no_result",
                failure_class="agent-error",
                result_text=f"the agent's result file is invalid: {str(exc)[:300]}",
            )
    if outcome.exit_code == 0:
        return result(status="success", stop_reason="completed", result_text=_summary(outcome))
    return result(
        status="failed",
        stop_reason="cli_error",
        failure_class="agent-error",
        result_text=f"the agent command exited {outcome.exit_code}",
    )


def _reported_fields(raw: str) -> dict[str, object]:
    reported = json.loads(raw)
    if not isinstance(reported, dict):
        raise ValueError("the result file must hold a JSON object")
    return reported


def _checked(result: AgentResult) -> AgentResult:
    """Fail a reported result whose status and stop reason disagree."""
    if (result.status == "success") == (result.stop_reason == "completed"):
        return result
    return result.model_copy(
        update={"status": "failed", "failure_class": result.failure_class or "agent-error"}
    )


def _summary(outcome: ProcessOutcome) -> str:
    lines = [line for line in outcome.tail if not line.startswith("stderr: ")]
    return "\n".join(lines[-10:]) if lines else "The agent finished without a message."
