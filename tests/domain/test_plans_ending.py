"""Ending: how an attempt that did not reach its pull request ended; pure, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.domain.classify import RunFacts, classify
from bot.domain.model import AgentResult, FailureClass, IssueRef, PendingPull, Run, RunState
from bot.domain.plans.ending import PULL_TRIES, End, after_agent, ended, put_off, with_pull
from bot.domain.plans.settlement import pushed_at, waits_on

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


# A pull request GitHub would not open yet ---------------------------------------------

ISSUE = IssueRef(installation_id=1, repo="octo/repo", number=7)
WAIT_ENDS = datetime(2026, 12, 1, 8, tzinfo=UTC)


def running() -> Run:
    claimed = Run.claimed(ISSUE, 1, "baton/7-fix", NOW)
    return claimed.moved(RunState.RUNNING, NOW).model_copy(
        update={"head_sha": "a" * 40, "agent_result": agent(result_text="done")}
    )


def test_a_secondary_limit_puts_the_pull_request_off_until_the_wait_ends() -> None:
    put = put_off(running(), "GitHub asked Baton to wait", NOW, draft=True, until=WAIT_ENDS)
    assert isinstance(put, Run) and put.state is RunState.PUSHED_PENDING
    assert put.pull_pending == PendingPull(
        at=WAIT_ENDS, draft=True, tries=0, why="GitHub asked Baton to wait"
    )
    again = put_off(put, "GitHub asked Baton to wait", NOW, draft=True, until=WAIT_ENDS)
    assert isinstance(again, Run) and again.pull_pending is not None
    assert again.pull_pending.tries == 0, "a wait GitHub asked for is no failure"
    assert len(again.history) == len(put.history), "put off again, it moves nowhere"


def test_server_errors_put_the_pull_request_off_ever_longer_then_end_the_attempt() -> None:
    run: Run | End = running()
    waits = []
    for _ in range(PULL_TRIES - 1):
        assert isinstance(run, Run)
        run = put_off(run, "GitHub answered 502", NOW, draft=False)
        assert isinstance(run, Run) and run.pull_pending is not None
        waits.append((run.pull_pending.at - NOW).total_seconds())
    assert waits == [60, 120, 240, 480]
    assert isinstance(run, Run)
    end = put_off(run, "GitHub answered 502", NOW, draft=False)
    assert isinstance(end, End) and end.state is RunState.FAILED
    assert end.facts.ending == "pr-failed"
    assert end.reason == "opening the pull request failed 5 times: GitHub answered 502"
    assert classify(end.facts).failure_class is FailureClass.DISPATCH_INFRA


def test_the_pull_request_that_opens_is_recorded_once_and_its_checks_wait_from_then() -> None:
    put = put_off(running(), "GitHub asked Baton to wait", NOW, draft=False, until=WAIT_ENDS)
    assert isinstance(put, Run)
    opened = with_pull(put, 12, "https://github.test/octo/repo/pull/12", WAIT_ENDS)
    assert opened is not None and opened.pull_pending is None
    assert (opened.pr_number, opened.state) == (12, RunState.PUSHED_PENDING)
    assert pushed_at(opened) == WAIT_ENDS
    assert with_pull(opened, 13, "https://github.test/octo/repo/pull/13", WAIT_ENDS) is None
    assert with_pull(running(), 12, "https://github.test/octo/repo/pull/12", NOW) is None


def test_a_head_whose_pull_request_is_put_off_waits_on_no_check() -> None:
    put = put_off(running(), "GitHub asked Baton to wait", NOW, draft=False, until=WAIT_ENDS)
    assert isinstance(put, Run)
    assert not waits_on(put, "a" * 40)
    opened = with_pull(put, 12, "https://github.test/octo/repo/pull/12", WAIT_ENDS)
    assert opened is not None and waits_on(opened, "a" * 40)
