"""The sweep's decisions: what it does about each item it finds, from what it read of it."""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import bot.domain.plans.sweep
from bot.domain.effects import Enqueue, MarkReady, PostStatus, Relabel, SetLabel, SettleHead
from bot.domain.issue_text import snapshot
from bot.domain.jobs import open_pull_job, queue_chain_job, run_issue_job
from bot.domain.model import IssueRef, Labels, PendingPull, Run, RunState
from bot.domain.pacing import RateBudget
from bot.domain.plans.recovery import follow_up_job
from bot.domain.plans.sweep import (
    NOTHING,
    ConcludeOrphan,
    EndIssue,
    Failure,
    InFlight,
    InProgress,
    IssueSeen,
    Outcome,
    PerformRecovery,
    Queued,
    RateLimited,
    Read,
    Refusal,
    SettleIssueClosed,
    SettlePull,
    SettleReview,
    Step,
    Unreachable,
    failed,
    in_flight,
    in_progress,
    installation,
    queued,
)
from bot.domain.render import no_record_comment
from bot.domain.resources import BranchRef, Installation, Issue, Label, PullRequest, Review, User
from bot.ops.settings import Settings

ISSUE = IssueRef(installation_id=3, repo="octo/widgets", number=7)
CLAIMED = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
READ_AT = CLAIMED + timedelta(hours=1)
SHA = "a" * 40
OLDER = "b" * 40
LABELS = Labels()
SETTINGS = Settings(agent="command", agent_command="true")
HERE = "https://api.github.com/repos/octo/widgets"


def run(state: RunState, head: str | None = SHA, pr: int | None = 5) -> Run:
    claimed = Run.claimed(ISSUE, 2, "baton/issue-7", CLAIMED)
    return claimed.model_copy(update={"state": state, "head_sha": head, "pr_number": pr})


def issue(
    *labels: str, state: str = "open", url: str = HERE, number: int = 7, body: str = ""
) -> Issue:
    return Issue(
        number=number,
        title="Fix the cart",
        body=body,
        state=state,
        labels=tuple(Label(name=name) for name in labels),
        repository_url=url,
    )


def seen(
    *labels: str,
    desired: str | None = LABELS.review,
    state: str = "open",
    url: str = HERE,
    number: int = 7,
) -> IssueSeen:
    found = issue(*labels, state=state, url=url, number=number)
    return IssueSeen(issue=found, labels=LABELS, desired=desired)


def pull(state: str = "open", merged: bool = False, draft: bool = False) -> PullRequest:
    return PullRequest(
        number=5,
        url=f"{HERE}/pulls/5",
        html_url="https://github.com/octo/widgets/pull/5",
        state=state,
        merged=merged,
        draft=draft,
        head=BranchRef(ref="baton/issue-7"),
    )


def review(
    id: int, state: str = "CHANGES_REQUESTED", commit: str = SHA, by: str | None = "maintainer"
) -> Review:
    return Review(
        id=id,
        user=User(login=by, id=1) if by is not None else None,
        state=state,
        commit_id=commit,
        submitted_at="2026-05-01T14:00:00Z",
    )


def asked(review_id: int, author: str = "maintainer") -> SettleReview:
    return SettleReview(
        issue=ISSUE,
        pull=5,
        review_id=review_id,
        author=author,
        submitted_at=datetime(2026, 5, 1, 14, 0, tzinfo=UTC),
    )


GREEN = run(RunState.PUSHED_GREEN)
IN_ORDER = seen(LABELS.review)
DRIFTED = seen(LABELS.review, LABELS.in_progress)
RELABEL = Step(
    outcome=Outcome.RELABELLED,
    effects=(
        Relabel(issue=ISSUE, labels=LABELS, live=frozenset({LABELS.review, LABELS.in_progress})),
    ),
)
CLOSED = Step(outcome=Outcome.SETTLED, settlement=SettleIssueClosed(issue=ISSUE))
READ_ISSUE = Step(read=Read.ISSUE)
PUT_OFF = run(RunState.PUSHED_PENDING, pr=None).model_copy(
    update={"pull_pending": PendingPull(at=READ_AT, draft=False, why="GitHub asked Baton to wait")}
)


OWED = run(RunState.FAILED).model_copy(update={"recovery_owed": True})

IN_FLIGHT = {
    # From Baton's records alone, before GitHub is asked anything.
    "a run whose recovery was cut short has it performed": (
        InFlight(run=OWED, locked=False),
        Step(outcome=Outcome.RECOVERED, settlement=PerformRecovery(run=OWED)),
    ),
    "one whose recovery a worker is performing is left to it": (
        InFlight(run=OWED, locked=True),
        Step(read=Read.ISSUE),
    ),
    "a pushed head whose pull request GitHub put off has its opening scheduled again": (
        InFlight(run=PUT_OFF, locked=False),
        Step(
            outcome=Outcome.OPENING,
            effects=(Enqueue(job=open_pull_job(ISSUE, 2), at=READ_AT),),
            read=Read.ISSUE,
        ),
    ),
    "a live run nobody holds was orphaned by its worker": (
        InFlight(run=run(RunState.RUNNING), locked=False),
        Step(outcome=Outcome.ORPHANED, settlement=ConcludeOrphan(run=run(RunState.RUNNING))),
    ),
    "a claimed run nobody holds was orphaned too": (
        InFlight(run=run(RunState.CLAIMED, head=None, pr=None), locked=False),
        Step(
            outcome=Outcome.ORPHANED,
            settlement=ConcludeOrphan(run=run(RunState.CLAIMED, head=None, pr=None)),
        ),
    ),
    "a live run a worker holds is only looked at": (
        InFlight(run=run(RunState.RUNNING), locked=True),
        READ_ISSUE,
    ),
    "a pushed run waiting for checks has its head settled, then is looked at": (
        InFlight(run=run(RunState.PUSHED_PENDING), locked=False),
        Step(
            outcome=Outcome.SETTLED,
            effects=(SettleHead(installation_id=3, repo="octo/widgets", head_sha=SHA),),
            read=Read.ISSUE,
        ),
    ),
    "a pushed run without a head has nothing to settle": (
        InFlight(run=run(RunState.PUSHED_PENDING, head=None), locked=False),
        READ_ISSUE,
    ),
    "a halted run nobody holds is not an orphan": (
        InFlight(run=run(RunState.HALTED), locked=False),
        READ_ISSUE,
    ),
    # From the issue as GitHub has it now.
    "an issue transferred elsewhere ends here": (
        InFlight(
            run=GREEN,
            locked=False,
            seen=seen(url="https://api.github.com/repos/octo/shop", number=12),
        ),
        Step(outcome=Outcome.ENDED, settlement=EndIssue(issue=ISSUE, why="moved to octo/shop#12")),
    ),
    "an issue that answers under another number moved": (
        InFlight(run=run(RunState.RUNNING), locked=True, seen=seen(number=9)),
        Step(
            outcome=Outcome.ENDED, settlement=EndIssue(issue=ISSUE, why="moved to octo/widgets#9")
        ),
    ),
    "a green run's pull request is read first": (
        InFlight(run=GREEN, locked=False, seen=seen(LABELS.review, state="closed")),
        Step(read=Read.PULL),
    ),
    "a green pull request merged while its webhook was lost": (
        InFlight(run=GREEN, locked=False, seen=IN_ORDER, pull=pull("closed", merged=True)),
        Step(outcome=Outcome.SETTLED, settlement=SettlePull(issue=ISSUE, pull=5, merged=True)),
    ),
    "a green pull request closed unmerged": (
        InFlight(run=GREEN, locked=False, seen=IN_ORDER, pull=pull("closed")),
        Step(outcome=Outcome.SETTLED, settlement=SettlePull(issue=ISSUE, pull=5, merged=False)),
    ),
    "an open green pull request has its reviews read": (
        InFlight(run=GREEN, locked=False, seen=IN_ORDER, pull=pull()),
        Step(read=Read.REVIEWS),
    ),
    "a green draft Baton failed to mark ready is marked ready, then its reviews read": (
        InFlight(run=GREEN, locked=False, draft=True, seen=IN_ORDER, pull=pull(draft=True)),
        Step(
            outcome=Outcome.READIED,
            effects=(MarkReady(issue=ISSUE, pull=5),),
            read=Read.REVIEWS,
        ),
    ),
    "a draft a maintainer marked ready meanwhile is left as it is": (
        InFlight(run=GREEN, locked=False, draft=True, seen=IN_ORDER, pull=pull()),
        Step(read=Read.REVIEWS),
    ),
    "a draft of a maintainer's own making is not Baton's to mark ready": (
        InFlight(run=GREEN, locked=False, seen=IN_ORDER, pull=pull(draft=True)),
        Step(read=Read.REVIEWS),
    ),
    "the latest review requesting changes on the head goes back to the agent": (
        InFlight(
            run=GREEN,
            locked=False,
            seen=DRIFTED,
            pull=pull(),
            reviews=(review(1), review(2, "APPROVED"), review(3)),
        ),
        Step(outcome=Outcome.SETTLED, settlement=asked(3), otherwise=RELABEL),
    ),
    "a review by an account GitHub no longer names has no author": (
        InFlight(
            run=GREEN, locked=False, seen=IN_ORDER, pull=pull(), reviews=(review(4, by=None),)
        ),
        Step(outcome=Outcome.SETTLED, settlement=asked(4, author=""), otherwise=NOTHING),
    ),
    "changes requested on an older head are not this run's": (
        InFlight(
            run=GREEN, locked=False, seen=IN_ORDER, pull=pull(), reviews=(review(1, commit=OLDER),)
        ),
        NOTHING,
    ),
    "an approved green pull request is left to its maintainer": (
        InFlight(
            run=GREEN, locked=False, seen=IN_ORDER, pull=pull(), reviews=(review(1, "APPROVED"),)
        ),
        NOTHING,
    ),
    "an open green pull request's closed issue is settled": (
        InFlight(
            run=GREEN,
            locked=False,
            seen=seen(LABELS.review, state="closed"),
            pull=pull(),
            reviews=(),
        ),
        CLOSED,
    ),
    "a green run without a pull request is judged by its issue": (
        InFlight(run=run(RunState.PUSHED_GREEN, pr=None), locked=False, seen=DRIFTED),
        RELABEL,
    ),
    "an issue closed while its closing webhook was lost is settled": (
        InFlight(run=run(RunState.RUNNING), locked=True, seen=seen(state="closed")),
        CLOSED,
    ),
    "labels that drifted from the recorded state are corrected": (
        InFlight(run=run(RunState.FAILED), locked=False, seen=DRIFTED),
        RELABEL,
    ),
    "a Baton label on an issue that should carry none comes off": (
        InFlight(run=run(RunState.FAILED), locked=False, seen=seen(LABELS.review, desired=None)),
        Step(
            outcome=Outcome.RELABELLED,
            effects=(Relabel(issue=ISSUE, labels=LABELS, live=frozenset({LABELS.review})),),
        ),
    ),
    "labels as recorded are left alone": (
        InFlight(run=run(RunState.FAILED), locked=False, seen=seen(LABELS.review, "bug")),
        NOTHING,
    ),
    "an issue a maintainer took every Baton label off is left withdrawn": (
        InFlight(run=run(RunState.RUNNING), locked=True, seen=seen("bug")),
        NOTHING,
    ),
}


@pytest.mark.parametrize(("item", "step"), IN_FLIGHT.values(), ids=IN_FLIGHT.keys())
def test_an_issue_in_flight_is_decided_from_what_the_sweep_read(item: InFlight, step: Step) -> None:
    assert in_flight(item) == step


def test_the_sweep_reads_an_issue_in_flight_only_as_far_as_its_decision_needs() -> None:
    item = InFlight(run=GREEN, locked=False)
    answers: dict[Read, dict[str, Any]] = {
        Read.ISSUE: {"seen": DRIFTED},
        Read.PULL: {"pull": pull()},
        Read.REVIEWS: {"reviews": (review(1, "APPROVED"),)},
    }
    asked_for = []
    while (step := in_flight(item)).read is not None:
        asked_for.append(step.read)
        item = item.model_copy(update=answers[step.read])
    assert asked_for == [Read.ISSUE, Read.PULL, Read.REVIEWS]
    assert step == RELABEL


def queued_item(
    found: Issue | None = None,
    waiting: bool = False,
    locked: bool = False,
    latest: Run | None = None,
) -> Queued:
    return Queued(
        issue=ISSUE,
        found=found or issue(LABELS.queue),
        label=LABELS.queue,
        waiting=waiting,
        locked=locked,
        run=latest,
        at=READ_AT,
    )


TEXT = snapshot("Fix the cart", "", READ_AT, None, "sweep")
CHAIN_BODY = "Depends on #3"
NOTE = (
    "octo/widgets#7 carries baton:queue with nothing working on it: picked up, with its text "
    "as read now (the lost label event carried it as queued)"
)
PICKED_UP = Step(
    outcome=Outcome.PICKED_UP,
    effects=(Enqueue(job=run_issue_job(SETTINGS, ISSUE, "sweep", text=TEXT)),),
    note=NOTE,
)

QUEUED = {
    "a queued issue nothing works on is picked up": (queued_item(), PICKED_UP),
    "one whose last run ended is picked up again": (
        queued_item(latest=run(RunState.FAILED)),
        PICKED_UP,
    ),
    "one whose green pull request awaits review is picked up again": (
        queued_item(latest=GREEN),
        PICKED_UP,
    ),
    "one that names a chain has its chain planned": (
        queued_item(found=issue(LABELS.queue, body=CHAIN_BODY)),
        Step(
            outcome=Outcome.PICKED_UP,
            effects=(
                Enqueue(
                    job=queue_chain_job(
                        ISSUE,
                        "sweep",
                        None,
                        snapshot("Fix the cart", CHAIN_BODY, READ_AT, None, "sweep"),
                    )
                ),
            ),
            note=NOTE,
        ),
    ),
    "a pull request carrying the label is not an issue": (
        queued_item(
            found=Issue.model_validate(
                {"number": 7, "title": "Fix", "pull_request": {}, "repository_url": HERE}
            )
        ),
        NOTHING,
    ),
    "one waiting for a window, a slot, or a run job already on its way": (
        queued_item(waiting=True),
        NOTHING,
    ),
    "one a worker holds": (queued_item(locked=True), NOTHING),
    "one whose run is live": (queued_item(latest=run(RunState.RUNNING)), NOTHING),
    "one whose pushed run waits for its checks": (
        queued_item(latest=run(RunState.PUSHED_PENDING)),
        NOTHING,
    ),
}


@pytest.mark.parametrize(("item", "step"), QUEUED.values(), ids=QUEUED.keys())
def test_a_queued_issue_is_picked_up_only_when_nothing_works_on_or_waits_for_it(
    item: Queued, step: Step
) -> None:
    assert queued(SETTINGS, item) == step


def shown(
    latest: Run | None = None,
    desired: str | None = LABELS.in_progress,
    **facts: bool,
) -> InProgress:
    return InProgress(
        issue=ISSUE,
        found=issue(LABELS.in_progress, "bug"),
        labels=LABELS,
        waiting=facts.get("waiting", False),
        locked=facts.get("locked", False),
        chained=facts.get("chained", False),
        run=latest,
        desired=desired,
    )


SHOWN_LIVE = frozenset({LABELS.in_progress, "bug"})
IN_PROGRESS = {
    "an issue Baton holds no run of is handed back, not started": (
        shown(),
        Step(
            outcome=Outcome.STUCK,
            effects=(
                SetLabel(issue=ISSUE, labels=LABELS, label=None, live=SHOWN_LIVE),
                PostStatus(issue=ISSUE, body=no_record_comment(LABELS.in_progress, LABELS.queue)),
            ),
            note=f"{ISSUE} carries baton:in-progress and Baton holds no run of it: handed back",
        ),
    ),
    "an ended run's next attempt, planned and lost, is scheduled again": (
        shown(run(RunState.FAILED)),
        Step(
            outcome=Outcome.STUCK,
            effects=(Enqueue(job=follow_up_job(SETTINGS, ISSUE, 2)),),
            note=f"{ISSUE}'s attempt after 2 was planned and lost: scheduled again",
        ),
    ),
    "labels that outlived an ended run are set back to it": (
        shown(run(RunState.MERGED), desired=None),
        Step(
            outcome=Outcome.STUCK,
            effects=(Relabel(issue=ISSUE, labels=LABELS, live=SHOWN_LIVE),),
            note=f"{ISSUE} kept baton:in-progress after attempt 2 ended: labels set back",
        ),
    ),
    "one a job is due for": (shown(waiting=True), NOTHING),
    "one a worker holds": (shown(locked=True), NOTHING),
    "a chain's link, which its chain starts": (shown(chained=True), NOTHING),
    "one whose run is live": (shown(run(RunState.RUNNING)), NOTHING),
    "one whose pushed run waits for its checks": (shown(run(RunState.PUSHED_PENDING)), NOTHING),
    "one whose run is owed its recovery": (shown(OWED), NOTHING),
}


@pytest.mark.parametrize(("item", "step"), IN_PROGRESS.values(), ids=IN_PROGRESS.keys())
def test_an_issue_shown_in_progress_with_nothing_working_on_it_is_set_right(
    item: InProgress, step: Step
) -> None:
    assert in_progress(SETTINGS, item) == step


NOW = 1_800_000_000.0
SUSPENDED = Installation(id=11, suspended_at="2026-05-01T00:00:00Z")
ACTIVE = Installation(id=11)


def budget(remaining: int, reset_in_s: float = 600) -> RateBudget:
    return RateBudget(limit=5000, remaining=remaining, reset_at=NOW + reset_in_s, seen_at=NOW - 5)


INSTALLATIONS = {
    "a suspended installation is skipped": (
        SUSPENDED,
        None,
        Step(skipped="the installation is suspended"),
    ),
    "one down to the runs' reserve is paused": (ACTIVE, budget(1000), Step(outcome=Outcome.PAUSED)),
    "one with budget to spare is swept": (ACTIVE, budget(1001), None),
    "one whose hour has refilled is swept": (ACTIVE, budget(10, reset_in_s=-1), None),
    "one whose budget is not known yet is swept": (ACTIVE, None, None),
}


@pytest.mark.parametrize(
    ("found", "left", "step"), INSTALLATIONS.values(), ids=INSTALLATIONS.keys()
)
def test_an_installation_is_swept_unless_suspended_or_low_on_its_rate_budget(
    found: Installation, left: RateBudget | None, step: Step | None
) -> None:
    assert installation(found, left, NOW) == step


GONE = "is gone (deleted, transferred, or out of the App's reach)"
FAILURES = {
    "a deleted issue ends": (
        Refusal(status=410, message="Gone"),
        ISSUE,
        Step(outcome=Outcome.ENDED, settlement=EndIssue(issue=ISSUE, why="was deleted")),
    ),
    "an issue out of reach ends": (
        Refusal(status=404, message="Not Found"),
        ISSUE,
        Step(outcome=Outcome.ENDED, settlement=EndIssue(issue=ISSUE, why=GONE)),
    ),
    "a repository out of reach is skipped": (
        Refusal(status=404, message="Not Found"),
        None,
        Step(skipped=GONE),
    ),
    "a suspended installation is skipped, its issues kept": (
        Refusal(status=403, message="This installation has been suspended"),
        ISSUE,
        Step(skipped="the installation is suspended"),
    ),
    "an installation refused access is skipped": (
        Refusal(status=403, message="Resource not accessible by integration"),
        ISSUE,
        Step(skipped="the installation refused the App access"),
    ),
    "a refused token is skipped": (
        Refusal(status=401, message="Bad credentials"),
        ISSUE,
        Step(skipped="the installation's token was refused"),
    ),
    "a secondary rate limit is GitHub's answer": (
        Refusal(status=403, message="You have exceeded a secondary rate limit"),
        ISSUE,
        Step(skipped="GitHub answered 403"),
    ),
    "a server error is GitHub's answer": (
        Refusal(status=502, message="Bad Gateway"),
        ISSUE,
        Step(skipped="GitHub answered 502"),
    ),
    "a spent rate limit says until when": (
        RateLimited(reset_at=datetime(2026, 5, 1, 13, 5, 59, tzinfo=UTC)),
        ISSUE,
        Step(skipped="the rate limit is spent until 13:05 UTC"),
    ),
    "an unreachable GitHub says how": (
        Unreachable(error="ClientConnectorError"),
        None,
        Step(skipped="GitHub could not be reached (ClientConnectorError)"),
    ),
}


@pytest.mark.parametrize(("failure", "concerns", "step"), FAILURES.values(), ids=FAILURES.keys())
def test_an_item_github_would_not_answer_for_is_ended_if_gone_else_skipped(
    failure: Failure, concerns: IssueRef | None, step: Step
) -> None:
    assert failed(failure, concerns) == step


FORBIDDEN = {"redis", "aiohttp", "gidgethub", "rq", "subprocess"}


def test_the_sweep_plan_does_no_io() -> None:
    tree = ast.parse(Path(bot.domain.plans.sweep.__file__).read_text())
    names = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    names |= {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not {name for name in names if name.split(".")[0] in FORBIDDEN}
    assert not {name for name in names if name.startswith(("bot.edges", "bot.workflows"))}
