"""Carry out a maintainer's comment command, answered with a reaction on the comment.

Only collaborators with the role Baton's rule asks for steer it (bot/workflows/standing.py); a
command from anyone else is refused with a `confused` reaction and logged, and one
from a bot Baton does not trust is ignored. Each comment is handled once, however
often its webhook is delivered.
"""

from __future__ import annotations

import logging
from typing import Literal

from bot.domain.commands import Command, Refused, budget_reply, ignored_bot, parse_command
from bot.domain.jobs import RunMode, run_issue_job
from bot.domain.model import IssueRef, utcnow
from bot.domain.render import refusal_comment
from bot.edges.api import post_comment, read_issue
from bot.edges.github import GitHubClient, github_app
from bot.workflows.conclude import policy_of, post_status, report
from bot.workflows.labels import set_state_label
from bot.workflows.services import Services
from bot.workflows.standing import repository_settings, standing_of

log = logging.getLogger(__name__)

Reaction = Literal["+1", "confused"]


async def handle_command(
    services: Services, installation_id: int, repo: str, number: int, comment_id: int
) -> Reaction | None:
    """Carry out the command in a comment on an issue or PR; return the reaction given."""
    store, settings = services.store, services.settings
    async with github_app(settings, store) as app:
        gh = await app.for_installation(installation_id)
        url_vars: dict[str, str | int] = {"repo": repo, "id": comment_id}
        comment = await gh.getitem("/repos/{+repo}/issues/comments/{id}", url_vars)
        login, kind = str(comment["user"]["login"]), comment["user"].get("type")
        command = parse_command(comment.get("body"))
        if command is None:
            return None
        if ignored_bot(login, kind, settings.trusted_bots):
            log.info("%s#%d: ignored a command from the bot @%s", repo, number, login)
            return None
        if not store.first_command(repo, comment_id):
            log.info("%s#%d: command in comment %d was handled already", repo, number, comment_id)
            return None
        judged = await repository_settings(gh, store, settings, repo)
        standing = await standing_of(gh, store, judged, repo, login, kind)
        commented = IssueRef(installation_id=installation_id, repo=repo, number=number)
        issue = _issue_of(services, commented)
        reply = None
        if isinstance(command, Refused) or not standing.allowed:
            why = command.reason if isinstance(command, Refused) else str(standing)
            log.warning("%s: refused %r from @%s: %s", issue, comment.get("body"), login, why)
            reaction: Reaction = "confused"
        else:
            done, reply = await _perform(services, gh, issue, command, comment_id)
            reaction = "+1" if done else "confused"
        await gh.post(
            "/repos/{+repo}/issues/comments/{id}/reactions", url_vars, data={"content": reaction}
        )
        if reply is not None:
            await post_comment(gh, commented, reply)
        return reaction


def _issue_of(services: Services, commented: IssueRef) -> IssueRef:
    """Return the issue a comment concerns: on a PR, the issue whose run opened it."""
    found = services.store.run_for_pull(commented.repo, commented.number)
    return found[0] if found is not None else commented


async def _perform(
    services: Services, gh: GitHubClient, issue: IssueRef, command: Command, comment_id: int
) -> tuple[bool, str | None]:
    """Carry out a permitted command; return whether it applied, and a reply, if one is due.

    It does not apply when the issue as it stands gives it nothing to do.
    """
    store, settings = services.store, services.settings
    run = store.latest_run(issue)
    if command.name == "status":
        if run is None:
            await post_status(services, gh, issue, refusal_comment("Baton has not run it yet."))
        else:
            await report(services, gh, run)
        return True, None
    if command.name == "stop":
        if run is None or not run.state.is_live:
            return False, None
        store.request_stop(issue)  # the worker running it stops the agent: admin-kill
        log.warning("%s: a maintainer stopped attempt %d", issue, run.attempt)
        return True, None
    if command.name == "pause":
        store.pause(issue.repo, utcnow())
        log.warning("%s: paused by a maintainer", issue.repo)
        return True, None
    if command.name == "resume":
        # Wakes dispatch now; every held start still meets its claim, window and budget.
        held = store.resume_repo(issue.repo)
        services.dispatch.enqueue(
            [
                run_issue_job(
                    settings,
                    IssueRef(installation_id=issue.installation_id, repo=issue.repo, number=n),
                    f"resumed-{comment_id}",
                    RunMode(mode),
                    after,
                )
                for n, mode, after in held
            ]
        )
        log.info("%s: resumed by a maintainer; %d held start(s) released", issue.repo, len(held))
        return True, None
    if command.name == "budget":
        assert command.amount is not None
        cap = settings.max_budget_grant
        granted, extra = store.grant_budget(issue, command.amount, cap)
        log.info(
            "%s: %s %d more continuations (%d of %d granted in all)",
            issue,
            "granted" if granted else "refused",
            command.amount,
            extra,
            cap,
        )
        return granted, budget_reply(command.amount, granted, extra, cap)
    # retry: a new attempt after the last one, which must have ended; budgets still apply.
    if run is None or run.state.is_live or run.classification is None:
        return False, None
    data = await read_issue(gh, issue)
    if data["state"] != "open":
        return False, None
    labels = policy_of(services, run).labels
    await set_state_label(gh, store, services.dispatch, labels, issue, labels.in_progress)
    mode = RunMode.CONTINUE if run.head_sha else RunMode.RETRY
    services.dispatch.enqueue(
        [run_issue_job(settings, issue, f"command-{comment_id}", mode, run.attempt)]
    )
    return True, None
