"""GitHub's resources as Baton reads them: each REST answer, with only the fields Baton uses.

Pure: bot/edges/api.py validates what GitHub answers into these, and everything past
it reads attributes, never GitHub's JSON. A field GitHub may leave out or send as
null is optional, with the value Baton reads it as then; any field a model does not
name is ignored, so what GitHub adds to an answer changes nothing.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, field_validator


class Resource(BaseModel):
    """One of GitHub's resources, as read: frozen, and blind to the fields it does not name."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class User(Resource):
    """An account: a person, an organization, or a bot (GitHub's simple-user)."""

    login: str
    id: int
    type: str | None = None  # `User`, `Bot`, `Organization`


class Label(Resource):
    """A label on an issue."""

    name: str


class IssuePullRequest(Resource):
    """What the issue side of a pull request carries: that it carries it is what counts."""


class Issue(Resource):
    """An issue, or the issue side of a pull request."""

    number: int
    title: str
    body: str | None = None
    state: str | None = None  # `open` or `closed`
    labels: tuple[Label, ...] = ()
    user: User | None = None
    pull_request: IssuePullRequest | None = None
    repository_url: str = ""  # the repository it lives in now: a transfer moves it

    @property
    def label_names(self) -> set[str]:
        """Return the names of the labels the issue carries."""
        return {label.name for label in self.labels}

    @property
    def is_pull_request(self) -> bool:
        """Tell whether this is a pull request's issue side, not an issue."""
        return self.pull_request is not None


class IssueComment(Resource):
    """A comment on an issue or on a pull request's conversation."""

    id: int
    user: User
    body: str | None = None
    html_url: str | None = None


class IssueEvent(Resource):
    """One thing that happened to an issue: a label added or taken off, a close."""

    event: str | None = None  # `labeled`, `unlabeled`, `closed`, ...
    label: Label | None = None
    actor: User | None = None


class RepositoryName(Resource):
    """A repository as another one names it: a fork's parent, say."""

    full_name: str


class Repository(Resource):
    """A repository: its name, the branch its work lands on, where git fetches it from."""

    full_name: str
    default_branch: str
    clone_url: str


class Forked(Repository):
    """A repository that may be a fork: parent names the repository it was made from."""

    parent: RepositoryName | None = None


class CollaboratorPermission(Resource):
    """A person's permission on a repository; role_name names a custom role's own name."""

    permission: str | None = None
    role_name: str | None = None


class ContentFile(Resource):
    """A file in a repository at a ref: its blob's sha and its bytes, base64-encoded."""

    sha: str
    content: str = ""


class ContentEntry(Resource):
    """One entry of a directory of a repository, as its contents listing names it."""

    name: str
    path: str
    type: str  # file, dir, symlink or submodule


class BranchRef(Resource):
    """One end of a pull request: the branch it comes from or goes to, and its tip."""

    ref: str
    sha: str | None = None


class PullRequest(Resource):
    """A pull request."""

    number: int
    url: str  # its API address
    html_url: str
    state: str | None = None  # `open` or `closed`
    merged: bool | None = None  # not in a list's entries
    head: BranchRef
    body: str | None = None
    # Whether its head merges into its base: null while GitHub computes it in the
    # background (and in a list's entries), then true or false.
    mergeable: bool | None = None
    # `clean`, `dirty` (conflicts), `behind`, `blocked`, `unstable`, `draft`, `has_hooks`,
    # or `unknown` while mergeable is null.
    mergeable_state: str | None = None
    node_id: str | None = None  # its GraphQL id, which GraphQL's mutations name it by
    draft: bool | None = None


DiffStatus = Literal["added", "removed", "modified", "renamed", "copied", "changed", "unchanged"]


class DiffFile(Resource):
    """One file of a pull request's diff, as GitHub lists it."""

    filename: str
    status: DiffStatus = "modified"
    previous_filename: str | None = None
    additions: int = 0
    deletions: int = 0
    patch: str | None = None  # GitHub leaves it out for binary files and very large diffs

    @field_validator("additions", "deletions", mode="before")
    @classmethod
    def _counted(cls, value: object) -> object:
        return value or 0  # a count GitHub sends as null is none


class Review(Resource):
    """A review of a pull request."""

    id: int
    user: User | None = None
    body: str | None = None
    state: str | None = None  # `CHANGES_REQUESTED`, `APPROVED`, `COMMENTED`, ...
    commit_id: str | None = None  # the head it reviewed
    submitted_at: str | None = None


class ReviewComment(Resource):
    """A comment on a line of a pull request's diff, part of a review."""

    path: str
    line: int | None = None
    body: str
    pull_request_review_id: int | None = None


class App(Resource):
    """A GitHub App: Baton itself, or the one that reported a check suite."""

    id: int
    name: str
    html_url: str
    slug: str | None = None  # a check suite's app may leave it out


class Installation(Resource):
    """An installation of the App on an account."""

    id: int
    account: User | None = None
    suspended_at: str | None = None


class InstallationToken(Resource):
    """A minted installation token, as far as Baton reads it: what it may do."""

    permissions: dict[str, str] = {}


class CheckSuite(Resource):
    """A check suite on a head: one app's verdict over its check runs."""

    status: str | None = None  # `queued`, `in_progress`, `completed`
    conclusion: str | None = None
    latest_check_runs_count: int | None = None
    app: App | None = None


class CheckRunOutput(Resource):
    """What a check run says about itself."""

    title: str | None = None
    summary: str | None = None
    text: str | None = None


class CheckRun(Resource):
    """One check run on a head."""

    id: int = 0
    name: str
    status: str | None = None
    conclusion: str | None = None
    output: CheckRunOutput | None = None
    app: App | None = None  # who reported it: Baton's own is told apart by its id


class CommitStatus(Resource):
    """A head's latest commit status of one context."""

    context: str
    state: str  # `error`, `failure`, `pending`, `success`
    description: str | None = None


class CombinedStatus(Resource):
    """A head's commit statuses, every page of them, with their combined state."""

    state: str
    total_count: int
    statuses: tuple[CommitStatus, ...] = ()
