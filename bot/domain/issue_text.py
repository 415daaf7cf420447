"""The issue's text as a maintainer queued it, and what edits made since do to it.

Pure: the record, how a queueing and an edit change it, and the lines the status
comment gives about it. Every attempt's brief reads the record's text, never the
issue as it stands, so a change its author makes after a maintainer queued it does
not reach the agent. An edit by someone who may steer Baton is taken in; anyone
else's is noted on the status comment, and a maintainer can queue the issue again.

Times are GitHub's, from the events (a label's or an edit's `updated_at`; a text
Baton reads itself is stamped with its own clock), so an edit whose job runs before
the queueing's is still judged against it: the record keeps edits that arrive
first, and the queueing keeps those made at or after it.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Literal, cast, get_args

from pydantic import AwareDatetime, BaseModel, ConfigDict

BODY_CAP = 65_536  # characters of a body kept: GitHub's own limit on an issue's body
OTHERS_KEPT = 20  # edits not taken in that a record keeps (the latest), for its notes

How = Literal["label", "chain", "command", "sweep", "claim"]
_KNOWN_TIME: tuple[How, ...] = ("label", "chain", "command")  # queueings whose time is known
TextField = Literal["title", "body"]


class Snapshot(BaseModel):
    """The issue's title and body when it was queued."""

    model_config = ConfigDict(frozen=True)

    title: str
    body: str
    at: AwareDatetime  # when it was queued: GitHub's time of the label event, or of the read
    by: str | None = None  # who queued it, where known
    # label: from the label event; chain: read when its tracking issue was queued;
    # command: read when a steerer's `/baton start` queued it; sweep: read by the sweep,
    # its label event lost; claim: read when an attempt found none.
    how: How


class Edit(BaseModel):
    """One edit of the issue's title or body after it was queued."""

    model_config = ConfigDict(frozen=True)

    at: AwareDatetime  # GitHub's time of the edit
    by: str
    delivery: str  # the webhook delivery that told of it: an edit is recorded once
    changed: tuple[TextField, ...]
    taken: bool  # made by someone who may steer Baton: the brief uses it
    title: str | None = None  # what a taken edit changed the title to
    body: str | None = None  # what a taken edit changed the body to


class IssueText(BaseModel):
    """What Baton keeps of an issue's text: as queued, and the edits since."""

    model_config = ConfigDict(frozen=True)

    queued: Snapshot | None = None  # None while only an edit that arrived first is known
    edits: tuple[Edit, ...] = ()
    held: Snapshot | None = None  # a queueing whose start a paused repository holds

    def since_queued(self) -> list[Edit]:
        """Return the edits made at or after the queueing, oldest first."""
        if self.queued is None:
            return []
        after = self.queued.at
        return sorted((e for e in self.edits if e.at >= after), key=lambda e: e.at)

    @property
    def title(self) -> str:
        """Return the title the brief uses: as queued, with a steerer's edits taken in."""
        return self._field("title")

    @property
    def body(self) -> str:
        """Return the body the brief uses: as queued, with a steerer's edits taken in."""
        return self._field("body")

    def _field(self, name: TextField) -> str:
        assert self.queued is not None, "no text was queued"
        value = self.queued.title if name == "title" else self.queued.body
        for edit in self.since_queued():
            new = edit.title if name == "title" else edit.body
            if edit.taken and name in edit.changed and new is not None:
                value = new
        return value


def snapshot(title: str, body: str | None, at: datetime, by: str | None, how: How) -> Snapshot:
    """Return the snapshot of an issue queued at at (its body cut to BODY_CAP characters)."""
    return Snapshot(title=title, body=(body or "")[:BODY_CAP], at=at, by=by or None, how=how)


def from_job(title: str, body: str, queued_at: str, how: str, by: str | None) -> Snapshot | None:
    """Return the snapshot a job's arguments carry (see bot/edges/queue.py), or None if none."""
    at = github_time(queued_at)
    if at is None or how not in get_args(How):
        return None
    return snapshot(title, body, at, by, cast(How, how))


def github_time(value: object) -> datetime | None:
    """Return a time as GitHub writes it (ISO 8601, `Z` for UTC), or None if it is not one."""
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo is not None else None


def queue(
    current: IssueText | None, queued: Snapshot, replaces_before: datetime | None = None
) -> IssueText | None:
    """Return the record once the issue is queued with this text; None to keep it as it is.

    A queueing at a known time (a label event, a chain's, a command's) replaces an earlier one,
    never a later or the same one: a repeated or late job changes nothing. A text
    read later (the sweep's, an attempt's that found none) stands for a queueing
    whose time is unknown: it replaces only a snapshot older than replaces_before
    (the issue's latest run started after that one, so it was another queueing).
    Edits made at or after the new queueing are kept; earlier ones are in its text.
    """
    if current is not None and current.queued is not None:
        recorded = current.queued.at
        if queued.how in _KNOWN_TIME:
            if queued.at <= recorded:
                return None
        elif replaces_before is None or recorded >= replaces_before:
            return None
    kept = tuple(e for e in current.edits if e.at >= queued.at) if current else ()
    held = current.held if current and current.held and current.held.at > queued.at else None
    return IssueText(queued=queued, edits=kept, held=held)


def hold(current: IssueText | None, queued: Snapshot) -> IssueText | None:
    """Return the record keeping a queueing whose start is held; None to keep it as it is.

    The start, made when the repository resumes, records it as queue() does; only
    the latest held queueing is kept.
    """
    if current is not None and current.held is not None and current.held.at >= queued.at:
        return None
    return (current or IssueText()).model_copy(update={"held": queued})


def edit(current: IssueText | None, made: Edit, queue_label_on: bool) -> IssueText | None:
    """Return the record once the edit is recorded; None when it changes nothing.

    An edit before the issue was queued is in the queued text already. An edit of
    an issue with no queued text yet is kept only while the issue carries the queue
    label (its queueing's job has not run yet); otherwise Baton does not hold it.
    """
    if not made.changed:
        return None
    if current is not None and any(e.delivery == made.delivery for e in current.edits):
        return None
    if current is None or current.queued is None:
        if not queue_label_on:
            return None
        return IssueText(edits=_compact((*(current.edits if current else ()), made)))
    if made.at < current.queued.at:
        return None
    return current.model_copy(update={"edits": _compact((*current.edits, made))})


def _compact(edits: Iterable[Edit]) -> tuple[Edit, ...]:
    """Return what the text and its notes need: each field's latest taken edit, the latest others.

    However often an issue is edited, its record stays small.
    """
    ordered = sorted(edits, key=lambda e: e.at)
    latest: dict[TextField, Edit] = {}
    for made in ordered:
        if made.taken:
            latest.update(dict.fromkeys(made.changed, made))
    kept = {id(made) for made in latest.values()}
    kept |= {id(made) for made in [e for e in ordered if not e.taken][-OTHERS_KEPT:]}
    return tuple(made for made in ordered if id(made) in kept)


def notes(text: IssueText | None, queue_label: str) -> list[str]:
    """Return the status comment's lines about edits since the issue was queued."""
    if text is None or text.queued is None:
        return []
    since = text.since_queued()
    taken = [e for e in since if e.taken]
    # An edit not taken in still stands unless steerers' later edits set all it changed.
    standing = [
        e
        for e in since
        if not e.taken
        and not set(e.changed) <= {f for t in taken if t.at >= e.at for f in t.changed}
    ]
    lines = []
    if taken:
        lines.append(
            f"The issue was edited since it was queued, by {_logins(taken)}: "
            "the agent works from the edited text."
        )
    if standing:
        lines.append(
            f"The issue was changed since it was queued, by {_logins(standing)}, and those "
            "changes are not taken in: the agent works from the text as a maintainer queued it. "
            f"A maintainer can add `{queue_label}` again to start from the issue as it is now."
        )
    return lines


def _logins(edits: Iterable[Edit]) -> str:
    names = list(dict.fromkeys(e.by for e in edits))
    return ", ".join(f"`{name}`" for name in names)
