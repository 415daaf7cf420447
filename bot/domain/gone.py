"""What GitHub's answers say about an item that is no longer where Baton left it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.domain.model import IssueRef


@dataclass(frozen=True)
class Disappearance:
    """Why an item cannot be reached, and whether that ends the work on an issue."""

    why: str
    of_issue: bool  # the issue (or its repository, or the App's access to it) is gone


def disappearance(status: int, message: str) -> Disappearance | None:
    """Read a refusal as GitHub documents them; None for one that says nothing is gone.

    410 is an issue deleted by a maintainer. 404 is an issue or repository that was
    deleted, transferred where the App cannot read, or removed from the installation,
    or an installation that was uninstalled. A 403 that is not a rate limit is an
    installation that was suspended or lost a permission: it may come back, so the
    work it concerns is left, not ended. A 401 is a token GitHub no longer honours.
    """
    text = message.lower()
    if status == 410:
        return Disappearance("was deleted", of_issue=True)
    if status == 404:
        return Disappearance(
            "is gone (deleted, transferred, or out of the App's reach)", of_issue=True
        )
    if status == 403 and "rate limit" not in text:
        why = "is suspended" if "suspended" in text else "refused the App access"
        return Disappearance(f"the installation {why}", of_issue=False)
    if status == 401:
        return Disappearance("the installation's token was refused", of_issue=False)
    return None


def moved_elsewhere(issue: IssueRef, data: dict[str, Any]) -> str | None:
    """Return where an issue read now lives, when GitHub redirected the read elsewhere.

    A transferred issue, or one whose repository was renamed, answers its old
    address with a redirect to the new one.
    """
    repository_url = str(data.get("repository_url", ""))
    here = repository_url.lower().endswith(f"/repos/{issue.repo.lower()}")
    if here and data.get("number") == issue.number:
        return None
    where = "/".join(repository_url.rstrip("/").split("/")[-2:]) or "another repository"
    return f"{where}#{data.get('number')}"
