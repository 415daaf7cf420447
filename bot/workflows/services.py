"""What every workflow is handed by its process: settings, state, the queues, the workspace."""

from __future__ import annotations

from dataclasses import dataclass

from bot.agents.jail import Jails, jails_for
from bot.edges.git import Git, Identity, Workspace
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from bot.ops.settings import Settings


@dataclass(frozen=True)
class Services:
    """What a job needs from its process: settings, state, and the queues."""

    settings: Settings
    store: Store
    dispatch: Dispatcher

    @property
    def workspace(self) -> Workspace:
        """Return the mirrors and worktrees under the data directory."""
        settings, store = self.settings, self.store
        identity = Identity.of(
            settings.git_author_name,
            settings.git_author_email,
            settings.bot_login or store.bot_login(),
            store.bot_user_id(),
            settings.github_api_url,
        )
        return Workspace(Git(identity), self.settings.data_dir, self.jails)

    @property
    def jails(self) -> Jails:
        """Return the builder of this worker's agent jails."""
        return jails_for(self.settings)
