"""What a plan asks to be done: the effects one executor performs, in order.

Pure data. Every workflow decision in bot/domain returns a plan, a tuple of these;
bot/workflows/execute.py is the one place that turns each into GitHub calls, Redis
writes and enqueued jobs, so a decision can be read, and tested, without any of them.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict

from bot.domain.classify import RunFacts
from bot.domain.commands import Standing
from bot.domain.issue_text import Snapshot
from bot.domain.jobs import JobSpec, RunMode
from bot.domain.model import IssueRef, Labels
from bot.domain.render import CheckSummary
from bot.ops.metrics import Metric


class _Effect(BaseModel):
    model_config = ConfigDict(frozen=True)


class SetLabel(_Effect):
    """Make label the issue's one Baton state label; None takes Baton's state labels off.

    labels are the names that applied to the run; live is what the issue carries,
    when the facts the plan was made from include it.
    """

    issue: IssueRef
    labels: Labels
    label: str | None
    live: frozenset[str] | None = None


class Report(_Effect):
    """Rewrite the issue's status comment (and its PR's) from the stored run."""

    issue: IssueRef
    attempt: int
    next_step: str | None = None
    checks: tuple[CheckSummary, ...] = ()


class PostStatus(_Effect):
    """Put body in the issue's status comment, for a state that is not a run's."""

    issue: IssueRef
    body: str


class Enqueue(_Effect):
    """Enqueue a job: now, after delay_s seconds, or at an instant."""

    job: JobSpec
    delay_s: float = 0.0
    at: datetime | None = None


class Conclude(_Effect):
    """Classify the stored run's end from facts and perform its recovery, once.

    checks are what failed, for the continuation's brief.
    """

    issue: IssueRef
    attempt: int
    facts: RunFacts
    checks: tuple[CheckSummary, ...] = ()


class HoldForAudit(_Effect):
    """Keep the stored green run its settlement audit flagged from review, and escalate it."""

    issue: IssueRef
    attempt: int


class SettleHeadAt(_Effect):
    """Settle the run that pushed head_sha at an instant: when its silence counts as no CI."""

    installation_id: int
    repo: str
    head_sha: str
    at: datetime


class HoldStart(_Effect):
    """Hold a start while its repository is paused: resuming the repository makes it.

    text is the issue as queued, where the start carries it: the hold keeps it, as it
    keeps the agent a steerer picked for it.
    """

    issue: IssueRef
    mode: RunMode
    after: int
    text: Snapshot | None = None
    agent: str | None = None


class RecordWait(_Effect):
    """Index the issue as waiting to start until an instant (a closed window, full slots)."""

    issue: IssueRef
    until: datetime


class RefuseQueueLabel(_Effect):
    """Undo a queue label someone who may not queue put on: label off, one comment, logged."""

    issue: IssueRef
    label: str
    standing: Standing


class ReportConfigError(_Effect):
    """Put what is wrong with the repository's file in the status comment, once per version."""

    issue: IssueRef
    blob_sha: str
    body: str


class Count(_Effect):
    """Add one to a counter's series (values name it)."""

    metric: Metric
    values: tuple[str, ...] = ()


class HaltRun(_Effect):
    """Halt the stored run until resume_at; close the account's usage window until then.

    The issue is indexed as halted, so the sweep and `baton resume` find it.
    """

    issue: IssueRef
    attempt: int
    account: str
    resume_at: datetime


class MarkEscalated(_Effect):
    """Record on the stored run that it was handed to a maintainer."""

    issue: IssueRef
    attempt: int


class Escalate(_Effect):
    """Post the escalation comment once per run and key; then, that first time, perform then.

    That first time, Baton's check run shows the escalation too, linked to the comment.
    A comment that fails to post is forgotten again, so the job's retry posts it.
    """

    issue: IssueRef
    attempt: int
    key: str
    reason: str
    body: str
    then: Plan = ()


class SettleHead(_Effect):
    """Settle the run that pushed head_sha now, unless a settlement of it waits queued already."""

    installation_id: int
    repo: str
    head_sha: str


class Relabel(_Effect):
    """Bring the issue's Baton labels back to its recorded state from live, what it carries."""

    issue: IssueRef
    labels: Labels
    live: frozenset[str]


class React(_Effect):
    """React to a comment on an issue or pull request (`+1`, `confused`)."""

    repo: str
    comment_id: int
    content: str


class PostComment(_Effect):
    """Post a new comment on the issue (or pull request)."""

    issue: IssueRef
    body: str


class MarkReady(_Effect):
    """Mark the issue's pull request ready for review, where Baton opened it as a draft."""

    issue: IssueRef
    pull: int


class StopRun(_Effect):
    """Ask whoever runs the issue to stop: its worker stops the agent (admin-kill)."""

    issue: IssueRef


class PauseRepo(_Effect):
    """Hold every new claim in the repository from at until it is resumed."""

    repo: str
    at: datetime


Effect = (
    SetLabel
    | Report
    | PostStatus
    | Enqueue
    | Conclude
    | HoldForAudit
    | SettleHeadAt
    | HoldStart
    | RecordWait
    | RefuseQueueLabel
    | ReportConfigError
    | Count
    | HaltRun
    | MarkEscalated
    | Escalate
    | SettleHead
    | Relabel
    | React
    | PostComment
    | MarkReady
    | StopRun
    | PauseRepo
)
Plan = tuple[Effect, ...]
Escalate.model_rebuild()  # then names Plan, defined after it
