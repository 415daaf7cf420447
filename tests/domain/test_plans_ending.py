"""Ending: how an attempt that did not reach its pull request ended; pure, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.domain.classify import RunFacts, classify
from bot.domain.model import AgentResult, FailureClass, RunState
from bot.domain.plans.ending import End, after_agent, ended

NOW = datetime(2026, 12, 1, 6, tzinfo=UTC)
RESET = datetime(2026, 12, 1, 7, tzinfo=UTC)


def agent(status: str = "success", stop_reason: str = "completed", **fields: Any) -> AgentResult:
    return AgentResult.model_validate(
        {
            "agent": "command",
            "status": status,
            "stop_reason": stop_reason,
            "started_at": NOW,
            "ended_at": NOW,
            "transcript_path": Path("transcript.log"),
            "stderr_path": Path("stderr.log"),
            **fields,
        }
    )


FAILED = agent("failed", "cli_error", result_text="boom")
WINDOW = agent("failed", "provider_window", resets_at=RESET)
STOPPED = agent("failed", "cancelled", result_text="stopped by a maintainer")


@pytest.mark.parametrize(
    ("result", "new_commits", "changed", "push_failure", "expected"),
    [
        # Pushing failed: the commits are not on GitHub, whatever the agent said.
        (
            agent(),
            2,
            True,
            "pushing baton/issue-7 failed: GitError: denied",
            End(
                state=RunState.FAILED,
                reason="pushing baton/issue-7 failed: GitError: denied",
                facts=RunFacts(
                    ending="push-failed", detail="pushing baton/issue-7 failed: GitError: denied"
                ),
            ),
        ),
        # A maintainer stopped it: killed, keeping its commits.
        (
            STOPPED,
            1,
            True,
            None,
            End(
                state=RunState.KILLED,
                reason="stopped by a maintainer",
                facts=RunFacts(
                    ending="stopped",
                    stop_reason="cancelled",
                    new_commits=1,
                    detail="stopped by a maintainer",
                ),
            ),
        ),
        # The agent failed: its report, or else its stop reason, says why.
        (
            FAILED,
            0,
            False,
            None,
            End(
                state=RunState.FAILED,
                reason="boom",
                facts=RunFacts(ending="agent", stop_reason="cli_error", detail="boom"),
            ),
        ),
        (
            agent("failed", "max_turns"),
            3,
            True,
            None,
            End(
                state=RunState.FAILED,
                reason="max_turns",
                facts=RunFacts(
                    ending="agent", stop_reason="max_turns", new_commits=3, detail="max_turns"
                ),
            ),
        ),
        # A usage window: its reset time goes with the facts.
        (
            WINDOW,
            0,
            False,
            None,
            End(
                state=RunState.FAILED,
                reason="provider_window",
                facts=RunFacts(
                    ending="agent",
                    stop_reason="provider_window",
                    resets_at=RESET,
                    detail="provider_window",
                ),
            ),
        ),
        # Finished without a change: no commits, or commits that change no file.
        (
            agent(),
            0,
            False,
            None,
            End(
                state=RunState.NO_CHANGE,
                reason="the agent finished without changing any file",
                facts=RunFacts(
                    ending="agent",
                    stop_reason="completed",
                    detail="the agent finished without changing any file",
                ),
            ),
        ),
        (
            agent(),
            2,
            False,
            None,
            End(
                state=RunState.NO_CHANGE,
                reason="the agent finished without changing any file",
                facts=RunFacts(
                    ending="agent",
                    stop_reason="completed",
                    detail="the agent finished without changing any file",
                ),
            ),
        ),
        # Finished with a change: it goes on to its pull request.
        (agent(), 2, True, None, None),
    ],
)
def test_after_agent(
    result: AgentResult,
    new_commits: int,
    changed: bool,
    push_failure: str | None,
    expected: End | None,
) -> None:
    assert after_agent(result, new_commits, changed, push_failure) == expected


@pytest.mark.parametrize(
    ("end", "failure_class"),
    [
        (ended("infra-failed", RunState.FAILED, "OSError: disk full"), FailureClass.DISPATCH_INFRA),
        (ended("pr-failed", RunState.FAILED, "422", FAILED), FailureClass.DISPATCH_INFRA),
        (ended("interrupted", RunState.FAILED, "restart", STOPPED, 1), FailureClass.INTERRUPTED),
        (ended("agent", RunState.FAILED, "window", WINDOW), FailureClass.PROVIDER_WINDOW),
    ],
)
def test_other_endings_classify_by_how_they_ended(end: End, failure_class: FailureClass) -> None:
    # Only the agent's own ending, or a stop, is judged by its stop reason.
    assert classify(end.facts).failure_class is failure_class
    assert end.facts.detail == end.reason


def test_commits_that_change_nothing_classify_as_no_change() -> None:
    end = after_agent(agent(), 2, False)
    assert end is not None and classify(end.facts).failure_class is FailureClass.NO_CHANGE
