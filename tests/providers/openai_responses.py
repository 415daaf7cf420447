"""A scripted OpenAI Responses API on loopback, for driving the real Codex CLI.

Codex 0.171 speaks the Responses API two ways: a WebSocket on `GET /v1/responses`
(each request a `response.create` message, each answer the stream's events as text
messages) and, when the WebSocket fails for good, `POST /v1/responses` streamed as
server-sent events. Both are served here and answer from one script, request by
request: a streamed reply (assistant text, tool calls for code mode's `exec`,
`exec_command`, `apply_patch`), an error shaped as OpenAI sends it (status, JSON body,
headers), or a stream cut mid-reply. What the CLI sent is kept, request by request.

Codex's warm-up requests (`"generate": false`) get an empty completed response and
never consume a step. `websockets=False` makes the server a gateway that only speaks
HTTPS: the WebSocket upgrade gets a 404, as from a gateway that routes only POST.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from aiohttp import WSMsgType, web

from tests.providers.scripted import (
    MID_REPLY_S,
    Cut,
    Json,
    ScriptedProvider,
    cut,
    event_stream,
    serving_on_loopback,
    sse,
)


@dataclass(frozen=True)
class Say:
    """An assistant message of a reply."""

    text: str


@dataclass(frozen=True)
class Call:
    """A function tool call (JSON arguments), e.g. `exec_command`."""

    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class Custom:
    """A freeform tool call (raw text input): code mode's `exec`, or `apply_patch`."""

    name: str
    input: str


Item = Say | Call | Custom


@dataclass(frozen=True)
class Reply:
    """A whole streamed reply: its output items, and the usage it reports."""

    items: tuple[Item, ...]
    input_tokens: int = 1200
    cached_tokens: int = 200
    output_tokens: int = 40


@dataclass(frozen=True)
class Failure:
    """An error as OpenAI answers it: an HTTP status with `{"error": {...}}`.

    Over HTTPS it is the response's status; over the WebSocket it is the wrapped
    error event (`{"type": "error", "status": ..., "error": ..., "headers": ...}`).
    """

    status: int
    error: Mapping[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)


Step = Reply | Failure | Cut


def say(words: str) -> Reply:
    """Return a reply that only says words (the model ends its turn)."""
    return Reply((Say(words),))


def js_string(text: str) -> str:
    """Return text as a JavaScript string literal."""
    return json.dumps(text)


def code(source: str) -> Reply:
    """Return a reply that runs JavaScript through code mode's `exec` tool."""
    return Reply((Custom("exec", source),))


def shell(command: str) -> Reply:
    """Return a reply that runs one shell command, as the default (code mode) model does.

    The command's output becomes the tool's output, with its exit code.
    """
    call = f"{{cmd: {js_string(command)}, yield_time_ms: 30000}}"
    return code(f"const r = await tools.exec_command({call});\ntext(r);\n")


def patch(body: str) -> Reply:
    """Return a reply that edits files through `apply_patch`, from code mode."""
    return code(f"text(await tools.apply_patch({js_string(body)}));\n")


def exec_command(command: str) -> Reply:
    """Return a reply that calls `exec_command` directly (models without code mode)."""
    return Reply((Call("exec_command", {"cmd": command, "yield_time_ms": 30000}),))


def apply_patch(body: str) -> Reply:
    """Return a reply that calls the freeform `apply_patch` tool directly."""
    return Reply((Custom("apply_patch", body),))


def throttled() -> Failure:
    """Return a plain 429 throttle (requests or tokens per minute), not a usage window."""
    return Failure(
        429,
        {
            "type": "requests",
            "code": "rate_limit_exceeded",
            "message": "Rate limit reached for requests per min. Please try again in 0.1s.",
        },
        headers={"retry-after-ms": "100"},
    )


def overloaded(status: int = 503) -> Failure:
    """Return a 5xx: the model is overloaded (503 `server_is_overloaded`) or erring."""
    code, message = (
        ("server_is_overloaded", "The server is overloaded.")
        if status == 503
        else (None, "The server had an error while processing your request.")
    )
    return Failure(status, {"type": "server_error", "code": code, "message": message})


def unauthorized() -> Failure:
    """Return the answer to an API key that is not (or no longer) valid."""
    return Failure(
        401,
        {
            "type": "invalid_request_error",
            "code": "invalid_api_key",
            "message": "Incorrect API key provided: sk-test. You can find your API key at "
            "https://platform.openai.com/account/api-keys.",
        },
    )


def insufficient_quota() -> Failure:
    """Return the 429 OpenAI answers an API account whose credit is spent."""
    return Failure(
        429,
        {
            "type": "insufficient_quota",
            "code": "insufficient_quota",
            "message": "You exceeded your current quota, please check your plan and billing "
            "details.",
            "param": None,
        },
    )


Window = Literal["primary", "secondary"]


def window_closed(window: Window, resets_at: int, plan: str = "plus") -> Failure:
    """Return the 429 a ChatGPT plan gets when a usage window is spent.

    `primary` is the five-hour window, `secondary` the weekly one; resets_at is when it
    reopens, in Unix seconds. The headers are the rate-limit snapshot codex reads.
    """
    minutes = 300 if window == "primary" else 10080
    headers = {
        "x-codex-active-limit": "codex",
        f"x-codex-{window}-used-percent": "100",
        f"x-codex-{window}-window-minutes": str(minutes),
        f"x-codex-{window}-reset-at": str(resets_at),
    }
    other: Window = "secondary" if window == "primary" else "primary"
    headers |= {
        f"x-codex-{other}-used-percent": "40",
        f"x-codex-{other}-window-minutes": "10080" if other == "secondary" else "300",
    }
    return Failure(
        429,
        {
            "type": "usage_limit_reached",
            "message": "The usage limit has been reached",
            "plan_type": plan,
            "resets_at": resets_at,
        },
        headers=headers,
    )


@dataclass
class Seen:
    """One request the CLI made to the provider."""

    transport: Literal["websocket", "https"]
    headers: Mapping[str, str]
    body: Json
    step: Step | None  # what it was answered with; None for a warm-up

    def outputs(self) -> list[str]:
        """Return the tool outputs this request carries back to the model, in order."""
        found = []
        for item in self.body.get("input", []):
            if not isinstance(item, dict):
                continue
            if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                found.append(_output_text(item.get("output")))
        return found

    def user_texts(self) -> list[str]:
        """Return the texts of the user messages the request carries."""
        texts = []
        for item in self.body.get("input", []):
            if (
                isinstance(item, dict)
                and item.get("type") == "message"
                and (item.get("role") == "user")
            ):
                texts += [
                    str(part.get("text", ""))
                    for part in item.get("content", [])
                    if isinstance(part, dict)
                ]
        return texts


def _output_text(output: object) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, dict):
        return _output_text(output.get("content") or output.get("output"))
    if isinstance(output, list):
        return "".join(
            str(part.get("text", "")) if isinstance(part, dict) else str(part) for part in output
        )
    return ""


class ScriptedResponses(ScriptedProvider[Step, Seen]):
    """The Responses API, answering the agent loop's requests step by step from a script,
    over the WebSocket or HTTPS (or HTTPS only, as a gateway, without `websockets`)."""

    def __init__(self, *, websockets: bool = True, api_key: str | None = None) -> None:
        super().__init__()
        self.websockets = websockets
        self.api_key = api_key  # when set, any other key is refused, as OpenAI refuses it
        self.keys_refused = 0
        self.upgrades_refused = 0
        self.other_paths: list[str] = []

    def no_step_left(self) -> Step:
        return Failure(500, {"type": "server_error", "message": "the script has no step left"})

    @property
    def base_url(self) -> str:
        """Return the URL codex takes as `openai_base_url`."""
        return f"{self.root_url}/v1"

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/v1/responses", self._websocket),
            web.post("/v1/responses", self._https),
        ]

    async def elsewhere(self, request: web.Request) -> web.StreamResponse:
        self.other_paths.append(f"{request.method} {request.path_qs}")
        return web.json_response({"error": {"message": "not here"}}, status=404)

    def _refuses_key(self, request: web.Request) -> web.Response | None:
        if self.api_key is None or request.headers.get("authorization") == f"Bearer {self.api_key}":
            return None
        self.keys_refused += 1
        return web.json_response({"error": dict(unauthorized().error)}, status=401)

    async def _https(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._refuses_key(request)) is not None:
            return refused
        body = await request.json()
        seen = partial(Seen, "https", dict(request.headers), body)
        step = self.answer(seen, side_call=body.get("generate") is False)
        if step is None:
            return await self._sse(request, Reply(()))
        if isinstance(step, Failure):
            return web.json_response(
                {"error": dict(step.error)}, status=step.status, headers=dict(step.headers)
            )
        return await self._sse(request, step)

    async def _sse(self, request: web.Request, step: Reply | Cut) -> web.StreamResponse:
        response = await event_stream(request, {"x-request-id": self._id("req")})

        async def send(event: Json) -> None:
            await response.write(sse(event, event["type"]))

        if await self._events(send, step):
            await cut(request)  # gone mid-reply: no response.completed, no last chunk
            return response
        await response.write_eof()
        return response

    async def _websocket(self, request: web.Request) -> web.StreamResponse:
        if not self.websockets or request.headers.get("upgrade", "").lower() != "websocket":
            self.upgrades_refused += 1
            # What a gateway that routes only `POST /v1/responses` answers the upgrade.
            return web.json_response({"error": {"message": "Not Found"}}, status=404)
        if (refused := self._refuses_key(request)) is not None:
            return refused  # at the upgrade, before any request is sent
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        headers = dict(request.headers)

        async def send(event: Json) -> None:
            await ws.send_str(json.dumps(event))

        async for message in ws:
            if message.type != WSMsgType.TEXT:
                break
            body = json.loads(message.data)
            if body.get("type") != "response.create":
                continue  # e.g. `response.processed` acknowledgements
            seen = partial(Seen, "websocket", headers, body)
            step = self.answer(seen, side_call=body.get("generate") is False)
            if step is None:
                await self._events(send, Reply(()))
                continue
            if isinstance(step, Failure):
                await send(
                    {
                        "type": "error",
                        "status": step.status,
                        "error": dict(step.error),
                        "headers": dict(step.headers),
                    }
                )
                continue
            if await self._events(send, step):
                await asyncio.sleep(MID_REPLY_S)
                await ws.close()
                break
        return ws

    async def _events(self, send: Any, step: Reply | Cut) -> bool:
        """Send one reply's events; return whether the connection must now be dropped."""
        response_id = self._id("resp")
        created = {"id": response_id, "object": "response", "status": "in_progress", "output": []}
        await send({"type": "response.created", "response": created})
        if isinstance(step, Cut):
            item_id = self._id("msg")
            await send(
                {
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {
                        "type": "message",
                        "id": item_id,
                        "role": "assistant",
                        "content": [],
                        "status": "in_progress",
                    },
                }
            )
            await send(
                {
                    "type": "response.output_text.delta",
                    "item_id": item_id,
                    "output_index": 0,
                    "content_index": 0,
                    "delta": step.text,
                }
            )
            return True
        output = [self._item(item) for item in step.items]
        for index, item in enumerate(output):
            await send({"type": "response.output_item.added", "output_index": index, "item": item})
            await send({"type": "response.output_item.done", "output_index": index, "item": item})
        usage = {
            "input_tokens": step.input_tokens,
            "input_tokens_details": {"cached_tokens": step.cached_tokens},
            "output_tokens": step.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": step.input_tokens + step.output_tokens,
        }
        await send(
            {
                "type": "response.completed",
                "response": {**created, "status": "completed", "output": output, "usage": usage},
            }
        )
        return False

    def _item(self, item: Item) -> Json:
        if isinstance(item, Say):
            return {
                "type": "message",
                "id": self._id("msg"),
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": item.text, "annotations": []}],
            }
        if isinstance(item, Call):
            return {
                "type": "function_call",
                "id": self._id("fc"),
                "call_id": self._id("call"),
                "name": item.name,
                "arguments": json.dumps(dict(item.arguments)),
                "status": "completed",
            }
        return {
            "type": "custom_tool_call",
            "id": self._id("ctc"),
            "call_id": self._id("call"),
            "name": item.name,
            "input": item.input,
            "status": "completed",
        }

    def _id(self, prefix: str) -> str:
        return f"{prefix}_{self.serial()}"


def serving(
    *, websockets: bool = True, api_key: str | None = None
) -> AbstractAsyncContextManager[ScriptedResponses]:
    """Serve a scripted provider on a free loopback port for the block's duration."""
    return serving_on_loopback(ScriptedResponses(websockets=websockets, api_key=api_key))
