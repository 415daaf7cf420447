"""Comment commands as a table: where each applies, and what Baton does about it.

Pure. bot/workflows/steer.py reads the comment, judges who wrote it, looks the
command up in COMMANDS and hands the answer's effects to the executor. Every command
asks the one standing Baton's rule gives (bot/domain/commands.judge): a repository
role of at least the repository's minimum (`steer_min_role`), or a bot Baton trusts.
A `/baton` line that is no command Baton knows, and any command from someone
without that standing, is refused with a `confused` reaction; so is a command the
issue as it stands gives nothing to do. A command that applies is answered `+1`.

A command's plan may first ask for what it needs (Need): whether the issue is open,
or the issue itself, read from GitHub, or the answer of a change Baton's records
make at once, as what it says decides the answer (a grant under the cap; the starts
a pause held, taken as it is lifted).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bot.domain.chains import names_a_chain
from bot.domain.commands import (
    Command,
    CommandName,
    Refused,
    Standing,
    budget_reply,
    unknown_agent_reply,
)
from bot.domain.effects import (
    Enqueue,
    PauseRepo,
    Plan,
    PostComment,
    PostStatus,
    React,
    Report,
    SetLabel,
    StopRun,
)
from bot.domain.issue_text import snapshot
from bot.domain.jobs import JobSpec, RunMode, queue_chain_job, run_issue_job
from bot.domain.model import IssueRef, Labels, Run
from bot.domain.render import refusal_comment
from bot.domain.resources import Issue
from bot.ops.settings import Settings

Reaction = Literal["+1", "confused"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True)


class Scope(enum.StrEnum):
    """What a command acts on."""

    ISSUE = "issue"  # the issue commented on; on a pull request, the issue whose run opened it
    REPOSITORY = "repository"  # every issue of the repository


class Granted(_Model):
    """What the store said to a grant of more continuations: given or not, and the total."""

    granted: bool
    total: int  # the continuations maintainers have added to the issue's budget in all


class HeldStart(_Model):
    """A start a pause held: the issue, how it starts, the attempt it comes after, and the
    agent a steerer picked for it."""

    number: int
    mode: RunMode
    after: int
    agent: str | None = None


class CommandFacts(_Model):
    """A command and what Baton knows as it answers it.

    commented is where the comment is, issue what it concerns; run is the issue's
    latest (None for a command on the repository) and labels the ones that applied
    to it. open, found (the issue as read), granted and released are learned when the
    command's plan asks.
    """

    command: Command | Refused
    standing: Standing
    text: str | None  # the comment's body, as the log quotes it
    comment_id: int | None  # None: a re-run of Baton's check run asked it (rerun)
    commented: IssueRef
    issue: IssueRef
    run: Run | None = None
    labels: Labels
    now: datetime
    open: bool | None = None
    found: Issue | None = None
    granted: Granted | None = None
    released: tuple[HeldStart, ...] | None = None
    rerun: str | None = None  # the delivery of "Re-run" on Baton's check run that asked it

    @property
    def asked(self) -> str:
        """Return what asked the command, once, as the key of the job it starts."""
        return f"command-{self.comment_id}" if self.rerun is None else f"rerun-{self.rerun}"


class Learn(_Model):
    """A fact a command's plan needs before it answers.

    `open`: whether the issue is open; `issue`: the issue as it is now; `release`: the
    starts the repository's pause held, taken as the pause is lifted.
    """

    fact: Literal["open", "issue", "release"]


class Grant(_Model):
    """The grant a `budget` command asks of the store: amount more, unless all pass cap."""

    amount: int
    cap: int


Need = Learn | Grant


class Answer(_Model):
    """Baton's answer to a command: the effects, its reaction and any reply among them last."""

    reaction: Reaction
    effects: Plan
    note: str | None = None  # what the log says
    level: int = logging.INFO


@dataclass(frozen=True)
class Rule:
    """One command: what it acts on, and the plan it yields from the facts."""

    scope: Scope
    plan: Callable[[Settings, CommandFacts], Answer | Need]


def answer(settings: Settings, facts: CommandFacts) -> Answer | Need:
    """Return Baton's answer to a command, or what its plan needs to learn first.

    settings are the deployment's: the jobs a command enqueues, and the cap on grants.
    """
    command = facts.command
    if isinstance(command, Refused):
        return _refused(facts, command.reason)
    if not facts.standing.allowed:
        return _refused(facts, str(facts.standing))
    return COMMANDS[command.name].plan(settings, facts)


def scope_of(command: Command | Refused) -> Scope:
    """Return what a command acts on (a refused line concerns the issue it is on)."""
    return COMMANDS[command.name].scope if isinstance(command, Command) else Scope.ISSUE


def _answered(
    facts: CommandFacts,
    applied: bool,
    effects: Plan = (),
    reply: str | None = None,
    note: str | None = None,
    level: int = logging.INFO,
) -> Answer:
    """Return the answer: the command's effects, then its reaction, then the reply, if any.

    A re-run of Baton's check run has no comment to react to: its answer is logged.
    """
    reaction: Reaction = "+1" if applied else "confused"
    reacted: Plan = ()
    if facts.comment_id is not None:
        reacted = (React(repo=facts.commented.repo, comment_id=facts.comment_id, content=reaction),)
    replied = () if reply is None else (PostComment(issue=facts.commented, body=reply),)
    return Answer(reaction=reaction, effects=(*effects, *reacted, *replied), note=note, level=level)


def _refused(facts: CommandFacts, why: str) -> Answer:
    note = f"{facts.issue}: refused {facts.text!r} from @{facts.standing.login}: {why}"
    return _answered(facts, False, note=note, level=logging.WARNING)


def _status(settings: Settings, facts: CommandFacts) -> Answer:
    """Rewrite the issue's status comment from where its run stands."""
    run, issue = facts.run, facts.issue
    if run is None:
        return _answered(
            facts,
            True,
            (PostStatus(issue=issue, body=refusal_comment("Baton has not run it yet.")),),
        )
    return _answered(facts, True, (Report(issue=issue, attempt=run.attempt),))


def _stop(settings: Settings, facts: CommandFacts) -> Answer:
    """Stop the live run: its worker stops the agent, and the run ends as an admin-kill."""
    run = facts.run
    if run is None or not run.state.is_live:
        return _answered(facts, False)
    note = f"{facts.issue}: a maintainer stopped attempt {run.attempt}"
    return _answered(facts, True, (StopRun(issue=facts.issue),), note=note, level=logging.WARNING)


def _start(settings: Settings, facts: CommandFacts) -> Answer | Need:
    """Queue the issue as its queue label does, the label put on; with `--agent`, that agent.

    The issue's text as read now is what it is queued with, by whoever commented. A
    run under way, a pull request and a closed issue start nothing.
    """
    asked = facts.command.agent if isinstance(facts.command, Command) else None
    if asked is not None and asked not in settings.agents:
        return _answered(facts, False, reply=unknown_agent_reply(asked, settings.agents))
    if facts.issue != facts.commented:  # a Baton pull request's conversation
        return _answered(facts, False, reply=_ON_A_PULL)
    if facts.run is not None and facts.run.state.is_live:
        return _answered(facts, False)
    found = facts.found
    if found is None:
        return Learn(fact="issue")
    if found.is_pull_request:
        return _answered(facts, False, reply=_ON_A_PULL)
    if found.state != "open":
        return _answered(facts, False, reply=_CLOSED)
    issue, login, queue = facts.issue, facts.standing.login, facts.labels.queue
    text = snapshot(found.title, found.body, facts.now, login, "command")
    key = f"command-{facts.comment_id}"
    job: JobSpec
    if names_a_chain(text.body, issue.repo):
        if asked is not None:
            return _answered(facts, False, reply=_CHAIN_AGENT)
        job = queue_chain_job(issue, key, login, text)
    else:
        shown = sorted(found.label_names | {queue})  # as the start finds it: its read of it
        job = run_issue_job(
            settings, issue, key, queued_by=login, text=text, labels=shown, agent=asked
        )
    # The label first: the start finds the issue queued, as a label event's start does.
    live = frozenset(found.label_names)
    label = SetLabel(issue=issue, labels=facts.labels, label=queue, live=live)
    agent = f" with {asked}" if asked is not None else ""
    note = f"{issue}: queued by @{login} with `/baton start`{agent}"
    return _answered(facts, True, (label, Enqueue(job=job)), note=note)


_ON_A_PULL = (
    "Baton did not start: `/baton start` queues an issue. Comment it on the issue the "
    "work is for, not on a pull request."
)
_CLOSED = "Baton did not start: the issue is closed. Reopen it, then `/baton start` queues it."
_CHAIN_AGENT = (
    "Baton did not start: this issue names a chain, and `--agent` picks the agent of one "
    "issue. Give each link its agent label, then `/baton start` without `--agent`."
)


def _retry(settings: Settings, facts: CommandFacts) -> Answer | Need:
    """Start a new attempt after the last one, which must have ended; budgets still apply.

    It continues on the last attempt's branch and pull request where that pushed any.
    """
    run, issue = facts.run, facts.issue
    if run is None or run.state.is_live or run.classification is None:
        return _answered(facts, False)
    if facts.open is None:
        return Learn(fact="open")
    if not facts.open:
        return _answered(facts, False)
    mode = RunMode.CONTINUE if run.head_sha else RunMode.RETRY
    job = run_issue_job(settings, issue, facts.asked, mode, run.attempt)
    label = SetLabel(issue=issue, labels=facts.labels, label=facts.labels.in_progress)
    return _answered(facts, True, (label, Enqueue(job=job)))


def _budget(settings: Settings, facts: CommandFacts) -> Answer | Need:
    """Grant more continuations than the issue's policy, within the deployment's cap."""
    asked = facts.command.amount if isinstance(facts.command, Command) else None
    assert asked is not None  # the parser gives `budget` its amount
    cap = settings.max_budget_grant
    granted = facts.granted
    if granted is None:
        return Grant(amount=asked, cap=cap)
    note = (
        f"{facts.issue}: {'granted' if granted.granted else 'refused'} {asked} more "
        f"continuations ({granted.total} of {cap} granted in all)"
    )
    reply = budget_reply(asked, granted.granted, granted.total, cap)
    return _answered(facts, granted.granted, reply=reply, note=note)


def _pause(settings: Settings, facts: CommandFacts) -> Answer:
    """Hold every new claim in the repository; runs under way go on, and still settle."""
    repo = facts.issue.repo
    note = f"{repo}: paused by a maintainer"
    pause = PauseRepo(repo=repo, at=facts.now)
    return _answered(facts, True, (pause,), note=note, level=logging.WARNING)


def _resume(settings: Settings, facts: CommandFacts) -> Answer | Need:
    """Lift the repository's pause and make every start it held.

    Each start still meets its claim, window and budget when its job runs.
    """
    if facts.released is None:
        return Learn(fact="release")
    issue = facts.issue
    starts = tuple(
        Enqueue(
            job=run_issue_job(
                settings,
                IssueRef(
                    installation_id=issue.installation_id, repo=issue.repo, number=held.number
                ),
                f"resumed-{facts.comment_id}",
                held.mode,
                held.after,
                agent=held.agent,
            )
        )
        for held in facts.released
    )
    note = f"{issue.repo}: resumed by a maintainer; {len(starts)} held start(s) released"
    return _answered(facts, True, starts, note=note)


COMMANDS: Mapping[CommandName, Rule] = {
    "status": Rule(Scope.ISSUE, _status),
    "start": Rule(Scope.ISSUE, _start),
    "stop": Rule(Scope.ISSUE, _stop),
    "retry": Rule(Scope.ISSUE, _retry),
    "budget": Rule(Scope.ISSUE, _budget),
    "pause": Rule(Scope.REPOSITORY, _pause),
    "resume": Rule(Scope.REPOSITORY, _resume),
}
