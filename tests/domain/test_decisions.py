"""Pure decisions: branch names, check verdicts, settlement, retry delays, rendering."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

import pytest

from bot.domain import render
from bot.domain.budget import Spend
from bot.domain.checks import Verdict, checks_verdict, failing_checks, required_checks_verdict
from bot.domain.model import AgentResult, IssueRef, Limits, Run, RunState, utcnow
from bot.domain.plans.settlement import settle_checks
from bot.edges.git import auth_header, branch_name
from bot.edges.github import MAX_ATTEMPTS, retry_delay

ISSUE = IssueRef(installation_id=1, repo="octo/widgets", number=7)
SAFE_REF = re.compile(r"^baton/issue-\d+(-[a-z0-9]+)*$")


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Fix the login bug", "baton/issue-7-fix-the-login-bug"),
        ("$(rm -rf /); `reboot` && echo | cat > x", "baton/issue-7-rm-rf-reboot-echo-cat-x"),
        ("Ünïcödé título — 日本語", "baton/issue-7-unicode-titulo"),
        ("日本語のみ", "baton/issue-7"),
        ("../../etc/passwd.lock", "baton/issue-7-etc-passwd-lock"),
        ("-" * 10, "baton/issue-7"),
        ("a" * 80, "baton/issue-7-" + "a" * 40),
    ],
)
def test_branch_names_are_safe_refs(title: str, expected: str) -> None:
    name = branch_name(7, title)
    assert name == expected
    assert SAFE_REF.match(name)


def test_auth_header_is_basic_auth_for_an_installation() -> None:
    assert auth_header("ghs_x") == "AUTHORIZATION: basic eC1hY2Nlc3MtdG9rZW46Z2hzX3g="


def suite(status: str, conclusion: str | None = None, runs: int = 1) -> dict[str, object]:
    return {"status": status, "conclusion": conclusion, "latest_check_runs_count": runs}


NO_STATUS = {"state": "pending", "total_count": 0, "statuses": []}


@pytest.mark.parametrize(
    ("suites", "status", "verdict"),
    [
        ([], NO_STATUS, Verdict.PENDING),
        ([suite("completed", "success")], NO_STATUS, Verdict.GREEN),
        ([suite("completed", "neutral"), suite("completed", "skipped")], NO_STATUS, Verdict.GREEN),
        ([suite("completed", "success"), suite("in_progress")], NO_STATUS, Verdict.PENDING),
        ([suite("completed", "failure"), suite("in_progress")], NO_STATUS, Verdict.RED),
        ([suite("completed", "timed_out")], NO_STATUS, Verdict.RED),
        ([suite("completed", "cancelled")], NO_STATUS, Verdict.RED),
        ([suite("completed", "action_required")], NO_STATUS, Verdict.RED),
        ([suite("completed", "success"), suite("queued", runs=0)], NO_STATUS, Verdict.GREEN),
        ([suite("queued", runs=0)], NO_STATUS, Verdict.PENDING),
        ([suite("completed", "success")], {"state": "pending", "total_count": 1}, Verdict.PENDING),
        ([suite("completed", "success")], {"state": "failure", "total_count": 1}, Verdict.RED),
        ([suite("completed", "success")], {"state": "error", "total_count": 2}, Verdict.RED),
        ([], {"state": "success", "total_count": 1}, Verdict.GREEN),
        ([suite("completed", "success")], None, Verdict.GREEN),
    ],
)
def test_checks_verdict(
    suites: list[dict[str, object]], status: dict[str, object] | None, verdict: Verdict
) -> None:
    assert checks_verdict(suites, status) is verdict


def check_run(
    name: str, status: str, conclusion: str | None = None, id_: int = 1
) -> dict[str, object]:
    return {"id": id_, "name": name, "status": status, "conclusion": conclusion}


def commit_status(context: str, state: str) -> dict[str, object]:
    return {"statuses": [{"context": context, "state": state}]}


@pytest.mark.parametrize(
    ("runs", "status", "verdict"),
    [
        ([], NO_STATUS, Verdict.PENDING),
        ([check_run("test", "completed", "success")], NO_STATUS, Verdict.PENDING),
        (
            [check_run("test", "completed", "success"), check_run("lint", "completed", "skipped")],
            NO_STATUS,
            Verdict.GREEN,
        ),
        (
            [check_run("test", "completed", "success"), check_run("lint", "in_progress")],
            NO_STATUS,
            Verdict.PENDING,
        ),
        ([check_run("test", "completed", "failure")], NO_STATUS, Verdict.RED),
        (
            [
                check_run("test", "completed", "success"),
                check_run("lint", "completed", "success"),
                check_run("docs", "completed", "failure"),
            ],
            NO_STATUS,
            Verdict.GREEN,
        ),
        (
            [
                check_run("test", "completed", "failure", id_=1),
                check_run("test", "completed", "success", id_=2),
            ],
            commit_status("lint", "success"),
            Verdict.GREEN,
        ),
        (
            [check_run("test", "completed", "success")],
            commit_status("lint", "pending"),
            Verdict.PENDING,
        ),
        ([check_run("test", "completed", "success")], commit_status("lint", "error"), Verdict.RED),
        ([check_run("test", "completed", "success")], None, Verdict.PENDING),
    ],
)
def test_required_checks_verdict(
    runs: list[dict[str, object]], status: dict[str, object] | None, verdict: Verdict
) -> None:
    assert required_checks_verdict(runs, status, ("test", "lint")) is verdict


def test_only_required_checks_are_failing_checks() -> None:
    runs = [check_run("test", "completed", "failure"), check_run("docs", "completed", "failure")]
    assert [c.name for c in failing_checks(runs, commit_status("lint", "error"), ("test",))] == [
        "test"
    ]
    assert [c.name for c in failing_checks(runs, None)] == ["test", "docs"]


def pushed(head: str = "a" * 40) -> Run:
    now = utcnow()
    run = Run.claimed(ISSUE, 1, "baton/issue-7", now).moved(RunState.PUSHED_PENDING, now)
    return run.model_copy(update={"head_sha": head})


def test_green_settles_the_pushed_head() -> None:
    settled = settle_checks(pushed(), "a" * 40, Verdict.GREEN, utcnow())
    assert settled is not None and settled.state is RunState.PUSHED_GREEN


def test_red_fails_the_run_as_checks_failed() -> None:
    settled = settle_checks(pushed(), "a" * 40, Verdict.RED, utcnow())
    assert settled is not None
    assert (settled.state, settled.failure_class) == (RunState.FAILED, "checks-failed")


@pytest.mark.parametrize(
    ("run", "sha", "verdict"),
    [
        (pushed(), "b" * 40, Verdict.RED),  # a late result for another (older) head
        (pushed(), "a" * 40, Verdict.PENDING),
        (pushed().moved(RunState.PUSHED_GREEN, utcnow()), "a" * 40, Verdict.RED),  # repeated
        (Run.claimed(ISSUE, 1, "b", utcnow()), "a" * 40, Verdict.GREEN),  # not pushed yet
    ],
)
def test_settlement_ignores_what_is_not_for_this_run(run: Run, sha: str, verdict: Verdict) -> None:
    assert settle_checks(run, sha, verdict, utcnow()) is None


@pytest.mark.parametrize(
    ("status", "headers", "message", "attempt", "expected"),
    [
        (403, {"Retry-After": "7"}, "You have exceeded a secondary rate limit", 1, 7.0),
        (429, {"retry-after": "3"}, "", 2, 3.0),
        (403, {}, "You have exceeded a secondary rate limit", 1, 60.0),
        (403, {"Retry-After": "9999"}, "", 1, 9999.0),  # hours are honoured, never cut
        (403, {}, "You have exceeded a secondary rate limit", 3, 240.0),  # doubled per repeat
        (403, {}, "Resource not accessible by integration", 1, None),
        (404, {}, "Not Found", 1, None),
        (422, {}, "Validation Failed", 1, None),
        (502, {}, "Bad Gateway", MAX_ATTEMPTS, None),
    ],
)
def test_retry_delay(
    status: int, headers: dict[str, str], message: str, attempt: int, expected: float | None
) -> None:
    assert retry_delay(status, headers, message, attempt) == expected


def test_server_errors_back_off_exponentially() -> None:
    delays = [retry_delay(502, {}, "", attempt, base_s=1.0) for attempt in (1, 2, 3)]
    assert all(d is not None for d in delays)
    assert 1.0 <= delays[0] <= 1.5 and 2.0 <= delays[1] <= 3.0 and 4.0 <= delays[2] <= 6.0  # type: ignore[operator]


def test_brief_carries_the_issue_as_data_and_the_instructions() -> None:
    text = render.brief("Fix $(whoami)", "Body with `backticks`", "octo/widgets#7", 1, 4)
    assert "# Issue octo/widgets#7: Fix $(whoami)" in text
    assert "Attempt 1 of 4." in text
    assert "Body with `backticks`" in text
    assert "Do not push" in text
    assert "Where the previous attempt stopped" not in text


def test_continuation_brief_carries_failing_checks_review_and_the_previous_report() -> None:
    previous = (
        pushed()
        .moved(RunState.FAILED, utcnow())
        .model_copy(
            update={
                "failure_class": "checks-failed",
                "reason": "checks failed",
                "pr_url": "https://github.com/octo/widgets/pull/8",
            }
        )
    )
    continuation = render.Continuation(
        previous=previous,
        failing_checks=(
            render.CheckSummary(
                name="tests",
                conclusion="failure",
                title="2 failed",
                text="x" * 5000 + "\nAssertionError: 3 != 4",
            ),
        ),
        review=render.ReviewSummary(
            author="octo-lead",
            body="Rename it.",
            comments=(render.ReviewComment(path="app.py", line=3, body="Not this name."),),
        ),
    )
    text = render.brief("Fix", "Body", "octo/widgets#7", 2, 4, continuation)
    assert "Attempt 2 of 4." in text
    assert "Attempt 1 pushed `baton/issue-7` at aaaaaaaaaaaa and opened" in text
    assert "### tests: failure\n\n2 failed" in text
    assert "AssertionError: 3 != 4" in text and "x" * 3001 not in text  # the tail, bounded
    assert "@octo-lead wrote:\n\nRename it." in text
    assert "- `app.py` line 3: Not this name." in text


def test_escalation_comment_says_why_what_spent_it_and_what_to_do() -> None:
    run = pushed().model_copy(update={"pr_url": "https://github.com/octo/widgets/pull/8"})
    spent = Spend(
        continuations=4,
        failed_attempts=1,
        reentries=0,
        backoffs_in_a_row=0,
        by_class={"checks-failed": 4, "agent-error": 1},
    )
    text = render.escalation_comment(
        "checks-failed, and all 3 continuations are spent", spent, Limits(), run, ["octo-lead"]
    )
    assert text.startswith(render.ESCALATION_MARKER)
    assert "| continuations | 4 | 3 |" in text and "| failed attempts | 1 | 3 |" in text
    assert "What spent them: agent-error: 1, checks-failed: 4." in text
    assert (
        "`baton/issue-7` at `aaaaaaaaaaaa`, pull request https://github.com/octo/widgets/pull/8"
        in text
    )
    assert text.rstrip().endswith("@octo-lead")
    nothing = render.escalation_comment("no-change: nothing", spent, Limits(), None, [])
    assert "There is no work to continue from" in nothing and "@" not in nothing
    assert "worker that died" not in text


def test_an_escalation_spent_by_worker_deaths_says_so() -> None:
    spent = Spend(
        continuations=4,
        failed_attempts=0,
        reentries=0,
        backoffs_in_a_row=0,
        by_class={"orphan-clean": 3, "orphan-progress": 1},
    )
    text = render.escalation_comment(
        "orphan-clean, and all 3 continuations are spent", spent, Limits(), None, []
    )
    assert "Every one was spent by a worker that died mid-run" in text


def test_pull_status_comment_has_a_row_per_attempt() -> None:
    first = pushed().model_copy(update={"failure_class": "checks-failed"})
    second = pushed("b" * 40).model_copy(update={"attempt": 2})
    text = render.pull_status_comment(
        [first, second],
        [render.CheckSummary(name="ci", conclusion="success")],
        "waiting for the pull request's checks",
        second.started_at,
    )
    assert "| 1 | checks-failed |" in text and "| 2 | pushed-pending |" in text
    assert "`aaaaaaa`" in text and "`bbbbbbb`" in text
    assert "- ci: success" in text


def test_pr_body_closes_the_issue_and_lists_the_diffs_files() -> None:
    body = render.pr_body(pushed(), "Fixed it.", ["calc.py", "test_calc.py"])
    assert body.startswith("Closes #7\n")
    assert "Fixed it." in body
    assert "- `calc.py`\n- `test_calc.py`" in body
    assert "Listed once GitHub" in render.pr_body(pushed(), "", None)


def test_status_comment_is_marked_and_says_the_state() -> None:
    run = pushed().model_copy(update={"pr_url": "https://github.com/octo/widgets/pull/8"})
    url = "https://github.com/octo/widgets/pull/8"
    text = render.status_comment(
        run, run.started_at + timedelta(seconds=75), "checks", f"{url}#issuecomment-5"
    )
    assert text.startswith(render.STATUS_MARKER)
    assert "attempt 1 · pushed-pending" in text and "Next: checks" in text
    assert f"Pull request: {url} ([history and checks]({url}#issuecomment-5))" in text
    assert "0.0s in all" in text  # pushed at once: the time to its last step
    live = render.status_comment(
        Run.claimed(ISSUE, 1, "b", run.started_at), run.started_at + timedelta(seconds=75)
    )
    assert "1m 15s so far" in live


def test_status_comment_names_the_hosts_the_sandbox_refused() -> None:
    run = pushed()
    now = run.started_at
    agent = AgentResult(
        agent="claude",
        status="success",
        stop_reason="completed",
        started_at=now,
        ended_at=now,
        transcript_path=Path("/var/lib/baton/runs/transcript.log"),
        stderr_path=Path("/var/lib/baton/runs/stderr.log"),
    )
    quiet = run.model_copy(update={"agent_result": agent})
    assert "refused connections" not in render.status_comment(quiet, now)
    assert render.status_key(quiet, None, None) == render.status_key(run, None, None)
    hosts = ["example.com:443", "pypi.org:443"]
    refused = run.model_copy(
        update={"agent_result": agent.model_copy(update={"refused_hosts": hosts})}
    )
    text = render.status_comment(refused, now)
    assert "\n\nThe sandbox refused connections to: example.com:443, pypi.org:443.\n" in text
    assert render.status_key(refused, None, None) != render.status_key(quiet, None, None)
    many = [f"host-{n:02}.example:443" for n in range(13)]
    flood = run.model_copy(
        update={"agent_result": agent.model_copy(update={"refused_hosts": many})}
    )
    line = render.sandbox_refusals(many)
    assert line is not None and line in render.status_comment(flood, now)
    assert line.startswith("The sandbox refused connections to: host-00.example:443, ")
    assert "host-09.example:443 and 3 more (the worker's log names each)." in line
    assert "host-10" not in line


@pytest.mark.parametrize(("seconds", "text"), [(4.25, "4.2s"), (185, "3m 05s"), (3725, "1h 02m")])
def test_duration(seconds: float, text: str) -> None:
    assert render.duration(timedelta(seconds=seconds)) == text
