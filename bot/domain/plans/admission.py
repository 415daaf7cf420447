"""Whether an attempt starts now: admit it, or have it wait, refuse it, hold it or skip it.

Pure. arrival() judges a start before the issue is claimed; admit() judges it once
it is, and asks for each fact it needs next (Learn), in order: the workflow learns
the facts that cost GitHub calls, git, a write or one of the repository's run slots
only while the start still goes on without them. Every verdict but Admit carries the
plan that carries it out.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from bot.domain import render
from bot.domain.chains import LinkStatus, link_status
from bot.domain.commands import Standing
from bot.domain.effects import (
    Enqueue,
    HoldStart,
    Plan,
    PostStatus,
    RecordWait,
    RefuseQueueLabel,
    ReportConfigError,
    SetLabel,
)
from bot.domain.issue_text import IssueText, Snapshot
from bot.domain.jobs import JobSpec, RunMode, run_issue_job
from bot.domain.model import IssueRef, Run
from bot.domain.repo_config import CONFIG_PATH
from bot.domain.spend import BudgetSpent, Spending, budget_spent, budget_wait_comment
from bot.ops.settings import Settings

CLAIM_RETRY_S = 30.0
# The attempt this one follows has ended and holds the claim only while it performs its
# recovery, this job's enqueueing included: it gives the claim back in moments.
HANDOVER_RETRY_S = 2.0
SLOT_RETRY_S = 30.0


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class _Stop(_Model):
    """A start that does not happen now; note is what the log says, where the plan does not."""

    level: ClassVar[int] = logging.INFO
    note: str | None
    plan: Plan = ()


class Skip(_Stop):
    """Start nothing: the issue moved on, a maintainer withdrew it, or another run has it."""


class Hold(_Stop):
    """Keep the start for when its paused repository resumes."""


class Wait(_Stop):
    """Start nothing until an instant, then come back with job."""

    on: Literal["window", "slot", "claim", "budget"]
    until: datetime
    job: JobSpec


class Refuse(_Stop):
    """Start nothing: the issue is a maintainer's to act on, and they are told why."""

    level: ClassVar[int] = logging.WARNING
    reason: str


class Admit(_Model):
    """Start the attempt: after previous, on base, from the text recorded for it."""

    previous: Run | None = None
    base: str
    text: IssueText


Fact = Literal["standing", "text", "spending", "stack", "window", "slot"]  # StartFacts, as asked


class Learn(_Model):
    """The fact admit() needs next to judge the start: the StartFacts field to fill in."""

    fact: Fact


Admission = Skip | Hold | Wait | Refuse | Admit


class Arrival(_Model):
    """A start as its job arrives: whether its repository is paused, whether it got the claim.

    The claim is asked for only when the repository is not paused.
    """

    issue: IssueRef
    mode: RunMode
    after: int
    text: Snapshot | None = None  # the issue as queued, where the start carries it
    paused: bool
    claimed: bool = False
    holder: str | None = None  # who holds the claim, when another does
    agent: str | None = None  # the agent `/baton start --agent` picked, where its job says
    handing_over: bool = False  # the holder is the ended attempt this start follows


def arrival(settings: Settings, facts: Arrival, now: datetime) -> Hold | Skip | Wait | None:
    """Return what becomes of a start that is not claimed; None once it is."""
    issue, mode = facts.issue, facts.mode
    if facts.paused:
        hold = HoldStart(
            issue=issue, mode=mode, after=facts.after, text=facts.text, agent=facts.agent
        )
        return Hold(note=f"{issue.repo} is paused; holding a {mode.value} run", plan=(hold,))
    if facts.claimed:
        return None
    note = f"already claimed ({facts.holder}); not starting a second run"
    if mode is RunMode.FRESH:
        return Skip(note=note)
    # A recovery is owed to this issue: try again once the holder is done, rather than
    # lose it (a duplicate of this very job finds nothing to do then).
    job = run_issue_job(settings, issue, f"after-{facts.after}", mode, facts.after)
    delay = HANDOVER_RETRY_S if facts.handing_over else CLAIM_RETRY_S
    return Wait(
        note=note,
        on="claim",
        until=now + timedelta(seconds=delay),
        job=job,
        plan=(Enqueue(job=job, delay_s=delay),),
    )


class RefusedConfig(_Model):
    """The repository's file, where it starts nothing: invalid, or asking for too much."""

    reason: str
    blob_sha: str
    problems: tuple[str, ...]  # each as the file's reader finds it


class Stack(_Model):
    """What a chain link builds on: its predecessor's branch, or why it cannot be built."""

    branch: str | None = None  # None: the repository's base branch
    refusal: str | None = None


class Window(_Model):
    """The usage window of the provider account the agent spends."""

    reopens_at: datetime | None = None  # None: open


class Slot(_Model):
    """One of the repository's run slots: taken for this start, or all taken by others."""

    got: bool
    waiting: bool = False  # the issue already waits, and its status comment says so


class StartFacts(_Model):
    """A claimed start: the issue as read, then the facts admit() asked for, as learnt.

    A fact admit() has not asked for yet is None.
    """

    issue: IssueRef
    mode: RunMode
    after: int
    queued_by: str | None = None  # who queued a fresh start, where its job says
    agent: str | None = None  # the agent `/baton start --agent` picked, where its job says
    open: bool  # an open issue, not a pull request
    carried: frozenset[str]  # the labels it carries
    latest: Run | None = None
    chain_link: bool = False  # a link of a chain Baton keeps for the repository
    default_branch: str
    refused_config: RefusedConfig | None = None
    standing: Standing | None = None  # who queued a fresh start, judged
    text: IssueText | None = None  # what the attempt works from, recorded
    stack: Stack | None = None
    window: Window | None = None
    slot: Slot | None = None
    spending: Spending | None = None  # a new issue's, where a monthly budget applies


def admit(settings: Settings, facts: StartFacts, now: datetime) -> Admission | Learn:
    """Return whether the claimed start goes ahead, or the fact that decides it next.

    settings are the repository's: its labels, its run slots, and the policy its
    attempts run under.
    """
    why = _not_now(settings, facts)
    if why is not None:
        return Skip(note=f"not starting a {facts.mode.value} run: {why}")
    if facts.mode is RunMode.FRESH:
        if facts.standing is None:
            return Learn(fact="standing")
        if not facts.standing.allowed:
            refusal = RefuseQueueLabel(
                issue=facts.issue, label=settings.labels.queue, standing=facts.standing
            )
            return Refuse(note=None, reason=str(facts.standing), plan=(refusal,))
    if facts.text is None:
        return Learn(fact="text")
    return _refusal(settings, facts) or _ready(settings, facts, facts.text, now)


def _not_now(settings: Settings, facts: StartFacts) -> str | None:
    """Return why the start is not this issue's next one, if it is not."""
    if not facts.open:
        return "not an open issue"
    if facts.mode is RunMode.FRESH:
        if settings.labels.queue not in facts.carried:
            return f"it no longer carries {settings.labels.queue}"
        return None
    if facts.mode is RunMode.CHAIN:
        if not facts.chain_link:
            return "it is no longer a link of a chain"
        # A chain starts a link never run, or one that stopped it and was queued again:
        # a repeated advance, or its job run twice, never starts a link under way or green.
        status = link_status(facts.latest, issue_open=True)
        if status not in (LinkStatus.NOT_STARTED, LinkStatus.STOPPED):
            return f"the link is {status.value} already"
        return None
    latest = facts.latest
    if latest is None or latest.attempt != facts.after or latest.classification is None:
        return f"attempt {facts.after} is not the latest, concluded attempt"
    if not facts.carried & settings.labels.active:
        return "a maintainer withdrew it"
    return None


def _refusal(settings: Settings, facts: StartFacts) -> Refuse | None:
    """Refuse a start on a file that starts nothing, or on a stack with no tip to build on.

    The comment goes before the label: a job put back before it was said runs again on
    an issue still queued, and says it then.
    """
    escalated = SetLabel(
        issue=facts.issue,
        labels=settings.labels,
        label=settings.labels.escalated,
        live=facts.carried,
    )
    refused = facts.refused_config
    if refused is not None:
        body = render.config_error_comment(CONFIG_PATH, facts.default_branch, refused.problems)
        said = ReportConfigError(issue=facts.issue, blob_sha=refused.blob_sha, body=body)
        return Refuse(
            note=f"not starting: {refused.reason}", reason=refused.reason, plan=(said, escalated)
        )
    if facts.stack is not None and facts.stack.refusal is not None:
        reason = facts.stack.refusal
        said_why = PostStatus(issue=facts.issue, body=render.refusal_comment(reason))
        return Refuse(note=f"not starting: {reason}", reason=reason, plan=(said_why, escalated))
    return None


def _ready(
    settings: Settings, facts: StartFacts, text: IssueText, now: datetime
) -> Admission | Learn:
    """Return whether the start has what it runs on: budget, its stack's tip, the window, a slot."""
    held = _budget(settings, facts, now)
    if held is not None:
        return held
    if facts.chain_link and facts.stack is None:
        return Learn(fact="stack")
    if settings.policy.limits.halt_on_usage_window:
        if facts.window is None:
            return Learn(fact="window")
        if facts.window.reopens_at is not None:
            return _wait_for_window(settings, facts, facts.window.reopens_at, now)
    limit = settings.max_concurrent_runs_per_repo
    if limit is not None:
        if facts.slot is None:
            return Learn(fact="slot")
        if not facts.slot.got:
            return _wait_for_slot(settings, facts, limit, facts.slot.waiting, now)
    base = facts.stack.branch if facts.stack is not None else None
    previous = facts.latest if facts.mode in (RunMode.CONTINUE, RunMode.RETRY) else None
    return Admit(previous=previous, base=base or facts.default_branch, text=text)


def _budget(settings: Settings, facts: StartFacts, now: datetime) -> Wait | Learn | None:
    """Hold a new issue while a monthly budget is spent; None when it may start.

    A budget stops new issues only: the continuations and retries of an issue already
    started go on, bounded by its own `max_cost_usd`.
    """
    if facts.mode not in (RunMode.FRESH, RunMode.CHAIN) or settings.monthly_budget_usd is None:
        return None
    if facts.spending is None:
        return Learn(fact="spending")
    held = budget_spent(facts.issue.repo, facts.spending, now)
    return None if held is None else _wait_for_budget(settings, facts, held, now)


def _wait_for_budget(
    settings: Settings, facts: StartFacts, held: BudgetSpent, now: datetime
) -> Wait:
    """Start nothing while the budget is spent; come back when its oldest spend has left."""
    frees_at = held.frees_at
    job = _come_back_job(settings, facts, frees_at, "budget")
    comment = budget_wait_comment(held, settings.labels.queue, now)
    return Wait(
        note=f"the {held.scope}'s monthly budget is spent; waiting until {frees_at}",
        on="budget",
        until=frees_at,
        job=job,
        plan=(*_come_back(facts, job, frees_at), PostStatus(issue=facts.issue, body=comment)),
    )


def _wait_for_window(
    settings: Settings, facts: StartFacts, reopens_at: datetime, now: datetime
) -> Wait:
    """Start nothing while the account's window is closed; come back when it reopens."""
    account = settings.policy.account
    job = _come_back_job(settings, facts, reopens_at, "window")
    plan: Plan = _come_back(facts, job, reopens_at)
    if facts.mode is not RunMode.FRESH:
        # A fresh run keeps the queue label it starts from; a recovery shows it is held.
        labels = settings.labels
        halted = SetLabel(issue=facts.issue, labels=labels, label=labels.halted, live=facts.carried)
        plan = (*plan, halted)
    waiting = PostStatus(issue=facts.issue, body=render.waiting_comment(account, reopens_at, now))
    return Wait(
        note=f"{account}'s usage window is closed; waiting until {reopens_at}",
        on="window",
        until=reopens_at,
        job=job,
        plan=(*plan, waiting),
    )


def _wait_for_slot(
    settings: Settings, facts: StartFacts, limit: int, waiting: bool, now: datetime
) -> Wait:
    """Start nothing while the repository's runs fill its slots; look again shortly."""
    repo = facts.issue.repo
    retry_at = now + timedelta(seconds=SLOT_RETRY_S)
    job = _come_back_job(settings, facts, retry_at, "slot")
    said: Plan = ()
    if not waiting:  # said once, not every time it looks
        comment = render.slot_wait_comment(repo, limit, retry_at, now)
        said = (PostStatus(issue=facts.issue, body=comment),)
    return Wait(
        note=f"{repo}'s {limit} run slots are taken; waiting",
        on="slot",
        until=retry_at,
        job=job,
        plan=(*said, *_come_back(facts, job, retry_at)),
    )


def _come_back_job(settings: Settings, facts: StartFacts, when: datetime, why: str) -> JobSpec:
    """Return this same start, as a job for when (why names what it waits on)."""
    queued_by = facts.standing.login if facts.standing is not None else facts.queued_by
    key = f"{why}-{int(when.timestamp())}"
    return run_issue_job(
        settings,
        facts.issue,
        key,
        facts.mode,
        facts.after,
        queued_by=queued_by,
        agent=facts.agent,
    )


def _come_back(facts: StartFacts, job: JobSpec, when: datetime) -> Plan:
    """Return the plan that schedules job for when, and indexes the issue as waiting."""
    return (Enqueue(job=job, at=when), RecordWait(issue=facts.issue, until=when))
