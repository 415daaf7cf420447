"""Who may steer Baton, asked of GitHub: the one rule of `bot/domain/commands.py`, applied.

Every way of steering Baton is judged here: the queue label (the run and chain
jobs, whoever enqueued them), reviews that request changes, the review comments a
continuation's brief quotes, and comment commands. A person's role comes from the
collaborator-permission API and is kept for ROLE_TTL_S seconds, so a collaborator
whose access is revoked stops steering Baton within that time. A bot has no role:
it steers only when its login is in `BATON_TRUSTED_BOTS`.
"""

from __future__ import annotations

import logging

from gidgethub import BadRequest, HTTPException

from bot.domain.commands import ROLES, Standing, is_bot, judge, queue_refusal_comment
from bot.domain.model import IssueRef
from bot.domain.repo_config import InvalidRepoConfig, apply_repo_config
from bot.edges.api import (
    list_issue_events,
    load_repo_config,
    post_comment,
    read_collaborator_permission,
    read_repository,
    swap_labels,
)
from bot.edges.github import GitHubClient
from bot.edges.store import Store
from bot.ops.settings import Settings

log = logging.getLogger(__name__)

GHOST = "ghost"  # how GitHub names an account it no longer knows


async def role_of(gh: GitHubClient, store: Store, repo: str, login: str) -> str:
    """Return the login's role on the repository (`none` for a stranger), cached briefly.

    A custom role GitHub names is read as the base permission it carries. The
    account that owns a personal repository is its admin, asked nothing: user and
    organization logins share one namespace, so no one else carries the owner's name.
    """
    if login.lower() == repo.split("/", 1)[0].lower():
        return "admin"
    cached = store.cached_role(repo, login)
    if cached is not None:
        return cached
    try:
        found = await read_collaborator_permission(gh, repo, login)
    except BadRequest as exc:
        if exc.status_code != 404:
            raise
        role = "none"
    else:
        named = found.role_name or ""
        role = named if named in ROLES else found.permission or "none"
    store.cache_role(repo, login, role)
    return role


async def standing_of(
    gh: GitHubClient,
    store: Store,
    settings: Settings,
    repo: str,
    login: str,
    kind: str | None = None,
) -> Standing:
    """Return whether login may steer Baton on repo under settings (the repository's own).

    kind is the account's type where GitHub said it (`User`, `Bot`); a bot's role is
    never asked for.
    """
    bot = is_bot(login, kind)
    role = None if bot else await role_of(gh, store, repo, login)
    return judge(login, bot, role, settings.steer_min_role, settings.trusted_bots)


async def repository_settings(
    gh: GitHubClient, store: Store, settings: Settings, repo: str
) -> Settings:
    """Return the settings that judge a sender on repo: the deployment's, with its file applied.

    A file that is invalid, or asks for less than the deployment, leaves the
    deployment's minimum role in force.
    """
    data = await read_repository(gh, store, repo)
    try:
        file = await load_repo_config(gh, store, repo, data.default_branch)
    except InvalidRepoConfig:
        return settings
    return apply_repo_config(settings, file.config)


async def labeller(gh: GitHubClient, issue: IssueRef, label: str) -> tuple[str, str | None] | None:
    """Return who last put label on the issue (login and account type), from its events."""
    found = None
    for event in await list_issue_events(gh, issue):
        named = event.label.name if event.label else ""
        actor = event.actor
        if event.event == "labeled" and named.casefold() == label.casefold() and actor:
            found = (actor.login, actor.type)
    return found


async def queuer_standing(
    gh: GitHubClient, store: Store, settings: Settings, issue: IssueRef, queued_by: str | None
) -> Standing:
    """Return the standing of whoever put the queue label on the issue (settings name it).

    queued_by is their login where the caller knows it; otherwise the issue's events
    say who did, and when they cannot, nobody who may did.
    """
    found: tuple[str, str | None] | None = (queued_by, None) if queued_by else None
    if found is None:
        found = await labeller(gh, issue, settings.labels.queue)
    if found is not None and found[0] == (settings.bot_login or store.bot_login()):
        found = _asked_baton(store, issue)
    if found is None:
        return judge(GHOST, False, None, settings.steer_min_role, settings.trusted_bots)
    login, kind = found
    return await standing_of(gh, store, settings, issue.repo, login, kind)


def _asked_baton(store: Store, issue: IssueRef) -> tuple[str, str | None] | None:
    """Return who had Baton put the queue label on (`/baton start`): its queueing names them.

    The latest queueing recorded for the issue: one a pause holds, or the one queued.
    """
    text = store.queued_text(issue)
    named = None if text is None else text.held or text.queued
    return (named.by, None) if named is not None and named.by else None


async def refuse_queue_label(
    gh: GitHubClient, store: Store, issue: IssueRef, label: str, standing: Standing
) -> None:
    """Undo a queue label put on by someone who may not queue: label off, one comment, logged."""
    log.warning("%s: not starting: %s added `%s`; taking it off", issue, standing, label)
    await swap_labels(gh, issue, add=None, remove={label})
    if not store.first_queue_refusal(issue):
        return  # told once already
    try:
        await post_comment(gh, issue, queue_refusal_comment(standing, label))
    except HTTPException:
        store.forget_queue_refusal(issue)  # the next refusal says it
        raise


async def queued_by_a_steerer(
    gh: GitHubClient, store: Store, settings: Settings, issue: IssueRef, queued_by: str | None
) -> str | None:
    """Return who queued the issue if they may; otherwise undo their queue label and say so.

    settings are the repository's: they name the queue label and the role it takes.
    """
    standing = await queuer_standing(gh, store, settings, issue, queued_by)
    if standing.allowed:
        return standing.login
    await refuse_queue_label(gh, store, issue, settings.labels.queue, standing)
    return None
