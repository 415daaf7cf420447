"""What one clean issue costs in GitHub REST API calls, counted by the sandbox GitHub.

GitHub meters an installation's REST calls (5,000 an hour and up, "Rate limits for
the REST API"), so a queued issue that Baton takes from label to merge must cost
fifteen calls at most, not a call per step.
"""

from __future__ import annotations

import json
from typing import Any

import redis
from rq import Queue, Worker

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.jobs import QUEUES
from bot.domain.model import RunState
from bot.domain.render import STATUS_MARKER
from bot.edges.store import Store
from tests.e2e.test_loop import (
    baton_comments,
    labels_are,
    latest_run,
    new_repo,
    run_state,
)
from tests.support import StackSpec

# Where a clean issue's calls go, at most, in a repository Baton has worked in before:
# the label changes (claimed, green, merged: add the new one, take off the one Baton put
# on), the issue's status comment once per phase (claimed, waiting for checks, green,
# merged), opening the pull request with its files, reading the head's check suites
# and commit status once, the settlement audit's read of the pull request's files
# (one call per 100 files), and Baton's check run on the head (created in progress as
# the pull request opens, updated once when it goes green). Starting costs nothing
# more: the label event shows the issue, the repository answers 304 to its conditional
# read, its `.github/baton.yml` was read within the hour, and the owner of a personal
# repository is its admin. The first issue of a repository also reads the repository
# and its file; one queued by someone else than the owner, that person's role (cached
# for a minute).
CALL_BUDGET = {
    "labels": 5,
    "status comment": 4,
    "pull request": 1,
    "checks": 2,
    "audit": 1,
    "check run": 2,
}
BATON_KINDS = ("installation", "app")  # the calls Baton makes: as the App, and as its installation
BATON_LABELS = {"baton:queue", "baton:in-progress", "baton:review"}


# Its own Redis database; a periodic sweep (its calls are not an issue's) far away.
STACK = StackSpec(database=8, env={"BATON_SWEEP_INTERVAL_SECONDS": "9999999"})


async def baton_calls(maintainer: Maintainer) -> dict[str, int]:
    """Return Baton's calls since the counts were reset, per caller kind and endpoint."""
    counted: dict[str, Any] = await maintainer.gh.getitem("/_sandbox/calls")
    return {
        f"{kind} {call}": n
        for kind in BATON_KINDS
        for call, n in counted.get(kind, {}).get("calls", {}).items()
    }


async def quiet(stack: LocalBaton, maintainer: Maintainer) -> bool:
    """Return whether nothing is under way: every webhook delivered, every job done."""
    deliveries = await maintainer.gh.getitem("/_sandbox/deliveries")
    if any(d["status"] == "pending" for d in deliveries):
        return False
    connection = redis.Redis.from_url(stack.redis_url)
    if Store.from_url(stack.redis_url).intake_backlog():
        return False
    if any(Queue(name, connection=connection).count for name in QUEUES):
        return False
    return all(worker.get_state() == "idle" for worker in Worker.all(connection=connection))


async def settled_down(stack: LocalBaton, maintainer: Maintainer) -> None:
    """Wait until nothing is under way, seen twice in a row with nothing called in between."""

    async def still() -> bool:
        before = await baton_calls(maintainer)
        if not await quiet(stack, maintainer):
            return False
        return await quiet(stack, maintainer) and await baton_calls(maintainer) == before

    await eventually(still, "Baton going quiet", 60)


async def warmed_up(stack: LocalBaton, maintainer: Maintainer, store: Store) -> str:
    """Take one issue of a new repository to a green PR; return the repository.

    What Baton learns once per deployment is then known (its installation token,
    minted once an hour, and its bot account's login and id), and once per
    repository (the repository, its file).
    """
    repo = await new_repo(maintainer, stack)
    issue = await maintainer.open_issue(repo, "Warm up", "agent: write greeting.txt hello")
    await maintainer.add_label(repo, int(issue["number"]), "baton:queue")
    await eventually(
        lambda: run_state(store, repo, int(issue["number"]), RunState.PUSHED_GREEN),
        "the first issue going green",
        90,
    )
    return repo


async def test_a_clean_issue_costs_a_call_per_change_from_label_to_merge(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await warmed_up(stack, maintainer, store)
    issue = await maintainer.open_issue(repo, "Greet with hello", "agent: write greeting.txt hello")
    number = int(issue["number"])
    await settled_down(stack, maintainer)  # the workers' first sweep, the repository's push
    await maintainer.gh.delete("/_sandbox/calls")

    await maintainer.add_label(repo, number, "baton:queue")
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN, RunState.FAILED),
        "the run settling",
        90,
    )
    assert run.state is RunState.PUSHED_GREEN, run.reason
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:review"}), "the review label"
    )
    [pr] = [pr for pr in await maintainer.pulls(repo) if pr["number"] == run.pr_number]
    assert pr["body"].startswith(f"Closes #{number}\n")
    assert "## Files changed\n\n- `greeting.txt`\n" in pr["body"]

    async def status_says_green() -> dict[str, Any] | None:
        # Edited after the label, through the paced writes: it may come a moment later.
        [status] = await baton_comments(maintainer, repo, number)
        return status if "pushed-green" in status["body"] else None

    status = await eventually(status_says_green, "the status comment saying pushed-green")
    assert status["body"].startswith(STATUS_MARKER)
    assert run.pr_url is not None and run.pr_url in status["body"]

    await maintainer.merge(repo, int(pr["number"]))
    await eventually(
        lambda: run_state(store, repo, number, RunState.MERGED), "the merge settling", 60
    )
    await eventually(
        lambda: labels_are(maintainer, repo, number, set()), "Baton's labels coming off"
    )
    await settled_down(stack, maintainer)

    [status] = await baton_comments(maintainer, repo, number)
    assert "· merged" in status["body"] and "The pull request was merged." in status["body"]
    merged = latest_run(store, repo, number)
    assert merged is not None and merged.changed_files == ["greeting.txt"]
    labels = await maintainer.labels(repo, number)
    assert not labels & BATON_LABELS
    calls = await baton_calls(maintainer)
    breakdown = json.dumps(dict(sorted(calls.items())), indent=2)
    budget = sum(CALL_BUDGET.values())
    assert sum(calls.values()) <= budget, f"{sum(calls.values())} calls:\n{breakdown}"
