"""Mutated payloads through real processes: `baton web` and its workers never fail on them.

GitHub's example payloads, mutated field by field as tests/web/test_ingress.py does, are
signed with the sandbox's secret and posted to the real web process. Each is accepted,
ignored or refused; none gets a 5xx, and no process logs a traceback, the workers that
run what was accepted included.
"""

from __future__ import annotations

import asyncio
import json
import random

import aiohttp
import redis
from rq import Queue
from rq.registry import StartedJobRegistry

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import eventually
from bot.domain.jobs import AGENTS, EVENTS
from bot.edges.store import Store
from tests.support import StackSpec, payload, post_signed
from tests.web.test_ingress import ROUTES, Mutation, field_by_field

STACK = StackSpec(database=12)
PER_ROUTE = 4  # of each route's field-by-field sweep: about fifty deliveries in all


def sampled_mutations() -> list[tuple[str, Mutation, bytes]]:
    """A fixed sample of every route's field-by-field sweep: event, mutation, payload."""
    pick = random.Random(6)
    return [
        (route[0], mutation, body)
        for route in ROUTES
        for mutation, body in pick.sample(field_by_field(route), PER_ROUTE)
    ]


async def drained(stack: LocalBaton, store: Store) -> bool:
    """Return whether every accepted delivery became a job, and every job has run."""
    connection = redis.Redis.from_url(stack.redis_url)
    queues = [Queue(name, connection=connection) for name in (EVENTS, AGENTS)]
    return store.intake_backlog() == 0 and all(
        queue.count == 0 and StartedJobRegistry(queue=queue).count == 0 for queue in queues
    )


def tracebacks(stack: LocalBaton) -> list[str]:
    return [
        path.name
        for path in stack.log_dir.glob("*.log")
        if "Traceback" in path.read_text(errors="replace")
    ]


async def test_signed_mutated_payloads_never_fail_the_web_process_or_its_workers(
    stack: LocalBaton, store: Store
) -> None:
    deliveries = sampled_mutations()
    answers: list[tuple[int, str]] = []
    async with aiohttp.ClientSession() as session:
        for start in range(0, len(deliveries), 8):
            batch = deliveries[start : start + 8]
            answers += await asyncio.gather(
                *(post_signed(session, stack, event, body) for event, _, body in batch)
            )
    for (event, mutation, _), (status, answer) in zip(deliveries, answers, strict=True):
        assert status in (202, 400), (event, mutation, status, answer)
    statuses = [status for status, _ in answers]
    assert 400 in statuses and 202 in statuses, "some refused, some taken: both doors tried"

    await eventually(lambda: drained(stack, store), "the accepted deliveries' jobs run", 60)
    assert tracebacks(stack) == []


async def test_a_delivery_for_an_installation_github_does_not_have_ends_in_one_line(
    stack: LocalBaton, store: Store
) -> None:
    """GitHub answers 404 when an App mints a token for an installation it does not have."""
    event = payload("issue_comment/created.json")
    event["installation"] = {"id": 424242}
    event["comment"]["body"] = "/baton status"
    async with aiohttp.ClientSession() as session:
        status, answer = await post_signed(
            session, stack, "issue_comment", json.dumps(event).encode()
        )
    assert status == 202, answer

    async def said() -> bool:
        logs = (path.read_text(errors="replace") for path in stack.log_dir.glob("*.log"))
        return any("nothing done: the App has no installation 424242" in log for log in logs)

    await eventually(said, "the command's job saying why it did nothing", 60)
    await eventually(lambda: drained(stack, store), "the command's job done", 60)
    assert tracebacks(stack) == []
