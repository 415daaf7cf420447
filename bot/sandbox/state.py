"""The sandbox's data model, persisted as one JSON document in the data directory."""

from __future__ import annotations

import base64
import datetime
import os
import pathlib
import secrets
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field

IssueState = Literal["open", "closed"]
UserType = Literal["User", "Bot", "Organization"]
# An account's GitHub plan; what a private repository may use depends on it.
Plan = Literal["free", "pro", "team", "enterprise"]


def utc_now() -> str:
    """Return the current UTC time in GitHub's ISO 8601 form."""
    return iso(datetime.datetime.now(datetime.UTC))


def iso(moment: datetime.datetime) -> str:
    """Format an aware datetime the way GitHub does (seconds, trailing Z)."""
    return moment.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(text: str) -> datetime.datetime:
    """Parse an ISO 8601 timestamp as written by `iso`."""
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def node_id(kind: str, ident: int) -> str:
    """Build a GraphQL node id in GitHub's legacy format."""
    return base64.b64encode(f"0{len(kind)}:{kind}{ident}".encode()).decode()


class User(BaseModel):
    """An account: a person, a bot or an organization."""

    login: str
    id: int
    type: UserType = "User"
    plan: Plan = "free"  # every account starts on GitHub Free


class Installation(BaseModel):
    """An App's installation on one account, covering all its repositories."""

    id: int
    account: str
    created_at: str
    app_id: int = 1  # auth.APP_ID, the sandbox's own Baton App
    suspended_at: str | None = None
    suspended_by: str | None = None


class Token(BaseModel):
    """An installation access token, holding the permissions it was minted with."""

    token: str
    installation_id: int
    expires_at: str
    repository_ids: list[int] | None = None
    # None only in state written before tokens recorded their permissions: the App's own.
    permissions: dict[str, str] | None = None
    minted_at: float = 0.0  # epoch seconds (0: written before tokens recorded it)


class RegisteredApp(BaseModel):
    """An App registered from a manifest; GitHub keeps its public key, never the private one."""

    id: int
    slug: str
    name: str
    owner: str
    description: str | None
    url: str
    hook_url: str | None
    permissions: dict[str, str]
    events: list[str]
    public_key: str
    webhook_secret: str
    client_id: str
    client_secret: str
    created_at: str


class ManifestCode(BaseModel):
    """A manifest confirmed on the registration page, waiting for its code's conversion."""

    code: str
    owner: str
    manifest: dict[str, Any]
    expires_at: str


class Label(BaseModel):
    """A repository label."""

    id: int
    name: str
    color: str = "ededed"
    description: str | None = None
    default: bool = False


# GitHub's default labels for a new repository.
DEFAULT_LABELS = [
    ("bug", "d73a4a", "Something isn't working"),
    ("documentation", "0075ca", "Improvements or additions to documentation"),
    ("duplicate", "cfd3d7", "This issue or pull request already exists"),
    ("enhancement", "a2eeef", "New feature or request"),
    ("good first issue", "7057ff", "Good for newcomers"),
    ("help wanted", "008672", "Extra attention is needed"),
    ("invalid", "e4e669", "This doesn't seem right"),
    ("question", "d876e3", "Further information is requested"),
    ("wontfix", "ffffff", "This will not be worked on"),
]


def default_labels(next_id: Callable[[], int]) -> list[Label]:
    """Return GitHub's default labels, as a new repository (or fork) gets them."""
    return [
        Label(id=next_id(), name=n, color=c, description=d, default=True)
        for n, c, d in DEFAULT_LABELS
    ]


class Reaction(BaseModel):
    """A reaction on an issue comment."""

    id: int
    user: str
    content: str
    created_at: str


class IssueEvent(BaseModel):
    """Something that happened to an issue, as its events list shows it (`labeled`, ...)."""

    id: int
    actor: str
    event: str
    created_at: str
    label: str | None = None  # the label of a `labeled` or `unlabeled` event


class Comment(BaseModel):
    """An issue (or pull request conversation) comment."""

    id: int
    user: str
    body: str
    created_at: str
    updated_at: str
    reactions: list[Reaction] = Field(default_factory=list)


class ReviewComment(BaseModel):
    """A comment on a line of a pull request's diff."""

    id: int
    review_id: int
    user: str
    path: str
    line: int
    side: str
    body: str
    commit_id: str
    diff_hunk: str
    created_at: str


class Review(BaseModel):
    """A pull request review."""

    id: int
    user: str
    body: str
    state: str
    commit_id: str
    submitted_at: str | None


class MergeCheck(BaseModel):
    """GitHub's background mergeability job for one pull request: what it compares, its answer."""

    base_sha: str
    head_sha: str
    mergeable: bool | None = None  # None while the job runs


class Pull(BaseModel):
    """The pull-request half of an issue that is a pull request."""

    head_ref: str
    head_sha: str
    base_ref: str
    # The fork the head branch is in; None for a branch of the pull request's own repository.
    head_repo_id: int | None = None
    base_sha: str
    draft: bool = False
    maintainer_can_modify: bool = False
    merged_at: str | None = None
    merge_commit_sha: str | None = None
    merged_by: str | None = None
    merge_check: MergeCheck | None = None
    reviews: list[Review] = Field(default_factory=list)
    review_comments: list[ReviewComment] = Field(default_factory=list)


class GoneIssue(BaseModel):
    """An issue number that no longer holds an issue: deleted, or transferred elsewhere."""

    repository_id: int | None = None  # where a transferred issue went; None: deleted
    number: int | None = None


class Issue(BaseModel):
    """An issue; a pull request is an issue with `pull` set, as on GitHub."""

    id: int
    number: int
    title: str
    body: str | None
    user: str
    state: IssueState = "open"
    state_reason: str | None = None
    labels: list[str] = Field(default_factory=list)
    assignees: list[str] = Field(default_factory=list)
    created_at: str
    updated_at: str
    closed_at: str | None = None
    comments: list[Comment] = Field(default_factory=list)
    events: list[IssueEvent] = Field(default_factory=list)
    pull: Pull | None = None


class CheckOutput(BaseModel):
    """The output block of a check run."""

    title: str | None = None
    summary: str | None = None
    text: str | None = None


class CheckSuite(BaseModel):
    """A check suite: one app's checks of one commit."""

    id: int
    app_id: int
    head_sha: str
    head_branch: str | None
    before: str | None
    after: str | None
    created_at: str
    updated_at: str
    # A re-run was asked of the suite's App: queued, no conclusion, until it reports again.
    requeued: bool = False
    # CI of a fork's pull request: it runs with none of the repository's secrets.
    from_fork: bool = False
    # Its workflows wait for a maintainer's approval: completed as action_required, no runs.
    awaiting_approval: bool = False


class CheckRun(BaseModel):
    """One check inside a check suite."""

    id: int
    suite_id: int
    app_id: int
    name: str
    head_sha: str
    status: str = "queued"
    conclusion: str | None = None
    started_at: str = Field(default_factory=utc_now)
    completed_at: str | None = None
    external_id: str | None = None
    details_url: str | None = None
    output: CheckOutput = Field(default_factory=CheckOutput)


class CommitStatus(BaseModel):
    """A commit status (the older statuses API)."""

    id: int
    sha: str
    state: str
    context: str
    description: str | None
    target_url: str | None
    creator: str
    created_at: str


ForkApproval = Literal[
    "first_time_contributors_new_to_github", "first_time_contributors", "all_external_contributors"
]


class Repo(BaseModel):
    """A repository with everything GitHub keeps about it besides git data."""

    id: int
    owner: str
    name: str
    description: str | None = None
    private: bool = False
    default_branch: str = "main"
    delete_branch_on_merge: bool = False
    created_at: str
    updated_at: str
    pushed_at: str
    labels: list[Label] = Field(default_factory=list)
    issues: dict[int, Issue] = Field(default_factory=dict)
    gone_issues: dict[int, GoneIssue] = Field(default_factory=dict)
    check_suites: list[CheckSuite] = Field(default_factory=list)
    check_runs: list[CheckRun] = Field(default_factory=list)
    statuses: list[CommitStatus] = Field(default_factory=list)
    collaborators: dict[str, str] = Field(default_factory=dict)
    # Actions secrets, by name: what the repository's CI runs get in their environment.
    secrets: dict[str, str] = Field(default_factory=dict)
    # The repository this one is a fork of; None for one that is not a fork.
    parent_id: int | None = None
    # Whose pull requests from forks wait for a maintainer's approval before CI runs
    # ("Approving workflow runs from public forks"): GitHub's default for a public one.
    fork_pr_approval: ForkApproval = "first_time_contributors"

    @property
    def full_name(self) -> str:
        """Return `owner/name`."""
        return f"{self.owner}/{self.name}"

    def label(self, name: str) -> Label | None:
        """Find a label by name, case-insensitively as GitHub does."""
        wanted = name.casefold()
        return next((lb for lb in self.labels if lb.name.casefold() == wanted), None)

    def next_number(self) -> int:
        """Return the next issue/pull request number (one sequence for both, never reused)."""
        return max((*self.issues, *self.gone_issues), default=0) + 1

    def find_comment(self, comment_id: int) -> tuple[Issue, Comment] | None:
        """Find an issue comment and the issue it belongs to."""
        for issue in self.issues.values():
            for comment in issue.comments:
                if comment.id == comment_id:
                    return issue, comment
        return None

    def suite(self, suite_id: int) -> CheckSuite | None:
        """Find a check suite by id."""
        return next((s for s in self.check_suites if s.id == suite_id), None)

    def runs_of(self, suite_id: int) -> list[CheckRun]:
        """Return the check runs of one suite."""
        return [r for r in self.check_runs if r.suite_id == suite_id]


class Secrets(BaseModel):
    """Values generated at first start and reused on every restart."""

    webhook_secret: str = Field(default_factory=lambda: secrets.token_hex(20))
    admin_token: str = Field(default_factory=lambda: "ghp_" + secrets.token_hex(18))
    created_at: str = Field(default_factory=utc_now)


class State(BaseModel):
    """Everything the sandbox knows, apart from git objects and webhook bodies."""

    secrets: Secrets = Field(default_factory=Secrets)
    last_id: int = 0
    users: dict[str, User] = Field(default_factory=dict)
    installations: list[Installation] = Field(default_factory=list)
    last_installation_id: int = 0
    repos: list[Repo] = Field(default_factory=list)
    # Former `owner/name` (casefolded) of renamed repositories -> the repository's id.
    renamed: dict[str, int] = Field(default_factory=dict)
    tokens: dict[str, Token] = Field(default_factory=dict)
    apps: list[RegisteredApp] = Field(default_factory=list)
    manifest_codes: dict[str, ManifestCode] = Field(default_factory=dict)

    def next_id(self) -> int:
        """Allocate a fresh object id."""
        self.last_id += 1
        return self.last_id

    def next_installation_id(self) -> int:
        """Allocate an installation id (1, 2, ...; never one an uninstalled App had)."""
        self.last_installation_id = max(
            self.last_installation_id, *(i.id for i in self.installations), 0
        )
        self.last_installation_id += 1
        return self.last_installation_id


class StateFile:
    """Load and atomically save the state document."""

    def __init__(self, path: pathlib.Path) -> None:
        self.path = path

    def load(self) -> State:
        """Read the state, or start a fresh one."""
        if self.path.exists():
            return State.model_validate_json(self.path.read_bytes())
        return State()

    def save(self, state: State) -> None:
        """Write the state through a temporary file and a rename."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_bytes(state.model_dump_json().encode())
        os.replace(tmp, self.path)
