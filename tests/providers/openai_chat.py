"""A scripted OpenAI Chat Completions API on loopback, for driving the real aider CLI.

aider reaches its model through litellm: `POST /v1/chat/completions` for `openai/...`
models, and `POST /v1/messages` for `anthropic/...` ones, both served here. Each request
of aider's chat is answered with the next step of a script: a reply (aider's SEARCH/REPLACE
edit blocks, shell blocks, prose), an error shaped as that provider sends it (status,
JSON body, headers), or a connection cut mid-response. Both APIs are answered streamed
or whole, as the request asks. What aider sent is kept, request by request.

aider's own side calls, the commit message it asks its weak model for, are answered
with `commit_message` and never consume a step.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import Literal

from aiohttp import web

from tests.providers import anthropic
from tests.providers.scripted import (
    Cut,
    Json,
    ScriptedProvider,
    cut,
    event_stream,
    serving_on_loopback,
    sse,
)

Api = Literal["openai", "anthropic"]

# How aider's commit-message prompt starts (aider/prompts.py `commit_system`).
_COMMIT_PROMPT = "generates concise, one-line Git commit messages"


@dataclass(frozen=True)
class Reply:
    """A whole reply of the model: the text aider reads its edits and commands from."""

    content: str
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_s: float = 0.0  # how long the model takes before it answers


@dataclass(frozen=True)
class Failure:
    """An HTTP error, rendered as the API asked answers it.

    OpenAI: `{"error": {"message", "type", "param", "code"}}`; Anthropic:
    `{"type": "error", "error": {"type", "message"}}`.
    """

    status: int
    error_type: str
    message: str
    code: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


Step = Reply | Failure | Cut


def say(*parts: str) -> Reply:
    """Return a reply made of these parts (prose, edit blocks, shell blocks), in order."""
    return Reply("\n\n".join(part.strip("\n") for part in parts) + "\n")


def edit(path: str, search: str, replace: str) -> str:
    """Return one SEARCH/REPLACE block of aider's `diff` edit format; search '' creates."""
    return f"{path}\n```\n<<<<<<< SEARCH\n{search}=======\n{replace}>>>>>>> REPLACE\n```"


def shell(*commands: str) -> str:
    """Return a shell block: the commands aider offers to run once its edits are applied."""
    lines = "\n".join(commands)
    return f"```bash\n{lines}\n```"


def throttled() -> Failure:
    """Return OpenAI's plain 429 throttle: tokens per minute, over in seconds."""
    return Failure(
        429,
        "tokens",
        "Rate limit reached for gpt-4o in organization org-baton on tokens per min (TPM): "
        "Limit 30000, Used 29760, Requested 1250. Please try again in 2.02s. Visit "
        "https://platform.openai.com/account/rate-limits to learn more.",
        code="rate_limit_exceeded",
        headers={"retry-after-ms": "10"},
    )


def insufficient_quota() -> Failure:
    """Return OpenAI's answer to an account whose quota or prepaid credit is spent."""
    return Failure(
        429,
        "insufficient_quota",
        "You exceeded your current quota, please check your plan and billing details. For "
        "more information on this error, read the docs: "
        "https://platform.openai.com/docs/guides/error-codes/api-errors.",
        code="insufficient_quota",
        headers={"retry-after-ms": "10"},
    )


def invalid_key() -> Failure:
    """Return OpenAI's answer to a key that is not (or no longer) valid."""
    return Failure(
        401,
        "invalid_request_error",
        "Incorrect API key provided: sk-revo*****oked. You can find your API key at "
        "https://platform.openai.com/account/api-keys.",
        code="invalid_api_key",
    )


def overloaded(status: int = 503) -> Failure:
    """Return a provider that is down or overloaded: 503 by default, 529 as Anthropic's."""
    return Failure(
        status,
        "server_error",
        "The engine is currently overloaded, please try again later.",
        headers={"retry-after-ms": "10"},
    )


def credit_too_low() -> Failure:
    """Return Anthropic's answer to an API account whose prepaid credit is spent."""
    return _as_anthropic_answers(anthropic.credit_too_low())


def window_closed(claim: str, resets_at: int) -> Failure:
    """Return the 429 Anthropic answers once a subscription's usage window is spent.

    claim is the window (`five_hour`, `seven_day`), resets_at when it reopens (Unix s).
    """
    return _as_anthropic_answers(anthropic.window_closed(claim, resets_at))


def _as_anthropic_answers(failure: anthropic.Failure) -> Failure:
    """Return one of Anthropic's errors (tests/providers/anthropic.py) as a step here."""
    return Failure(failure.status, failure.error_type, failure.message, headers=failure.headers)


@dataclass
class Seen:
    """One request aider made to the provider."""

    api: Api
    path: str
    headers: Mapping[str, str]
    body: Json
    step: Step | None  # what it was answered with; None for a side call

    @property
    def user_text(self) -> str:
        """Return the text of the request's user messages, joined."""
        texts = []
        for message in self.body.get("messages", []):
            if message.get("role") != "user":
                continue
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts += [str(p.get("text", "")) for p in content if isinstance(p, dict)]
        return "\n".join(texts)


class ScriptedChat(ScriptedProvider[Step, Seen]):
    """The provider: answers aider's chat requests step by step from a script, which may
    be one model's only."""

    def __init__(self) -> None:
        super().__init__()
        self.commit_message = "Fix the greeting"

    def no_step_left(self) -> Step:
        return Failure(500, "server_error", "the test's script has no step left")

    @property
    def base_url(self) -> str:
        """Return the provider's root; OpenAI's API is under `/v1`, Anthropic's beside it."""
        return self.root_url

    @property
    def openai_base(self) -> str:
        """Return the URL to hand aider as OPENAI_API_BASE."""
        return f"{self.base_url}/v1"

    @property
    def chat_requests(self) -> list[Seen]:
        """Return the requests of aider's chat (not its commit messages), in order."""
        return self.loop_requests

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/chat/completions", self._openai),
            web.post("/v1/messages", self._anthropic),
        ]

    async def elsewhere(self, request: web.Request) -> web.StreamResponse:
        return web.json_response({"error": {"message": f"no route {request.path}"}}, status=404)

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, "openai")

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, "anthropic")

    async def _answer(self, request: web.Request, api: Api) -> web.StreamResponse:
        body = await request.json()
        seen = partial(Seen, api, request.path_qs, dict(request.headers), body)
        side_call = _COMMIT_PROMPT in _system_text(body)
        step = self.answer(seen, side_call=side_call, model=str(body.get("model")))
        if step is None:
            step = Reply(self.commit_message)
        if isinstance(step, Failure):
            return _failure(api, step)
        if isinstance(step, Reply) and step.delay_s:
            await asyncio.sleep(step.delay_s)
        model = str(body.get("model", "gpt-4o"))
        if body.get("stream"):
            return await self._stream(request, api, model, step)
        return await self._whole(request, api, model, step)

    async def _whole(
        self, request: web.Request, api: Api, model: str, step: Reply | Cut
    ) -> web.StreamResponse:
        payload = json.dumps(self._message(api, model, _said(step))).encode()
        headers = {"content-type": "application/json", **_reply_headers(step)}
        if isinstance(step, Reply):
            return web.Response(body=payload, headers=headers)
        response = web.StreamResponse(headers=headers)
        response.content_length = len(payload)
        await response.prepare(request)
        await response.write(payload[: len(payload) // 3])
        await cut(request)  # gone mid-body: fewer bytes than its Content-Length said
        return response

    async def _stream(
        self, request: web.Request, api: Api, model: str, step: Reply | Cut
    ) -> web.StreamResponse:
        response = await event_stream(request, _reply_headers(step))
        ident = self.serial()
        events = (
            _openai_events(ident, model, _said(step))
            if api == "openai"
            else _anthropic_events(ident, model, _said(step))
        )
        if isinstance(step, Cut):
            for event in events[:2]:
                await response.write(event)
            await cut(request)  # gone mid-stream: no final chunk
            return response
        for event in events:
            await response.write(event)
        await response.write_eof()
        return response

    def _message(self, api: Api, model: str, content: str) -> Json:
        ident = self.serial()
        if api == "anthropic":
            return anthropic.message(
                f"msg_{ident}",
                model,
                1250,
                content=[{"type": "text", "text": content}],
                stop_reason="end_turn",
                output_tokens=60,
            )
        return {
            "id": f"chatcmpl-{ident}",
            "object": "chat.completion",
            "created": 1_790_000_000,
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1250, "completion_tokens": 60, "total_tokens": 1310},
        }


def _system_text(body: Json) -> str:
    system = body.get("system")
    texts = [system] if isinstance(system, str) else []
    if isinstance(system, list):
        texts += [str(p.get("text", "")) for p in system if isinstance(p, dict)]
    for message in body.get("messages", []):
        if message.get("role") == "system" and isinstance(message.get("content"), str):
            texts.append(message["content"])
    return "\n".join(texts)


def _said(step: Reply | Cut) -> str:
    """Return what the reply says, or what a cut reply says before its connection drops."""
    return step.content if isinstance(step, Reply) else step.text


def _reply_headers(step: Reply | Cut) -> dict[str, str]:
    return dict(step.headers) if isinstance(step, Reply) else {}


def _openai_events(ident: str, model: str, content: str) -> list[bytes]:
    def chunk(delta: Json, finish: str | None) -> bytes:
        return sse(
            {
                "id": f"chatcmpl-{ident}",
                "object": "chat.completion.chunk",
                "created": 1_790_000_000,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    half = len(content) // 2
    return [
        chunk({"role": "assistant", "content": ""}, None),
        chunk({"content": content[:half]}, None),
        chunk({"content": content[half:]}, None),
        chunk({}, "stop"),
        sse(
            {
                "id": f"chatcmpl-{ident}",
                "object": "chat.completion.chunk",
                "created": 1_790_000_000,
                "model": model,
                "choices": [],
                "usage": {"prompt_tokens": 1250, "completion_tokens": 60, "total_tokens": 1310},
            }
        ),
        b"data: [DONE]\n\n",
    ]


def _anthropic_events(ident: str, model: str, content: str) -> list[bytes]:
    half = len(content) // 2
    said = anthropic.text_block(content[:half], content[half:])
    return anthropic.reply_events(
        f"msg_{ident}", model, [said], "end_turn", input_tokens=1250, output_tokens=60
    )


def _failure(api: Api, step: Failure) -> web.Response:
    if api == "anthropic":
        said = anthropic.Failure(step.status, step.error_type, step.message, headers=step.headers)
        return anthropic.failure_response(said)
    error = {"message": step.message, "type": step.error_type, "param": None, "code": step.code}
    return web.json_response({"error": error}, status=step.status, headers=dict(step.headers))


def serving() -> AbstractAsyncContextManager[ScriptedChat]:
    """Serve a scripted provider on a free loopback port for the block's duration."""
    # A reply still being delayed (a model that never answers) is not waited for at the end.
    return serving_on_loopback(ScriptedChat(), shutdown_timeout=1.0)
