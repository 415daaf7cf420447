"""What GitHub does when a maintainer deletes or transfers an issue, renames or deletes a
repository, or suspends or removes an App's installation: the state it leaves and the
webhooks it sends (to an App subscribed to `issues`; `installation` events always go).
"""

from __future__ import annotations

import os
import shutil

from bot.sandbox import events
from bot.sandbox.hub import Hub
from bot.sandbox.rest import custom_invalid, name_taken
from bot.sandbox.state import GoneIssue, Installation, Issue, Repo, utc_now


def delete_issue(hub: Hub, repo: Repo, issue: Issue, sender: str) -> None:
    """Delete an issue: its number answers 410 Gone from now on; `issues.deleted`."""
    if issue.pull is not None:
        raise custom_invalid("Issue", "Pull requests cannot be deleted.")
    rendered = hub.render.issue(repo, issue)
    del repo.issues[issue.number]
    repo.gone_issues[issue.number] = GoneIssue()
    repo.updated_at = utc_now()
    hub.emit(repo, "issues", sender, {"issue": rendered}, "deleted")


async def transfer_issue(hub: Hub, repo: Repo, issue: Issue, target: Repo, sender: str) -> Issue:
    """Move an issue to another repository of the same owner, where it gets a new number.

    Its comments go with it, and the labels the target has by the same name; the old
    number redirects to the new one. The source repository gets `issues.transferred`, the
    target `issues.opened`.
    """
    if issue.pull is not None:
        raise custom_invalid("Issue", "Pull requests cannot be transferred.")
    if target.owner != repo.owner or target.id == repo.id:
        raise custom_invalid("Issue", "Issues move only to another repository of the owner.")
    moved = issue.model_copy(
        deep=True,
        update={
            "id": hub.state.next_id(),
            "number": target.next_number(),
            "labels": [lb.name for name in issue.labels if (lb := target.label(name))],
        },
    )
    old = hub.render.issue(repo, issue)
    del repo.issues[issue.number]
    repo.gone_issues[issue.number] = GoneIssue(repository_id=target.id, number=moved.number)
    target.issues[moved.number] = moved
    events.touch(target, moved)
    repo.updated_at = moved.updated_at
    changes = {
        "new_issue": hub.render.issue(target, moved),
        "new_repository": hub.render.repo(target, webhook=True),
    }
    hub.emit(repo, "issues", sender, {"issue": old, "changes": changes}, "transferred")
    await events.announce(hub, target, moved, "opened", sender)
    return moved


async def rename_repo(hub: Hub, repo: Repo, name: str) -> None:
    """Rename a repository; its former name keeps redirecting to it, as on GitHub."""
    taken = hub.repo(repo.owner, name)
    if taken is not None and taken.id != repo.id:
        raise name_taken()
    async with hub.lock(repo):
        old_path, old_name = hub.git(repo).path, repo.full_name
        repo.name = name
        os.replace(old_path, hub.git(repo).path)
    hub.state.renamed[old_name.casefold()] = repo.id
    hub.state.renamed.pop(repo.full_name.casefold(), None)
    repo.updated_at = utc_now()


async def delete_repo(hub: Hub, repo: Repo) -> None:
    """Delete a repository and its git data; every URL of it answers 404 afterwards."""
    async with hub.lock(repo):
        hub.state.repos.remove(repo)
        hub.state.renamed = {old: i for old, i in hub.state.renamed.items() if i != repo.id}
        shutil.rmtree(hub.git(repo).path, ignore_errors=True)


def install(hub: Hub, account: str, sender: str) -> tuple[Installation, bool]:
    """Install Baton's App on an account (a user, made if need be): `installation.created`
    the first time; return the installation and whether it is new."""
    hub.user(account)
    found = hub.installation(account)
    if found is not None:
        return found, False
    inst = hub.ensure_installation(account)
    hub.user(sender)
    hub.emit_installation(inst, "created", sender)
    return inst, True


def suspend(hub: Hub, inst: Installation, sender: str) -> None:
    """Suspend an installation: its tokens stop working; `installation.suspend`."""
    if inst.suspended_at is None:
        inst.suspended_at, inst.suspended_by = utc_now(), sender
        hub.user(sender)
        hub.emit_installation(inst, "suspend", sender)


def unsuspend(hub: Hub, inst: Installation, sender: str) -> None:
    """Lift an installation's suspension; `installation.unsuspend`."""
    if inst.suspended_at is not None:
        inst.suspended_at, inst.suspended_by = None, None
        hub.emit_installation(inst, "unsuspend", sender)


def uninstall(hub: Hub, inst: Installation, sender: str) -> None:
    """Remove the App from an account: the installation and its tokens are gone."""
    hub.state.installations.remove(inst)
    hub.state.tokens = {
        key: tok for key, tok in hub.state.tokens.items() if tok.installation_id != inst.id
    }
    hub.emit_installation(inst, "deleted", sender)
