"""Chains through real processes: stacked pull requests on the sandbox GitHub, built in order."""

from __future__ import annotations

from typing import Any

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.chains import STACK_MARKER
from bot.domain.jobs import RunMode, run_issue_job
from bot.domain.model import IssueRef, Run, RunState
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from bot.ops.settings import Settings
from tests.e2e.test_loop import (  # a stack of its own, declared as test_e2e.py's is
    STACK,
    attempt_state,
    comment_saying,
    labels_are,
    latest_run,
    new_repo,
    queued_issue,
    run_state,
    webhooks_lost,
)

__all__ = ["STACK"]  # its stack's declaration

# CI fails while two.txt says "broken"; every other head passes.
CI = "#!/bin/sh\n! grep -q broken two.txt 2>/dev/null\n"
FILES = {"README.md": "# chained\n", ".sandbox/ci": CI}


async def open_links(maintainer: Maintainer, repo: str, *bodies: str) -> list[int]:
    """Open one unlabelled issue per body; return their numbers."""
    return [
        int((await maintainer.open_issue(repo, f"Link {n}", body))["number"])
        for n, body in enumerate(bodies, 1)
    ]


async def queued_chain(
    stack: LocalBaton, maintainer: Maintainer, *bodies: str, files: dict[str, str] = FILES
) -> tuple[str, int, list[int]]:
    """Open one issue per body in a new repository and queue a tracking issue listing them."""
    repo = await new_repo(maintainer, stack, files)
    links = await open_links(maintainer, repo, *bodies)
    tasks = "".join(f"- [ ] #{n}\n" for n in links)
    return repo, await queued_issue(maintainer, repo, "A chain", tasks), links


async def green(store: Store, repo: str, number: int) -> Run:
    return await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN),
        f"#{number} going green",
        60,
    )


async def pull(maintainer: Maintainer, repo: str, number: int) -> dict[str, Any]:
    return next(p for p in await maintainer.pulls(repo) if p["number"] == number)


async def based_on(maintainer: Maintainer, repo: str, number: int, base: str) -> bool:
    return (await pull(maintainer, repo, number))["base"]["ref"] == base


async def test_a_three_link_chain_stacks_recovers_a_red_link_and_merges_in_order(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo, tracking, links = await queued_chain(
        stack,
        maintainer,
        "agent: write one.txt 1",
        "agent@1: write two.txt broken\nagent@2: write two.txt fixed",
        "agent: write three.txt 3",
    )
    runs = [await green(store, repo, number) for number in links]
    first_of_two = store.run(IssueRef(installation_id=1, repo=repo, number=links[1]), 1)
    assert first_of_two is not None and first_of_two.failure_class == "checks-failed"
    assert runs[1].attempt == 2 and runs[1].continuation_of == 1
    # Stacked: each PR targets the branch of the link before it.
    assert [run.base_branch for run in runs] == ["main", runs[0].branch, runs[1].branch]
    for run in runs:
        await eventually(
            lambda run=run: _manifest_marks(maintainer, repo, run), "the stack manifest", 30
        )
    await eventually(
        lambda: comment_saying(maintainer, repo, tracking, "every link is done"),
        "the tracking issue's status",
        30,
    )
    # Merged bottom up: each merge restacks the next link onto main, which goes green again.
    for number in links:
        ready = await eventually(
            lambda number=number: _ready_to_merge(maintainer, store, repo, number),
            f"#{number} restacked onto main and green",
            60,
        )
        await maintainer.merge(repo, ready.pr_number or 0)
        await eventually(
            lambda number=number: run_state(store, repo, number, RunState.MERGED), "the merge", 30
        )
    for number in links:
        assert (await maintainer.issue(repo, number))["state"] == "closed"


async def _ready_to_merge(
    maintainer: Maintainer, store: Store, repo: str, number: int
) -> Run | None:
    run = latest_run(store, repo, number)
    if run is None or run.state is not RunState.PUSHED_GREEN or run.base_branch != "main":
        return None
    pr = await pull(maintainer, repo, run.pr_number or 0)
    return run if pr["base"]["ref"] == "main" and pr["head"]["sha"] == run.head_sha else None


async def _manifest_marks(maintainer: Maintainer, repo: str, run: Run) -> bool:
    body = str((await pull(maintainer, repo, run.pr_number or 0)).get("body") or "")
    return STACK_MARKER in body and f"#{run.issue.number}" in body and "this pull request" in body


async def test_a_merge_that_conflicts_with_a_successor_goes_back_to_its_agent(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo, _, links = await queued_chain(
        stack,
        maintainer,
        "agent: write one.txt 1",
        "agent@1: write shared.txt from the chain\n"
        "agent@2: merge origin/main\nagent@2: write shared.txt from both\n"
        "agent@2: commit Merge main",
    )
    first, second = [await green(store, repo, number) for number in links]
    # Meanwhile a maintainer changes the same file on main.
    await maintainer.push_to_main(
        repo, {"shared.txt": "from a maintainer\n"}, stack.workdir, "Shared by hand"
    )
    assert first.pr_number is not None
    await maintainer.merge(repo, first.pr_number)
    resolved = await eventually(
        lambda: attempt_state(store, repo, links[1], 2, RunState.PUSHED_GREEN),
        "the conflicted link's continuation going green",
        60,
    )
    conflicted = store.run(IssueRef(installation_id=1, repo=repo, number=links[1]), 1)
    assert conflicted is not None and conflicted.failure_class == "merge-conflict"
    assert "`shared.txt`" in str(conflicted.reason)
    assert resolved.continuation_of == 1 and resolved.pr_number == second.pr_number
    assert await based_on(maintainer, repo, second.pr_number or 0, "main")


async def test_a_dependency_cycle_is_refused_before_anything_runs(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack, FILES)
    first, second = await open_links(maintainer, repo, "Depends on #2", "Blocked by #1")
    await maintainer.add_label(repo, first, "baton:queue")
    refusal = await eventually(
        lambda: comment_saying(maintainer, repo, first, "refused"), "the refusal"
    )
    assert "cycle" in refusal["body"] and "#1" in refusal["body"] and "#2" in refusal["body"]
    await eventually(
        lambda: labels_are(maintainer, repo, first, {"baton:escalated"}), "the escalated label"
    )
    assert latest_run(store, repo, first) is None and latest_run(store, repo, second) is None


STOPS_ONCE = "agent@1: exit 3\nagent@2: write two.txt 2"
ONE_ATTEMPT = {**FILES, ".github/baton.yml": "max_attempts: 1\n"}


async def stopped_chain(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> tuple[str, int, list[int]]:
    """A two-link chain whose second link failed its only attempt: the chain is held."""
    repo, tracking, links = await queued_chain(
        stack, maintainer, "agent: write one.txt 1", STOPS_ONCE, files=ONE_ATTEMPT
    )
    await green(store, repo, links[0])
    await eventually(
        lambda: labels_are(maintainer, repo, links[1], {"baton:escalated"}), "link 2 stopping"
    )
    await eventually(lambda: comment_saying(maintainer, repo, tracking, "held"), "the chain held")
    return repo, tracking, links


async def test_a_requeued_chain_resumes_at_the_stopped_link_on_its_predecessors_tip(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo, tracking, links = await stopped_chain(stack, maintainer, store)
    first = latest_run(store, repo, links[0])
    assert first is not None
    await maintainer.add_label(repo, tracking, "baton:queue")
    resumed = await eventually(
        lambda: attempt_state(store, repo, links[1], 2, RunState.PUSHED_GREEN),
        "link 2 resumed",
        60,
    )
    assert resumed.base_branch == first.branch and resumed.base_sha == first.head_sha
    assert len(store.runs(IssueRef(installation_id=1, repo=repo, number=links[0]))) == 1


async def test_a_requeued_chain_refuses_a_predecessor_tip_that_is_gone(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo, tracking, links = await stopped_chain(stack, maintainer, store)
    first = latest_run(store, repo, links[0])
    assert first is not None
    # The branch goes while Baton hears nothing of it (a webhook outage).
    async with webhooks_lost(maintainer, stack):
        await maintainer.delete_branch(repo, first.branch)
    await maintainer.add_label(repo, tracking, "baton:queue")
    refusal = await eventually(
        lambda: comment_saying(maintainer, repo, links[1], "no longer exists"), "the refusal"
    )
    assert first.branch in refusal["body"] and "base branch" in refusal["body"]
    assert [
        run.attempt for run in store.runs(IssueRef(installation_id=1, repo=repo, number=links[1]))
    ] == [1]


async def test_a_predecessor_that_takes_more_commits_carries_its_successors_along(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo, _, links = await queued_chain(
        stack,
        maintainer,
        "agent@1: write one.txt 1\nagent@2: write one.txt 1, reviewed",
        "agent: write two.txt 2",
    )
    first, second = [await green(store, repo, number) for number in links]
    await maintainer.gh.post(
        "/repos/{+repo}/pulls/{number}/reviews",
        {"repo": repo, "number": first.pr_number},
        data={"event": "REQUEST_CHANGES", "body": "Say it was reviewed."},
    )
    reviewed = await eventually(
        lambda: attempt_state(store, repo, links[0], 2, RunState.PUSHED_GREEN),
        "link 1 reviewed",
        60,
    )
    restacked = await eventually(
        lambda: _restacked_on(store, repo, links[1], reviewed), "link 2 on link 1's new tip", 60
    )
    assert restacked.attempt == second.attempt and restacked.head_sha != second.head_sha
    assert restacked.base_branch == first.branch
    assert await based_on(maintainer, repo, second.pr_number or 0, first.branch)


async def _restacked_on(store: Store, repo: str, number: int, predecessor: Run) -> Run | None:
    run = latest_run(store, repo, number)
    if run is None or run.state is not RunState.PUSHED_GREEN:
        return None
    return run if run.base_sha == predecessor.head_sha else None


async def test_a_chain_whose_links_get_no_checks_completes(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """Workflows often run only on PRs into the default branch: a stacked link gets none."""
    repo, tracking, links = await queued_chain(
        stack,
        maintainer,
        "agent: write one.txt 1",
        "agent: write two.txt 2",
        files={"README.md": "# no ci\n"},
    )
    runs = [await green(store, repo, number) for number in links]
    assert [run.base_branch for run in runs] == ["main", runs[0].branch]
    await eventually(
        lambda: comment_saying(maintainer, repo, tracking, "every link is done"),
        "the tracking issue's status",
        30,
    )
    for number in links:  # each merge restacks the next link, which settles again by silence
        ready = await eventually(
            lambda number=number: _ready_to_merge(maintainer, store, repo, number),
            f"#{number} restacked onto main and green",
            60,
        )
        await maintainer.merge(repo, ready.pr_number or 0)
        await eventually(
            lambda number=number: run_state(store, repo, number, RunState.MERGED), "the merge", 30
        )


async def test_links_queued_at_once_each_run_once_however_often_the_chain_advances(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """Queue two issues together, the second `Depends on` the first: one run each.

    The chain's advances repeat (each link's label, head and settlement moves it), and
    a start job can run twice: a link that is under way or green never starts again.
    """
    repo = await new_repo(maintainer, stack, FILES)
    first = await queued_issue(maintainer, repo, "The base", "agent: write one.txt 1")
    second = await queued_issue(
        maintainer, repo, "On top", f"Depends on #{first}\n\nagent: write two.txt 2"
    )
    await green(store, repo, first)
    await green(store, repo, second)
    chain = store.chain_of(IssueRef(installation_id=1, repo=repo, number=second))
    assert chain is not None
    settings = Settings(REDIS_URL=stack.redis_url, BATON_AGENT="command")
    dispatch = Dispatcher.from_url(stack.redis_url, settings)
    key = f"{chain.head}-{chain.generation}"
    for number in (first, second):  # each link's start job, run again
        dispatch.enqueue([run_issue_job(settings, chain.issue(number), key, RunMode.CHAIN)])
    for n in range(3):  # and the chain advanced again and again
        dispatch.advance_chain(chain, f"again-{n}")
    await eventually(lambda: _queues_drained(dispatch), "the repeated jobs done", 30)
    for number in (first, second):
        runs = store.runs(IssueRef(installation_id=1, repo=repo, number=number))
        assert [(r.attempt, r.state) for r in runs] == [(1, RunState.PUSHED_GREEN)]


async def _queues_drained(dispatch: Dispatcher) -> bool:
    return all(
        queue.count == 0 and queue.started_job_registry.count == 0
        for queue in dispatch.queues.values()
    )
