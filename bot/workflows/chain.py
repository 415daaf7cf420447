"""Chains at work: plan a queued chain, start its links in order, restack them after a merge.

The decisions are pure (`bot/domain/chains.py`, `bot/domain/plans/restack.py`); this
module reads what GitHub and the run records say, applies those decisions and writes the
results back. Every step is recomputed from that state, so a repeated job finds the work
done.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime
from functools import partial

from gidgethub import BadRequest

from bot.domain import render
from bot.domain.chains import (
    ChainRefused,
    IssueFacts,
    LinkStatus,
    ManifestLink,
    chain_from_dependencies,
    chain_status_comment,
    dependencies,
    dependency_closure,
    held_comment,
    is_tracking_issue,
    link_status,
    next_step,
    predecessor_of,
    preflight,
    successors,
    task_list,
)
from bot.domain.issue_text import Snapshot, queue, snapshot
from bot.domain.jobs import RunMode, run_issue_job
from bot.domain.model import Chain, IssueRef, Run, utcnow
from bot.domain.plans.restack import (
    Moved,
    Replay,
    manifest_pulls,
    replay_plan,
    replayed,
    restack_due,
    restack_plan,
    restamped,
)
from bot.domain.repo_config import InvalidRepoConfig, apply_repo_config
from bot.domain.resources import Issue
from bot.edges.api import load_repo_config, read_issue, read_pull, read_repository, update_pull
from bot.edges.github import GitHubApp, GitHubClient, github_app
from bot.edges.store import Store
from bot.ops.settings import Settings
from bot.workflows.conclude import policy_of, post_status
from bot.workflows.execute import execute
from bot.workflows.labels import recorded_labels, set_state_label
from bot.workflows.remotes import remotes_of
from bot.workflows.services import Services
from bot.workflows.standing import queued_by_a_steerer, standing_of

log = logging.getLogger(__name__)


async def queue_chain(
    services: Services,
    issue: IssueRef,
    queued_by: str | None = None,
    text: Snapshot | None = None,
) -> Chain | None:
    """Plan the chain a queued issue names and start its first incomplete link.

    A refused chain (a cycle, a missing issue, another repository, a strict
    pre-flight) gets one clear comment and nothing is provisioned. So does one
    queued by someone who may not steer Baton (queued_by, or whom the issue's
    events name), and its queue label comes off.

    text is the issue as it was queued: the chain is planned from it, and it is the
    text of the issue's own link. Every other link's text is recorded as it reads now.
    """
    settings, store = services.settings, services.store
    async with github_app(settings, store) as app:
        gh = await app.for_installation(issue.installation_id)
        data = await read_issue(gh, issue)
        if text is not None:
            data = data.model_copy(update={"title": text.title, "body": text.body})
        labels = data.label_names
        repo = await read_repository(gh, store, issue.repo)
        ours = settings.labels  # until the repository's file names its own
        judged = False  # whether who queued it was judged by the repository's rule
        try:
            file = await load_repo_config(gh, store, issue.repo, repo.default_branch)
            applied = apply_repo_config(settings, file.config)
            ours = applied.labels
            if ours.queue not in labels or data.state != "open":
                log.info("%s: no longer queued; not planning its chain", issue)
                return None
            if await queued_by_a_steerer(gh, store, applied, issue, queued_by) is None:
                return None
            judged = True
            refused = file.refused_by(settings)  # asks for more than the deployment allows
            if refused is not None:
                raise refused
            chain, facts = await _plan(gh, issue, data, file.config.strict_preflight)
            await _refuse_links_named_by_strangers(gh, store, applied, chain, facts)
        except (ChainRefused, InvalidRepoConfig) as exc:
            if ours.queue not in labels:
                return None
            if (
                not judged
                and await queued_by_a_steerer(gh, store, settings, issue, queued_by) is None
            ):
                return None  # an unreadable file: the deployment's rule, before anything is said
            log.warning("%s: chain refused: %s", issue, exc)
            await set_state_label(gh, store, services.dispatch, ours, issue, ours.escalated, labels)
            await post_status(
                services, gh, issue, render.refusal_comment(f"The chain was refused: {exc}")
            )
            return None
        chain = store.save_chain(chain)
        log.info("%s: chain %s of links %s", issue, chain.chain_id, chain.links)
        at = text.at if text is not None else utcnow()
        _record_link_texts(store, chain, facts, at, queued_by)
        # Taken off the queue: the chain, not a second delivery, moves it from here.
        await set_state_label(gh, store, services.dispatch, ours, issue, ours.in_progress, labels)
        await advance(services, gh, chain, requeued=True)
        return chain


async def advance_chain(services: Services, installation_id: int, repo: str, head: int) -> None:
    """Start, hold or finish the chain queued at head, as its links now stand."""
    chain = services.store.chain(f"{repo}#{head}")
    if chain is None or chain.installation_id != installation_id:
        return
    async with github_app(services.settings, services.store) as app:
        gh = await app.for_installation(installation_id)
        await advance(services, gh, chain)


async def advance(
    services: Services, gh: GitHubClient, chain: Chain, requeued: bool = False
) -> None:
    """Do the chain's next step and show where every link stands.

    Queued again by a maintainer, a link that stopped the chain gets a new start;
    links that are merged or green are never run again.
    """
    settings, store = services.settings, services.store
    links = await manifest_links(gh, services, chain)
    statuses = {
        link.number: LinkStatus.NOT_STARTED
        if requeued and link.status is LinkStatus.STOPPED
        else link.status
        for link in links
    }
    step = next_step(chain.links, statuses)
    log.info("%s: chain %s next: %s", chain.chain_id, statuses, step.action)
    if step.action == "start" and step.link is not None:
        key = f"{chain.head}-{chain.generation}"
        services.dispatch.enqueue(
            [run_issue_job(settings, chain.issue(step.link), key, RunMode.CHAIN)]
        )
    elif step.action == "held" and step.held_by is not None:
        for number in successors(chain.links, step.held_by):
            if statuses[number] is LinkStatus.NOT_STARTED:
                await post_status(
                    services, gh, chain.issue(number), held_comment(number, step.held_by)
                )
    await _restamp_manifests(gh, chain, links)
    if chain.tracking:
        head = chain.issue(chain.head)
        await post_status(
            services, gh, head, chain_status_comment(chain.head, links, step, chain.warnings)
        )
        if step.action == "complete":
            done = all(status is not LinkStatus.GREEN for status in statuses.values())
            ours = recorded_labels(store, settings, head)
            label = None if done else ours.review
            await set_state_label(gh, store, services.dispatch, ours, head, label)


async def manifest_links(gh: GitHubClient, services: Services, chain: Chain) -> list[ManifestLink]:
    """Return every link of the chain with its title, PR and status as they are now."""
    links = []
    for number in chain.links:
        data = await read_issue(gh, chain.issue(number))
        run = services.store.latest_run(chain.issue(number))
        links.append(
            ManifestLink(
                number=number,
                title=data.title,
                status=link_status(run, data.state == "open"),
                pr_number=run.pr_number if run else None,
                pr_url=run.pr_url if run else None,
            )
        )
    return links


async def stack_base(gh: GitHubClient, services: Services, chain: Chain, number: int) -> Run | None:
    """Return the run whose branch the link builds on now (None: the base branch)."""
    links = await manifest_links(gh, services, chain)
    statuses = {link.number: link.status for link in links}
    predecessor = predecessor_of(chain.links, statuses, number)
    if predecessor is None:
        return None
    return services.store.latest_run(chain.issue(predecessor))


async def restack_chain(services: Services, app: GitHubApp, moved: Run, how: Moved) -> None:
    """Bring the links stacked on a link that merged or went green (again) along, then advance.

    After a merge, the first successor's PR is retargeted to the branch the link merged
    into; after a continuation gave the link's PR more commits, its successors are
    left on its old tip. Either way every successor's branch is replayed without the
    commits it inherited (bot/domain/plans/restack.py). A conflict sends that link
    back to the agent as a `merge-conflict` continuation, and stops there.
    """
    chain = services.store.chain_of(moved.issue)
    if chain is None or moved.issue.number not in chain.links:
        return
    gh = await app.for_installation(chain.installation_id)
    async with services.store.chain_lock(chain):
        await _restack(services, app, gh, chain, moved, how)
    await advance(services, gh, chain)


async def _restack(
    services: Services, app: GitHubApp, gh: GitHubClient, chain: Chain, moved: Run, how: Moved
) -> None:
    store = services.store
    stacked = [
        run
        for number in successors(chain.links, moved.issue.number)
        if (run := store.latest_run(chain.issue(number))) is not None
    ]
    if not restack_due(moved, how, stacked):
        return
    repo = await read_repository(gh, services.store, chain.repo)
    plan = restack_plan(moved, how, stacked, repo.default_branch)
    remotes = await remotes_of(app, services.settings, repo, chain.installation_id)
    workspace = services.workspace
    mirror = await remotes.refresh(app, workspace)
    onto = await workspace.rev_parse(mirror, f"refs/remotes/origin/{plan.target}")
    push_url, pushing_installation = remotes.push_target()
    for step in plan.steps:
        run = step.run
        # A pull request from a fork targets the default branch all along: a link's
        # predecessor's branch is the fork's, which no pull request can target.
        if step.retarget and (remotes.fork is None or step.base == repo.default_branch):
            await update_pull(gh, chain.repo, step.pull, base=step.base)
        token = await app.installation_token(pushing_installation)
        rebased = await workspace.rebase_branch(
            chain.repo, run.branch, onto, step.built_on, push_url, token
        )
        replay = Replay(tip=rebased.tip, conflicts=rebased.conflicts)
        at = utcnow()
        store.update_run(
            run.issue, run.attempt, partial(replayed, step=step, onto=onto, replay=replay, at=at)
        )
        wait_s = policy_of(services, run).no_checks_after_s
        await execute(services, gh, replay_plan(step, replay, wait_s, at))
        if replay.tip is None:
            break
        log.info(
            "%s: restacked %s onto %s at %s", run.issue, run.branch, step.base, replay.tip[:12]
        )
        onto = replay.tip


async def _restamp_manifests(gh: GitHubClient, chain: Chain, links: list[ManifestLink]) -> None:
    """Keep the stack manifest in every open PR of the chain as the links now stand."""
    for number, pull_number in manifest_pulls(links):
        pull = await read_pull(gh, chain.repo, pull_number)
        stamped = restamped(pull.body or "", links, number)
        if stamped is not None:
            await update_pull(gh, chain.repo, pull_number, body=stamped)


async def _plan(
    gh: GitHubClient, issue: IssueRef, data: Issue, strict: bool
) -> tuple[Chain, Mapping[int, IssueFacts]]:
    """Return the chain the issue names, and what was read of each issue in it."""
    body = data.body
    if is_tracking_issue(body, issue.repo):
        listed = task_list(body, issue.repo)
        listed_facts = await _issue_facts(gh, issue, listed)
        planned = preflight(listed, listed_facts, issue.repo, strict)
        tracked = Chain(
            installation_id=issue.installation_id,
            repo=issue.repo,
            head=issue.number,
            tracking=True,
            links=planned.order,
            warnings=planned.warnings,
        )
        return tracked, listed_facts
    facts = {issue.number: _facts_of(data)}
    absent: set[int] = set()
    while missing := set(dependency_closure(issue.number, facts, issue.repo)) - absent:
        fetched = await _issue_facts(gh, issue, sorted(missing))
        absent |= missing - fetched.keys()
        facts.update(fetched)
    chain = Chain(
        installation_id=issue.installation_id,
        repo=issue.repo,
        head=issue.number,
        tracking=False,
        links=chain_from_dependencies(issue.number, facts, issue.repo),
    )
    return chain, facts


async def _refuse_links_named_by_strangers(
    gh: GitHubClient,
    store: Store,
    settings: Settings,
    chain: Chain,
    facts: Mapping[int, IssueFacts],
) -> None:
    """Refuse a chain that follows dependencies named by someone who may not steer Baton.

    The queued issue's own references are the maintainer's choice; an issue further
    along names its dependencies in a body its author can edit at any time, so only a
    steerer's issue may bring more issues into the chain.
    """
    if chain.tracking:
        return  # the tracking issue, as queued, names every link itself
    for number in chain.links:
        read = facts.get(number)
        if number == chain.head or read is None or not dependencies(read.body, chain.repo):
            continue
        author = read.author
        standing = author and await standing_of(gh, store, settings, chain.repo, author)
        if not standing or not standing.allowed:
            raise ChainRefused(
                f"#{number} names issues of its own to depend on, but it was opened by "
                f"{f'@{author}' if author else 'someone unknown'}, who may not steer Baton "
                "here, so Baton does not follow them. "
                "List the chain's issues in a tracking issue instead."
            )


def _record_link_texts(
    store: Store, chain: Chain, facts: Mapping[int, IssueFacts], at: datetime, by: str | None
) -> None:
    """Record each link's text as read when its chain was queued (at that time, by by).

    The head's facts hold its text as queued; every other link's, as read then.
    """
    for number in chain.links:
        if number in facts:
            read = facts[number]
            text = snapshot(read.title, read.body, at, by, "chain")
            store.update_queued_text(chain.issue(number), partial(queue, queued=text))


async def _issue_facts(
    gh: GitHubClient, issue: IssueRef, numbers: list[int] | tuple[int, ...]
) -> Mapping[int, IssueFacts]:
    """Return what the chain needs of each issue that exists (pull requests are not issues)."""
    found = {}
    for number in numbers:
        try:
            data = await read_issue(
                gh, IssueRef(installation_id=issue.installation_id, repo=issue.repo, number=number)
            )
        except BadRequest as exc:
            if exc.status_code in (404, 410):
                continue
            raise
        if not data.is_pull_request:
            found[number] = _facts_of(data)
    return found


def _facts_of(data: Issue) -> IssueFacts:
    return IssueFacts(
        number=data.number,
        title=data.title,
        body=data.body,
        open=data.state == "open",
        author=data.user.login if data.user else None,
    )
