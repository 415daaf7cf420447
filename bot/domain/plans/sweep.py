"""What the reconcile sweep does about each item it finds, decided from what it read of it.

Pure. bot/workflows/sweep.py reads an item's facts, asks here, and does what the
step it gets says: its effects through the executor, its settlement through the
workflow that settles what the lost event would have set off, and it counts the item
in its report under the step's outcome. About an issue in flight a step may ask for
more to be read first: the sweep reads only what its decision still needs, so an
idle repository costs no rate limit. (Which halted issues are due to resume is
bot/domain/resume.py's plan.)
"""

from __future__ import annotations

import enum
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from bot.domain.chains import names_a_chain
from bot.domain.effects import (
    Enqueue,
    MarkReady,
    Plan,
    PostStatus,
    Relabel,
    SetLabel,
    SettleHead,
)
from bot.domain.gone import disappearance, moved_elsewhere
from bot.domain.issue_text import github_time, snapshot
from bot.domain.jobs import open_pull_job, queue_chain_job, run_issue_job
from bot.domain.model import SWEPT_STATES, IssueRef, Labels, Run, RunState
from bot.domain.pacing import RateBudget, sweep_may_spend
from bot.domain.plans.recovery import follow_up_job
from bot.domain.render import no_record_comment
from bot.domain.resources import Installation, Issue, PullRequest, Review
from bot.ops.settings import Settings

SWEEP_KEY = "sweep"  # the key of the jobs the sweep enqueues: one pick-up per issue


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class Outcome(enum.StrEnum):
    """The heading of the sweep's report an item is counted under."""

    ORPHANED = "orphaned"
    SETTLED = "settled"
    RESUMED = "resumed"
    PICKED_UP = "picked_up"
    RELABELLED = "relabelled"
    ENDED = "ended"
    PAUSED = "paused"
    READIED = "readied"
    OPENING = "opening"  # a pushed head whose pull request GitHub put off: its job is scheduled
    RECOVERED = "recovered"  # a classified run whose recovery was cut short: performed now
    STUCK = "stuck"  # shown in progress with nothing working on it: set right


class Read(enum.StrEnum):
    """What the sweep reads next of an issue in flight, for its decision to go on."""

    ISSUE = "issue"  # the issue as GitHub has it now, with the labels Baton recorded for it
    PULL = "pull"  # its run's pull request
    REVIEWS = "reviews"  # that pull request's reviews


class ConcludeOrphan(_Model):
    """Conclude a live run whose worker died, as orphaned: its recovery follows."""

    run: Run


class PerformRecovery(_Model):
    """Perform the recovery a classified run owes: its job failed or died before the end."""

    run: Run


class SettlePull(_Model):
    """End the run of a pull request that was merged or closed."""

    issue: IssueRef
    pull: int
    merged: bool


class SettleReview(_Model):
    """Send a review that requested changes on the run's head back to the agent.

    author is who submitted it (empty for an account GitHub no longer names).
    """

    issue: IssueRef
    pull: int
    review_id: int
    author: str
    submitted_at: datetime | None


class SettleIssueClosed(_Model):
    """Stop the work on an issue a human closed."""

    issue: IssueRef


class EndIssue(_Model):
    """End Baton's work on an issue GitHub no longer has where Baton left it."""

    issue: IssueRef
    why: str


Settlement = (
    ConcludeOrphan | PerformRecovery | SettlePull | SettleReview | SettleIssueClosed | EndIssue
)


class Step(_Model):
    """What the sweep does about an item now, and what its report counts it as.

    effects go to the executor; a settlement goes to the workflow that settles what a
    lost event said. That workflow may find nothing to change (someone settled it
    first, or the review's author does not steer Baton): then the item is not counted,
    and otherwise, where there is one, is the step taken instead. read asks for more
    of the item to be read, and a decision again; skipped says why the item is left
    this pass; note is what the log says.
    """

    outcome: Outcome | None = None
    effects: Plan = ()
    settlement: Settlement | None = None
    otherwise: Step | None = None
    read: Read | None = None
    skipped: str | None = None
    note: str | None = None


NOTHING = Step()


class IssueSeen(_Model):
    """An issue in flight as GitHub has it now, and the Baton labels recorded for it then.

    labels are the names that apply to its run; desired is the state label Baton last
    wanted on it (None: none).
    """

    issue: Issue
    labels: Labels
    desired: str | None


class InFlight(_Model):
    """An issue Baton has a run for, as far as the sweep has read it (None: not read yet)."""

    run: Run  # its latest
    locked: bool  # a worker holds its lock
    draft: bool = False  # Baton opened its pull request as a draft and has not seen it ready
    seen: IssueSeen | None = None
    pull: PullRequest | None = None
    reviews: tuple[Review, ...] | None = None


def in_flight(item: InFlight) -> Step:
    """Decide what the sweep does about an issue in flight, from what it has read so far.

    From Baton's records alone, first: a live run whose lock is gone was orphaned by
    its worker; a pushed run waiting for its checks has its head settled from the API,
    in case the check webhook never came. Then from the issue: one that moved
    elsewhere ends here; a green pull request's lost webhooks are asked for (a merge
    closes its issue too, so the pull request comes first); a closed issue is settled;
    Baton's labels that drifted from the recorded state are corrected.
    """
    run = item.run
    if item.seen is None:
        return _from_records(run, item.locked)
    moved = moved_elsewhere(run.issue, item.seen.issue.model_dump())
    if moved is not None:
        return Step(
            outcome=Outcome.ENDED, settlement=EndIssue(issue=run.issue, why=f"moved to {moved}")
        )
    if run.state is RunState.PUSHED_GREEN and run.pr_number is not None:
        return _green(item, run.pr_number, item.seen)
    return _as_seen(run.issue, item.seen)


def _from_records(run: Run, locked: bool) -> Step:
    if run.state.is_live and not locked:
        return Step(outcome=Outcome.ORPHANED, settlement=ConcludeOrphan(run=run))
    if run.recovery_owed and not locked:
        return Step(outcome=Outcome.RECOVERED, settlement=PerformRecovery(run=run))
    if run.state is RunState.PUSHED_PENDING and run.pull_pending is not None:
        # Its job is scheduled already, unless that was lost: scheduled again, it moves.
        opening = Enqueue(job=open_pull_job(run.issue, run.attempt), at=run.pull_pending.at)
        return Step(outcome=Outcome.OPENING, effects=(opening,), read=Read.ISSUE)
    if run.state is RunState.PUSHED_PENDING and run.head_sha is not None:
        head = SettleHead(
            installation_id=run.issue.installation_id, repo=run.issue.repo, head_sha=run.head_sha
        )
        return Step(outcome=Outcome.SETTLED, effects=(head,), read=Read.ISSUE)
    return Step(read=Read.ISSUE)


def _green(item: InFlight, pull: int, seen: IssueSeen) -> Step:
    """Decide from the green run's pull request: merged or closed, changes requested, or a
    draft Baton failed to mark ready for review (asked once a pass, while the run awaits
    review)."""
    issue = item.run.issue
    if item.pull is None:
        return Step(read=Read.PULL)
    if item.pull.state == "closed":
        closed = SettlePull(issue=issue, pull=pull, merged=bool(item.pull.merged))
        return Step(outcome=Outcome.SETTLED, settlement=closed)
    if item.reviews is None:
        if item.draft and item.pull.draft:  # its ready-for-review failed: asked again
            ready = MarkReady(issue=issue, pull=pull)
            return Step(outcome=Outcome.READIED, effects=(ready,), read=Read.REVIEWS)
        return Step(read=Read.REVIEWS)
    asked = [
        review
        for review in item.reviews
        if review.state == "CHANGES_REQUESTED" and review.commit_id == item.run.head_sha
    ]
    as_seen = _as_seen(issue, seen)
    if not asked:
        return as_seen
    latest = asked[-1]
    review = SettleReview(
        issue=issue,
        pull=pull,
        review_id=latest.id,
        author=latest.user.login if latest.user else "",
        submitted_at=github_time(latest.submitted_at),
    )
    return Step(outcome=Outcome.SETTLED, settlement=review, otherwise=as_seen)


def _as_seen(issue: IssueRef, seen: IssueSeen) -> Step:
    """Decide from the issue itself: closed meanwhile, or carrying drifted Baton labels.

    An issue that carries none of Baton's labels was withdrawn by a maintainer: it is
    left as it is, never labelled back into the queue.
    """
    if seen.issue.state == "closed":
        # Its closing webhook was lost.
        return Step(outcome=Outcome.SETTLED, settlement=SettleIssueClosed(issue=issue))
    live = frozenset(seen.issue.label_names)
    ours = live & seen.labels.states
    if not ours or ours == ({seen.desired} if seen.desired else set()):
        return NOTHING
    return Step(
        outcome=Outcome.RELABELLED,
        effects=(Relabel(issue=issue, labels=seen.labels, live=live),),
    )


def installation(found: Installation, budget: RateBudget | None, now: float) -> Step | None:
    """Decide whether the sweep looks through an installation's repositories for queued issues.

    None: it does. A suspended installation is skipped; one whose hourly budget is
    down to the runs' reserve (budget, as its last answer reported it, at now in
    epoch seconds) is paused until it refills: its runs have the rest of it.
    """
    if found.suspended_at:
        return Step(skipped="the installation is suspended")
    if not sweep_may_spend(budget, now):
        return Step(outcome=Outcome.PAUSED)
    return None


class Queued(_Model):
    """An open issue (or pull request) carrying its repository's queue label, as listed.

    waiting: a job is due for it (a closed window, full run slots) or a run job is on
    its way; locked: a worker holds it; run: its latest; at: when it was read.
    """

    issue: IssueRef
    found: Issue
    label: str
    waiting: bool
    locked: bool
    run: Run | None
    at: datetime


def queued(settings: Settings, item: Queued) -> Step:
    """Decide whether the sweep picks up a queued issue whose label event may have been lost.

    Nothing holds, runs or waits for it: it is picked up as its label event would
    have queued it. Who put the label on is found and judged by the job, from the
    issue's events; the text the lost event carried is lost with it, so the issue's
    text as read now stands for the issue as queued.
    """
    run = item.run
    if item.found.is_pull_request or item.waiting or item.locked:
        return NOTHING
    if run is not None and (run.state.is_live or run.state is RunState.PUSHED_PENDING):
        return NOTHING
    issue, body = item.issue, item.found.body
    text = snapshot(item.found.title, body, item.at, None, "sweep")
    job = (
        queue_chain_job(issue, SWEEP_KEY, None, text)
        if names_a_chain(body, issue.repo)
        else run_issue_job(settings, issue, SWEEP_KEY, text=text)
    )
    note = (
        f"{issue} carries {item.label} with nothing working on it: picked up, with its "
        "text as read now (the lost label event carried it as queued)"
    )
    return Step(outcome=Outcome.PICKED_UP, effects=(Enqueue(job=job),), note=note)


class InProgress(_Model):
    """An open issue (or pull request) carrying its repository's in-progress label, as listed.

    waiting, locked and run as for Queued; chained: it is a link of a chain, whose
    runs the chain starts; desired: the state label Baton last wanted on it.
    """

    issue: IssueRef
    found: Issue
    labels: Labels
    waiting: bool
    locked: bool
    chained: bool
    run: Run | None
    desired: str | None


def in_progress(settings: Settings, item: InProgress) -> Step:
    """Decide whether an issue shown in progress has anything working on it, and if not, why.

    A worker on it, a job due for it, a chain it waits in, or a run live, pushed,
    green or owed its recovery (the in-flight pass sees to those): something does.
    Otherwise it is stuck. The next attempt Baton planned and lost is scheduled again
    (its job starts only after that very attempt, so never twice); labels that
    outlived the run Baton recorded are set back to it; an issue Baton holds no run of
    at all is handed back, with its label off, never started unasked.
    """
    run, issue = item.run, item.issue
    if item.found.is_pull_request or item.waiting or item.locked or item.chained:
        return NOTHING
    if run is not None and (run.state in SWEPT_STATES or run.recovery_owed):
        return NOTHING
    live = frozenset(item.found.label_names)
    if run is None:
        body = no_record_comment(item.labels.in_progress, item.labels.queue)
        effects: Plan = (
            SetLabel(issue=issue, labels=item.labels, label=None, live=live),
            PostStatus(issue=issue, body=body),
        )
        note = f"{issue} carries {item.labels.in_progress} and Baton holds no run of it"
        return Step(outcome=Outcome.STUCK, effects=effects, note=note + ": handed back")
    if item.desired == item.labels.in_progress:
        follow = Enqueue(job=follow_up_job(settings, issue, run.attempt))
        note = f"{issue}'s attempt after {run.attempt} was planned and lost: scheduled again"
        return Step(outcome=Outcome.STUCK, effects=(follow,), note=note)
    relabel = Relabel(issue=issue, labels=item.labels, live=live)
    note = f"{issue} kept {item.labels.in_progress} after attempt {run.attempt} ended"
    return Step(outcome=Outcome.STUCK, effects=(relabel,), note=note + ": labels set back")


class Refusal(_Model):
    """GitHub refused a read: its status and message."""

    status: int
    message: str


class RateLimited(_Model):
    """The installation's rate limit is spent until reset_at."""

    reset_at: datetime


class Unreachable(_Model):
    """GitHub could not be reached: error names how the connection failed."""

    error: str


Failure = Refusal | RateLimited | Unreachable


def failed(failure: Failure, issue: IssueRef | None = None) -> Step:
    """Decide what a failure to read an item means; issue is the issue in flight it is, if any.

    An issue that is gone (deleted, transferred, its repository or the App's access to
    it gone) ends Baton's work on it; anything else is skipped this pass, and why.
    """
    match failure:
        case RateLimited(reset_at=reset_at):
            return Step(skipped=f"the rate limit is spent until {reset_at:%H:%M} UTC")
        case Unreachable(error=error):
            return Step(skipped=f"GitHub could not be reached ({error})")
        case Refusal(status=status, message=message):
            gone = disappearance(status, message)
            if gone is not None and issue is not None and gone.of_issue:
                return Step(outcome=Outcome.ENDED, settlement=EndIssue(issue=issue, why=gone.why))
            return Step(skipped=gone.why if gone is not None else f"GitHub answered {status}")
