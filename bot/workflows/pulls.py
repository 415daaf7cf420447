"""An attempt's pull request: opened once its head is pushed, or put off and opened later.

GitHub may refuse to open it for a while: a secondary rate limit asks the installation
to wait, or it answers with server errors. The pushed work is kept, the run records
when its pull request is tried again (bot/domain/plans/ending.py `put_off`), and the
job jobs/pulls.py opens it then, so a refusal never runs the agent again for one head.
The sweep schedules that job again should it be lost.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import aiohttp
from gidgethub import GitHubBroken, HTTPException

from bot.domain import render
from bot.domain.jobs import open_pull_job
from bot.domain.model import IssueRef, Run, RunState, utcnow
from bot.domain.plans.ending import End, ended, put_off, with_pull
from bot.domain.resources import PullRequest
from bot.edges.api import DraftsRefused, open_or_update_pr
from bot.edges.github import GitHubClient, WritesPaused, github_app
from bot.workflows.conclude import policy_of, report
from bot.workflows.execute import conclude
from bot.workflows.services import Services

log = logging.getLogger(__name__)

# What opening a pull request can fail with that is worth trying again later.
PUT_OFF_BY = (WritesPaused, GitHubBroken, aiohttp.ClientError, TimeoutError)


@dataclass(frozen=True)
class Opened:
    """A pull request GitHub opened (or updated) for a run, and whether it refused a draft."""

    pull: PullRequest
    drafts_refused: bool


async def open_pull(gh: GitHubClient, run: Run, title: str, body: str, draft: bool) -> Opened:
    """Open or update the run's PR, a draft where the repository's file asks.

    A repository that cannot have drafts (a private one on GitHub Free) gets a normal
    PR, and the answer says GitHub refused the draft.
    """
    assert run.base_branch is not None  # recorded when its worktree was made

    async def opened(as_draft: bool) -> PullRequest:
        return await open_or_update_pr(
            gh,
            run.issue,
            branch=run.branch,
            head_owner=run.head_owner or run.issue.owner,
            base=run.pull_base or run.base_branch or "",
            title=title,
            body=body,
            number=run.pr_number,
            draft=as_draft,
        )

    try:
        return Opened(await opened(draft), drafts_refused=False)
    except DraftsRefused:
        log.info("%s: GitHub takes no draft here; the PR opens ready for review", run.issue)
        return Opened(await opened(False), drafts_refused=True)


def put_off_by(run: Run, exc: BaseException, draft: bool) -> Run | End:
    """Return the run with its pull request put off after exc, or its end (see `put_off`)."""
    now = utcnow()
    why = " ".join(str(exc).split())[:300] or type(exc).__name__
    if isinstance(exc, WritesPaused):
        until = datetime.fromtimestamp(exc.until, UTC)
        return put_off(run, "GitHub asked Baton to wait", now, draft=draft, until=until)
    return put_off(run, f"GitHub answered {why}", now, draft=draft)


def failed(run: Run, exc: HTTPException) -> End:
    """Return the end of an attempt whose pull request GitHub refused for good."""
    reason = f"opening the pull request failed: {' '.join(str(exc).split())[:300]}"
    return ended("pr-failed", RunState.FAILED, reason, run.agent_result)


async def after_put_off(services: Services, gh: GitHubClient, run: Run) -> None:
    """Schedule the pull request's next try; say so where GitHub lets Baton write now."""
    assert run.pull_pending is not None
    services.dispatch.enqueue_at(open_pull_job(run.issue, run.attempt), run.pull_pending.at)
    log.warning(
        "%s: attempt %d pushed %s; its pull request is put off until %s: %s",
        run.issue,
        run.attempt,
        (run.head_sha or "")[:12],
        run.pull_pending.at.isoformat(timespec="seconds"),
        run.pull_pending.why,
    )
    with contextlib.suppress(HTTPException, *PUT_OFF_BY):
        await report(services, gh, run)  # the status comes with the pull request otherwise


async def after_opened(services: Services, gh: GitHubClient, run: Run, opened: Opened) -> None:
    """Do what follows a run's pull request opening: its status, its checks, its chain."""
    store, issue = services.store, run.issue
    pull = opened.pull
    if pull.draft and pull.node_id is not None:  # marked ready for review once it is green
        store.record_draft(issue.repo, pull.number, pull.node_id)
    await report(services, gh, run)
    # A check result that came before the run was recorded as pushed found nothing to
    # settle and said so: look once now. Otherwise the result's own event settles it.
    assert run.head_sha is not None
    if store.take_check_result(issue.repo, run.head_sha):
        services.dispatch.settle_head(issue.installation_id, issue.repo, run.head_sha)
    else:
        # A head no CI runs on sends no event at all: look once its silence is an answer.
        services.dispatch.settle_head_at(
            issue.installation_id,
            issue.repo,
            run.head_sha,
            utcnow() + timedelta(seconds=policy_of(services, run).no_checks_after_s),
        )
    log.info("%s: attempt %d pushed %s to %s", issue, run.attempt, run.head_sha[:12], run.pr_url)
    chain = store.chain_of(issue)
    if chain is not None:
        services.dispatch.advance_chain(chain, f"pushed-{run.head_sha}")  # its manifest


async def open_put_off_pull(services: Services, issue: IssueRef, attempt: int) -> str:
    """Open the pull request GitHub put off for an attempt; return what happened.

    Safe to run twice: GitHub keeps one open pull request per branch, and the run
    records it once (`with_pull`); a copy that runs early schedules itself for the
    recorded time.
    """
    store = services.store
    run = store.run(issue, attempt)
    latest = store.latest_run(issue)
    if run is None or run.pull_pending is None or run.state is not RunState.PUSHED_PENDING:
        return "nothing"
    if latest is None or latest.attempt != attempt:
        return "superseded"
    if run.pull_pending.at > utcnow() + timedelta(seconds=1):
        services.dispatch.enqueue_at(open_pull_job(issue, attempt), run.pull_pending.at)
        return "not-yet"
    async with github_app(services.settings, store) as app:
        gh = await app.for_installation(issue.installation_id)
        return await _try(services, gh, run)


async def _try(services: Services, gh: GitHubClient, run: Run) -> str:
    """Try to open the run's put-off pull request once, and record what came of it."""
    assert run.pull_pending is not None
    draft = run.pull_pending.draft
    report_text = run.agent_result.result_text if run.agent_result else None
    title = render.pr_title(run.title or run.branch, run.issue.number)
    body = render.pr_body(run, report_text or "", run.changed_files)
    try:
        opened = await open_pull(gh, run, title, body, draft)
    except PUT_OFF_BY as exc:
        return await _put_off_again(services, gh, run, exc, draft)
    except HTTPException as exc:
        return await _end(services, gh, run, failed(run, exc))
    pull = opened.pull
    now = utcnow()
    recorded = services.store.update_run(
        run.issue,
        run.attempt,
        lambda current: with_pull(
            current, pull.number, pull.html_url, now, drafts_refused=opened.drafts_refused
        ),
    )
    if recorded is None:
        return "opened-already"
    await after_opened(services, gh, recorded, opened)
    return "opened"


async def _put_off_again(
    services: Services, gh: GitHubClient, run: Run, exc: BaseException, draft: bool
) -> str:
    decided = put_off_by(run, exc, draft)
    if isinstance(decided, End):
        return await _end(services, gh, run, decided)

    def again(current: Run) -> Run | None:
        if current.pull_pending is None or current.state is not RunState.PUSHED_PENDING:
            return None  # opened or ended meanwhile
        later = put_off_by(current, exc, draft)
        return None if isinstance(later, End) else later

    recorded = services.store.update_run(run.issue, run.attempt, again)
    if recorded is not None:
        await after_put_off(services, gh, recorded)
    return "put-off"


async def _end(services: Services, gh: GitHubClient, run: Run, end: End) -> str:
    """End the attempt whose pull request never opened, and perform its recovery."""

    def ending(current: Run) -> Run | None:
        if current.pull_pending is None or current.state is not RunState.PUSHED_PENDING:
            return None
        moved = current.moved(end.state, utcnow())
        return moved.model_copy(update={"reason": end.reason, "pull_pending": None})

    ended_run = services.store.update_run(run.issue, run.attempt, ending)
    if ended_run is None:
        return "nothing"
    log.warning("%s: attempt %d ended %s: %s", run.issue, run.attempt, end.state, end.reason)
    await conclude(services, gh, ended_run, end.facts)
    return "failed"
