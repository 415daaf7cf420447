"""What GitHub says about a pushed run: checks, reviews, merges, closes.

Each reads the facts, asks the pure plan (bot/domain/plans/settlement.py) what they
do to the run it concerns, moves the run atomically and performs the plan's effects,
so a repeated or late event finds nothing to change and does nothing.
"""

from __future__ import annotations

import logging
from datetime import datetime

from gidgethub import BadRequest, HTTPException

from bot.domain.audit import audit, unreadable
from bot.domain.checks import (
    Verdict,
    ci_suites,
    head_verdict,
    needs_check_runs,
    nothing_reported,
    reported_by_others,
)
from bot.domain.model import AuditFinding, IssueRef, Run, RunState, utcnow
from bot.domain.plans.settlement import (
    Audit,
    HeadFacts,
    Settlement,
    closing_settlement,
    end_gone,
    head_settlement,
    read_head,
    review_settlement,
    waits_on,
)
from bot.domain.repo_config import InvalidRepoConfig, RepoConfig
from bot.edges.api import (
    delete_branch,
    learn_app_id,
    list_check_runs,
    list_pull_files,
    load_repo_config,
    read_head_checks,
    read_repository,
)
from bot.edges.github import GitHubApp, GitHubClient, github_app
from bot.ops.metrics import AUDIT_FLAGS, Tally
from bot.workflows.chain import restack_chain
from bot.workflows.conclude import policy_of
from bot.workflows.execute import execute
from bot.workflows.labels import recorded_labels, take_state_labels_off
from bot.workflows.remotes import ForkMissing, remotes_of
from bot.workflows.services import Services
from bot.workflows.standing import repository_settings, standing_of

log = logging.getLogger(__name__)


async def _head_facts(
    gh: GitHubClient,
    installation_id: int,
    repo: str,
    sha: str,
    required: tuple[str, ...],
    own_app: int | None,
) -> HeadFacts:
    """Return what the head's CI has said by now, every page of it.

    Baton's own check run, and its suite, are not CI: own_app is the App's id.
    """
    head = await read_head_checks(gh, repo, sha)
    suites = ci_suites([suite.model_dump() for suite in head.suites], own_app)
    status = head.combined_status.model_dump()
    runs = (
        reported_by_others(
            [run.model_dump() for run in await list_check_runs(gh, repo, sha)], own_app
        )
        if needs_check_runs(suites, status, required)
        else []
    )
    verdict, checks = head_verdict(suites, status, runs, required)
    return HeadFacts(
        installation_id=installation_id,
        repo=repo,
        sha=sha,
        verdict=verdict,
        checks=checks,
        silent=nothing_reported(suites, status),
        now=utcnow(),
    )


async def settle_head(
    services: Services, installation_id: int, repo: str, head_sha: str
) -> list[Run]:
    """Settle each run that pushed head_sha from the head's check results, if they are final.

    Mostly one run: two issues whose agents pushed byte-identical commits share the
    head, and each is settled. Without required checks, a head no CI has reported on
    by the policy's wait is green ("no CI reported"); until then a settlement is
    scheduled for that moment. A green head is audited first (bot/domain/audit.py):
    its flags go on the status comments, and where the repository's file says
    `audit: hold`, they keep it from review. Returns the runs it settled.
    """
    store = services.store
    waiting = [
        run
        for found in store.runs_for_head(repo, head_sha)
        if (run := store.run(*found)) is not None and waits_on(run, head_sha)
    ]
    if not waiting:
        return []  # an older head, or runs that moved on: nothing to settle
    async with github_app(services.settings, store) as app:
        gh = await app.for_installation(installation_id)
        own_app = await learn_app_id(app, store)
        settled = [await _settle_run(services, app, gh, run, own_app) for run in waiting]
    return [run for run in settled if run is not None]


async def _settle_run(
    services: Services, app: GitHubApp, gh: GitHubClient, run: Run, own_app: int | None
) -> Run | None:
    """Settle one run waiting on its head; None while it is pending or settled by another."""
    assert run.head_sha is not None
    policy = policy_of(services, run)
    head = await _head_facts(
        gh, run.issue.installation_id, run.issue.repo, run.head_sha, policy.required_checks, own_app
    )
    verdict = read_head(run, head, policy).verdict
    audited = await _audited(services, gh, run) if verdict is Verdict.GREEN else Audit()
    plan = head_settlement(run, head, policy, audited)
    if plan.run is None:
        await execute(services, gh, plan.effects)  # pending: a silent head's later look
        return None
    settled = services.store.update_run(
        run.issue,
        run.attempt,
        lambda current: head_settlement(current, head, policy, audited).run,
    )
    if settled is None:
        return None  # still pending, settled by someone else, or a newer head took over
    _record_settlement(services, settled, verdict, audited)
    await execute(services, gh, plan.effects)
    if plan.restack is not None:
        await restack_chain(services, app, settled, plan.restack)  # what is stacked follows
    return settled


def _record_settlement(services: Services, run: Run, verdict: Verdict, audited: Audit) -> None:
    """Log a settlement; count it if the repository is paused, and what its audit flagged."""
    log.info(
        "%s: attempt %d settled %s at %.12s", run.issue, run.attempt, verdict.value, run.head_sha
    )
    if services.store.paused_since(run.issue.repo) is not None:
        services.store.count_paused_settlement(run.issue.repo)
    if audited.findings:
        tally = Tally()
        for finding in audited.findings:
            tally.count(AUDIT_FLAGS, finding.kind.value)
        services.store.add_metrics(tally)
        log.warning("%s: the settlement audit flagged %d things", run.issue, len(audited.findings))


async def _audited(services: Services, gh: GitHubClient, run: Run) -> Audit:
    """Return the settlement audit of a green head: its flags, and whether they hold it."""
    config = await _repo_config(services, gh, run.issue.repo)
    return Audit(findings=tuple(await _audit(services, gh, run, config)), mode=config.audit)


async def _repo_config(services: Services, gh: GitHubClient, repo: str) -> RepoConfig:
    """Return the repository's file on its default branch (read within the hour: no call).

    An invalid file holds nothing: the audit stays advisory.
    """
    data = await read_repository(gh, services.store, repo)
    try:
        file = await load_repo_config(gh, services.store, repo, data.default_branch)
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
        files = await list_pull_files(gh, run.issue.repo, run.pr_number)
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

    def settlement(current: Run) -> Settlement:
        return review_settlement(current, review_id, author, submitted_at, utcnow())

    run = store.run(issue, attempt)
    plan = settlement(run) if run is not None else Settlement()
    if plan.run is None:
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
        changed = store.update_run(issue, attempt, lambda current: settlement(current).run)
        if changed is None:
            return None  # the run moved on meanwhile
        await execute(services, gh, plan.effects)
    return changed


async def settle_pull_closed(
    services: Services, installation_id: int, repo: str, pull: int, merged: bool
) -> Run | None:
    """End the run of a merged or closed pull request: labels off, worktree gone, no requeue."""
    store = services.store
    found = store.run_for_pull(repo, pull)
    if found is None:
        return None
    issue, attempt = found
    labels, chain = recorded_labels(store, services.settings, issue), store.chain_of(issue)

    def settlement(current: Run) -> Settlement:
        return closing_settlement(current, pull, merged, labels, chain, utcnow())

    run = store.run(issue, attempt)
    plan = settlement(run) if run is not None else Settlement()
    if plan.run is None:
        return None
    closed = store.update_run(issue, attempt, lambda current: settlement(current).run)
    if closed is None:
        return None
    store.request_stop(issue)  # a continuation under way has nothing left to do
    if merged:
        await services.workspace.remove(repo, issue.number)
    async with github_app(services.settings, store) as app:
        gh = await app.for_installation(installation_id)
        await execute(services, gh, plan.effects)
        if plan.restack is not None:
            await restack_chain(services, app, closed, plan.restack)
        if merged and closed.head_owner is not None:
            await _drop_fork_branch(services, app, gh, closed)
    log.info(
        "%s: PR #%d %s; attempt %d ends %s",
        issue,
        pull,
        "merged" if merged else "closed",
        attempt,
        closed.state.value,
    )
    return closed


async def _drop_fork_branch(services: Services, app: GitHubApp, gh: GitHubClient, run: Run) -> None:
    """Delete a merged pull request's branch from the fork, as GitHub deletes a merged
    branch of the repository's own (`delete_branch_on_merge`) but never a fork's."""
    try:
        repo = await read_repository(gh, services.store, run.issue.repo)
        remotes = await remotes_of(app, services.settings, repo, run.issue.installation_id)
        if remotes.fork is None:
            return
        fork_gh = await app.for_installation(remotes.fork.installation_id)
        deleted = await delete_branch(fork_gh, remotes.fork.full_name, run.branch)
    except (ForkMissing, BadRequest) as exc:
        # Left in the fork, harmless: the merge is what the run ended on.
        log.warning("%s: %s not deleted from the fork: %s", run.issue, run.branch, exc)
        return
    if deleted:
        log.info("%s: deleted %s from %s", run.issue, run.branch, remotes.fork.full_name)


async def settle_issue_closed(services: Services, issue: IssueRef) -> None:
    """Stop the work on an issue a human closed; its branch and PR are kept.

    Its text as queued is kept: reopened, a retry works from it, not from the issue as
    it stands (queueing it again records the text anew).
    """
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
    store = services.store
    run = store.latest_run(issue)
    if run is not None:
        if run.state.is_live:
            store.request_stop(issue)  # its worker stops the agent
        store.update_run(issue, run.attempt, lambda current: end_gone(current, reason, utcnow()))
    store.forget_issue(issue)
    store.record_withdrawal(issue, utcnow())  # a start queued before now reads it first
    log.warning("%s: %s; Baton's work on it ends", issue, reason)
