"""Restacking a chain: the links built on a link follow it when it merges or takes new commits.

Pure. From the link that moved and the runs stacked on it, which branches are
replayed onto what and which pull request is retargeted; from each replay, what it
does to its run (a new head to settle, or a `merge-conflict` continuation); and the
stack manifest each open pull request of the chain carries. bot/workflows/chain.py
does the git and GitHub work, in this order.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict

from bot.domain.chains import STACK_MARKER, LinkStatus, ManifestLink, stack_manifest
from bot.domain.classify import RunFacts
from bot.domain.effects import Conclude, Plan, SettleHeadAt
from bot.domain.model import Run, RunState


class Moved(enum.StrEnum):
    """What happened to the link its successors are built on."""

    TIP = "tip"  # it went green on new commits: they are replayed onto its new tip
    MERGED = "merged"  # it merged: they are replayed onto the branch it merged into


class RestackStep(BaseModel):
    """One link to replay: its own commits, without those it inherited, onto its new base."""

    model_config = ConfigDict(frozen=True)

    run: Run
    pull: int
    base: str  # the branch it is stacked on afterwards: its pull request's base
    retarget: bool  # its pull request's base changes to base before the replay
    built_on: str  # the tip of the branch it was built on: the commits shared with it are dropped


class RestackPlan(BaseModel):
    """The links to replay, in chain order, each onto the new tip of the one before it.

    The first goes onto target's tip; a replay that conflicts ends the plan there.
    """

    model_config = ConfigDict(frozen=True)

    target: str
    steps: tuple[RestackStep, ...] = ()


class Replay(BaseModel):
    """What replaying one link's branch gave: its new tip, or the files it conflicted in."""

    model_config = ConfigDict(frozen=True)

    tip: str | None
    conflicts: tuple[str, ...] = ()


def restack_due(moved: Run, how: Moved, stacked: Sequence[Run]) -> bool:
    """Tell whether the links stacked on the link that moved must follow it.

    stacked are its successors' latest runs, in chain order. Nothing follows a link
    nothing is built on yet, nor a new tip its successor is on already.
    """
    first = stacked[0] if stacked else None
    if first is None or first.base_branch != moved.branch or moved.head_sha is None:
        return False
    return how is Moved.MERGED or first.base_sha != moved.head_sha


def restack_plan(
    moved: Run, how: Moved, stacked: Sequence[Run], default_branch: str
) -> RestackPlan:
    """Return which of the stacked links are replayed onto what, and which PR is retargeted.

    After a merge the first successor goes onto the branch the link merged into (the
    repository's default branch where the run does not name one) and its pull
    request is retargeted there; after a new tip it goes onto the link's own branch.
    Each further link follows the one before it, as long as it is built on it.
    """
    target = (moved.base_branch or default_branch) if how is Moved.MERGED else moved.branch
    if moved.head_sha is None or not restack_due(moved, how, stacked):
        return RestackPlan(target=target)
    steps: list[RestackStep] = []
    base, stacked_on, built_on = target, moved.branch, moved.head_sha
    for run in stacked:
        if run.head_sha is None or run.pr_number is None or run.base_branch != stacked_on:
            break  # not built on the link before it: nothing inherited to drop
        steps.append(
            RestackStep(
                run=run,
                pull=run.pr_number,
                base=base,
                retarget=base != run.base_branch,
                built_on=built_on,
            )
        )
        base, stacked_on, built_on = run.branch, run.branch, run.head_sha
    return RestackPlan(target=target, steps=tuple(steps))


def named_files(files: Sequence[str]) -> str:
    """Return the files a merge or replay conflicted in, as a reason names them."""
    return ", ".join(f"`{name}`" for name in files) or "files git did not name"


def conflict_reason(step: RestackStep, files: Sequence[str]) -> str:
    """Return why a replay failed, naming the files it conflicted in."""
    return f"replaying `{step.run.branch}` onto `{step.base}` conflicted in {named_files(files)}"


def replayed(
    current: Run, step: RestackStep, onto: str, replay: Replay, at: datetime
) -> Run | None:
    """Return the link's run after its replay onto onto, or None if it changes nothing.

    A new tip puts it back to waiting for its checks, stacked on step.base; a conflict
    fails it, unless its end was classified already.
    """
    if replay.tip is None:
        if current.classification is not None:
            return None
        failed = current.moved(RunState.FAILED, at, note="merge conflict")
        reason = conflict_reason(step, replay.conflicts)
        return failed.model_copy(update={"reason": reason, "base_branch": step.base})
    if current.head_sha == replay.tip:
        return None
    pending = (
        current
        if current.state is RunState.PUSHED_PENDING
        else current.moved(RunState.PUSHED_PENDING, at, note=f"restacked onto {step.base}")
    )
    return pending.model_copy(
        update={"base_branch": step.base, "base_sha": onto, "head_sha": replay.tip}
    )


def replay_plan(step: RestackStep, replay: Replay, no_checks_after_s: float, at: datetime) -> Plan:
    """Return what follows a link's replay.

    A conflict is a `merge-conflict` continuation. A new head is settled by its checks'
    events, and one no CI runs on sends none: it is looked at when its silence counts.
    """
    issue = step.run.issue
    if replay.tip is None:
        facts = RunFacts(ending="merge-conflict", detail=conflict_reason(step, replay.conflicts))
        return (Conclude(issue=issue, attempt=step.run.attempt, facts=facts),)
    due = at + timedelta(seconds=no_checks_after_s)
    return (
        SettleHeadAt(
            installation_id=issue.installation_id, repo=issue.repo, head_sha=replay.tip, at=due
        ),
    )


def manifest_pulls(links: Sequence[ManifestLink]) -> tuple[tuple[int, int], ...]:
    """Return (link, pull request) for each link whose pull request is open, to show the stack."""
    return tuple(
        (link.number, link.pr_number)
        for link in links
        if link.pr_number is not None and link.status not in (LinkStatus.MERGED, LinkStatus.CLOSED)
    )


def restamped(body: str, links: Sequence[ManifestLink], current: int) -> str | None:
    """Return a link's pull request body with the stack manifest as the links now stand.

    None when it says that already. What the body says above the manifest is kept.
    """
    kept = body.split(STACK_MARKER, 1)[0].rstrip()
    stamped = f"{kept}\n\n{stack_manifest(links, current)}"
    return stamped if stamped != body else None
