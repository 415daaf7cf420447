"""The domain model: issues, runs and what an agent reports."""

from __future__ import annotations

import enum
import itertools
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, field_validator, model_validator

_REPO_NAME = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")

AgentName = Literal["command", "claude", "codex", "aider"]  # the agent adapters Baton has


def utcnow() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(UTC)


class IssueRef(BaseModel):
    """One issue of one repository, reached through one installation."""

    model_config = ConfigDict(frozen=True)

    installation_id: int
    repo: str = Field(pattern=_REPO_NAME.pattern, description="owner/name")
    number: int = Field(gt=0)

    @property
    def owner(self) -> str:
        """Return the repository's owner."""
        return self.repo.split("/", 1)[0]

    @property
    def name(self) -> str:
        """Return the repository's name without its owner."""
        return self.repo.split("/", 1)[1]

    def __str__(self) -> str:
        return f"{self.repo}#{self.number}"


class RunState(enum.StrEnum):
    """Where one attempt at an issue stands."""

    CLAIMED = "claimed"
    PROVISIONING = "provisioning"
    RUNNING = "running"
    PUSHED_PENDING = "pushed-pending"
    PUSHED_GREEN = "pushed-green"
    MERGED = "merged"
    CLOSED = "closed"
    FAILED = "failed"
    NO_CHANGE = "no-change"
    KILLED = "killed"
    HALTED = "halted"

    @property
    def is_terminal(self) -> bool:
        """Return whether the run has stopped moving by itself."""
        return self in _TERMINAL

    @property
    def is_live(self) -> bool:
        """Return whether a worker is (or should be) working on the run now."""
        return self in _LIVE


_LIVE = frozenset({RunState.CLAIMED, RunState.PROVISIONING, RunState.RUNNING})
_TERMINAL = frozenset(
    {
        RunState.MERGED,
        RunState.CLOSED,
        RunState.FAILED,
        RunState.NO_CHANGE,
        RunState.KILLED,
        RunState.HALTED,
    }
)

# What the reconcile sweep looks at: runs a worker holds, pushes waiting for their
# checks, and green PRs waiting for a merge, a close or a review whose webhook may be
# lost (bot/domain/plans/sweep.py), indexed as they are written (bot/edges/store/runs.py).
SWEPT_STATES = _LIVE | {RunState.PUSHED_PENDING, RunState.PUSHED_GREEN}

# Its pull request merged or closed, or its issue gone, ends a run wherever it stands.
_ENDED_BY_ITS_PULL = frozenset({RunState.MERGED, RunState.CLOSED})

# Every move Baton makes of a run: from each state, the states it may go to next. A retry,
# a continuation or a resumption is the next attempt, a new run that starts claimed: no run
# is worked on again once its agent stopped. docs/architecture.md draws this table
# (`lifecycle_diagram`).
TRANSITIONS: Mapping[RunState, frozenset[RunState]] = MappingProxyType(
    {
        # Provisioning starts; an error of git, GitHub or the agent's setup fails the attempt,
        # and so does its worker dying (the sweep finds the run orphaned).
        RunState.CLAIMED: frozenset({RunState.PROVISIONING, RunState.FAILED}) | _ENDED_BY_ITS_PULL,
        RunState.PROVISIONING: frozenset({RunState.RUNNING, RunState.FAILED}) | _ENDED_BY_ITS_PULL,
        # Pushed with its pull request open; failed (the agent, the push, the pull request, or
        # its worker stopping); stopped by a maintainer; finished with nothing changed.
        RunState.RUNNING: frozenset(
            {RunState.PUSHED_PENDING, RunState.FAILED, RunState.KILLED, RunState.NO_CHANGE}
        )
        | _ENDED_BY_ITS_PULL,
        # Its head's checks settle it green or red; a review requests changes. A pull request
        # GitHub put off opens later, and the head waits for its checks again from then;
        # one GitHub kept refusing fails the attempt.
        RunState.PUSHED_PENDING: frozenset(
            {RunState.PUSHED_PENDING, RunState.PUSHED_GREEN, RunState.FAILED}
        )
        | _ENDED_BY_ITS_PULL,
        # A review requests changes, its settlement audit holds it, or restacking it onto
        # the link below conflicts; restacked cleanly, its new head waits for checks again.
        RunState.PUSHED_GREEN: frozenset({RunState.PUSHED_PENDING, RunState.FAILED})
        | _ENDED_BY_ITS_PULL,
        # A provider's usage window halts a failed run until it reopens; a link holding
        # pushed work is restacked whatever ended it.
        RunState.FAILED: frozenset({RunState.HALTED, RunState.PUSHED_PENDING}) | _ENDED_BY_ITS_PULL,
        RunState.KILLED: frozenset({RunState.PUSHED_PENDING}) | _ENDED_BY_ITS_PULL,
        RunState.HALTED: frozenset({RunState.PUSHED_PENDING}) | _ENDED_BY_ITS_PULL,
        RunState.NO_CHANGE: _ENDED_BY_ITS_PULL,
        RunState.MERGED: frozenset(),
        RunState.CLOSED: frozenset(),
    }
)


def lifecycle_diagram() -> str:
    """Return TRANSITIONS as a Mermaid state diagram: every run starts claimed (`Run.claimed`)."""
    lines = ["stateDiagram-v2"]
    lines += [f'    state "{state.value}" as {state.name}' for state in RunState]
    lines.append(f"    [*] --> {RunState.CLAIMED.name}")
    for state in RunState:
        lines += [f"    {state.name} --> {to.name}" for to in RunState if to in TRANSITIONS[state]]
    lines += [f"    {state.name} --> [*]" for state in RunState if not TRANSITIONS[state]]
    return "\n".join(lines) + "\n"


class FailureClass(enum.StrEnum):
    """Why a run ended other than green: each class names exactly one recovery."""

    CHECKS_FAILED = "checks-failed"
    CHANGES_REQUESTED = "changes-requested"
    MERGE_CONFLICT = "merge-conflict"
    TURN_CAP_PROGRESS = "turn-cap-progress"
    TURN_CAP_SPINNING = "turn-cap-spinning"
    WALL_CLOCK_CAP_PROGRESS = "wall-clock-cap-progress"
    WALL_CLOCK_CAP_SPINNING = "wall-clock-cap-spinning"
    NO_CHANGE = "no-change"
    ORPHAN_CLEAN = "orphan-clean"
    ORPHAN_PROGRESS = "orphan-progress"
    AGENT_ERROR = "agent-error"
    PROVIDER_WINDOW = "provider-window"
    PROVIDER_CREDIT = "provider-credit"
    PROVIDER_TRANSIENT = "provider-transient"
    ENV_START_FAILURE = "env-start-failure"
    DISPATCH_INFRA = "dispatch-infra"
    ADMIN_KILL = "admin-kill"
    COST_CAP = "cost-cap"  # the agent stopped at its spending cap
    AUDIT_FLAGGED = "audit-flagged"  # green, but held: the settlement audit flagged its diff
    CREDENTIAL_FOUND = "credential-found"  # its commits carry a credential: nothing was pushed
    INTERRUPTED = "interrupted"  # its worker was told to stop (a restart) and handed it over


class Recovery(enum.StrEnum):
    """What Baton does after a run of a class ends."""

    CONTINUE = "continue"  # a continuation on the same branch and PR
    RETRY = "retry"  # a new attempt
    REQUEUE = "requeue"  # back to the queue, unless the operator withdrew the issue
    HALT = "halt"  # wait for the provider's window to reopen
    BACKOFF = "backoff"  # try the same again later, charged to nothing
    ESCALATE = "escalate"  # a human decides
    NONE = "none"


class Budget(enum.StrEnum):
    """What a recovery is charged to."""

    CONTINUATIONS = "continuations"
    ATTEMPTS = "attempts"
    REENTRIES = "reentries"
    NOTHING = "nothing"


class Classification(BaseModel):
    """A terminal run's class, the one recovery it names, and why."""

    model_config = ConfigDict(frozen=True)

    failure_class: FailureClass
    recovery: Recovery
    charged_to: Budget
    evidence: str


class AuditKind(enum.StrEnum):
    """What the settlement audit saw in a green pull request's diff that a reviewer must see."""

    TEST_FILE_DELETED = "test-file-deleted"  # deleted, emptied, or renamed out of the tests
    TEST_REMOVED = "test-removed"  # a test function or case
    SKIP_ADDED = "skip-added"  # a skip, an expected failure, or a focus that skips the rest
    ASSERTION_REMOVED = "assertion-removed"
    ASSERTION_WEAKENED = "assertion-weakened"
    CI_CHANGED = "ci-changed"
    THRESHOLD_LOWERED = "threshold-lowered"  # coverage or lint
    OUT_OF_SCOPE = "out-of-scope"  # a file the issue does not mention
    DIFF_UNREADABLE = "diff-unreadable"  # GitHub gave no patch, or the files could not be read
    DIFF_TRUNCATED = "diff-truncated"  # GitHub's list of files stops at its cap


class AuditFinding(BaseModel):
    """One thing the settlement audit flagged: where, and what it saw there."""

    model_config = ConfigDict(frozen=True)

    kind: AuditKind
    path: str = Field(description="the file; empty for the pull request as a whole")
    line: int | None = Field(default=None, description="the line the finding is on")
    side: Literal["base", "head"] = Field(
        default="head", description="whose numbering line is in: the base's (removed) or the head's"
    )
    note: str = Field(description="what Baton saw, in its own words")
    text: str = Field(default="", description="the diff's own line there, cut to one line")
    was: str = Field(default="", description="the line it replaced, for a loosened assertion")


class StateChange(BaseModel):
    """One step of a run's history."""

    state: RunState
    at: AwareDatetime
    note: str | None = None


RESULT_TEXT_LIMIT = 200_000  # characters of an agent's report kept with its run
DENIALS_KEPT = 100  # the first this many refused tool calls are kept with a run
DENIAL_CHARS = 200  # of each one


def bounded_denials(lines: Iterable[str]) -> tuple[str, ...]:
    """Return the first refused tool calls an agent CLI reported, each cut to one short line."""
    return tuple(
        line if len(line) <= DENIAL_CHARS else line[: DENIAL_CHARS - 1] + "…"
        for line in itertools.islice(lines, DENIALS_KEPT)
    )


# The longest a provider keeps an account's window shut: a week, and an hour of clocks
# apart (the CLIs' readers hold a five-hour window to five hours, bot/agents/stream.py).
LONGEST_WINDOW = timedelta(days=7, hours=1)
# The most one run counts for in the spend ledger when its issue has no cost cap
# (BATON_MAX_COST_USD): more than an hour of the dearest model, far less than a forged
# report could claim.
MAX_RUN_COST_USD = 200.0


class AgentResult(BaseModel):
    """What one agent process did, normalized across agent CLIs."""

    agent: str
    status: Literal["success", "failed"]
    stop_reason: Literal[
        "completed",
        "max_turns",
        "max_budget",
        "wall_clock",
        "cancelled",
        "provider_window",
        "provider_credit",
        "provider_transient",
        "auth",
        "cli_missing",
        "cli_usage_error",
        "setup_failed",
        "resume_miss",
        "no_result",
        "cli_error",
    ]
    failure_class: str | None = None
    turns: int | None = None
    cost_usd: float | None = None
    session_id: str | None = None
    resets_at: AwareDatetime | None = None
    exit_code: int | None = None
    started_at: AwareDatetime
    ended_at: AwareDatetime
    result_text: str | None = None
    evidence: list[str] = Field(default_factory=list)
    transcript_path: Path
    stderr_path: Path
    refused_hosts: list[str] = Field(
        default_factory=list, description="host:port the agent's sandbox refused to reach"
    )
    denials: list[str] = Field(
        default_factory=list,
        description="tool calls the agent's CLI refused it (a shell command, a file write), "
        "one line each",
    )

    @field_validator("result_text")
    @classmethod
    def _bounded_text(cls, text: str | None) -> str | None:
        # The agent's words are kept with the run in Redis and quoted in briefs: bounded.
        if text is None or len(text) <= RESULT_TEXT_LIMIT:
            return text
        cut = len(text) - RESULT_TEXT_LIMIT
        return f"{text[:RESULT_TEXT_LIMIT]}\n[baton: {cut} more characters cut here]"

    @model_validator(mode="after")
    def _credible(self) -> AgentResult:
        """Hold the agent's report of itself to what can be true; say what was set aside.

        The agent reads what strangers write, so its report is a claim: a cost that is
        not a finite, non-negative number counts as none, and a usage window that would
        reopen later than any provider's window can (a week) is no window to wait for.
        """
        cost = self.cost_usd
        if cost is not None and not (math.isfinite(cost) and cost >= 0):
            self.cost_usd = None
            self.evidence.append(f"baton: a reported cost of {cost!r} USD is not credible")
        reset = self.resets_at
        if reset is not None and reset > self.ended_at + LONGEST_WINDOW:
            self.resets_at = None
            self.evidence.append(
                f"baton: a usage window said to reopen at {reset.isoformat()} is not credible"
            )
        return self

    @property
    def duration(self) -> timedelta:
        """Return how long the agent ran."""
        return self.ended_at - self.started_at


class Limits(BaseModel):
    """An issue's budgets."""

    model_config = ConfigDict(frozen=True)

    max_attempts: int = Field(default=3, ge=1, description="failed attempts before escalating")
    max_continuations: int = Field(
        default=3, ge=0, description="continuations on the same branch before escalating"
    )
    max_reentries: int = Field(
        default=2, ge=0, description="resumptions after usage windows before escalating"
    )
    max_backoffs: int = Field(
        default=5, ge=0, description="retries charged to nothing, in a row, before escalating"
    )
    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        description="agent spend since a human queued the issue past which nothing more starts",
    )
    halt_on_usage_window: bool = Field(
        default=True,
        description="wait out a provider's usage window and resume; otherwise escalate",
    )

    @property
    def max_runs(self) -> int:
        """Return how many attempts an issue can see: the first and every continuation."""
        return 1 + self.max_continuations


class Labels(BaseModel):
    """The labels that show where an issue stands with Baton."""

    model_config = ConfigDict(frozen=True)

    queue: str = "baton:queue"
    in_progress: str = "baton:in-progress"
    review: str = "baton:review"
    halted: str = "baton:halted"
    escalated: str = "baton:escalated"
    # Not a state: `<agent_prefix><name>` on an issue picks the agent its runs use.
    agent_prefix: str = "baton:agent:"

    @property
    def states(self) -> frozenset[str]:
        """Return every label Baton uses to show where an issue stands."""
        return frozenset({self.queue, self.in_progress, self.review, self.halted, self.escalated})

    @property
    def active(self) -> frozenset[str]:
        """Return the labels of an issue Baton works on; a human removing them withdraws it."""
        return self.states - {self.escalated}


class Policy(BaseModel):
    """What applied to an attempt, recorded on its run so every later step of it agrees.

    Built from the deployment's settings and the repository's `.github/baton.yml`
    when the attempt is claimed; a changed file applies from the next attempt.
    """

    model_config = ConfigDict(frozen=True)

    limits: Limits = Field(default_factory=lambda: Limits())
    account: str = Field(description="the provider account the agent spends")
    escalation_mentions: tuple[str, ...] = ()
    labels: Labels = Field(default_factory=lambda: Labels())
    required_checks: tuple[str, ...] = Field(
        default=(), description="the checks that decide green; empty: every check on the head"
    )
    no_checks_after_s: float = Field(
        default=120.0,
        description="without required checks, a head with no CI reported this long after "
        "its push is green",
    )


class PendingPull(BaseModel):
    """A pushed head whose pull request GitHub did not let Baton open yet.

    It is tried again at `at`: GitHub asked the installation to wait (a secondary rate
    limit), or answered with a server error. tries counts the server errors only: a
    wait GitHub asked for is no failure.
    """

    model_config = ConfigDict(frozen=True)

    at: AwareDatetime
    draft: bool = Field(description="the repository's file asked for a draft")
    tries: int = Field(default=0, ge=0)
    why: str


class Run(BaseModel):
    """One attempt at one issue, as recorded in Redis."""

    issue: IssueRef
    attempt: int = Field(gt=0)
    state: RunState
    branch: str
    title: str | None = Field(default=None, description="the issue's title when it was claimed")
    history: list[StateChange] = Field(default_factory=list)
    base_branch: str | None = None
    base_sha: str | None = None
    head_sha: str | None = None
    head_owner: str | None = Field(
        default=None, description="the fork's owner, when the branch is pushed to a fork"
    )
    pull_base: str | None = Field(
        default=None,
        description="the branch its pull request targets, when not base_branch: a fork's "
        "chain link's, whose predecessor's branch is in the fork",
    )
    pr_number: int | None = None
    pr_url: str | None = None
    changed_files: list[str] = Field(default_factory=list)
    agent_result: AgentResult | None = None
    agent: str | None = Field(
        default=None, description="the agent the attempt runs (absent on older records)"
    )
    continuation_of: int | None = Field(
        default=None, description="the attempt this one continues on the same branch"
    )
    resume_at: AwareDatetime | None = Field(
        default=None, description="when a run halted by a usage window may go on"
    )
    review_id: int | None = Field(
        default=None, description="the review that requested changes, for the next brief"
    )
    queued_fresh: bool = Field(
        default=True, description="a human queued it (budgets start again from here)"
    )
    failure_class: str | None = None
    reason: str | None = None
    classification: Classification | None = None
    policy: Policy | None = Field(
        default=None, description="the budgets and account that applied (absent: the defaults)"
    )
    escalated: bool = Field(
        default=False, description="Baton handed the issue to a human after this run"
    )
    audit: list[AuditFinding] = Field(
        default_factory=list, description="what the settlement audit flagged when it went green"
    )
    drafts_refused: bool = Field(
        default=False,
        description="GitHub refused its pull request as a draft, so it opened ready for review",
    )
    pull_pending: PendingPull | None = Field(
        default=None, description="its head is pushed and its pull request is still to open"
    )
    recovery_owed: bool = Field(
        default=False,
        description="classified, and the recovery its class names not yet performed in full",
    )

    @property
    def run_id(self) -> str:
        """Return the run's id: the issue and the attempt number."""
        return f"{self.issue}/{self.attempt}"

    @property
    def started_at(self) -> datetime:
        """Return when the run was claimed."""
        return self.history[0].at

    @property
    def ended_at(self) -> datetime | None:
        """Return when the run reached a terminal state, if it has."""
        return self.history[-1].at if self.state.is_terminal else None

    def wall_clock(self, now: datetime) -> timedelta:
        """Return the time from claim to the last settled state (or to now, if live)."""
        last = self.history[-1].at if not self.state.is_live else now
        return last - self.started_at

    def moved(self, state: RunState, at: datetime, note: str | None = None) -> Run:
        """Return a copy of the run moved to a new state, the step recorded."""
        history = [*self.history, StateChange(state=state, at=at, note=note)]
        return self.model_copy(update={"state": state, "history": history})

    @classmethod
    def claimed(cls, issue: IssueRef, attempt: int, branch: str, at: datetime) -> Run:
        """Return a freshly claimed run."""
        return cls(
            issue=issue,
            attempt=attempt,
            branch=branch,
            state=RunState.CLAIMED,
            history=[StateChange(state=RunState.CLAIMED, at=at)],
        )


class Chain(BaseModel):
    """Dependent issues of one repository, run in order as stacked pull requests."""

    model_config = ConfigDict(frozen=True)

    installation_id: int
    repo: str
    head: int = Field(description="the issue that was queued: a tracking issue or the last link")
    tracking: bool = Field(description="head lists the links; otherwise head is the last link")
    links: tuple[int, ...]
    warnings: tuple[str, ...] = ()
    generation: int = Field(default=1, description="how often the chain was queued")

    @property
    def chain_id(self) -> str:
        """Return the chain's id: its repository and the issue that was queued."""
        return f"{self.repo}#{self.head}"

    def issue(self, number: int) -> IssueRef:
        """Return the reference of one of the chain's issues."""
        return IssueRef(installation_id=self.installation_id, repo=self.repo, number=number)
