"""A scripted Anthropic Messages API on loopback, for driving the real Claude Code CLI.

`POST /v1/messages` answers each request of the agent's loop with the next step of a
script: a streamed reply (text, tool calls for Edit, Write, Bash...), an error shaped as
Anthropic sends it (status, JSON body, headers), or a stream cut mid-response. What the
CLI sent is kept, request by request, for the test to read.

Requests that carry no tools are the CLI's own side calls (a title, a summary); they get
a short text reply and never consume a step.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from aiohttp import web

from tests.providers.scripted import (
    Cut,
    Json,
    ScriptedProvider,
    cut,
    event_stream,
    serving_on_loopback,
    sse,
)


@dataclass(frozen=True)
class Text:
    """A text block of a reply."""

    text: str


@dataclass(frozen=True)
class ToolUse:
    """A tool call the model makes: Claude Code's own tool name and its input."""

    name: str
    input: Mapping[str, Any]


@dataclass(frozen=True)
class Reply:
    """A whole streamed reply: its blocks, and why the model stopped."""

    blocks: tuple[Text | ToolUse, ...]
    headers: Mapping[str, str] = field(default_factory=dict)

    @property
    def stop_reason(self) -> str:
        return "tool_use" if any(isinstance(b, ToolUse) for b in self.blocks) else "end_turn"


@dataclass(frozen=True)
class Failure:
    """An HTTP error as Anthropic answers it: `{"type": "error", "error": {...}}`."""

    status: int
    error_type: str
    message: str
    headers: Mapping[str, str] = field(default_factory=dict)
    details: Mapping[str, Any] | None = None


Step = Reply | Failure | Cut


def text(words: str) -> Reply:
    """Return a reply that only says words (the model ends its turn)."""
    return Reply((Text(words),))


def tool(name: str, **tool_input: Any) -> Reply:
    """Return a reply that calls one tool."""
    return Reply((ToolUse(name, tool_input),))


def bash(command: str, description: str = "Run a command") -> Reply:
    """Return a reply that runs one shell command through Claude Code's Bash tool."""
    return tool("Bash", command=command, description=description)


def throttled() -> Failure:
    """Return a plain 429 throttle (tokens or requests per minute)."""
    return Failure(
        429,
        "rate_limit_error",
        "This request would exceed your organization's rate limit of 50 requests per minute.",
        headers={"retry-after": "0"},
    )


def overloaded() -> Failure:
    """Return Anthropic's 529 overloaded answer."""
    return Failure(529, "overloaded_error", "Overloaded", headers={"retry-after": "0"})


def unauthorized() -> Failure:
    """Return the answer to a key that is not (or no longer) valid."""
    return Failure(401, "authentication_error", "invalid x-api-key")


def credit_too_low() -> Failure:
    """Return the answer to an API account whose prepaid credit is spent."""
    return Failure(
        400,
        "invalid_request_error",
        "Your credit balance is too low to access the Anthropic API. "
        "Please go to Plans & Billing to upgrade or purchase credits.",
    )


def window_closed(claim: str, resets_at: int) -> Failure:
    """Return the 429 a subscription gets when a usage window is spent.

    claim is the window the `anthropic-ratelimit-unified-representative-claim` header
    names (`five_hour`, `seven_day`); resets_at is when it reopens, in Unix seconds.
    """
    return Failure(
        429,
        "rate_limit_error",
        "Number of request tokens has exceeded your rate limit.",
        headers={
            "anthropic-ratelimit-unified-status": "rejected",
            "anthropic-ratelimit-unified-representative-claim": claim,
            "anthropic-ratelimit-unified-reset": str(resets_at),
            "anthropic-ratelimit-unified-overage-status": "rejected",
            "anthropic-ratelimit-unified-overage-disabled-reason": "out_of_credits",
            "anthropic-ratelimit-unified-fallback": "unavailable",
        },
    )


@dataclass
class Seen:
    """One request the CLI made to the provider."""

    path: str
    headers: Mapping[str, str]
    body: Json
    step: Step | None  # what it was answered with; None for a side call

    @property
    def tool_results(self) -> list[Json]:
        """Return the tool results the request carries back to the model."""
        found = []
        for message in self.body.get("messages", []):
            content = message.get("content")
            for block in content if isinstance(content, list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    found.append(block)
        return found

    def last_tool_result_text(self) -> str:
        """Return the text of the last tool result sent back, '' without one."""
        results = self.tool_results
        if not results:
            return ""
        content = results[-1].get("content")
        if isinstance(content, str):
            return content
        return "".join(
            str(part.get("text", "")) for part in content or [] if isinstance(part, dict)
        )


class ScriptedAnthropic(ScriptedProvider[Step, Seen]):
    """The Messages API, answering the agent loop's requests step by step from a script."""

    def no_step_left(self) -> Step:
        return Failure(500, "api_error", "the test's script has no step left")

    @property
    def base_url(self) -> str:
        """Return the URL to hand the CLI as ANTHROPIC_BASE_URL."""
        return self.root_url

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/messages", self._messages),
            web.post("/v1/messages/count_tokens", self._count_tokens),
        ]

    async def elsewhere(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({})  # the CLI's connection warm-up (HEAD /)

    async def _count_tokens(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"input_tokens": 100})

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        seen = partial(Seen, request.path_qs, dict(request.headers), body)
        step = self.answer(seen, side_call=not body.get("tools"))
        if step is None:
            return await self._stream(request, body, text("OK"))
        if isinstance(step, Failure):
            return failure_response(step)
        if not body.get("stream"):
            return await self._whole(request, body, step)
        return await self._stream(request, body, step)

    async def _whole(self, request: web.Request, body: Json, step: Reply | Cut) -> web.Response:
        """Answer a request that asked for no stream (the CLI's fallback) in one JSON body."""
        if isinstance(step, Cut):
            await cut(request)
            return web.Response(status=500)  # never sent: the connection is gone
        whole = message(
            f"msg_{self.serial()}",
            str(body.get("model", "claude")),
            content=[_content(block, self.serial()) for block in step.blocks],
            stop_reason=step.stop_reason,
            output_tokens=20,
        )
        return web.json_response(whole, headers=dict(step.headers))

    async def _stream(
        self, request: web.Request, body: Json, step: Reply | Cut
    ) -> web.StreamResponse:
        headers = {"request-id": f"req_{self.serial()}"}
        if isinstance(step, Reply):
            headers.update(step.headers)
        response = await event_stream(request, headers)
        model = str(body.get("model", "claude-sonnet-4-5"))
        message_id = f"msg_{self.serial()}"
        if isinstance(step, Cut):
            for event in reply_events(message_id, model, [text_block(step.text)], "end_turn")[:3]:
                await response.write(event)
            await cut(request)  # gone mid-reply: no message_stop, no closing chunk
            return response
        blocks = [_streamed(block, self.serial()) for block in step.blocks]
        for event in reply_events(message_id, model, blocks, step.stop_reason):
            await response.write(event)
        await response.write_eof()
        return response


def message(
    message_id: str,
    model: str,
    input_tokens: int = 120,
    *,
    content: Sequence[Json] = (),
    stop_reason: str | None = None,
    output_tokens: int = 1,
) -> Json:
    """Return an assistant message as the Messages API sends it: whole, or (with no
    content and no stop yet) as its stream starts."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(content),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens},
    }


@dataclass(frozen=True)
class Block:
    """A content block as a stream sends it: how it starts, then its deltas."""

    start: Json
    deltas: Sequence[Json]


def reply_events(
    message_id: str,
    model: str,
    blocks: Sequence[Block],
    stop_reason: str,
    *,
    input_tokens: int = 120,
    output_tokens: int = 20,
) -> list[bytes]:
    """Return a streamed reply's server-sent events, as the Messages API sends them: the
    message's start, each block's start, deltas and stop, then why the model stopped."""
    start = message(message_id, model, input_tokens)
    events = [_event("message_start", {"message": start})]
    for index, block in enumerate(blocks):
        events.append(_event("content_block_start", {"index": index, "content_block": block.start}))
        for delta in block.deltas:
            events.append(_event("content_block_delta", {"index": index, "delta": delta}))
        events.append(_event("content_block_stop", {"index": index}))
    stop = {"delta": {"stop_reason": stop_reason, "stop_sequence": None}}
    events.append(_event("message_delta", {**stop, "usage": {"output_tokens": output_tokens}}))
    events.append(_event("message_stop", {}))
    return events


def _content(block: Text | ToolUse, serial: str) -> Json:
    if isinstance(block, Text):
        return {"type": "text", "text": block.text}
    return {
        "type": "tool_use",
        "id": f"toolu_{serial}",
        "name": block.name,
        "input": dict(block.input),
    }


def text_block(*parts: str) -> Block:
    """Return a text block as a stream sends it, in these parts."""
    return Block({"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in parts])


def _streamed(block: Text | ToolUse, serial: str) -> Block:
    if isinstance(block, Text):
        return text_block(block.text)
    start = {"type": "tool_use", "id": f"toolu_{serial}", "name": block.name, "input": {}}
    delta = {"type": "input_json_delta", "partial_json": json.dumps(dict(block.input))}
    return Block(start, (delta,))


def _event(kind: str, data: Json) -> bytes:
    return sse({"type": kind, **data}, kind)


def failure_response(step: Failure) -> web.Response:
    """Return the HTTP answer to a request that failed, as Anthropic shapes it."""
    error: Json = {"type": step.error_type, "message": step.message}
    if step.details is not None:
        error["details"] = dict(step.details)
    return web.json_response(
        {"type": "error", "error": error, "request_id": "req_failed"},
        status=step.status,
        headers=dict(step.headers),
    )


def serving() -> AbstractAsyncContextManager[ScriptedAnthropic]:
    """Serve a scripted provider on a free loopback port for the block's duration."""
    return serving_on_loopback(ScriptedAnthropic())
