"""Keeping Baton's open pull requests mergeable as the branch they target moves.

Pure. A push to a repository's default branch is looked at in rounds, each a job
(`Look`): look 0 finds Baton's open pull requests on that branch whose runs wait for
their checks or a review, and every later look reads them from GitHub. GitHub says
`mergeable: null` until its background job has compared head and base, so those still
undecided are read again at the next look, at most `MAX_LOOKS`, each later than the one
before (`look_delay`). No worker waits: a look is a job enqueued for later.

What `decide` makes of each pull request read:

- conflicting (`mergeable: false`): a trial merge in Baton's mirror names the files, and
  the run ends as a `merge-conflict`: the agent continues on its branch, briefed with
  them, within the continuation budget, as a chain link whose restack conflicts does;
- only behind: nothing, unless the repository's file sets `update_branch: true`; then
  GitHub merges the base in ("Update branch"), and a later look records the merge
  commit GitHub made as the run's head, whose checks settle it as any head's do;
- still null at the last look: left as it is, and logged; merging cleanly: nothing.

Chain links stacked on another link are never looked at: their base is that link's
Baton branch, which only the chain moves, and the chain restacks them
(bot/domain/plans/restack.py). A chain's first link targets the default branch and is
kept mergeable like any pull request; the links on it follow its new tip once it
settles green, as after any continuation of it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from bot.domain.classify import RunFacts
from bot.domain.effects import Conclude, Enqueue, Plan, Report, SettleHead, SettleHeadAt
from bot.domain.jobs import JobSpec, mergeable_job
from bot.domain.model import Run, RunState
from bot.domain.plans.restack import named_files
from bot.domain.resources import PullRequest

MAX_LOOKS = 5  # reads of one pull request after one push, at most
FIRST_LOOK_S = 2.0  # before look 1; each look after waits twice as long as the one before

# The runs whose pull requests are kept mergeable: pushed, waiting for checks or a review.
# A live run's agent is at work on the branch; an ended one is a maintainer's to decide.
_KEPT = frozenset({RunState.PUSHED_PENDING, RunState.PUSHED_GREEN})
_ENDED = frozenset({RunState.MERGED, RunState.CLOSED})


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class Look(_Model):
    """One round of looking at a push to base: which pull requests, the how-manyth time."""

    installation_id: int
    repo: str
    base: str
    after: str  # the commit the push left base at
    number: int = 0
    pulls: tuple[int, ...] = ()  # to read at this look (look 0 finds them)
    updating: tuple[int, ...] = ()  # those whose branch Baton asked GitHub to update

    @property
    def last(self) -> bool:
        """Tell whether this is the last look there is at the push."""
        return self.number >= MAX_LOOKS

    def job(self) -> JobSpec:
        """Return the job that takes this look."""
        return mergeable_job(
            self.installation_id,
            self.repo,
            self.base,
            self.after,
            self.number,
            self.pulls,
            self.updating,
        )


class Action(enum.StrEnum):
    """What Baton does for one pull request at one look."""

    LEAVE = "leave"  # nothing: the decision says why
    FORGET = "forget"  # it is closed: out of the index of open ones
    LOOK_AGAIN = "look-again"  # undecided yet: read it at the next look
    TRY_MERGE = "try-merge"  # decided once a trial merge in the mirror is known
    CONTINUE = "continue"  # it conflicts: a `merge-conflict` continuation
    UPDATE = "update"  # only behind, and the repository asks: GitHub merges the base in
    RECORD_HEAD = "record-head"  # a merge of the base landed on it: the run settles that head


class Decision(_Model):
    """An action, and why, for the log."""

    action: Action
    reason: str


class TrialMerge(_Model):
    """What merging base into the pull request's head does, tried in Baton's mirror."""

    parents: tuple[str, ...]  # the head's own, first parent first
    behind: bool  # base has commits the head lacks
    conflicts: tuple[str, ...] = ()


class PullFacts(_Model):
    """What one look knows of one pull request: its run, GitHub's answer, the trial merge."""

    run: Run
    pull: PullRequest
    look: Look
    update_branch: bool  # the repository's file asks for behind branches to be updated
    merge: TrialMerge | None = None  # None: not tried yet


def kept(run: Run | None, base: str) -> bool:
    """Tell whether the run's pull request is one Baton keeps mergeable with base now."""
    return (
        run is not None
        and run.state in _KEPT
        and run.pr_number is not None
        and run.head_sha is not None
        and run.base_branch == base
    )


def sort_pulls(
    base: str, runs: Mapping[int, Run | None]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Return which indexed pull requests to look at, and which to drop from the index.

    runs are the newest run of each, where one is recorded. One whose run merged or
    closed it, or whose runs are forgotten, is not open any more.
    """
    looked = tuple(number for number, run in sorted(runs.items()) if kept(run, base))
    ended = tuple(
        number for number, run in sorted(runs.items()) if run is None or run.state in _ENDED
    )
    return looked, ended


def decide(facts: PullFacts) -> Decision:
    """Return what Baton does for a pull request at this look, from what it knows of it."""
    run, pull, look = facts.run, facts.pull, facts.look
    if not kept(run, look.base):
        return Decision(action=Action.LEAVE, reason=f"its run is {run.state.value} now")
    if pull.state != "open":
        return Decision(action=Action.FORGET, reason="it is closed")
    if pull.head.sha is not None and pull.head.sha != run.head_sha:
        return _head_moved(facts)
    if pull.number in look.updating:
        return _later(look, "GitHub has not merged the base into it yet")
    if pull.mergeable is None:
        return _later(look, "GitHub has not said yet whether it merges")
    if not pull.mergeable:
        return _conflicting(facts)
    return _merges(facts)


def _later(look: Look, why: str) -> Decision:
    if look.last:
        return Decision(action=Action.LEAVE, reason=f"{why} after {MAX_LOOKS} looks")
    return Decision(action=Action.LOOK_AGAIN, reason=why)


def _head_moved(facts: PullFacts) -> Decision:
    """A head that is not the run's: GitHub's merge of the base into it, or someone's push.

    A merge commit whose first parent is the run's head merged something into Baton's
    work without changing it: the run settles that head. Anything else is not Baton's.
    """
    merge, run = facts.merge, facts.run
    if merge is None:
        return Decision(action=Action.TRY_MERGE, reason="its head moved")
    if len(merge.parents) == 2 and merge.parents[0] == run.head_sha:
        return Decision(
            action=Action.RECORD_HEAD, reason=f"`{facts.look.base}` was merged into its head"
        )
    return Decision(action=Action.LEAVE, reason="its head moved to a commit Baton did not make")


def _conflicting(facts: PullFacts) -> Decision:
    merge, base = facts.merge, facts.look.base
    if merge is None:
        return Decision(action=Action.TRY_MERGE, reason="GitHub says it conflicts")
    if not merge.conflicts:
        # GitHub compared an older base, or the base moved on since: the next push looks.
        return Decision(
            action=Action.LEAVE,
            reason=f"GitHub says it conflicts, but merging `{base}` as fetched does not",
        )
    return Decision(
        action=Action.CONTINUE, reason=conflict_reason(facts.run, base, merge.conflicts)
    )


def _merges(facts: PullFacts) -> Decision:
    base, merge = facts.look.base, facts.merge
    if not facts.update_branch:
        return Decision(action=Action.LEAVE, reason="it merges; its branch is not updated")
    if facts.pull.mergeable_state == "behind":
        return Decision(action=Action.UPDATE, reason=f"it is behind `{base}`")
    if merge is None:
        return Decision(action=Action.TRY_MERGE, reason="it merges; is it behind?")
    if merge.behind:
        return Decision(action=Action.UPDATE, reason=f"it is behind `{base}`")
    return Decision(action=Action.LEAVE, reason=f"it is up to date with `{base}`")


def conflict_reason(run: Run, base: str, files: Sequence[str]) -> str:
    """Return why the run's branch no longer merges, naming the files it conflicts in."""
    return f"merging `{base}` into `{run.branch}` conflicts in {named_files(files)}"


def conflicted(
    current: Run, base: str, head: str, files: Sequence[str], at: datetime
) -> Run | None:
    """Return the run failed by a conflict of head with base, or None if it moved on since."""
    if current.state not in _KEPT or current.head_sha != head or current.classification:
        return None
    failed = current.moved(RunState.FAILED, at, note="merge conflict")
    reason = conflict_reason(current, base, files)
    return failed.model_copy(update={"reason": reason, "base_branch": base})


def conflict_plan(run: Run) -> Plan:
    """Return what follows a conflict: the run concluded as a `merge-conflict`.

    Its recovery is a continuation on the same branch and pull request, briefed to merge
    the base in and resolve the files the reason names (bot/domain/render.py), charged to
    the continuation budget: past it, the issue escalates.
    """
    facts = RunFacts(ending="merge-conflict", detail=run.reason or "")
    return (Conclude(issue=run.issue, attempt=run.attempt, facts=facts),)


def branch_updated(
    current: Run, head: str, parents: Sequence[str], base: str, at: datetime
) -> Run | None:
    """Return the run waiting for the checks of head, a merge of base into its own head.

    None if the run moved on since, or has that head already. Its base is the base
    commit merged in, so its diff stays its own work.
    """
    if current.state not in _KEPT or current.head_sha != parents[0] or len(parents) != 2:
        return None
    pending = (
        current
        if current.state is RunState.PUSHED_PENDING
        else current.moved(RunState.PUSHED_PENDING, at, note=f"`{base}` merged in")
    )
    return pending.model_copy(update={"head_sha": head, "base_sha": parents[1]})


def updated_plan(
    run: Run, base: str, checked: bool, no_checks_after_s: float, at: datetime
) -> Plan:
    """Return what follows recording a merged-in head: its status, and its settlement.

    checked: a check result for it came in before it was the run's, and found nothing to
    settle; it is settled now. Otherwise its checks' own events settle it, and a head no
    CI runs on sends none: it is looked at when its silence counts as no CI.
    """
    issue, head = run.issue, run.head_sha
    assert head is not None
    report = Report(
        issue=issue,
        attempt=run.attempt,
        next_step=f"waiting for the checks of the branch with `{base}` merged in",
    )
    if checked:
        return (
            report,
            SettleHead(installation_id=issue.installation_id, repo=issue.repo, head_sha=head),
        )
    due = at + timedelta(seconds=no_checks_after_s)
    return (
        report,
        SettleHeadAt(installation_id=issue.installation_id, repo=issue.repo, head_sha=head, at=due),
    )


def look_delay(number: int) -> float:
    """Return how long after the look before it look number is taken, in seconds."""
    return FIRST_LOOK_S * 2.0 ** (number - 1)


def next_look(look: Look, pending: Sequence[int], updating: Sequence[int]) -> Plan:
    """Return the next look at the push, for the pull requests still undecided.

    pending are undecided; updating, those whose branch GitHub was asked to update at
    this look. One asked before that GitHub has not updated yet is still updating.
    Nothing after the last look, or when every pull request is decided.
    """
    if look.last or not (pending or updating):
        return ()
    still = {number for number in pending if number in look.updating}
    following = look.model_copy(
        update={
            "number": look.number + 1,
            "pulls": tuple(sorted({*pending, *updating})),
            "updating": tuple(sorted({*updating, *still})),
        }
    )
    return (Enqueue(job=following.job(), delay_s=look_delay(following.number)),)
