"""Which halted issues are due to resume: the sweep's and `baton resume`'s plan, pure."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from bot.domain.model import IssueRef, Run, RunState


class Halt(BaseModel):
    """One issue waiting for a usage window, and its halted run."""

    model_config = ConfigDict(frozen=True)

    issue: IssueRef
    resume_at: datetime
    run: Run | None


class ResumePlan(BaseModel):
    """What to resume now, what waits, and what the index holds that is not halted any more."""

    model_config = ConfigDict(frozen=True)

    due: tuple[Halt, ...]
    waiting: tuple[Halt, ...]
    stale: tuple[Halt, ...]


def plan_resumes(halts: Sequence[Halt], now: datetime, only: Sequence[str] = ()) -> ResumePlan:
    """Split halted issues into due and waiting; issues named in only are due whatever the time."""
    due, waiting, stale = [], [], []
    for halt in halts:
        if only and str(halt.issue) not in only:
            continue
        if halt.run is None or halt.run.state is not RunState.HALTED:
            stale.append(halt)
        elif halt.resume_at <= now or only:
            due.append(halt)
        else:
            waiting.append(halt)
    waiting.sort(key=lambda halt: halt.resume_at)
    return ResumePlan(due=tuple(due), waiting=tuple(waiting), stale=tuple(stale))
