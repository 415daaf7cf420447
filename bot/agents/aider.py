"""The `aider` adapter: `aider --message-file`, its plain-text output read into a result."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from datetime import datetime, tzinfo
from pathlib import Path

from bot.agents.base import AgentRequest, agent_environment
from bot.agents.stream import Clock, Reading, StopReason, run_cli
from bot.model import AgentResult

SUMMARY_LINES = 10

_BANNER = re.compile(r"^Aider v\d")
_PROVIDER_ERROR = re.compile(r"^(?:litellm\.\w+|The API provider\b)")
# What aider prints only after a model call came back: the run went on past the error.
_PROGRESS = re.compile(r"^(?:Applied edit to |Commit [0-9a-f]{7,} |Tokens: )")
_COST = re.compile(r"Cost: \$[\d.]+ message, \$(?P<session>[\d.]+) session")
_ERROR_CLASSES: tuple[tuple[re.Pattern[str], StopReason], ...] = (
    (
        re.compile(r"insufficient_quota|credit balance|exceeded your current quota", re.I),
        "provider_credit",
    ),
    (re.compile(r"AuthenticationError|not able to authenticate", re.I), "auth"),
    (
        re.compile(
            r"RateLimitError|rate limited|overloaded|servers are down|timed? ?out"
            r"|InternalServerError|ServiceUnavailable|APIConnectionError",
            re.I,
        ),
        "provider_transient",
    ),
)


class AiderAdapter:
    """Run aider on the brief file and read its text output; aider has no turn cap or session."""

    name = "aider"

    def __init__(
        self,
        binary: str = "aider",
        *,
        model: str | None = None,
        extra_flags: tuple[str, ...] = (),
        clock: Clock | None = None,
    ) -> None:
        self.binary = binary
        self.model = model
        self.extra_flags = extra_flags
        self.clock = clock

    def argv(self, request: AgentRequest) -> list[str]:
        """Return the command line; the brief is a file aider reads, never text in argv."""
        argv = [
            self.binary,
            "--message-file",
            str(request.brief_path),
            "--yes-always",
            "--no-pretty",
            "--no-stream",
            "--no-check-update",
            "--analytics-disable",
            # Baton owns the branch: it commits what the agent leaves behind.
            "--no-auto-commits",
            "--no-dirty-commits",
        ]
        if self.model is not None:
            argv += ["--model", self.model]
        return [*argv, *self.extra_flags]

    async def run(self, request: AgentRequest) -> AgentResult:
        """Run aider in the worktree and report what it printed."""
        return await run_cli(
            self.name,
            read,
            request,
            self.argv(request),
            agent_environment(request),
            stdin=Path(os.devnull),  # nothing to answer: every question is answered yes
            turn_limit=None,
            clock=self.clock,
        )


def read(
    text: str, exit_code: int | None, observed_at: datetime, child_tz: tzinfo | None
) -> Reading:
    """Read aider's output: it exits 0 even when the provider failed, so the text decides."""
    lines = [line.rstrip("\r") for line in text.split("\n")]
    costs = [match["session"] for line in lines if (match := _COST.search(line))]
    summary = [line for line in lines if line.strip()][-SUMMARY_LINES:]
    return replace(
        _verdict(lines, exit_code),
        cost_usd=float(costs[-1]) if costs else None,
        result_text="\n".join(summary) or None,
    )


def _verdict(lines: list[str], exit_code: int | None) -> Reading:
    if exit_code != 0:
        return Reading("cli_error", evidence=(f"aider exited {exit_code}",))
    if block := _unrecovered_provider_error(lines):
        text = "\n".join(block)
        for pattern, stop_reason in _ERROR_CLASSES:
            if pattern.search(text):
                return Reading(stop_reason, evidence=tuple(block))
        return Reading("cli_error", evidence=tuple(block))
    if not any(_BANNER.match(line) for line in lines):
        return Reading("no_result", evidence=("the output is not aider's: no version banner",))
    return Reading("completed")


def _unrecovered_provider_error(lines: list[str]) -> list[str]:
    """Return the last provider-error block, unless aider went on working after it."""
    errors = [n for n, line in enumerate(lines) if _PROVIDER_ERROR.match(line)]
    if not errors or any(_PROGRESS.match(line) for line in lines[errors[-1] :]):
        return []
    start = errors[-1]
    while start > 0 and _PROVIDER_ERROR.match(lines[start - 1]):
        start -= 1
    return lines[start : errors[-1] + 1]
