"""What GitHub says about a pushed run: checks, reviews, merges, closes.

Each settles the run it concerns through a pure transition, so a repeated or
late event finds nothing to change and does nothing.
"""

from __future__ import annotations

import logging
from datetime import datetime

from gidgethub import HTTPException

from bot.domain.audit import DiffFile, audit, unreadable
from bot.domain.checks import (
    Verdict,
    checks_verdict,
    failing_checks,
    no_ci_due,
    required_checks_verdict,
)
from bot.domain.classify import RunFacts
from bot.domain.lifecycle import close_pull, request_changes, settle_checks
from bot.domain.model import AuditFinding, IssueRef, Run, RunState, utcnow
from bot.domain.render import CheckSummary
from bot.domain.repo_config import InvalidRepoConfig, RepoConfig
from bot.edges.api import (
    HeadChecks,
    load_repo_config,
    read_check_runs,
    read_head_checks,
    read_repository,
)
from bot.edges.github import GitHubClient, github_app
from bot.ops.metrics import AUDIT_FLAGS, Tally
from bot.workflows.chain import link_green, link_merged
from bot.workflows.conclude import conclude, hold_for_audit, policy_of, report
from bot.workflows.labels import set_state_label, take_state_labels_off
from bot.workflows.services import Services
from bot.workflows.standing import repository_settings, standing_of

log = logging.getLogger(__name__)


async def _checks(
    gh: GitHubClient, repo: str, sha: str, head: HeadChecks, required: tuple[str, ...]
) -> tuple[Verdict, list[CheckSummary]]:
    status = head.combined_status
    if required:
        runs = await read_check_runs(gh, repo, sha)
        verdict = required_checks_verdict(runs, status, required)
        passed = [CheckSummary(name=name, conclusion="success") for name in required]
        if verdict is Verdict.RED:
            return verdict, failing_checks(runs, status, required)
        return verdict, passed
    verdict = checks_verdict(head.suites, status)
    if verdict is not Verdict.RED:
        return verdict, [
            CheckSummary(name=str(suite["app"]["name"]), conclusion=str(suite["conclusion"]))
            for suite in head.suites
            if suite.get("status") == "completed" and suite.get("app")
        ]
    return verdict, failing_checks(await read_check_runs(gh, repo, sha), status)


def _pushed_at(run: Run) -> datetime:
    """Return when the run's head was pushed (its latest move to waiting for checks)."""
    pushes = [change.at for change in run.history if change.state is RunState.PUSHED_PENDING]
    return pushes[-1] if pushes else run.started_at


async def settle_head(
    services: Services, installation_id: int, repo: str, head_sha: str
) -> Run | None:
    """Settle the run that pushed head_sha from the head's check results, if they are final.

    Without required checks, a head no CI has reported on by the policy's wait is
    green ("no CI reported"); until then a settlement is scheduled for that moment.
    A green head is audited first (bot/domain/audit.py): its flags go on the status comments,
    and where the repository's file says `audit: hold`, they keep it from review.
    """
    found = services.store.run_for_head(repo, head_sha)
    if found is None:
        return None
    issue, attempt = found
    run = services.store.run(issue, attempt)
    if run is None or run.state is not RunState.PUSHED_PENDING or run.head_sha != head_sha:
        return None  # an older head, or a run that moved on: nothing to settle
    async with github_app(services.settings, services.store) as app:
        gh = await app.for_installation(installation_id)
        policy = policy_of(services, run)
        head = await read_head_checks(gh, repo, head_sha)
        verdict, checks = await _checks(gh, repo, head_sha, head, policy.required_checks)
        next_step = None
        if verdict is Verdict.PENDING and head.silent and not policy.required_checks:
            due = no_ci_due(_pushed_at(run), utcnow(), policy.no_checks_after_s)
            if due is not None:
                services.dispatch.settle_head_at(installation_id, repo, head_sha, due)
                return None
            verdict, next_step = Verdict.GREEN, _no_ci_reported(policy.no_checks_after_s)
        config, findings = RepoConfig(), []
        if verdict is Verdict.GREEN:
            config = await _repo_config(services, gh, repo)
            findings = await _audit(services, gh, run, config)

        def settle(current: Run) -> Run | None:
            moved = settle_checks(current, head_sha, verdict, utcnow())
            return moved.model_copy(update={"audit": findings}) if moved and findings else moved

        settled = services.store.update_run(issue, attempt, settle)
        if settled is None:
            return None  # still pending, settled by someone else, or a newer head took over
        log.info("%s: attempt %d settled %s at %s", issue, attempt, verdict.value, head_sha[:12])
        if services.store.paused_since(repo) is not None:
            services.store.count_paused_settlement(repo)
        if verdict is Verdict.GREEN:
            if findings:
                tally = Tally()
                for finding in findings:
                    tally.count(AUDIT_FLAGS, finding.kind.value)
                services.store.add_metrics(tally)
                log.warning("%s: the settlement audit flagged %d things", issue, len(findings))
            if findings and config.audit == "hold":
                await hold_for_audit(services, gh, settled)
                return settled
            labels = policy_of(services, settled).labels
            await set_state_label(
                gh, services.store, services.dispatch, labels, issue, labels.review
            )
            await report(services, gh, settled, next_step, checks=checks)
            await link_green(services, app, settled)  # what is stacked on it follows
            return settled
        names = ", ".join(check.name for check in checks) or "a check"
        facts = RunFacts(ending="checks-failed", detail=f"failing: {names}")
        await conclude(services, gh, settled, facts, checks)
        return settled


async def _repo_config(services: Services, gh: GitHubClient, repo: str) -> RepoConfig:
    """Return the repository's file on its default branch (read within the hour: no call).

    An invalid file holds nothing: the audit stays advisory.
    """
    data = await read_repository(gh, services.store, repo)
    try:
        file = await load_repo_config(gh, services.store, repo, data["default_branch"])
    except InvalidRepoConfig:
        return RepoConfig()
    return file.config


async def _audit(
    services: Services, gh: GitHubClient, run: Run, config: RepoConfig
) -> list[AuditFinding]:
    """Return what the settlement audit flags in the PR's own diff, every page of it.

    A list GitHub would not give is a finding, never a clean bill.
    """
    if run.pr_number is None:
        return [unreadable("the run has no pull request whose diff could be read")]
    try:
        files = [
            DiffFile.from_api(entry)
            async for entry in gh.getiter(
                "/repos/{+repo}/pulls/{number}/files",
                {"repo": run.issue.repo, "number": run.pr_number},
            )
        ]
    except HTTPException as exc:
        return [unreadable(f"GitHub answered {exc.status_code} to the pull request's files")]
    return audit(files, _issue_text(services, run), scope=config.audit_scope)


def _issue_text(services: Services, run: Run) -> str:
    """Return the issue's text the run worked from: as queued, with the edits taken since."""
    recorded = services.store.queued_text(run.issue)
    if recorded is None or recorded.queued is None:
        return run.title or ""
    taken = [
        text
        for edit in recorded.since_queued()
        if edit.taken
        for text in (edit.title, edit.body)
        if text
    ]
    return "\n".join([recorded.queued.title, recorded.queued.body, *taken])


def _no_ci_reported(wait_s: float) -> str:
    return (
        f"No CI reported on this head within {wait_s:g} s of its push, and no checks are "
        "required: it counts as green and awaits a maintainer's review."
    )


async def settle_review(
    services: Services,
    installation_id: int,
    repo: str,
    pull: int,
    review_id: int,
    author: str,
    submitted_at: datetime | None = None,
) -> Run | None:
    """Send a review that requested changes back to the agent as a continuation.

    Only a reviewer who may steer Baton is heard; each review acts at most once,
    however often it is delivered, and only on the attempt it reviewed.
    """
    store = services.store
    found = store.run_for_pull(repo, pull)
    if found is None:
        return None
    issue, attempt = found

    def changes(current: Run) -> Run | None:
        return request_changes(current, review_id, author, submitted_at, utcnow())

    run = store.run(issue, attempt)
    if run is None or changes(run) is None:
        log.info("%s: review %d changes nothing for attempt %d", issue, review_id, attempt)
        return None
    async with github_app(services.settings, store) as app:
        gh = await app.for_installation(installation_id)
        judged = await repository_settings(gh, store, services.settings, repo)
        standing = await standing_of(gh, store, judged, repo, author)
        if not standing.allowed:
            log.warning("%s: ignored review %d requesting changes: %s", issue, review_id, standing)
            return None
        if not store.first_review(repo, review_id):
            log.info("%s: review %d acted already", issue, review_id)
            return None
        changed = store.update_run(issue, attempt, changes)
        if changed is None:
            return None  # the run moved on meanwhile
        facts = RunFacts(ending="changes-requested", detail=f"review {review_id} by @{author}")
        await conclude(services, gh, changed, facts)
    return changed


async def settle_pull_closed(
    services: Services, installation_id: int, repo: str, pull: int, merged: bool
) -> Run | None:
    """End the run of a merged or closed pull request: labels off, worktree gone, no requeue."""
    found = services.store.run_for_pull(repo, pull)
    if found is None:
        return None
    issue, attempt = found
    closed = services.store.update_run(
        issue, attempt, lambda current: close_pull(current, merged, utcnow())
    )
    if closed is None:
        return None
    services.store.request_stop(issue)  # a continuation under way has nothing left to do
    if merged:
        await services.workspace.remove(repo, issue.number)
    async with github_app(services.settings, services.store) as app:
        gh = await app.for_installation(installation_id)
        await take_state_labels_off(gh, services, issue)
        await report(services, gh, closed)
        if merged:
            await link_merged(services, app, closed)
        elif (chain := services.store.chain_of(issue)) is not None:
            services.dispatch.advance_chain(chain, f"closed-{pull}")  # it holds its successors
    log.info(
        "%s: PR #%d %s; attempt %d ends %s",
        issue,
        pull,
        "merged" if merged else "closed",
        attempt,
        closed.state.value,
    )
    return closed


async def settle_issue_closed(services: Services, issue: IssueRef) -> None:
    """Stop the work on an issue a human closed; its branch and PR are kept.

    Its text as queued is forgotten: reopened, it is queued again before it runs.
    """
    services.store.forget_queued_text(issue)
    run = services.store.latest_run(issue)
    if run is None or run.state in (RunState.MERGED, RunState.CLOSED):
        return  # never run, or closed by its own merge
    if run.state.is_live:
        services.store.request_stop(issue)  # the worker running it stops the agent: admin-kill
        log.warning("%s: closed by a human while attempt %d runs; stopping it", issue, run.attempt)
    async with github_app(services.settings, services.store) as app:
        gh = await app.for_installation(issue.installation_id)
        await take_state_labels_off(gh, services, issue)


async def settle_label_taken_off(
    services: Services, issue: IssueRef, label: str, sender: str
) -> str:
    """Withdraw the issue when a maintainer takes its queue or in-progress label off.

    A live run stops at once (its work is kept on its branch, as for `/baton stop`);
    a start still queued finds it withdrawn. Returns what happened, in a word.
    """
    store = services.store
    async with github_app(services.settings, store) as app:
        gh = await app.for_installation(issue.installation_id)
        judged = await repository_settings(gh, store, services.settings, issue.repo)
        if label not in (judged.labels.queue, judged.labels.in_progress):
            return "not ours"
        standing = await standing_of(gh, store, judged, issue.repo, sender)
    if not standing.allowed:
        log.warning(
            "%s: %s took %s off, which withdraws nothing: %s", issue, sender, label, standing
        )
        return "ignored"
    store.record_withdrawal(issue, utcnow())
    run = store.latest_run(issue)
    if run is None or not run.state.is_live:
        return "withdrawn"
    store.request_stop(issue)  # the worker running it stops the agent: admin-kill
    log.warning(
        "%s: @%s took %s off while attempt %d runs; stopping it", issue, sender, label, run.attempt
    )
    return "stopped"


def end_gone_issue(services: Services, issue: IssueRef, why: str) -> None:
    """End Baton's work on an issue GitHub no longer has here: its run closes, its state goes."""
    reason = f"the issue {why}"

    def close(current: Run) -> Run | None:
        if current.state.is_terminal:
            return None
        return current.moved(RunState.CLOSED, utcnow(), note="gone").model_copy(
            update={"reason": reason}
        )

    store = services.store
    run = store.latest_run(issue)
    if run is not None:
        if run.state.is_live:
            store.request_stop(issue)  # its worker stops the agent
        store.update_run(issue, run.attempt, close)
    store.forget_issue(issue)
    store.record_withdrawal(issue, utcnow())  # a start queued before now reads it first
    log.warning("%s: %s; Baton's work on it ends", issue, reason)
