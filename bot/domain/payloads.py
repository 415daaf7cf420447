"""The fields each routed webhook's handler reads, checked before the handler runs.

A correctly signed delivery comes from GitHub, but its shape is only what the event's
schema promises. Each routed (event, action) has a model of exactly the fields its
handler reads, strictly typed: an integer is an integer, a string a string, and null
only where GitHub sends null. The web process checks a routed delivery against its
model before any handler runs, so handlers index `event.data` as they are, and every
job argument they take from it has the type its worker expects.

Pure: `payload_problem` reads a dict and returns what is wrong with it, or None.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    FailFast,
    Field,
    ValidationError,
)

from bot.domain.issue_text import github_time


class _Fields(BaseModel):
    # Everything else in the payload is left unread (and unvalidated: it costs nothing).
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


def _not_null(value: object) -> object:
    if value is None:
        raise ValueError("null where GitHub sends an object or leaves the key out")
    return value


Id = Annotated[int, Field(gt=0)]
Sha = Annotated[str, Field(pattern=r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")]  # SHA-1 or SHA-256
# GitHub's owners are letters, digits, - (and _ for managed users); names add `.`.
RepoName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]+/[A-Za-z0-9._-]+$")]


def _a_time(value: str) -> str:
    if github_time(value) is None:  # as the handlers read it: a 13th month is no time
        raise ValueError("not a time GitHub writes")
    return value


# GitHub's times are ISO 8601 with a zone: `2026-12-01T09:00:00Z`.
Timestamp = Annotated[
    str,
    Field(pattern=r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)$"),
    AfterValidator(_a_time),
]
Texts = Annotated[list[str], FailFast()]  # a bad item ends the check: no error per item


class Installation(_Fields):
    id: Id


class Repository(_Fields):
    full_name: RepoName


class Account(_Fields):
    login: str
    type: str


class _Delivery(_Fields):
    """What every routed event carries: the repository, the sender, the App's installation.

    A delivery without an installation came from a repository webhook, not the App: the
    handlers log and drop it.
    """

    repository: Repository
    sender: Account
    installation: Annotated[Installation | None, BeforeValidator(_not_null)] = None


class IssueNumber(_Fields):
    number: Id


class Label(_Fields):
    name: str


class LabeledIssue(IssueNumber):
    title: str
    body: str | None
    updated_at: Timestamp  # when the text was as it is here: the brief works from it
    labels: Annotated[list[Label], FailFast()]


class IssueLabeled(_Delivery):
    issue: LabeledIssue
    label: Label


class IssueEdited(_Delivery):
    issue: LabeledIssue
    changes: dict[str, Any]  # only which fields changed is read


class IssueClosed(_Delivery):
    issue: IssueNumber


class IssueUnlabeled(_Delivery):
    issue: IssueNumber
    label: Label | None = None  # GitHub leaves it out when the label itself was deleted


class Comment(_Fields):
    id: Id
    body: str


class CommentCreated(_Delivery):
    issue: IssueNumber
    comment: Comment


class EditedComment(_Fields):
    body: str


class CommentEdited(_Fields):
    comment: EditedComment


class HeadRepo(_Fields):
    full_name: RepoName


class Head(_Fields):
    ref: str
    repo: HeadRepo | None  # null once a fork the head was in is deleted


class Pull(_Fields):
    number: Id
    head: Head


class ClosedPull(Pull):
    merged: bool


class PullClosed(_Delivery):
    pull_request: ClosedPull


class Review(_Fields):
    id: Id
    state: str
    user: Account
    submitted_at: Timestamp | None = None


class ReviewSubmitted(_Delivery):
    review: Review
    pull_request: Pull


class Suite(_Fields):
    head_sha: Sha
    head_branch: str | None


class SuiteCompleted(_Delivery):
    check_suite: Suite


class RunSuite(_Fields):
    head_branch: str | None


class Run(_Fields):
    head_sha: Sha
    check_suite: RunSuite


class RunCompleted(_Delivery):
    check_run: Run


class RerequestedSuite(_Fields):
    head_sha: Sha


class SuiteRerequested(_Delivery):
    check_suite: RerequestedSuite


class RerequestedRun(_Fields):
    head_sha: Sha


class RunRerequested(_Delivery):
    check_run: RerequestedRun


class Branch(_Fields):
    name: str


class CommitStatus(_Delivery):
    sha: Sha
    state: str
    branches: Annotated[list[Branch], FailFast()]


class PushedCommit(_Fields):
    added: Texts
    modified: Texts
    removed: Texts


class PushedRepository(Repository):
    default_branch: str


class Push(_Delivery):
    repository: PushedRepository
    ref: str
    after: Sha
    deleted: bool
    commits: Annotated[list[PushedCommit], FailFast()]


# Every (event, action) the router sends to a handler; None for events without actions.
PAYLOADS: Mapping[tuple[str, str | None], type[_Fields]] = {
    ("issues", "labeled"): IssueLabeled,
    ("issues", "edited"): IssueEdited,
    ("issues", "closed"): IssueClosed,
    ("issues", "unlabeled"): IssueUnlabeled,
    ("issues", "deleted"): IssueClosed,  # the same fields: which issue
    ("issue_comment", "created"): CommentCreated,
    ("issue_comment", "edited"): CommentEdited,
    ("pull_request", "closed"): PullClosed,
    ("pull_request_review", "submitted"): ReviewSubmitted,
    ("check_suite", "completed"): SuiteCompleted,
    ("check_run", "completed"): RunCompleted,
    ("check_run", "rerequested"): RunRerequested,
    ("check_suite", "rerequested"): SuiteRerequested,
    ("status", None): CommitStatus,
    ("push", None): Push,
}


def model_for(event: str, action: str | None) -> type[_Fields] | None:
    """Return the model of what the handlers of an event and action read, if it is routed."""
    return PAYLOADS.get((event, action)) or PAYLOADS.get((event, None))


def payload_problem(event: str, action: str | None, data: Mapping[str, Any]) -> str | None:
    """Return what makes a routed delivery unusable, naming the field, or None if it is fine."""
    model = model_for(event, action)
    if model is None:
        return "routed, but what its handler reads is not described: it is not read"
    try:
        model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_context=False, include_input=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or "payload"
        more = exc.error_count() - 1
        return f"{field}: {first['msg']}" + (f" (and {more} more)" if more else "")
    return None
