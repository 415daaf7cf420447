"""Pure decisions: branch names, check verdicts, settlement, retry delays, rendering."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

from bot import render
from bot.checks import Verdict, checks_verdict
from bot.git import auth_header, branch_name
from bot.github import MAX_ATTEMPTS, retry_delay
from bot.lifecycle import settle_checks
from bot.model import IssueRef, Run, RunState, utcnow

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
        (403, {"Retry-After": "9999"}, "", 1, 120.0),
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
    text = render.brief("Fix $(whoami)", "Body with `backticks`", "octo/widgets#7", 1)
    assert "# Issue octo/widgets#7: Fix $(whoami)" in text
    assert "Body with `backticks`" in text
    assert "Do not push" in text


def test_pr_body_closes_the_issue_and_lists_the_diffs_files() -> None:
    body = render.pr_body(pushed(), "Fixed it.", ["calc.py", "test_calc.py"])
    assert body.startswith("Closes #7\n")
    assert "Fixed it." in body
    assert "- `calc.py`\n- `test_calc.py`" in body
    assert "Listed once GitHub" in render.pr_body(pushed(), "", None)


def test_status_comment_is_marked_and_says_the_state() -> None:
    run = pushed().model_copy(update={"pr_url": "https://github.com/octo/widgets/pull/8"})
    text = render.status_comment(run, run.started_at + timedelta(seconds=75))
    assert text.startswith(render.STATUS_MARKER)
    assert "attempt 1 · pushed-pending" in text
    assert "https://github.com/octo/widgets/pull/8" in text


@pytest.mark.parametrize(("seconds", "text"), [(4.25, "4.2s"), (185, "3m 05s"), (3725, "1h 02m")])
def test_duration(seconds: float, text: str) -> None:
    assert render.duration(timedelta(seconds=seconds)) == text
