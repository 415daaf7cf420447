"""Mergeability plans: what a push to the base branch does to each of Baton's open PRs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import bot.domain.plans.mergeable
from bot.domain.classify import RunFacts, classify
from bot.domain.effects import Conclude, Enqueue, Report, SettleHead, SettleHeadAt
from bot.domain.model import FailureClass, IssueRef, Recovery, Run, RunState
from bot.domain.plans.mergeable import (
    MAX_LOOKS,
    Action,
    Look,
    PullFacts,
    TrialMerge,
    branch_updated,
    conflict_plan,
    conflicted,
    decide,
    look_delay,
    next_look,
    sort_pulls,
    updated_plan,
)
from bot.domain.render import Continuation, brief
from bot.domain.resources import BranchRef, PullRequest
from tests.domain.test_plans_settlement import FORBIDDEN, imported

REPO = "octo/widgets"
ISSUE = IssueRef(installation_id=3, repo=REPO, number=7)
AT = datetime(2024, 5, 2, 9, 0, tzinfo=UTC)
HEAD = "h" * 40
MERGED_IN = "m" * 40  # GitHub's merge of main into HEAD
MAIN_TIP = "b" * 40
LOOK = Look(installation_id=3, repo=REPO, base="main", after=MAIN_TIP, number=1, pulls=(5,))
LAST = LOOK.model_copy(update={"number": MAX_LOOKS})
UPDATING = LOOK.model_copy(update={"number": 2, "updating": (5,)})


def pushed(state: RunState = RunState.PUSHED_GREEN, base: str | None = "main") -> Run:
    run = Run.claimed(ISSUE, 1, "baton/issue-7", AT).moved(RunState.PUSHED_PENDING, AT)
    if state is not RunState.PUSHED_PENDING:
        run = run.moved(state, AT)
    return run.model_copy(
        update={"head_sha": HEAD, "pr_number": 5, "base_branch": base, "base_sha": "a" * 40}
    )


def pull(
    mergeable: bool | None,
    state: str = "open",
    head: str = HEAD,
    mergeable_state: str | None = None,
) -> PullRequest:
    known = "unknown" if mergeable is None else ("clean" if mergeable else "dirty")
    return PullRequest(
        number=5,
        url=f"https://api.github.com/repos/{REPO}/pulls/5",
        html_url=f"https://github.com/{REPO}/pull/5",
        state=state,
        head=BranchRef(ref="baton/issue-7", sha=head),
        mergeable=mergeable,
        mergeable_state=mergeable_state or known,
    )


BEHIND = TrialMerge(parents=("p" * 40,), behind=True)
UP_TO_DATE = TrialMerge(parents=("p" * 40,), behind=False)
CONFLICTS = TrialMerge(parents=("p" * 40,), behind=True, conflicts=("shared.txt", "b.py"))
UPDATED = TrialMerge(parents=(HEAD, MAIN_TIP), behind=False)
SOMEONE_ELSES = TrialMerge(parents=(HEAD,), behind=True)


def facts(
    pr: PullRequest,
    run: Run | None = None,
    look: Look = LOOK,
    update_branch: bool = False,
    merge: TrialMerge | None = None,
) -> PullFacts:
    return PullFacts(
        run=run or pushed(),
        pull=pr,
        look=look,
        update_branch=update_branch,
        merge=merge,
    )


@pytest.mark.parametrize(
    ("known", "action"),
    [
        pytest.param(facts(pull(None)), Action.LOOK_AGAIN, id="null: looked at again"),
        pytest.param(facts(pull(None), look=LAST), Action.LEAVE, id="null at the last look: left"),
        pytest.param(facts(pull(True)), Action.LEAVE, id="clean: nothing"),
        pytest.param(
            facts(pull(True), merge=BEHIND),
            Action.LEAVE,
            id="only behind, without update_branch: left alone",
        ),
        pytest.param(
            facts(pull(True), update_branch=True),
            Action.TRY_MERGE,
            id="merges, with update_branch: is it behind?",
        ),
        pytest.param(
            facts(pull(True), update_branch=True, merge=BEHIND),
            Action.UPDATE,
            id="only behind, with update_branch: updated",
        ),
        pytest.param(
            facts(pull(True, mergeable_state="behind"), update_branch=True),
            Action.UPDATE,
            id="GitHub says behind (a protected branch), with update_branch: updated",
        ),
        pytest.param(
            facts(pull(True), update_branch=True, merge=UP_TO_DATE),
            Action.LEAVE,
            id="up to date, with update_branch: nothing",
        ),
        pytest.param(facts(pull(False)), Action.TRY_MERGE, id="dirty: which files?"),
        pytest.param(
            facts(pull(False), merge=CONFLICTS), Action.CONTINUE, id="conflicting: continued"
        ),
        pytest.param(
            facts(pull(False), merge=UP_TO_DATE),
            Action.LEAVE,
            id="dirty on GitHub, clean in the mirror (the base moved again): left",
        ),
        pytest.param(facts(pull(None, state="closed")), Action.FORGET, id="closed: forgotten"),
        pytest.param(
            facts(pull(False), run=pushed(RunState.RUNNING)),
            Action.LEAVE,
            id="its agent is at work: left",
        ),
        pytest.param(
            facts(pull(False), run=pushed(RunState.FAILED)),
            Action.LEAVE,
            id="its run ended: a maintainer's to decide",
        ),
        pytest.param(
            facts(pull(False), run=pushed(base="baton/issue-6")),
            Action.LEAVE,
            id="a chain link stacked on another: the chain's",
        ),
        pytest.param(
            facts(pull(True), look=UPDATING), Action.LOOK_AGAIN, id="updating, head not moved yet"
        ),
        pytest.param(
            facts(pull(True), look=UPDATING.model_copy(update={"number": MAX_LOOKS})),
            Action.LEAVE,
            id="updating, head never moved: left",
        ),
        pytest.param(
            facts(pull(None, head=MERGED_IN), look=UPDATING),
            Action.TRY_MERGE,
            id="its head moved: whose commit?",
        ),
        pytest.param(
            facts(pull(None, head=MERGED_IN), look=UPDATING, merge=UPDATED),
            Action.RECORD_HEAD,
            id="the base merged into its head: the run settles it",
        ),
        pytest.param(
            facts(pull(True, head=MERGED_IN), merge=SOMEONE_ELSES),
            Action.LEAVE,
            id="a commit someone pushed on it: not Baton's",
        ),
    ],
)
def test_each_pull_request_gets_one_decision(known: PullFacts, action: Action) -> None:
    assert decide(known).action is action


def test_a_conflict_names_the_base_the_branch_and_the_files() -> None:
    decision = decide(facts(pull(False), merge=CONFLICTS))
    assert decision.reason == (
        "merging `main` into `baton/issue-7` conflicts in `shared.txt`, `b.py`"
    )


def test_a_conflicting_run_fails_once_and_concludes_as_a_merge_conflict() -> None:
    failed = conflicted(pushed(), "main", HEAD, ("shared.txt",), AT)
    assert failed is not None and failed.state is RunState.FAILED
    assert failed.history[-1].note == "merge conflict"
    assert failed.reason == "merging `main` into `baton/issue-7` conflicts in `shared.txt`"
    assert failed.base_branch == "main"
    [effect] = conflict_plan(failed)
    assert effect == Conclude(
        issue=ISSUE,
        attempt=1,
        facts=RunFacts(ending="merge-conflict", detail=failed.reason),
    )
    classified = classify(effect.facts)
    assert classified.failure_class is FailureClass.MERGE_CONFLICT
    assert classified.recovery is Recovery.CONTINUE
    # Moved on since the look: nothing changes.
    assert conflicted(failed, "main", HEAD, ("shared.txt",), AT) is None
    assert conflicted(pushed(), "main", "other", ("shared.txt",), AT) is None


def test_the_continuation_is_briefed_to_merge_the_base_and_resolve_the_files() -> None:
    failed = conflicted(pushed(), "main", HEAD, ("shared.txt",), AT)
    assert failed is not None
    failed = failed.model_copy(update={"failure_class": "merge-conflict"})
    text = brief("Greet", "Say hello.", str(ISSUE), 2, 4, Continuation(previous=failed))
    assert "## Merge conflict" in text
    assert "`git merge origin/main`" in text
    assert "conflicts in `shared.txt`" in text


@pytest.mark.parametrize("state", [RunState.PUSHED_GREEN, RunState.PUSHED_PENDING])
def test_the_merge_github_made_becomes_the_runs_head_waiting_for_its_checks(
    state: RunState,
) -> None:
    updated = branch_updated(pushed(state), MERGED_IN, (HEAD, MAIN_TIP), "main", AT)
    assert updated is not None
    assert updated.state is RunState.PUSHED_PENDING
    assert (updated.head_sha, updated.base_sha) == (MERGED_IN, MAIN_TIP)
    assert updated.attempt == 1 and updated.pr_number == 5
    if state is RunState.PUSHED_GREEN:
        assert updated.history[-1].note == "`main` merged in"
    assert branch_updated(updated, MERGED_IN, (HEAD, MAIN_TIP), "main", AT) is None
    assert branch_updated(pushed(RunState.FAILED), MERGED_IN, (HEAD, MAIN_TIP), "main", AT) is None
    assert branch_updated(pushed(state), MERGED_IN, (HEAD,), "main", AT) is None


@pytest.mark.parametrize("checked", [True, False])
def test_a_recorded_head_is_settled_now_if_its_checks_came_first_else_when_due(
    checked: bool,
) -> None:
    run = branch_updated(pushed(), MERGED_IN, (HEAD, MAIN_TIP), "main", AT)
    assert run is not None
    report, settle = updated_plan(run, "main", checked, 120.0, AT)
    assert isinstance(report, Report) and "`main` merged in" in str(report.next_step)
    if checked:
        assert settle == SettleHead(installation_id=3, repo=REPO, head_sha=MERGED_IN)
    else:
        assert settle == SettleHeadAt(
            installation_id=3, repo=REPO, head_sha=MERGED_IN, at=AT + timedelta(seconds=120)
        )


def test_the_pull_requests_a_push_concerns_and_those_gone_from_the_index() -> None:
    runs = {
        5: pushed(),
        6: pushed(RunState.PUSHED_PENDING),
        7: pushed(RunState.RUNNING),  # kept in the index: its PR is open
        8: pushed(RunState.MERGED),
        9: None,  # its runs forgotten
        10: pushed(base="baton/issue-6"),
    }
    assert sort_pulls("main", runs) == ((5, 6), (8, 9))


def test_looks_back_off_and_end() -> None:
    assert [look_delay(number) for number in range(1, MAX_LOOKS + 1)] == [2, 4, 8, 16, 32]
    first = Look(installation_id=3, repo=REPO, base="main", after=MAIN_TIP)
    [effect] = next_look(first, (5, 6), ())
    assert isinstance(effect, Enqueue) and effect.delay_s == 2
    assert effect.job.func == "jobs.mergeable.keep_mergeable"
    assert effect.job.args == (3, REPO, "main", MAIN_TIP, 1, "5,6", "")
    assert effect.job.job_id == f"mergeable-octo_widgets-main-{MAIN_TIP}-1"
    assert effect.job.timeout_s > 0
    # A pull request asked to update stays updating until its head moves.
    [again] = next_look(UPDATING, (5,), (6,))
    assert isinstance(again, Enqueue) and again.delay_s == 8
    assert again.job.args == (3, REPO, "main", MAIN_TIP, 3, "5,6", "5,6")
    assert next_look(LOOK, (), ()) == ()
    assert next_look(LAST, (5,), (6,)) == ()


def test_the_plans_are_pure() -> None:
    module = Path(bot.domain.plans.mergeable.__file__)
    names = imported(module)
    assert not {name for name in names if name.split(".")[0] in FORBIDDEN}
    assert not {name for name in names if name.startswith(("bot.edges", "bot.workflows"))}
