"""What every handler receives beside the event: settings, state and the queues."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from gidgethub.sansio import Event

from bot.dispatch import Dispatcher
from bot.model import IssueRef
from bot.settings import Settings
from bot.store import Store

log = logging.getLogger(__name__)


@dataclass
class HandlerContext:
    """The web process's view of Baton: it decides and enqueues, it never calls GitHub."""

    settings: Settings
    store: Store
    dispatch: Dispatcher

    def installation_id(self, event: Event) -> int | None:
        """Return the installation the event came through, or None (logged) if it has none."""
        installation = event.data.get("installation")
        if not isinstance(installation, dict) or "id" not in installation:
            log.warning(
                "delivery %s (%s) names no installation of the App; dropped",
                event.delivery_id,
                event.event,
            )
            return None
        return int(installation["id"])

    def issue_ref(self, event: Event) -> IssueRef | None:
        """Return the issue an issues/issue_comment event is about, if it came via the App."""
        installation_id = self.installation_id(event)
        if installation_id is None:
            return None
        return IssueRef(
            installation_id=installation_id,
            repo=event.data["repository"]["full_name"],
            number=event.data["issue"]["number"],
        )

    def sent_by_baton(self, event: Event) -> bool:
        """Return whether Baton itself caused the event (its own label changes)."""
        sender: dict[str, Any] = event.data.get("sender") or {}
        login = self.settings.bot_login or self.store.bot_login()
        return sender.get("type") == "Bot" and login is not None and sender.get("login") == login
