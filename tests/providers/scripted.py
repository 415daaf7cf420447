"""What the scripted providers share, whatever API they speak.

A provider answers each request of the agent's loop with the next step of its script,
keeps every request it was sent for the test to read, and is served on a free loopback
port for as long as a test needs it. Its replies go out as server-sent events, or are
cut off mid-reply by dropping the connection.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from aiohttp import web

Json = dict[str, Any]

LOOPBACK = "127.0.0.1"
# How long a reply that is cut off lingers before its connection drops: long enough for
# what was written of it to reach the CLI.
MID_REPLY_S = 0.05


@dataclass(frozen=True)
class Cut:
    """A reply whose stream starts, says a little, and then the connection drops."""

    text: str = "Let me look at"


class Recorded(Protocol):
    """A request as a provider keeps it: what it was answered with, None for a side call."""

    @property
    def step(self) -> object | None: ...


StepT = TypeVar("StepT")
SeenT = TypeVar("SeenT", bound=Recorded)


class Script(Generic[StepT]):
    """The steps that answer requests, in order; then `then` for ever, when given."""

    def __init__(self, steps: Iterable[StepT] = (), then: StepT | None = None) -> None:
        self.steps = list(steps)
        self.then = then

    def next(self) -> StepT | None:
        """Return the step that answers the next request; None once the script is spent."""
        if self.steps:
            return self.steps.pop(0)
        return self.then


class ScriptedProvider(Generic[StepT, SeenT]):
    """A provider that answers the agent loop's requests step by step from a script.

    When the script runs out, `then` answers every further request, when given; else
    each extra request is answered with `no_step_left()` (a 500) and counted in `overrun`.
    A script may be for one model only (the request's `model`, e.g. `gpt-4o`): one
    provider then serves runs of different models, each its own way. A subclass serves
    its API's `routes`, and keeps each request in `seen` as it `answer`s it.
    """

    def __init__(self) -> None:
        self.scripts: dict[str | None, Script[StepT]] = {None: Script()}
        self.seen: list[SeenT] = []
        self.overrun = 0
        self.port = 0
        self._serials = itertools.count(1)

    def script(self, *steps: StepT, then: StepT | None = None, model: str | None = None) -> None:
        """Replace the script (of one model's requests, if given): these steps in order,
        then `then` for ever (if given)."""
        self.scripts[model] = Script(steps, then)
        self.overrun = 0

    def next_step(self, model: str | None = None) -> StepT:
        """Return the step that answers the next request (of model's script, if it has one)."""
        step = self.scripts.get(model, self.scripts[None]).next()
        if step is None:
            self.overrun += 1
            return self.no_step_left()
        return step

    def answer(
        self,
        seen: Callable[[StepT | None], SeenT],
        *,
        side_call: bool = False,
        model: str | None = None,
    ) -> StepT | None:
        """Return the step that answers a request, keeping the request as seen makes it of
        that step; None for a side call of the CLI's own, which takes no step."""
        step = None if side_call else self.next_step(model)
        self.seen.append(seen(step))
        return step

    def no_step_left(self) -> StepT:
        """Return the 500 that answers a request the script has no step for."""
        raise NotImplementedError

    def routes(self) -> list[web.RouteDef]:
        """Return the routes of the provider's API."""
        raise NotImplementedError

    async def elsewhere(self, request: web.Request) -> web.StreamResponse:
        """Answer a request for a path the API has no route for."""
        raise NotImplementedError

    def app(self) -> web.Application:
        """Return the aiohttp application that serves the provider's API."""
        app = web.Application()
        app.add_routes([*self.routes(), web.route("*", "/{tail:.*}", self.elsewhere)])
        return app

    @property
    def host_port(self) -> str:
        """Return the provider's `host:port`, as BATON_AGENT_ALLOWED_HOSTS names it."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def root_url(self) -> str:
        """Return the URL of the provider's root."""
        return f"http://{self.host_port}"

    @property
    def loop_requests(self) -> list[SeenT]:
        """Return the requests of the agent's own loop (no side call), in order."""
        return [seen for seen in self.seen if seen.step is not None]

    def serial(self) -> str:
        """Return the next of the provider's serial numbers, for the ids of what it sends."""
        return f"{next(self._serials):04d}"


ProviderT = TypeVar("ProviderT", bound=ScriptedProvider[Any, Any])


@asynccontextmanager
async def serving_on_loopback(
    provider: ProviderT, *, shutdown_timeout: float = 60.0
) -> AsyncIterator[ProviderT]:
    """Serve provider on a free loopback port for the block's duration.

    shutdown_timeout bounds how long the end of the block waits for replies still
    being made (a model that never answers).
    """
    runner = web.AppRunner(provider.app(), access_log=None, shutdown_timeout=shutdown_timeout)
    await runner.setup()
    site = web.TCPSite(runner, LOOPBACK, 0)
    await site.start()
    provider.port = int(runner.addresses[0][1])
    try:
        yield provider
    finally:
        await runner.cleanup()


def sse(data: Json, event: str | None = None) -> bytes:
    """Return one server-sent event: data as JSON, under its event's name when given."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data)}\n\n".encode()


async def event_stream(
    request: web.Request, headers: Mapping[str, str] | None = None
) -> web.StreamResponse:
    """Start the answer to request as a stream of server-sent events."""
    response = web.StreamResponse(headers={"content-type": "text/event-stream", **(headers or {})})
    await response.prepare(request)
    return response


async def cut(request: web.Request) -> None:
    """Drop request's connection mid-reply (no last event, no closing chunk), once what
    was written of the reply has had the time to reach the CLI."""
    await asyncio.sleep(MID_REPLY_S)
    transport = request.transport
    if transport is not None:
        transport.abort()
