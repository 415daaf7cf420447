"""The jobs Baton runs, as specs: queue, function, ids, semantic job id and timeout.

Pure: a plan names the jobs to enqueue with these, and bot/edges/queue.py puts them on RQ.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Sequence
from datetime import datetime

from pydantic import BaseModel, ConfigDict, TypeAdapter

from bot.domain.issue_text import Snapshot
from bot.domain.model import Chain, IssueRef
from bot.ops.settings import Settings

EVENTS = "baton-events"
AGENTS = "baton-agents"
QUEUES = (EVENTS, AGENTS)  # the order a worker on both takes work in
# Once the sweep's queue; the clock sweeps now. Still accepted in `--queues`, and ignored.
RETIRED_QUEUES = ("baton-maintenance",)

SETTLE_TIMEOUT_S = 120
MERGEABLE_TIMEOUT_S = 600
RUN_ISSUE = "jobs.run.run_issue"
_NOT_IN_JOB_ID = re.compile(r"[^A-Za-z0-9_-]+")


def job_id(*parts: object) -> str:
    """Return an RQ job id (letters, digits, _ and - only) naming what the job is for."""
    return "-".join(_NOT_IN_JOB_ID.sub("_", str(part)) for part in parts)


class JobSpec(BaseModel):
    """One job to enqueue: a function path and ids, never an event or a token."""

    model_config = ConfigDict(frozen=True)

    queue: str
    func: str
    args: tuple[int | str, ...]
    job_id: str
    timeout_s: int
    description: str
    retry_intervals_s: tuple[int, ...] = ()


JOB_SPECS = TypeAdapter(list[JobSpec])


class RunMode(enum.StrEnum):
    """How an attempt starts."""

    FRESH = "fresh"  # a human queued the issue: it must still carry the queue label
    CONTINUE = "continue"  # on the previous attempt's branch and PR
    RETRY = "retry"  # a new attempt from the base branch
    CHAIN = "chain"  # a link its chain starts: the chain, not the link, carries the queue label


def run_issue_job(
    settings: Settings,
    issue: IssueRef,
    key: str,
    mode: RunMode = RunMode.FRESH,
    after: int = 0,
    queued_by: str | None = None,
    text: Snapshot | None = None,
    labels: Sequence[str] | None = None,
    agent: str | None = None,
) -> JobSpec:
    """Return the job for an attempt at an issue (it claims the issue: a duplicate is harmless).

    key makes the job id: the delivery id for a fresh run, the attempt it follows otherwise.
    queued_by is the login that put the queue label on, for a fresh run, where it is known.
    text is the issue as its label event carried it (or the sweep read it): the run
    records it once whoever queued it is known to steer Baton. labels are the ones its
    label event showed on the issue, which a prompt start takes for a read of it. agent
    is the one a steerer's `/baton start --agent` picked for it, where one did.
    """
    return JobSpec(
        queue=AGENTS,
        func=RUN_ISSUE,
        args=(
            issue.installation_id,
            issue.repo,
            issue.number,
            mode.value,
            after,
            queued_by or "",
            *_text_args(text),
            json.dumps(sorted(labels)) if labels is not None else "",
            *((agent,) if agent else ()),  # only where picked: the other starts' arguments stay
        ),
        job_id=job_id("run", issue.repo, issue.number, mode.value, key),
        # Longer than the agent's own cap, so the run ends itself and reports why.
        timeout_s=int(settings.agent_wall_clock_seconds) + 15 * 60,
        description=f"{mode.value} run {issue}",
    )


def _text_args(text: Snapshot | None) -> tuple[str, str, str, str]:
    """Return the job arguments that carry a queued issue's text: title, body, when, how.

    Empty without one (the job then records the issue as it reads it, if nothing is).
    """
    if text is None:
        return ("", "", "", "")
    return (text.title, text.body, text.at.isoformat(), text.how)


def _event_job(func: str, args: tuple[int | str, ...], description: str) -> JobSpec:
    """Return a short job on the events queue, its id made of what it is for."""
    return JobSpec(
        queue=EVENTS,
        func=f"jobs.{func}",
        args=args,
        job_id=job_id(func.rsplit(".", 1)[-1], *args[1:]),
        timeout_s=SETTLE_TIMEOUT_S,
        description=description,
    )


def settle_head_job(installation_id: int, repo: str, head_sha: str) -> JobSpec:
    """Return the job that settles the run which pushed head_sha from its check results.

    Its id is the head's: however many events ask, one head has one job (and the job
    runs one settlement of a head at a time, jobs/settle.py).
    """
    return _event_job(
        "settle.settle_head", (installation_id, repo, head_sha), f"settle {repo}@{head_sha[:12]}"
    )


def review_job(
    installation_id: int, repo: str, pull: int, review_id: int, author: str, submitted_at: str
) -> JobSpec:
    """Return the job that sends a pull request's requested changes back to the agent.

    submitted_at is when GitHub says the review was submitted (ISO 8601).
    """
    return JobSpec(
        queue=EVENTS,
        func="jobs.settle.settle_review",
        args=(installation_id, repo, pull, review_id, author, submitted_at),
        job_id=job_id("settle_review", repo, review_id),  # one job per review, however delivered
        timeout_s=SETTLE_TIMEOUT_S,
        description=f"review {repo}#{pull}",
    )


def pull_closed_job(installation_id: int, repo: str, pull: int, merged: bool) -> JobSpec:
    """Return the job that ends the run of a merged or closed pull request."""
    return _event_job(
        "settle.settle_pull_closed",
        (installation_id, repo, pull, int(merged)),
        f"{'merged' if merged else 'closed'} {repo}#{pull}",
    )


def issue_closed_job(issue: IssueRef) -> JobSpec:
    """Return the job that stops the work on an issue a human closed."""
    return _event_job(
        "settle.settle_issue_closed",
        (issue.installation_id, issue.repo, issue.number),
        f"issue closed {issue}",
    )


def withdrawn_job(issue: IssueRef, label: str, sender: str, delivery_id: str) -> JobSpec:
    """Return the job that judges a human taking a label off: a maintainer's withdraws the issue."""
    return JobSpec(
        queue=EVENTS,
        func="jobs.settle.label_taken_off",
        args=(issue.installation_id, issue.repo, issue.number, label, sender),
        job_id=job_id("unlabeled", issue.repo, issue.number, delivery_id),
        timeout_s=SETTLE_TIMEOUT_S,
        description=f"label {label} taken off {issue}",
    )


def issue_deleted_job(issue: IssueRef) -> JobSpec:
    """Return the job that ends the work on an issue a maintainer deleted."""
    return _event_job(
        "settle.issue_deleted",
        (issue.installation_id, issue.repo, issue.number),
        f"issue deleted {issue}",
    )


def repo_config_job(installation_id: int, repo: str, sha: str) -> JobSpec:
    """Return the job that reads a repository's Baton file as a push left it."""
    return _event_job(
        "config.read_repo_config", (installation_id, repo, sha), f"config {repo}@{sha[:12]}"
    )


def queue_chain_job(
    issue: IssueRef, key: str, queued_by: str | None = None, text: Snapshot | None = None
) -> JobSpec:
    """Return the job that plans the chain a queued issue names, and starts its first link.

    queued_by is the login that put the queue label on, where it is known. text is
    the issue as its label event carried it: the chain is planned from it.
    """
    return JobSpec(
        queue=EVENTS,
        func="jobs.chains.queue_chain",
        args=(issue.installation_id, issue.repo, issue.number, queued_by or "", *_text_args(text)),
        job_id=job_id("chain", issue.repo, issue.number, key),
        timeout_s=SETTLE_TIMEOUT_S,
        description=f"queue chain {issue}",
    )


def advance_chain_job(chain: Chain, because: str) -> JobSpec:
    """Return the job that starts, holds or finishes a chain's next link.

    because names what moved (a link's new head, merge, escalation): one job per
    change, so a change that lands while an earlier look is running is never lost.
    """
    return JobSpec(
        queue=EVENTS,
        func="jobs.chains.advance_chain",
        args=(chain.installation_id, chain.repo, chain.head),
        job_id=job_id("advance", chain.repo, chain.head, because),
        timeout_s=SETTLE_TIMEOUT_S,
        description=f"advance chain {chain.chain_id}",
    )


def mergeable_job(
    installation_id: int,
    repo: str,
    base: str,
    after: str,
    look: int = 0,
    pulls: Sequence[int] = (),
    updating: Sequence[int] = (),
) -> JobSpec:
    """Return the job that keeps Baton's open pull requests on base mergeable after a push.

    after is the commit the push left base at: one job per push, and one per look
    of it. Look 0 finds the pull requests to look at; each later look reads those
    still to decide, pulls, and the ones whose branch Baton asked GitHub to update,
    updating (bot/domain/plans/mergeable.py).
    """
    return JobSpec(
        queue=EVENTS,
        func="jobs.mergeable.keep_mergeable",
        args=(
            installation_id,
            repo,
            base,
            after,
            look,
            ",".join(map(str, pulls)),
            ",".join(map(str, updating)),
        ),
        job_id=job_id("mergeable", repo, base, after, look),
        # A fetch of the repository and a trial merge per pull request, besides the reads.
        timeout_s=MERGEABLE_TIMEOUT_S,
        description=f"mergeable {repo}:{base}@{after[:12]} look {look}",
    )


def issue_edited_job(
    issue: IssueRef,
    editor: str,
    delivery_id: str,
    edited_at: datetime,
    changed: Sequence[str],
    title: str,
    body: str,
    queue_label_on: bool,
) -> JobSpec:
    """Return the job that judges editor's edit of an issue's title or body.

    changed names the fields the edit changed; title and body are the issue as the
    edit left it, at edited_at (GitHub's time), and queue_label_on whether it then
    carried the queue label.
    """
    return JobSpec(
        queue=EVENTS,
        func="jobs.edits.issue_edited",
        args=(
            issue.installation_id,
            issue.repo,
            issue.number,
            editor,
            delivery_id,
            edited_at.isoformat(),
            ",".join(changed),
            title,
            body,
            int(queue_label_on),
        ),
        job_id=job_id("edited", issue.repo, issue.number, delivery_id),
        timeout_s=SETTLE_TIMEOUT_S,
        description=f"edited {issue}",
    )


def command_job(issue: IssueRef, comment_id: int) -> JobSpec:
    """Return the job that carries out the `/baton` command in a comment on an issue or PR."""
    return JobSpec(
        queue=EVENTS,
        func="jobs.steering.handle_command",
        args=(issue.installation_id, issue.repo, issue.number, comment_id),
        job_id=job_id("command", issue.repo, comment_id),
        timeout_s=SETTLE_TIMEOUT_S,
        description=f"command in {issue} comment {comment_id}",
    )


def rerun_job(
    installation_id: int, repo: str, head_sha: str, login: str, kind: str, delivery_id: str
) -> JobSpec:
    """Return the job that takes a re-run of Baton's check run on a head as `/baton retry`.

    login asked for it (kind: `User` or `Bot`); one job per delivery, however delivered.
    """
    return JobSpec(
        queue=EVENTS,
        func="jobs.steering.handle_rerun",
        args=(installation_id, repo, head_sha, login, kind, delivery_id),
        job_id=job_id("rerun", repo, delivery_id),
        timeout_s=SETTLE_TIMEOUT_S,
        description=f"re-run of Baton's check run on {repo}@{head_sha[:12]}",
    )


def orphan_job(issue: IssueRef, attempt: int) -> JobSpec:
    """Return the job that concludes an attempt whose claim lapsed, starting its recovery.

    One job per attempt, however often the clock sees its claim lapsed.
    """
    return _event_job(
        "takeover.orphan",
        (issue.installation_id, issue.repo, issue.number, attempt),
        f"take over {issue} attempt {attempt}",
    )


def open_pull_job(issue: IssueRef, attempt: int) -> JobSpec:
    """Return the job that opens the pull request GitHub put off for an attempt's pushed head.

    One job per attempt: scheduling it again moves it, and a copy finds the PR open.
    """
    return _event_job(
        "pulls.open_pull",
        (issue.installation_id, issue.repo, issue.number, attempt),
        f"open the pull request of {issue} attempt {attempt}",
    )


def sync_labels_job(issue: IssueRef) -> JobSpec:
    """Return the job that applies the issue's recorded Baton label, retrying for minutes."""
    return _issue_repair_job(
        issue, "labels", "jobs.labels.sync_labels", (5, 15, 60, 120, 300, 600, 1200)
    )


def refresh_status_job(issue: IssueRef) -> JobSpec:
    """Return the job that brings the issue's status comments up to its latest run.

    It follows a report put off by the installation's write pace: one per issue,
    whichever report was put off last, as each renders the run as stored.
    """
    return _issue_repair_job(issue, "status", "jobs.status.refresh_status", (5, 15, 60, 120, 300))


def _issue_repair_job(
    issue: IssueRef, name: str, func: str, retry_intervals_s: tuple[int, ...]
) -> JobSpec:
    """Return the one job per issue that brings a thing on GitHub up to the issue's record.

    Its id is the issue's, so scheduling it again moves it rather than adding a copy.
    """
    return JobSpec(
        queue=EVENTS,
        func=func,
        args=(issue.installation_id, issue.repo, issue.number),
        job_id=job_id(name, issue.repo, issue.number),
        timeout_s=SETTLE_TIMEOUT_S,
        description=f"{name} {issue}",
        retry_intervals_s=retry_intervals_s,
    )
