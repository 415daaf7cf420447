"""Pure rules for GitHub as it is: pages, fresh tokens, budgets, silence, disappearances."""

from __future__ import annotations

from datetime import timedelta

import pytest

from bot.domain.checks import (
    Verdict,
    checks_verdict,
    ci_suites,
    combined_state,
    no_ci_due,
    nothing_reported,
)
from bot.domain.gone import disappearance, moved_elsewhere
from bot.domain.model import IssueRef, utcnow
from bot.domain.pacing import RateBudget, budget_from_headers, sweep_may_spend
from bot.edges.github import FRESH_TOKEN_S, ConditionalReads, retry_delay, with_page_size

ISSUE = IssueRef(installation_id=1, repo="octo/widgets", number=7)
API = "https://api.github.com"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (f"{API}/repos/o/r/pulls/1/files", f"{API}/repos/o/r/pulls/1/files?per_page=100"),
        (f"{API}/repos/o/r/issues?state=open", f"{API}/repos/o/r/issues?state=open&per_page=100"),
        # A URL that names its page size (a Link header's next page) keeps it.
        (f"{API}/x?per_page=100&page=2", f"{API}/x?per_page=100&page=2"),
    ],
)
def test_lists_are_read_in_pages_of_a_hundred(url: str, expected: str) -> None:
    assert with_page_size(url) == expected


@pytest.mark.parametrize(
    ("status", "age_s", "headers", "retried"),
    [
        (401, 0.2, {}, True),  # GitHub has not seen the new token everywhere yet
        (403, 1.0, {"x-ratelimit-remaining": "4000"}, True),
        (401, FRESH_TOKEN_S + 1, {}, False),  # an old token refused: it was revoked
        (401, None, {}, False),  # the App's own JWT is never "fresh"
        (403, 0.2, {"x-ratelimit-remaining": "0"}, False),  # a primary rate limit
        (404, 0.2, {}, False),
    ],
)
def test_a_fresh_tokens_refusal_is_retried_for_a_few_seconds(
    status: int, age_s: float | None, headers: dict[str, str], retried: bool
) -> None:
    delay = retry_delay(status, headers, "Bad credentials", 1, token_age_s=age_s)
    assert (delay is not None) is retried
    if delay is not None:
        assert 0 < delay <= FRESH_TOKEN_S


def test_fresh_token_retries_end_when_the_token_is_old_enough() -> None:
    waited, attempt = 0.0, 1
    while (delay := retry_delay(401, {}, "", attempt, token_age_s=waited)) is not None:
        waited, attempt = waited + delay, attempt + 1
    assert FRESH_TOKEN_S - 0.5 <= waited <= FRESH_TOKEN_S


@pytest.mark.parametrize(
    ("path", "kept"),
    [
        ("/repos/o/r", True),  # each run's look at the repository
        ("/repos/o/r/issues", True),  # the sweep's list of queued issues
        ("/repos/o/r/issues/7", True),
        ("/repos/o/r/contents/.github/baton.yml", True),
        ("/installation/repositories", True),
        ("/app/installations", True),
        ("/repos/o/r/pulls/3", True),
        ("/repos/o/r/pulls/3/reviews", True),
        ("/repos/o/r/commits/abc/check-runs", False),  # read once per head
        ("/repos/o/r/issues/7/events", False),
    ],
)
def test_only_the_reads_baton_repeats_are_kept_for_conditional_requests(
    path: str, kept: bool
) -> None:
    assert ConditionalReads.kept(f"{API}{path}?per_page=100") is kept


def budget(remaining: int, limit: int = 5000, reset_in: float = 600) -> RateBudget:
    return RateBudget(limit=limit, remaining=remaining, reset_at=1000 + reset_in, seen_at=1000)


@pytest.mark.parametrize(
    ("found", "allowed"),
    [
        (None, True),  # nothing known yet
        (budget(4000), True),
        (budget(1001), True),
        (budget(1000), False),  # the last 20% is the runs'
        (budget(3), False),
        (budget(3, reset_in=-1), True),  # the hour has refilled since
    ],
)
def test_the_sweep_never_spends_the_last_fifth_of_an_hours_budget(
    found: RateBudget | None, allowed: bool
) -> None:
    assert sweep_may_spend(found, 1000) is allowed


def test_a_budget_is_read_from_githubs_headers() -> None:
    headers = {"x-ratelimit-limit": "5000", "x-ratelimit-remaining": "42", "x-ratelimit-reset": "9"}
    assert budget_from_headers(headers, 1.0) == RateBudget(
        limit=5000, remaining=42, reset_at=9, seen_at=1.0
    )
    assert budget_from_headers({"x-ratelimit-limit": "5000"}, 1.0) is None
    assert budget_from_headers({**headers, "x-ratelimit-remaining": "many"}, 1.0) is None


def test_githubs_combined_state_is_computed_over_every_page() -> None:
    assert combined_state([]) == "pending"
    assert combined_state([{"state": "success"}, {"state": "success"}]) == "success"
    assert combined_state([{"state": "success"}, {"state": "pending"}]) == "pending"
    assert combined_state([{"state": "pending"}, {"state": "error"}]) == "failure"


def test_silence_is_no_suite_and_no_status() -> None:
    assert nothing_reported([], {"state": "pending", "total_count": 0})
    assert not nothing_reported([{"id": 1}], {"total_count": 0})
    assert not nothing_reported([], {"state": "pending", "total_count": 1})


def test_workflows_awaiting_approval_hold_the_head_pending_and_are_not_silence() -> None:
    """GitHub ("Approving workflow runs from public forks"): an outside contributor's
    workflow runs wait for a maintainer, their suite completed as `action_required` with
    no run started. That is neither red nor the silence the no-CI rule greens."""
    waiting = {
        "app": {"id": 15368},
        "status": "completed",
        "conclusion": "action_required",
        "latest_check_runs_count": 0,
    }
    passed = {**waiting, "conclusion": "success", "latest_check_runs_count": 2}
    none = {"state": "pending", "total_count": 0}
    assert ci_suites([waiting], own_app_id=1) == [waiting]
    assert checks_verdict([waiting], none) is Verdict.PENDING
    assert checks_verdict([passed, waiting], none) is Verdict.PENDING
    assert not nothing_reported([waiting], none)
    # An App's own check run that asks for action is a result: red, as before.
    asked = {**waiting, "latest_check_runs_count": 1}
    assert checks_verdict([asked], none) is Verdict.RED


def test_no_ci_counts_only_after_the_wait() -> None:
    pushed = utcnow()
    assert no_ci_due(pushed, pushed + timedelta(seconds=5), 120) == pushed + timedelta(seconds=120)
    assert no_ci_due(pushed, pushed + timedelta(seconds=120), 120) is None


@pytest.mark.parametrize(
    ("status", "message", "why", "of_issue"),
    [
        (410, "This issue was deleted", "was deleted", True),
        (404, "Not Found", "is gone", True),
        (403, "This installation has been suspended", "the installation is suspended", False),
        (403, "Resource not accessible by integration", "refused the App access", False),
        (401, "Bad credentials", "token was refused", False),
    ],
)
def test_what_a_refusal_says_is_gone(status: int, message: str, why: str, of_issue: bool) -> None:
    found = disappearance(status, message)
    assert found is not None and why in found.why and found.of_issue is of_issue


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (403, "API rate limit exceeded for installation ID 1."),
        (422, "Validation Failed"),
        (500, ""),
    ],
)
def test_other_refusals_say_nothing_is_gone(status: int, message: str) -> None:
    assert disappearance(status, message) is None


def test_an_issue_read_through_a_redirect_has_moved() -> None:
    here = {"repository_url": f"{API}/repos/octo/widgets", "number": 7}
    assert moved_elsewhere(ISSUE, here) is None
    assert moved_elsewhere(ISSUE, {**here, "repository_url": f"{API}/repos/Octo/Widgets"}) is None
    moved = {"repository_url": f"{API}/repos/octo/gadgets", "number": 31}
    assert moved_elsewhere(ISSUE, moved) == "octo/gadgets#31"


def test_a_malformed_retry_after_waits_a_minute() -> None:
    """A Retry-After GitHub's docs never send still means the documented minute.

    mirrors https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api#exceeding-the-rate-limit
    """
    assert retry_delay(403, {"retry-after": "soon"}, "", 1) == 60.0
