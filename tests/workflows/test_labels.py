"""Pure decisions that keep an issue's API calls few: label changes and status comment writes."""

from __future__ import annotations

from datetime import timedelta

from bot.domain import render
from bot.domain.model import IssueRef, Labels, Policy, Run, RunState, utcnow
from bot.workflows.labels import LabelPlan, plan_state_label

ISSUE = IssueRef(installation_id=1, repo="octo/widgets", number=7)
LABELS = Labels()
STATES = LABELS.states


def test_a_swap_adds_the_new_label_and_takes_off_only_the_recorded_one() -> None:
    plan = plan_state_label(LABELS.review, LABELS.in_progress, True, frozenset(), None, STATES)
    assert plan == LabelPlan(LABELS.review, frozenset({LABELS.in_progress}))


def test_a_label_already_on_is_not_added_again() -> None:
    plan = plan_state_label(LABELS.in_progress, LABELS.in_progress, True, frozenset(), None, STATES)
    assert plan == LabelPlan(None, frozenset())


def test_a_label_whose_adding_failed_is_added_again() -> None:
    plan = plan_state_label(
        LABELS.in_progress, LABELS.in_progress, False, frozenset(), None, STATES
    )
    assert plan == LabelPlan(LABELS.in_progress, frozenset())


def test_labels_still_to_come_off_stay_planned_until_taken_off() -> None:
    plan = plan_state_label(
        None, LABELS.review, True, frozenset({LABELS.in_progress}), None, STATES
    )
    assert plan == LabelPlan(None, frozenset({LABELS.review, LABELS.in_progress}))


def test_a_read_issue_says_what_comes_off_and_a_humans_labels_stay() -> None:
    live = {LABELS.queue, "bug", "needs-triage"}
    plan = plan_state_label(LABELS.in_progress, None, True, frozenset(), live, STATES)
    assert plan == LabelPlan(LABELS.in_progress, frozenset({LABELS.queue}))


def test_a_label_the_new_one_replaces_is_never_both_added_and_removed() -> None:
    plan = plan_state_label(
        LABELS.in_progress, LABELS.halted, True, frozenset({LABELS.in_progress}), None, STATES
    )
    assert plan == LabelPlan(LABELS.in_progress, frozenset({LABELS.halted}))


def claimed() -> Run:
    return Run.claimed(ISSUE, 1, "baton/issue-7", utcnow())


def test_claiming_provisioning_and_running_are_one_phase_of_the_status_comment() -> None:
    run = claimed()
    keys = {render.status_key(run, None, None)}
    for state in (RunState.PROVISIONING, RunState.RUNNING):
        run = run.moved(state, run.started_at + timedelta(seconds=5))
        keys.add(render.status_key(run, None, None))
    assert len(keys) == 1


def test_each_later_phase_rewrites_the_status_comment() -> None:
    run = claimed().moved(RunState.RUNNING, utcnow())
    pending = run.moved(RunState.PUSHED_PENDING, utcnow()).model_copy(
        update={"pr_url": "https://github.com/octo/widgets/pull/8", "pr_number": 8}
    )
    green = pending.moved(RunState.PUSHED_GREEN, utcnow())
    merged = green.moved(RunState.MERGED, utcnow())
    keys = [render.status_key(r, None, None) for r in (run, pending, green, merged)]
    assert len(set(keys)) == 4


def test_what_comes_next_or_why_rewrites_the_status_comment() -> None:
    failed = claimed().moved(RunState.FAILED, utcnow())
    plain = render.status_key(failed, None, None)
    assert render.status_key(failed, "a new attempt from the base branch", None) != plain
    because = failed.model_copy(update={"reason": "the agent exited with 3"})
    assert render.status_key(because, None, None) != plain


def test_a_clean_pull_request_needs_no_status_comment_of_its_own() -> None:
    pending = claimed().moved(RunState.PUSHED_PENDING, utcnow())
    for run in (pending, pending.moved(RunState.PUSHED_GREEN, utcnow())):
        assert not render.pull_comment_due([run], has_comment=False)


def test_a_failed_or_second_attempt_gives_the_pull_request_its_comment() -> None:
    failed = (
        claimed()
        .moved(RunState.FAILED, utcnow())
        .model_copy(update={"failure_class": "checks-failed"})
    )
    assert render.pull_comment_due([failed], has_comment=False)
    second = claimed().model_copy(update={"attempt": 2})
    assert render.pull_comment_due([failed, second], has_comment=False)


def test_a_pull_request_comment_once_posted_is_kept_current() -> None:
    merged = claimed().moved(RunState.MERGED, utcnow())
    assert render.pull_comment_due([merged], has_comment=True)


def test_a_pushed_run_with_required_checks_says_which_it_waits_for() -> None:
    policy = Policy(account="claude", required_checks=("test (3.12)", "lint"))
    pushed = claimed().moved(RunState.PUSHED_PENDING, utcnow())
    said = render.status_comment(pushed.model_copy(update={"policy": policy}), utcnow())
    assert "Waiting for its required checks: `test (3.12)`, `lint`." in said
    assert "required checks" not in render.status_comment(pushed, utcnow())
