"""What a handler receives beside the event: settings, and where its decisions go.

Handlers decide; they do not touch Redis or GitHub. The jobs they choose are
collected here and enqueued by the web process once the delivery is known to
be new.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gidgethub.sansio import Event

from bot.domain.jobs import JobSpec
from bot.domain.model import IssueRef
from bot.ops.settings import Settings

log = logging.getLogger(__name__)


@dataclass
class HandlerContext:
    """One delivery's view of Baton: settings in, chosen jobs out."""

    settings: Settings
    bot_login: Callable[[], str | None]
    repo_queue_labels: Mapping[str, str] = field(default_factory=dict)
    jobs: list[JobSpec] = field(default_factory=list)

    def queue_label(self, repo: str) -> str:
        """Return the label that hands the repository's issues to Baton."""
        return self.repo_queue_labels.get(repo, self.settings.queue_label)

    def enqueue(self, job: JobSpec) -> None:
        """Choose a job to run for this delivery."""
        self.jobs.append(job)

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
        return sender.get("type") == "Bot" and sender.get("login") == self.bot_login()
