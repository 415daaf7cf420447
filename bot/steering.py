"""Carry out a maintainer's comment command, answered with a reaction on the comment.

Only collaborators with write access or above steer Baton; a command from anyone
else is refused with a `confused` reaction and logged. Each comment is handled
once, however often its webhook is delivered.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

from gidgethub import BadRequest

from bot.commands import Command, Refused, may_steer, parse_command
from bot.dispatch import RunMode, run_issue_job
from bot.github import GitHubClient, github_app
from bot.labels import set_state_label
from bot.model import IssueRef, utcnow
from bot.recovery import Services, policy_of, post_status, report
from bot.render import refusal_comment
from bot.tracker import read_issue

log = logging.getLogger(__name__)

Reaction = Literal["+1", "confused"]


async def handle_command(
    services: Services, installation_id: int, repo: str, number: int, comment_id: int
) -> Reaction | None:
    """Carry out the command in a comment on an issue or PR; return the reaction given."""
    store = services.store
    async with github_app(services.settings, store) as app:
        gh = await app.for_installation(installation_id)
        url_vars: dict[str, str | int] = {"repo": repo, "id": comment_id}
        comment = await gh.getitem("/repos/{+repo}/issues/comments/{id}", url_vars)
        author = comment["user"]
        command = parse_command(comment.get("body"))
        if command is None or author.get("type") == "Bot":
            return None
        if not store.first_command(repo, comment_id):
            log.info("%s#%d: command in comment %d was handled already", repo, number, comment_id)
            return None
        role = await _role(gh, services, repo, str(author["login"]))
        issue = _issue_of(
            services, IssueRef(installation_id=installation_id, repo=repo, number=number)
        )
        if isinstance(command, Refused) or not may_steer(role):
            why = (
                command.reason if isinstance(command, Refused) else f"@{author['login']} is {role}"
            )
            log.warning(
                "%s: refused %r from @%s: %s", issue, comment.get("body"), author["login"], why
            )
            reaction: Reaction = "confused"
        else:
            reaction = (
                "+1" if await _perform(services, gh, issue, command, comment_id) else "confused"
            )
        await gh.post(
            "/repos/{+repo}/issues/comments/{id}/reactions", url_vars, data={"content": reaction}
        )
        return reaction


async def _role(gh: GitHubClient, services: Services, repo: str, login: str) -> str:
    """Return the login's role on the repository, looked up at most once a minute."""
    cached = services.store.cached_role(repo, login)
    if cached is not None:
        return cached
    url_vars = {"repo": repo, "login": login}
    try:
        found: dict[str, Any] = await gh.getitem(
            "/repos/{+repo}/collaborators/{login}/permission", url_vars
        )
        role = str(found.get("role_name") or found["permission"])
    except BadRequest as exc:
        if exc.status_code != 404:
            raise
        role = "none"
    services.store.cache_role(repo, login, role)
    return role


def _issue_of(services: Services, commented: IssueRef) -> IssueRef:
    """Return the issue a comment concerns: on a PR, the issue whose run opened it."""
    found = services.store.run_for_pull(commented.repo, commented.number)
    return found[0] if found is not None else commented


async def _perform(
    services: Services, gh: GitHubClient, issue: IssueRef, command: Command, comment_id: int
) -> bool:
    """Carry out a permitted command; False when it cannot apply to the issue as it stands."""
    store, settings = services.store, services.settings
    run = store.latest_run(issue)
    if command.name == "status":
        if run is None:
            await post_status(services, gh, issue, refusal_comment("Baton has not run it yet."))
        else:
            await report(services, gh, run)
        return True
    if command.name == "stop":
        if run is None or not run.state.is_live:
            return False
        store.request_stop(issue)  # the worker running it stops the agent: admin-kill
        log.warning("%s: a maintainer stopped attempt %d", issue, run.attempt)
        return True
    if command.name == "pause":
        store.pause(issue.repo, utcnow())
        log.warning("%s: paused by a maintainer", issue.repo)
        return True
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
        return True
    if command.name == "budget":
        assert command.amount is not None
        extra = store.raise_budget(issue, command.amount)
        log.info("%s: continuation budget raised by %d (%d in all)", issue, command.amount, extra)
        return True
    # retry: a new attempt after the last one, which must have ended; budgets still apply.
    if run is None or run.state.is_live or run.classification is None:
        return False
    data = await read_issue(gh, issue)
    if data["state"] != "open":
        return False
    labels = policy_of(services, run).labels
    await set_state_label(gh, store, services.dispatch, labels, issue, labels.in_progress)
    mode = RunMode.CONTINUE if run.head_sha else RunMode.RETRY
    services.dispatch.enqueue(
        [run_issue_job(settings, issue, f"command-{comment_id}", mode, run.attempt)]
    )
    return True
