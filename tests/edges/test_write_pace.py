"""Writes keep GitHub's pace per installation, over every worker, before GitHub must ask.

Mirrors https://docs.github.com/en/rest/using-the-rest-api/best-practices-for-using-the-rest-api:
"make requests for a single user or client ID serially", "wait at least one second
between each request" that creates content; and the secondary limits of
https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api: "No
more than 80 content-generating requests per minute and no more than 500
content-generating requests per hour" (GraphQL's endpoint counts as a POST).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from gidgethub import QueryError

from bot.devkit.maintainer import Maintainer
from bot.domain.model import IssueRef
from bot.domain.pacing import HOLD_WORKER_S, WritePace
from bot.edges.api import graphql_endpoint
from bot.edges.github import WritesPaused, github_app
from bot.edges.queue import Dispatcher
from bot.edges.store import Store, keys
from bot.ops.settings import Settings
from bot.workflows.conclude import post_status
from bot.workflows.services import Services

REPO = "maintainer/widgets"
GITHUB = WritePace(interval_s=1.0, per_minute=80, per_hour=500)
APP = "1@https://api.github.example"


def test_writes_from_many_workers_at_once_take_slots_a_second_apart(store: Store) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        slots = list(
            pool.map(lambda _: store.take_write_slot(APP, 1, GITHUB, HOLD_WORKER_S), range(12))
        )
    assert all(slot.taken for slot in slots)
    times = sorted(slot.at for slot in slots)
    assert all(later - earlier >= 1.0 - 1e-6 for earlier, later in itertools.pairwise(times))
    # Another installation keeps its own pace.
    other = store.take_write_slot(APP, 2, GITHUB, HOLD_WORKER_S)
    assert other.taken and other.wait_s < 1.0


@pytest.mark.parametrize(
    ("pace", "window_s"),
    [
        (GITHUB.model_copy(update={"interval_s": 0.0}), 60),
        (WritePace(interval_s=0.0, per_minute=1000, per_hour=500), 3600),
    ],
    ids=["the 81st of a minute", "the 501st of an hour"],
)
def test_a_write_past_a_window_waits_for_the_first_to_leave_it(
    store: Store, pace: WritePace, window_s: int
) -> None:
    first = store.take_write_slot(APP, 1, pace, 0.0)
    for _ in range(min(pace.per_minute, pace.per_hour) - 1):
        assert store.take_write_slot(APP, 1, pace, 0.0).taken
    refused = store.take_write_slot(APP, 1, pace, HOLD_WORKER_S)
    assert not refused.taken
    assert refused.at == pytest.approx(first.at + window_s, abs=1e-3)
    # A slot too far off is named, not taken: asking again names the same one.
    assert store.take_write_slot(APP, 1, pace, HOLD_WORKER_S).at == pytest.approx(refused.at)
    waited = store.take_write_slot(APP, 1, pace, window_s + 1.0)
    assert waited.taken and waited.at == pytest.approx(first.at + window_s, abs=1e-3)


def paced(sandbox: dict[str, str], redis_url: str, **pace: str) -> Settings:
    """Return the settings of a Baton on the sandbox with the given write pace."""
    env = {k: v for k, v in sandbox.items() if k != "SANDBOX_ADMIN_TOKEN"}
    return Settings(**env, REDIS_URL=redis_url, **pace)


async def test_writes_of_one_installation_go_a_second_apart_and_reads_do_not_wait(
    maintainer: Maintainer, store: Store, sandbox: dict[str, str], redis_url: str
) -> None:
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    async with github_app(paced(sandbox, redis_url), store) as app:
        gh, other_worker = await app.for_installation(1), await app.for_installation(1)
        started = time.monotonic()
        await asyncio.gather(
            gh.post("/repos/{+repo}/issues", {"repo": REPO}, data={"title": "One"}),
            other_worker.post("/repos/{+repo}/issues", {"repo": REPO}, data={"title": "Two"}),
            gh.post("/repos/{+repo}/issues", {"repo": REPO}, data={"title": "Three"}),
        )
        assert time.monotonic() - started >= 2.0 - 0.05  # three writes, two gaps
        started = time.monotonic()
        for _ in range(3):
            await gh.getitem("/repos/{+repo}/labels", {"repo": REPO})
        assert time.monotonic() - started < 1.0
    issues = await maintainer.gh.getitem("/repos/{+repo}/issues", {"repo": REPO})
    assert sorted(i["title"] for i in issues) == ["One", "Three", "Two"]


async def test_a_write_beyond_the_installations_minute_is_put_off_not_sent(
    maintainer: Maintainer, store: Store, sandbox: dict[str, str], redis_url: str
) -> None:
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    settings = paced(
        sandbox, redis_url, BATON_WRITE_INTERVAL_SECONDS="0", BATON_WRITE_PER_MINUTE="2"
    )
    async with github_app(settings, store) as app:
        gh = await app.for_installation(1)
        for title in ("One", "Two"):
            await gh.post("/repos/{+repo}/issues", {"repo": REPO}, data={"title": title})
        before = time.time()
        with pytest.raises(WritesPaused) as paused:
            await gh.post("/repos/{+repo}/issues", {"repo": REPO}, data={"title": "Three"})
        assert before + 55 < paused.value.until < before + 61
    issues = await maintainer.gh.getitem("/repos/{+repo}/issues", {"repo": REPO})
    assert sorted(i["title"] for i in issues) == ["One", "Two"]


async def test_a_write_waiting_for_its_slot_keeps_a_stop_another_process_was_told(
    maintainer: Maintainer, store: Store, sandbox: dict[str, str], redis_url: str
) -> None:
    """GitHub: after a secondary limit, "do not retry your request until" retry-after
    has passed; a write that took its slot before the stop began is no exception."""
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    async with github_app(paced(sandbox, redis_url), store) as app:
        gh = await app.for_installation(1)
        await gh.post("/repos/{+repo}/issues", {"repo": REPO}, data={"title": "One"})
        waiting = asyncio.create_task(
            gh.post("/repos/{+repo}/issues", {"repo": REPO}, data={"title": "Two"})
        )
        await asyncio.sleep(0.3)  # its slot is a second after the first write's
        until = time.time() + 600  # another process was told to wait ten minutes
        store.stop_installation(app.identity, 1, until)
        with pytest.raises(WritesPaused) as paused:
            await waiting
        assert paused.value.until == pytest.approx(until, abs=1.0)
    issues = await maintainer.gh.getitem("/repos/{+repo}/issues", {"repo": REPO})
    assert [i["title"] for i in issues] == ["One"]


@pytest.mark.parametrize(
    "refusal",
    [{"status": 502}, {"status": 403, "retry_after": 0}],
    ids=["a server error", "a secondary limit"],
)
async def test_a_graphql_call_is_retried_as_a_rest_call_is(
    maintainer: Maintainer,
    store: Store,
    sandbox: dict[str, str],
    redis_url: str,
    refusal: dict[str, object],
) -> None:
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    await maintainer.gh.post(
        "/_sandbox/faults", data={"method": "POST", "path": "^/graphql$", "count": 2, **refusal}
    )
    async with github_app(paced(sandbox, redis_url), store) as app:
        gh = await app.for_installation(1)
        gh.retry_base_s = 0.01
        # No such pull request: GitHub's answer, once the refusals are over, says so.
        with pytest.raises(QueryError, match="Could not resolve"):
            await gh.graphql(
                "mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id})"
                " { pullRequest { isDraft } } }",
                endpoint=graphql_endpoint(gh.base_url),
                id="PR_none",
            )
    counted = await maintainer.gh.getitem("/_sandbox/calls")
    sent = sum(
        n for kind in counted.values() for call, n in kind["calls"].items() if "graphql" in call
    )
    assert sent == 3  # refused twice, answered the third time


def test_writes_that_give_way_leave_a_quarter_of_the_minute_to_the_rest(store: Store) -> None:
    burst = GITHUB.model_copy(update={"interval_s": 0.0})
    for _ in range(60):
        assert store.take_write_slot(APP, 1, burst.giving_way(), 0.0).taken
    assert not store.take_write_slot(APP, 1, burst.giving_way(), 0.0).taken  # a status edit
    for _ in range(20):
        assert store.take_write_slot(APP, 1, burst, 0.0).taken  # a label, a pull request
    assert not store.take_write_slot(APP, 1, burst, 0.0).taken


async def test_a_status_edit_overtaken_while_it_waits_for_its_turn_is_dropped(
    maintainer: Maintainer, store: Store, sandbox: dict[str, str], redis_url: str
) -> None:
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    opened = await maintainer.open_issue(REPO, "Fix it", "")
    issue = IssueRef(installation_id=1, repo=REPO, number=int(opened["number"]))
    settings = paced(sandbox, redis_url, BATON_WRITE_INTERVAL_SECONDS="2")
    services = Services(
        settings=settings, store=store, dispatch=Dispatcher.from_url(redis_url, settings)
    )
    async with github_app(settings, store) as app:
        gh = await app.for_installation(1)
        await post_status(services, gh, issue, "claimed")
        waiting = asyncio.create_task(post_status(services, gh, issue, "running"))
        await asyncio.sleep(0.5)  # "running" waits for its slot, two seconds after "claimed"
        await post_status(services, gh, issue, "green")
        await waiting
    comments = await maintainer.gh.getitem(
        "/repos/{+repo}/issues/{number}/comments", {"repo": REPO, "number": issue.number}
    )
    assert [c["body"] for c in comments] == ["green"]
    counted = await maintainer.gh.getitem("/_sandbox/calls")
    edits = sum(
        n
        for kind in counted.values()
        for call, n in kind["calls"].items()
        if call.startswith("PATCH")
    )
    assert edits == 1  # "running" was never sent


def test_secondary_limits_in_one_burst_count_once_and_a_later_one_counts_on(store: Store) -> None:
    """Writes already on their way when GitHub said stop are answered the same: the stop
    doubles for answers in a row, not for the writes of one burst."""
    assert store.secondary_limits_in_a_row(APP, 1) == 1
    store.stop_installation(APP, 1, time.time() + 60)
    assert [store.secondary_limits_in_a_row(APP, 1) for _ in range(5)] == [1] * 5
    store.redis.delete(keys.secondary_stop(APP, 1))  # the stop is over
    assert store.secondary_limits_in_a_row(APP, 1) == 2
    store.stop_installation(APP, 1, time.time() + 120)
    assert 3600 < store.redis.ttl(keys.secondary_limits(APP, 1)) <= 3720  # an hour past it
