"""Settlement plans: what a head's checks, a review and a pull request's end do to a run."""

from __future__ import annotations

import ast
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import bot.domain.plans.settlement
from bot.domain.checks import Verdict
from bot.domain.classify import RunFacts
from bot.domain.effects import (
    Conclude,
    Effect,
    Enqueue,
    HoldForAudit,
    MarkReady,
    Report,
    SetLabel,
    SettleHeadAt,
)
from bot.domain.jobs import advance_chain_job
from bot.domain.model import AuditFinding, AuditKind, Chain, IssueRef, Labels, Policy, Run, RunState
from bot.domain.plans.restack import Moved
from bot.domain.plans.settlement import (
    Audit,
    HeadFacts,
    Settlement,
    closing_settlement,
    end_gone,
    head_settlement,
    pushed_at,
    review_settlement,
)
from bot.domain.render import CheckSummary

ISSUE = IssueRef(installation_id=3, repo="octo/widgets", number=7)
CLAIMED = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
PUSHED = CLAIMED + timedelta(minutes=5)
SHA = "a" * 40
LABELS = Labels()
POLICY = Policy(account="claude")  # no required checks; silence counts as no CI after 120 s
REQUIRED = Policy(account="claude", required_checks=("test",))
PASSED = (CheckSummary(name="ci", conclusion="success"),)
FAILING = (CheckSummary(name="test", conclusion="failure", title="2 failed"),)
FLAG = AuditFinding(kind=AuditKind.TEST_REMOVED, path="tests/test_cart.py", note="a test went")
CHAIN = Chain(installation_id=3, repo="octo/widgets", head=9, tracking=False, links=(7, 9))
NO_CI = (
    "No CI reported on this head within 120 s of its push, and no checks are required: "
    "it counts as green and awaits a maintainer's review."
)


def pushed(state: RunState = RunState.PUSHED_PENDING, head: str = SHA) -> Run:
    run = Run.claimed(ISSUE, 2, "baton/issue-7", CLAIMED).moved(RunState.PUSHED_PENDING, PUSHED)
    if state is not RunState.PUSHED_PENDING:
        run = run.moved(state, PUSHED + timedelta(minutes=3))
    return run.model_copy(update={"head_sha": head, "pr_number": 5})


def head(
    verdict: Verdict,
    checks: tuple[CheckSummary, ...] = (),
    silent: bool = False,
    after_s: float = 30,
) -> HeadFacts:
    return HeadFacts(
        installation_id=3,
        repo=ISSUE.repo,
        sha=SHA,
        verdict=verdict,
        checks=checks,
        silent=silent,
        now=PUSHED + timedelta(seconds=after_s),
    )


def to_review(
    next_step: str | None = None, checks: tuple[CheckSummary, ...] = ()
) -> tuple[Effect, ...]:
    return (
        SetLabel(issue=ISSUE, labels=LABELS, label=LABELS.review),
        Report(issue=ISSUE, attempt=2, next_step=next_step, checks=checks),
        MarkReady(issue=ISSUE, pull=5),
    )


def failed_checks(detail: str, checks: tuple[CheckSummary, ...]) -> tuple[Effect, ...]:
    facts = RunFacts(ending="checks-failed", detail=detail)
    return (Conclude(issue=ISSUE, attempt=2, facts=facts, checks=checks),)


REQUIRED_PASSED = (CheckSummary(name="test", conclusion="success"),)
LOOK_AGAIN = (
    SettleHeadAt(
        installation_id=3, repo=ISSUE.repo, head_sha=SHA, at=PUSHED + timedelta(seconds=120)
    ),
)


@pytest.mark.parametrize(
    ("facts", "policy", "audit", "state", "effects", "restack"),
    [
        pytest.param(
            head(Verdict.GREEN, PASSED),
            POLICY,
            Audit(),
            RunState.PUSHED_GREEN,
            to_review(checks=PASSED),
            Moved.TIP,
            id="green: review, and the links stacked on it follow its tip",
        ),
        pytest.param(
            head(Verdict.GREEN, REQUIRED_PASSED),
            REQUIRED,
            Audit(),
            RunState.PUSHED_GREEN,
            to_review(checks=REQUIRED_PASSED),
            Moved.TIP,
            id="required checks passed",
        ),
        pytest.param(
            head(Verdict.RED, FAILING),
            POLICY,
            Audit(),
            RunState.FAILED,
            failed_checks("failing: test", FAILING),
            None,
            id="red: a checks-failed continuation briefed with what failed",
        ),
        pytest.param(
            head(Verdict.RED),
            POLICY,
            Audit(),
            RunState.FAILED,
            failed_checks("failing: a check", ()),
            None,
            id="red, with nothing named",
        ),
        pytest.param(
            head(Verdict.PENDING, PASSED),
            POLICY,
            Audit(),
            None,
            (),
            None,
            id="pending: nothing yet",
        ),
        pytest.param(
            head(Verdict.PENDING, silent=True, after_s=600),
            REQUIRED,
            Audit(),
            None,
            (),
            None,
            id="required checks missing: silence never counts",
        ),
        pytest.param(
            head(Verdict.PENDING, silent=True, after_s=30),
            POLICY,
            Audit(),
            None,
            LOOK_AGAIN,
            None,
            id="no CI yet, within the window: looked at again when it ends",
        ),
        pytest.param(
            head(Verdict.PENDING, silent=True, after_s=121),
            POLICY,
            Audit(),
            RunState.PUSHED_GREEN,
            to_review(next_step=NO_CI),
            Moved.TIP,
            id="no CI after the window: green, and the status says why",
        ),
        pytest.param(
            head(Verdict.GREEN, PASSED),
            POLICY,
            Audit(findings=(FLAG,)),
            RunState.PUSHED_GREEN,
            to_review(checks=PASSED),
            Moved.TIP,
            id="audit advisory: flagged, still for review",
        ),
        pytest.param(
            head(Verdict.GREEN, PASSED),
            POLICY,
            Audit(findings=(FLAG,), mode="hold"),
            RunState.PUSHED_GREEN,
            (HoldForAudit(issue=ISSUE, attempt=2),),
            None,
            id="audit hold: kept from review, nothing follows it",
        ),
        pytest.param(
            head(Verdict.GREEN, PASSED),
            POLICY,
            Audit(mode="hold"),
            RunState.PUSHED_GREEN,
            to_review(checks=PASSED),
            Moved.TIP,
            id="audit hold with nothing flagged",
        ),
    ],
)
def test_a_head_settles_the_run_that_pushed_it(
    facts: HeadFacts,
    policy: Policy,
    audit: Audit,
    state: RunState | None,
    effects: tuple[Effect, ...],
    restack: Moved | None,
) -> None:
    plan = head_settlement(pushed(), facts, policy, audit)
    assert (plan.run.state if plan.run else None, plan.effects, plan.restack) == (
        state,
        effects,
        restack,
    )


@pytest.mark.parametrize(
    ("audit", "recorded"),
    [
        pytest.param(Audit(), [], id="nothing flagged"),
        pytest.param(Audit(findings=(FLAG,)), [FLAG], id="advisory"),
        pytest.param(Audit(findings=(FLAG,), mode="hold"), [FLAG], id="hold"),
    ],
)
def test_a_green_run_records_what_its_audit_flagged(
    audit: Audit, recorded: list[AuditFinding]
) -> None:
    plan = head_settlement(pushed(), head(Verdict.GREEN, PASSED), POLICY, audit)
    assert plan.run is not None and plan.run.audit == recorded


def test_a_red_run_is_failed_as_checks_failed() -> None:
    plan = head_settlement(pushed(), head(Verdict.RED, FAILING), POLICY, Audit())
    assert plan.run is not None
    assert (plan.run.failure_class, plan.run.reason) == (
        "checks-failed",
        "the pull request's checks failed",
    )


@pytest.mark.parametrize(
    ("run", "facts"),
    [
        pytest.param(pushed(head="b" * 40), head(Verdict.RED, FAILING), id="an older head"),
        pytest.param(pushed(RunState.PUSHED_GREEN), head(Verdict.RED), id="settled already"),
        pytest.param(pushed(RunState.MERGED), head(Verdict.GREEN), id="merged"),
        pytest.param(
            pushed(RunState.FAILED), head(Verdict.PENDING, silent=True), id="moved on, silent head"
        ),
        pytest.param(
            Run.claimed(ISSUE, 2, "baton/issue-7", CLAIMED), head(Verdict.GREEN), id="not pushed"
        ),
    ],
)
def test_a_head_not_awaited_by_the_run_changes_nothing(run: Run, facts: HeadFacts) -> None:
    assert head_settlement(run, facts, POLICY, Audit()) == Settlement()


def test_a_head_was_pushed_at_the_runs_latest_move_to_waiting_for_checks() -> None:
    restacked = pushed(RunState.PUSHED_GREEN).moved(
        RunState.PUSHED_PENDING, PUSHED + timedelta(hours=1)
    )
    claimed = Run.claimed(ISSUE, 2, "baton/issue-7", CLAIMED)
    assert (pushed_at(pushed()), pushed_at(restacked), pushed_at(claimed)) == (
        PUSHED,
        PUSHED + timedelta(hours=1),
        CLAIMED,
    )


CHANGES_REQUESTED = (
    Conclude(
        issue=ISSUE,
        attempt=2,
        facts=RunFacts(ending="changes-requested", detail="review 77 by @lead"),
    ),
)


@pytest.mark.parametrize(
    ("run", "submitted_at", "effects"),
    [
        pytest.param(pushed(), PUSHED, CHANGES_REQUESTED, id="a steerer's review while pending"),
        pytest.param(
            pushed(RunState.PUSHED_GREEN),
            None,
            CHANGES_REQUESTED,
            id="a steerer's review once green",
        ),
        pytest.param(
            pushed(), CLAIMED - timedelta(seconds=1), (), id="stale: before the attempt started"
        ),
        pytest.param(pushed(RunState.FAILED), PUSHED, (), id="the attempt failed already"),
        pytest.param(pushed(RunState.MERGED), PUSHED, (), id="merged"),
    ],
)
def test_requested_changes_go_back_to_the_agent(
    run: Run, submitted_at: datetime | None, effects: tuple[Effect, ...]
) -> None:
    plan = review_settlement(run, 77, "lead", submitted_at, PUSHED + timedelta(minutes=9))
    assert plan.effects == effects
    if effects:
        assert plan.run is not None
        assert (plan.run.state, plan.run.failure_class, plan.run.review_id, plan.run.reason) == (
            RunState.FAILED,
            "changes-requested",
            77,
            "@lead requested changes",
        )
    else:
        assert plan.run is None


ENDED = (
    SetLabel(issue=ISSUE, labels=LABELS, label=None),
    Report(issue=ISSUE, attempt=2),
)


@pytest.mark.parametrize(
    ("run", "merged", "chain", "state", "effects", "restack"),
    [
        pytest.param(pushed(), True, None, RunState.MERGED, ENDED, Moved.MERGED, id="merged"),
        pytest.param(
            pushed(RunState.PUSHED_GREEN),
            True,
            CHAIN,
            RunState.MERGED,
            ENDED,
            Moved.MERGED,
            id="merged link: its successors follow onto what it merged into",
        ),
        pytest.param(
            pushed(RunState.PUSHED_GREEN),
            False,
            CHAIN,
            RunState.CLOSED,
            (*ENDED, Enqueue(job=advance_chain_job(CHAIN, "closed-5"))),
            None,
            id="closed link: its chain looks again",
        ),
        pytest.param(pushed(), False, None, RunState.CLOSED, ENDED, None, id="closed"),
        pytest.param(pushed(RunState.MERGED), True, CHAIN, None, (), None, id="merged already"),
        pytest.param(pushed(RunState.CLOSED), False, CHAIN, None, (), None, id="closed already"),
    ],
)
def test_the_end_of_a_pull_request_ends_its_run(
    run: Run,
    merged: bool,
    chain: Chain | None,
    state: RunState | None,
    effects: tuple[Effect, ...],
    restack: Moved | None,
) -> None:
    plan = closing_settlement(run, 5, merged, LABELS, chain, PUSHED + timedelta(hours=2))
    assert (plan.run.state if plan.run else None, plan.effects, plan.restack) == (
        state,
        effects,
        restack,
    )


@pytest.mark.parametrize(
    ("run", "closed"),
    [
        pytest.param(Run.claimed(ISSUE, 2, "baton/issue-7", CLAIMED), True, id="live"),
        pytest.param(pushed(RunState.PUSHED_GREEN), True, id="awaiting review"),
        pytest.param(pushed(RunState.MERGED), False, id="merged"),
        pytest.param(pushed(RunState.FAILED), False, id="failed"),
    ],
)
def test_a_gone_issue_closes_its_run_unless_it_had_ended(run: Run, closed: bool) -> None:
    ended = end_gone(run, "the issue was deleted", PUSHED + timedelta(hours=3))
    if closed:
        assert ended is not None
        assert (ended.state, ended.reason) == (RunState.CLOSED, "the issue was deleted")
    else:
        assert ended is None


FORBIDDEN = {"redis", "aiohttp", "gidgethub", "rq", "subprocess"}


def imported(module: Path) -> set[str]:
    tree = ast.parse(module.read_text())
    names = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    return names | {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }


def test_the_settlement_plan_does_no_io() -> None:
    names = imported(Path(bot.domain.plans.settlement.__file__))
    assert not {name for name in names if name.split(".")[0] in FORBIDDEN}
    assert not {name for name in names if name.startswith(("bot.edges", "bot.workflows"))}
