"""Restack plans: which links follow the one that moved, onto what, and what a replay does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import bot.domain.plans.restack
from bot.domain.chains import STACK_MARKER, LinkStatus, ManifestLink, stack_manifest
from bot.domain.classify import RunFacts
from bot.domain.effects import Conclude, SettleHeadAt
from bot.domain.model import Budget, Classification, FailureClass, IssueRef, Recovery, Run, RunState
from bot.domain.plans.restack import (
    Moved,
    Replay,
    RestackStep,
    manifest_pulls,
    replay_plan,
    replayed,
    restack_due,
    restack_plan,
    restamped,
)
from tests.domain.test_plans_settlement import FORBIDDEN, imported

REPO = "octo/widgets"
AT = datetime(2024, 5, 2, 9, 0, tzinfo=UTC)
MAIN = "main"


def link(
    number: int,
    base: str | None,
    base_sha: str | None,
    head: str | None,
    pull: int | None = None,
    state: RunState = RunState.PUSHED_GREEN,
) -> Run:
    issue = IssueRef(installation_id=3, repo=REPO, number=number)
    run = Run.claimed(issue, 1, f"baton/issue-{number}", AT).moved(RunState.PUSHED_PENDING, AT)
    if state is not RunState.PUSHED_PENDING:
        run = run.moved(state, AT)
    return run.model_copy(
        update={"base_branch": base, "base_sha": base_sha, "head_sha": head, "pr_number": pull}
    )


# Link 1 is on main; link 2 was built on link 1's old tip, link 3 on link 2's.
FIRST = link(1, MAIN, "m0", "t1-new", 11)
SECOND = link(2, "baton/issue-1", "t1-old", "t2", 12)
THIRD = link(3, "baton/issue-2", "t2", "t3", 13)


def step(run: Run, base: str, retarget: bool, built_on: str) -> RestackStep:
    assert run.pr_number is not None
    return RestackStep(run=run, pull=run.pr_number, base=base, retarget=retarget, built_on=built_on)


@pytest.mark.parametrize(
    ("moved", "how", "stacked", "due", "target", "steps"),
    [
        pytest.param(
            FIRST,
            Moved.MERGED,
            [SECOND, THIRD],
            True,
            MAIN,
            (
                step(SECOND, MAIN, True, "t1-new"),
                step(THIRD, "baton/issue-2", False, "t2"),
            ),
            id="merged: the first is retargeted onto main, the next follows it",
        ),
        pytest.param(
            FIRST.model_copy(update={"base_branch": None}),
            Moved.MERGED,
            [SECOND],
            True,
            "trunk",
            (step(SECOND, "trunk", True, "t1-new"),),
            id="merged, onto the default branch where the run names none",
        ),
        pytest.param(
            FIRST,
            Moved.TIP,
            [SECOND, THIRD],
            True,
            "baton/issue-1",
            (
                step(SECOND, "baton/issue-1", False, "t1-new"),
                step(THIRD, "baton/issue-2", False, "t2"),
            ),
            id="a new tip: replayed onto it, no retarget",
        ),
        pytest.param(
            FIRST,
            Moved.TIP,
            [SECOND.model_copy(update={"base_sha": "t1-new"})],
            False,
            "baton/issue-1",
            (),
            id="already on the new tip",
        ),
        pytest.param(FIRST, Moved.MERGED, [], False, MAIN, (), id="nothing stacked on it"),
        pytest.param(
            FIRST,
            Moved.MERGED,
            [SECOND.model_copy(update={"base_branch": MAIN})],
            False,
            MAIN,
            (),
            id="its successor is not built on it",
        ),
        pytest.param(
            FIRST.model_copy(update={"head_sha": None}),
            Moved.MERGED,
            [SECOND],
            False,
            MAIN,
            (),
            id="the link has no head",
        ),
        pytest.param(
            FIRST,
            Moved.MERGED,
            [SECOND, THIRD.model_copy(update={"base_branch": MAIN})],
            True,
            MAIN,
            (step(SECOND, MAIN, True, "t1-new"),),
            id="the chain of branches breaks: the rest stays",
        ),
        pytest.param(
            FIRST,
            Moved.MERGED,
            [SECOND.model_copy(update={"pr_number": None}), THIRD],
            True,
            MAIN,
            (),
            id="a successor without a pull request stops it",
        ),
    ],
)
def test_the_links_stacked_on_a_link_follow_it(
    moved: Run,
    how: Moved,
    stacked: list[Run],
    due: bool,
    target: str,
    steps: tuple[RestackStep, ...],
) -> None:
    plan = restack_plan(moved, how, stacked, "trunk")
    assert (restack_due(moved, how, stacked), plan.target, plan.steps) == (due, target, steps)


CLASSIFIED = Classification(
    failure_class=FailureClass.CHECKS_FAILED,
    recovery=Recovery.CONTINUE,
    charged_to=Budget.CONTINUATIONS,
    evidence="test",
)
ONTO_MAIN = step(SECOND, MAIN, True, "t1-new")
CONFLICT = "replaying `baton/issue-2` onto `main` conflicted in `cart.py`, `tax.py`"


@pytest.mark.parametrize(
    ("run", "replay", "expected"),
    [
        pytest.param(
            SECOND,
            Replay(tip="t2-new"),
            (RunState.PUSHED_PENDING, MAIN, "m1", "t2-new", None, "restacked onto main"),
            id="a new head: waits for its checks again",
        ),
        pytest.param(
            SECOND.model_copy(update={"state": RunState.PUSHED_PENDING}),
            Replay(tip="t2-new"),
            (RunState.PUSHED_PENDING, MAIN, "m1", "t2-new", None, None),
            id="a new head while pending",
        ),
        pytest.param(
            SECOND,
            Replay(tip=None, conflicts=("cart.py", "tax.py")),
            (RunState.FAILED, MAIN, "t1-old", "t2", CONFLICT, "merge conflict"),
            id="a conflict fails it",
        ),
        pytest.param(
            SECOND,
            Replay(tip=None),
            (
                RunState.FAILED,
                MAIN,
                "t1-old",
                "t2",
                "replaying `baton/issue-2` onto `main` conflicted in files git did not name",
                "merge conflict",
            ),
            id="a conflict in files git did not name",
        ),
    ],
)
def test_a_replay_moves_the_links_run(
    run: Run, replay: Replay, expected: tuple[object, ...]
) -> None:
    after = replayed(run, ONTO_MAIN, "m1", replay, AT)
    assert after is not None
    note = after.history[-1].note if len(after.history) > len(run.history) else None
    state = (after.state, after.base_branch, after.base_sha, after.head_sha, after.reason, note)
    assert state == expected


@pytest.mark.parametrize(
    ("run", "replay"),
    [
        pytest.param(SECOND, Replay(tip="t2"), id="on that head already"),
        pytest.param(
            SECOND.model_copy(update={"classification": CLASSIFIED}),
            Replay(tip=None, conflicts=("cart.py",)),
            id="a conflict after its end was classified",
        ),
    ],
)
def test_a_replay_that_changes_nothing(run: Run, replay: Replay) -> None:
    assert replayed(run, ONTO_MAIN, "m1", replay, AT) is None


@pytest.mark.parametrize(
    ("replay", "plan"),
    [
        pytest.param(
            Replay(tip="t2-new"),
            (
                SettleHeadAt(
                    installation_id=3,
                    repo=REPO,
                    head_sha="t2-new",
                    at=AT + timedelta(seconds=90),
                ),
            ),
            id="a new head: looked at when its silence would count as no CI",
        ),
        pytest.param(
            Replay(tip=None, conflicts=("cart.py", "tax.py")),
            (
                Conclude(
                    issue=SECOND.issue,
                    attempt=1,
                    facts=RunFacts(ending="merge-conflict", detail=CONFLICT),
                ),
            ),
            id="a conflict: a merge-conflict continuation",
        ),
    ],
)
def test_what_follows_a_replay(replay: Replay, plan: tuple[object, ...]) -> None:
    assert replay_plan(ONTO_MAIN, replay, 90, AT) == plan


LINKS = [
    ManifestLink(number=1, title="Cart", status=LinkStatus.MERGED, pr_number=11),
    ManifestLink(number=2, title="Tax", status=LinkStatus.GREEN, pr_number=12),
    ManifestLink(number=3, title="Receipts", status=LinkStatus.IN_PROGRESS, pr_number=13),
    ManifestLink(number=4, title="Refunds", status=LinkStatus.NOT_STARTED),
    ManifestLink(number=5, title="Coupons", status=LinkStatus.CLOSED, pr_number=15),
]


def test_every_open_pull_request_of_the_chain_shows_the_stack() -> None:
    assert manifest_pulls(LINKS) == ((2, 12), (3, 13))


STAMPED = f"Adds tax.\n\n{stack_manifest(LINKS, 2)}"


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param("Adds tax.", STAMPED, id="no manifest yet"),
        pytest.param(f"Adds tax.\n\n{STACK_MARKER}\nan older stack", STAMPED, id="a stale one"),
        pytest.param(STAMPED, None, id="as the links stand already"),
    ],
)
def test_a_pull_request_body_is_restamped_as_the_links_stand(
    body: str, expected: str | None
) -> None:
    assert restamped(body, LINKS, 2) == expected


def test_the_restack_plan_does_no_io() -> None:
    names = imported(Path(bot.domain.plans.restack.__file__))
    assert not {name for name in names if name.split(".")[0] in FORBIDDEN}
    assert not {name for name in names if name.startswith(("bot.edges", "bot.workflows"))}
