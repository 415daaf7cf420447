"""Classify a run that ended without a green PR, or was held by its audit: class, recovery, why.

Pure: the facts come in, a Classification goes out. The code that performs a
recovery never chooses one; it asks here.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bot.domain.model import Budget, Classification, FailureClass, Recovery

Ending = Literal[
    "agent",  # the agent process ended by itself or at a cap
    "checks-failed",
    "changes-requested",
    "merge-conflict",
    "orphaned",  # the worker died; found later
    "stopped",  # an operator stopped it
    "push-failed",
    "credential-found",  # its commits carry a credential: nothing was pushed
    "pr-failed",
    "infra-failed",  # git, the GitHub API or the disk failed under the run
    "audit-flagged",  # green, and held: the settlement audit flagged its diff
    "interrupted",  # its worker was told to stop (a restart) and handed the run over
]


class RunFacts(BaseModel):
    """What is known about a run that ended: how, what the agent said, what git shows."""

    model_config = ConfigDict(frozen=True)

    ending: Ending
    stop_reason: str | None = Field(default=None, description="the agent adapter's stop reason")
    new_commits: int = Field(default=0, ge=0, description="commits this attempt added")
    resets_at: datetime | None = None
    detail: str = ""


_RULES: dict[FailureClass, tuple[Recovery, Budget]] = {
    FailureClass.CHECKS_FAILED: (Recovery.CONTINUE, Budget.CONTINUATIONS),
    FailureClass.CHANGES_REQUESTED: (Recovery.CONTINUE, Budget.CONTINUATIONS),
    FailureClass.MERGE_CONFLICT: (Recovery.CONTINUE, Budget.CONTINUATIONS),
    FailureClass.TURN_CAP_PROGRESS: (Recovery.CONTINUE, Budget.CONTINUATIONS),
    FailureClass.WALL_CLOCK_CAP_PROGRESS: (Recovery.CONTINUE, Budget.CONTINUATIONS),
    FailureClass.TURN_CAP_SPINNING: (Recovery.ESCALATE, Budget.NOTHING),
    FailureClass.WALL_CLOCK_CAP_SPINNING: (Recovery.ESCALATE, Budget.NOTHING),
    FailureClass.NO_CHANGE: (Recovery.ESCALATE, Budget.NOTHING),
    FailureClass.ORPHAN_CLEAN: (Recovery.REQUEUE, Budget.CONTINUATIONS),
    FailureClass.ORPHAN_PROGRESS: (Recovery.CONTINUE, Budget.CONTINUATIONS),
    FailureClass.AGENT_ERROR: (Recovery.RETRY, Budget.ATTEMPTS),
    FailureClass.PROVIDER_WINDOW: (Recovery.HALT, Budget.REENTRIES),
    FailureClass.PROVIDER_CREDIT: (Recovery.ESCALATE, Budget.NOTHING),
    FailureClass.COST_CAP: (Recovery.ESCALATE, Budget.NOTHING),
    FailureClass.PROVIDER_TRANSIENT: (Recovery.BACKOFF, Budget.NOTHING),
    FailureClass.ENV_START_FAILURE: (Recovery.BACKOFF, Budget.NOTHING),
    FailureClass.DISPATCH_INFRA: (Recovery.BACKOFF, Budget.NOTHING),
    FailureClass.ADMIN_KILL: (Recovery.NONE, Budget.NOTHING),
    FailureClass.AUDIT_FLAGGED: (Recovery.ESCALATE, Budget.NOTHING),
    FailureClass.CREDENTIAL_FOUND: (Recovery.ESCALATE, Budget.NOTHING),
    FailureClass.INTERRUPTED: (Recovery.CONTINUE, Budget.NOTHING),  # a restart is nobody's fault
}

_DIRECT: dict[str, FailureClass] = {
    "checks-failed": FailureClass.CHECKS_FAILED,
    "changes-requested": FailureClass.CHANGES_REQUESTED,
    "merge-conflict": FailureClass.MERGE_CONFLICT,
    "stopped": FailureClass.ADMIN_KILL,
    "push-failed": FailureClass.DISPATCH_INFRA,
    "credential-found": FailureClass.CREDENTIAL_FOUND,
    "pr-failed": FailureClass.DISPATCH_INFRA,
    "infra-failed": FailureClass.DISPATCH_INFRA,
    "audit-flagged": FailureClass.AUDIT_FLAGGED,
    "interrupted": FailureClass.INTERRUPTED,
}

# What the agent adapter said, for the stop reasons that do not depend on git facts.
_BY_STOP_REASON: dict[str, FailureClass] = {
    "provider_credit": FailureClass.PROVIDER_CREDIT,
    "auth": FailureClass.PROVIDER_CREDIT,  # waiting cannot fix a revoked key
    "max_budget": FailureClass.COST_CAP,
    "provider_transient": FailureClass.PROVIDER_TRANSIENT,
    "cli_missing": FailureClass.ENV_START_FAILURE,
    "cli_usage_error": FailureClass.ENV_START_FAILURE,
    "setup_failed": FailureClass.ENV_START_FAILURE,  # often a registry or network hiccup
    "cancelled": FailureClass.ADMIN_KILL,
}


def classify(facts: RunFacts) -> Classification:
    """Return the class of a run that ended without a green PR, and its recovery."""
    failure_class = _failure_class(facts)
    recovery, charged_to = _RULES[failure_class]
    return Classification(
        failure_class=failure_class,
        recovery=recovery,
        charged_to=charged_to,
        evidence=_evidence(failure_class, facts),
    )


def _failure_class(facts: RunFacts) -> FailureClass:
    if facts.ending in _DIRECT:
        return _DIRECT[facts.ending]
    progress = facts.new_commits > 0
    if facts.ending == "orphaned":
        return FailureClass.ORPHAN_PROGRESS if progress else FailureClass.ORPHAN_CLEAN
    reason = facts.stop_reason
    if reason == "completed":
        if progress:
            raise ValueError("a run that completed with commits is a success, not a failure")
        return FailureClass.NO_CHANGE
    if reason == "max_turns":
        return FailureClass.TURN_CAP_PROGRESS if progress else FailureClass.TURN_CAP_SPINNING
    if reason == "wall_clock":
        return (
            FailureClass.WALL_CLOCK_CAP_PROGRESS
            if progress
            else FailureClass.WALL_CLOCK_CAP_SPINNING
        )
    if reason == "provider_window":
        # A window without a reset time cannot be waited out: fail closed.
        return FailureClass.PROVIDER_WINDOW if facts.resets_at else FailureClass.PROVIDER_CREDIT
    if reason is not None and reason in _BY_STOP_REASON:
        return _BY_STOP_REASON[reason]
    return FailureClass.AGENT_ERROR  # no_result, cli_error, resume_miss, or anything unknown


def _evidence(failure_class: FailureClass, facts: RunFacts) -> str:
    parts = [f"ended: {facts.ending}"]
    if facts.stop_reason:
        parts.append(f"agent stop reason: {facts.stop_reason}")
    if facts.ending in ("agent", "orphaned"):
        parts.append(f"new commits: {facts.new_commits}")
    if failure_class is FailureClass.PROVIDER_WINDOW and facts.resets_at:
        parts.append(f"window resets at {facts.resets_at.isoformat()}")
    if facts.detail:
        parts.append(facts.detail)
    return "; ".join(parts)
