"""Where an issue's work is fetched from and where its branch is pushed.

By default Baton's branches are the repository's own. In fork mode
(`BATON_PUSH_TO=fork:OWNER`) they live in OWNER's fork of the repository, pushed with the
token of the App's installation on OWNER, and each pull request is opened from there
(`OWNER:branch`). GitHub then treats the agent's code as an outside contributor's: the
repository's workflows run on it with no secrets and a read-only token, behind its
approval for outside contributors, and no workflow of the repository runs on a push.

The fork is made by a person, once (`gh repo fork`): making one takes the Administration
permission, which Baton's App does not ask for on any repository.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bot.domain.resources import Repository
from bot.edges.api import read_fork_of
from bot.edges.git import Workspace
from bot.edges.github import GitHubApp
from bot.ops.settings import Settings


class ForkMissing(Exception):
    """Fork mode is on, and the account holds no fork of the repository the App reaches."""


@dataclass(frozen=True)
class Fork:
    """The fork Baton's branches of one repository are pushed to."""

    full_name: str
    clone_url: str
    installation_id: int

    @property
    def owner(self) -> str:
        """Return the account the fork belongs to."""
        return self.full_name.split("/", 1)[0]


@dataclass(frozen=True)
class Remotes:
    """A repository as Baton's git reaches it: where it fetches, and where it pushes."""

    repo: str
    clone_url: str
    installation_id: int
    fork: Fork | None = None

    def head(self, branch: str) -> str:
        """Name a branch as a pull request's head: `owner:branch` when it is in the fork."""
        return f"{self.fork.owner}:{branch}" if self.fork else branch

    def head_owner(self) -> str:
        """Return the account a pull request's head branch belongs to."""
        return self.fork.owner if self.fork else self.repo.split("/", 1)[0]

    def push_target(self) -> tuple[str, int]:
        """Return the clone URL pushes go to, and the installation whose token opens it."""
        if self.fork is not None:
            return self.fork.clone_url, self.fork.installation_id
        return self.clone_url, self.installation_id

    async def refresh(self, app: GitHubApp, workspace: Workspace) -> Path:
        """Fetch the repository into its mirror, and Baton's branches from the fork."""
        token = await app.installation_token(self.installation_id)
        fork = None
        if self.fork is not None:
            fork = (self.fork.clone_url, await app.installation_token(self.fork.installation_id))
        return await workspace.refresh_mirror(self.repo, self.clone_url, token, fork)

    async def push(
        self, app: GitHubApp, workspace: Workspace, branch: str, sha: str, expected: str | None
    ) -> None:
        """Push sha to branch where Baton's branches live, with a token minted for it now."""
        url, installation_id = self.push_target()
        token = await app.installation_token(installation_id)
        await workspace.push(self.repo, url, branch, sha, token, expected)


async def remotes_of(
    app: GitHubApp, settings: Settings, repo: Repository, installation_id: int
) -> Remotes:
    """Return where the repository's work is fetched from and pushed to.

    Raises ForkMissing, saying what to do, when fork mode finds no fork to push to.
    """
    remotes = Remotes(repo.full_name, repo.clone_url, installation_id)
    owner = settings.fork_owner
    if owner is None:
        return remotes
    name = f"{owner}/{repo.full_name.split('/', 1)[1]}"
    found = await read_fork_of(app, name, repo.full_name)
    if found is None:
        raise ForkMissing(_missing(repo.full_name, owner, f"{name} is no fork of it"))
    fork, fork_installation = found
    forked = Fork(fork.full_name, fork.clone_url, fork_installation)
    return Remotes(repo.full_name, repo.clone_url, installation_id, forked)


def _missing(repo: str, owner: str, why: str) -> str:
    return (
        f"Baton pushes {repo}'s work to a fork under {owner} (BATON_PUSH_TO=fork:{owner}), "
        f"but {why}. Fork it there, under the same name, with the App installed on {owner}: "
        f"`gh repo fork {repo} --org {owner} --clone=false`."
    )
