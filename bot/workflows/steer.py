"""Carry out a maintainer's comment command, answered with a reaction on the comment,
and pick the agent an attempt runs.

Only collaborators with the role Baton's rule asks for steer it (bot/workflows/standing.py); a
command from anyone else is refused with a `confused` reaction and logged, and one
from a bot Baton does not trust is ignored. Each comment is handled once, however
often its webhook is delivered. What each command does is the table of
bot/domain/plans/commands.py: this module reads the comment and the facts, judges
its author, learns what the command's plan asks for, and has the plan executed.

An agent label counts as a command does: only when a steerer put it on.
"""

from __future__ import annotations

import logging

from bot.domain.commands import (
    Command,
    Refused,
    Standing,
    agent_labels,
    choose_agent,
    ignored_bot,
    offers,
    parse_command,
)
from bot.domain.jobs import RunMode
from bot.domain.model import IssueRef, utcnow
from bot.domain.plans import commands as plans
from bot.domain.plans.commands import (
    Answer,
    CommandFacts,
    Grant,
    Granted,
    HeldStart,
    Need,
    Reaction,
    Scope,
)
from bot.domain.resources import Issue, IssueComment
from bot.edges.api import list_issue_events, read_comment, read_issue
from bot.edges.github import GitHubClient, github_app
from bot.ops.settings import Settings
from bot.workflows.conclude import policy_of
from bot.workflows.execute import execute, forgotten_on_failure
from bot.workflows.services import Services
from bot.workflows.standing import repository_settings, standing_of

log = logging.getLogger(__name__)


async def handle_command(
    services: Services, installation_id: int, repo: str, number: int, comment_id: int
) -> Reaction | None:
    """Carry out the command in a comment on an issue or PR; return the reaction given."""
    store, settings = services.store, services.settings
    async with github_app(settings, store) as app:
        gh = await app.for_installation(installation_id)
        comment = await read_comment(gh, repo, comment_id)
        login, kind = comment.user.login, comment.user.type
        command = parse_command(comment.body)
        if command is None:
            return None
        if ignored_bot(login, kind, settings.trusted_bots):
            log.info("%s#%d: ignored a command from the bot @%s", repo, number, login)
            return None
        if not store.first_command(repo, comment_id):
            log.info("%s#%d: command in comment %d was handled already", repo, number, comment_id)
            return None
        with forgotten_on_failure(lambda: store.forget_command(repo, comment_id)):
            # Known before Baton labels anything: the web process then tells its own events
            # apart.
            await app.learn_bot_login()
            judged = await repository_settings(gh, store, settings, repo)
            standing = await standing_of(gh, store, judged, repo, login, kind)
            commented = IssueRef(installation_id=installation_id, repo=repo, number=number)
            facts = _facts(services, command, standing, comment, commented, judged)
            answer = await _answer(services, gh, facts)
            if answer.note is not None:
                log.log(answer.level, "%s", answer.note)
            await execute(services, gh, answer.effects)
            return answer.reaction


RERUN_TEXT = "Re-run of Baton's check run"  # what the log quotes, as it quotes a comment


async def handle_rerun(
    services: Services,
    installation_id: int,
    repo: str,
    head_sha: str,
    login: str,
    kind: str,
    delivery_id: str,
) -> Reaction | None:
    """Take "Re-run" on Baton's check run of a head as `/baton retry` from whoever asked.

    Their role is judged as a comment's author's is. A check run takes no reaction: a
    re-run that retries nothing, or comes from someone who may not steer Baton, changes
    nothing on GitHub and is logged. Each re-run is handled once, however delivered.
    Returns the reaction a comment would have had.
    """
    store = services.store
    found = store.runs_for_head(repo, head_sha)
    if not found:
        log.info("%s: re-run of a check run on %.12s, a head Baton did not push", repo, head_sha)
        return None
    if not store.first_rerun(repo, delivery_id):
        log.info("%s: re-run %s was handled already", repo, delivery_id)
        return None
    reaction = None
    with forgotten_on_failure(lambda: store.forget_rerun(repo, delivery_id)):
        for issue, _ in found:  # two issues whose agents pushed the same commit share a head
            reaction = await _rerun(
                services, installation_id, repo, issue, login, kind, delivery_id
            )
    return reaction


async def _rerun(
    services: Services,
    installation_id: int,
    repo: str,
    issue: IssueRef,
    login: str,
    kind: str,
    delivery_id: str,
) -> Reaction | None:
    store, settings = services.store, services.settings
    async with github_app(settings, store) as app:
        gh = await app.for_installation(installation_id)
        await app.learn_bot_login()  # as for a command: Baton may label the issue now
        judged = await repository_settings(gh, store, settings, repo)
        standing = await standing_of(gh, store, judged, repo, login, kind)
        run = store.latest_run(issue)
        facts = CommandFacts(
            command=Command(name="retry"),
            standing=standing,
            text=RERUN_TEXT,
            comment_id=None,
            commented=issue,
            issue=issue,
            run=run,
            labels=policy_of(services, run).labels if run is not None else judged.labels,
            now=utcnow(),
            rerun=delivery_id,
        )
        answer = await _answer(services, gh, facts)
        outcome = "retries it" if answer.reaction == "+1" else "retries nothing"
        log.log(answer.level, "%s", answer.note or f"{issue}: @{login}'s re-run {outcome}")
        await execute(services, gh, answer.effects)
        return answer.reaction


def _facts(
    services: Services,
    command: Command | Refused,
    standing: Standing,
    comment: IssueComment,
    commented: IssueRef,
    judged: Settings,
) -> CommandFacts:
    """Return what Baton knows of a command before its plan asks for more.

    judged are the repository's settings: their labels apply to an issue with no run.
    """
    store = services.store
    # On a PR, a command concerns the issue whose run opened it.
    found = store.run_for_pull(commented.repo, commented.number)
    issue = found[0] if found is not None else commented
    run = store.latest_run(issue) if plans.scope_of(command) is Scope.ISSUE else None
    return CommandFacts(
        command=command,
        standing=standing,
        text=comment.body,
        comment_id=comment.id,
        commented=commented,
        issue=issue,
        run=run,
        labels=policy_of(services, run).labels if run is not None else judged.labels,
        now=utcnow(),
    )


async def _answer(services: Services, gh: GitHubClient, facts: CommandFacts) -> Answer:
    """Return the table's answer to the command, learning first what its plan asks for."""
    answer = plans.answer(services.settings, facts)
    while not isinstance(answer, Answer):
        facts = await _learn(services, gh, facts, answer)
        answer = plans.answer(services.settings, facts)
    return answer


async def _learn(
    services: Services, gh: GitHubClient, facts: CommandFacts, need: Need
) -> CommandFacts:
    """Return the facts with what the plan needs: read from GitHub, or made at once in Redis."""
    store, issue = services.store, facts.issue
    if isinstance(need, Grant):
        granted, total = store.grant_budget(issue, need.amount, need.cap)
        return facts.model_copy(update={"granted": Granted(granted=granted, total=total)})
    match need.fact:
        case "open":
            found = await read_issue(gh, issue)
            return facts.model_copy(update={"open": found.state == "open"})
        case "issue":
            return facts.model_copy(update={"found": await read_issue(gh, issue)})
        case "release":
            released = tuple(
                HeldStart(number=number, mode=RunMode(mode), after=after, agent=agent)
                for number, mode, after, agent in store.resume_repo(issue.repo)
            )
            return facts.model_copy(update={"released": released})


async def with_chosen_agent(
    services: Services,
    gh: GitHubClient,
    settings: Settings,
    issue: IssueRef,
    mode: RunMode,
    asked: str | None,
    data: Issue,
) -> Settings:
    """Return the repository's settings with the agent this attempt runs in them.

    In order: the agent of the attempt it follows (a continuation or retry keeps it),
    the one a steerer's `/baton start --agent` picked (asked), the one a steerer's
    agent label on the issue picks, then the repository's own (settings name it).
    """
    deployment = services.settings
    kept = None
    if mode in (RunMode.CONTINUE, RunMode.RETRY):
        latest = services.store.latest_run(issue)
        kept = latest.agent if latest is not None else None
    labelled = None
    offered, repository = deployment.agents, settings.agent
    if not offers(kept, offered, repository) and not offers(asked, offered, repository):
        labelled = await labelled_agent(services, gh, settings, issue, data.label_names)
    agent = choose_agent(offered, repository, kept, asked, labelled)
    if agent != repository:
        log.info("%s: running %s, picked for the issue", issue, agent)
    return settings.running(agent, deployment)


async def labelled_agent(
    services: Services, gh: GitHubClient, settings: Settings, issue: IssueRef, carried: set[str]
) -> str | None:
    """Return the agent the issue's agent label picks: the latest a steerer put on.

    One put on by anyone else is ignored and logged, as is one naming an agent the
    deployment does not run. settings are the repository's: they name the prefix and
    the role steering takes.
    """
    named = agent_labels(carried, settings.labels.agent_prefix)
    if not named:
        return None
    put_on: dict[str, tuple[str, str | None]] = {}  # label: who last put it on
    for event in await list_issue_events(gh, issue):
        label = event.label.name if event.label else None
        if event.event == "labeled" and label in named and event.actor is not None:
            put_on.pop(label, None)  # the latest last
            put_on[label] = (event.actor.login, event.actor.type)
    for label, (login, kind) in reversed(put_on.items()):
        standing = await standing_of(gh, services.store, settings, issue.repo, login, kind)
        if not standing.allowed:
            log.warning("%s: ignored the label `%s`: %s", issue, label, standing)
        elif not offers(named[label], services.settings.agents, settings.agent):
            log.warning("%s: ignored the label `%s`: Baton runs no such agent here", issue, label)
        else:
            return named[label]
    return None
