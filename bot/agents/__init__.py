"""Agent adapters: each turns one agent CLI's own output into an AgentResult."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bot.agents.aider import AiderAdapter
from bot.agents.base import Adapter, AgentConfigError, AgentRequest
from bot.agents.claude import ClaudeAdapter
from bot.agents.codex import CodexAdapter
from bot.agents.command import CommandAdapter
from bot.settings import Settings

__all__ = ["Adapter", "AgentConfigError", "AgentRequest", "adapter_for", "build_adapter"]

_ADAPTERS: dict[str, Callable[..., Adapter]] = {
    "command": CommandAdapter,
    "claude": ClaudeAdapter,
    "codex": CodexAdapter,
    "aider": AiderAdapter,
}


def adapter_for(settings: Settings) -> Adapter:
    """Return the adapter the settings select, with the options they give it."""
    if settings.agent == "command":
        return CommandAdapter(settings.agent_command)
    options: dict[str, Any] = {"model": settings.agent_model}
    if settings.agent_binary:
        options["binary"] = settings.agent_binary
    if settings.agent != "aider":  # aider has no turns to cap: its wall clock bounds it
        options["max_turns"] = settings.agent_max_turns
    return build_adapter(settings.agent, **options)


def build_adapter(name: str, **options: Any) -> Adapter:
    """Return the named adapter built from its constructor's options; refuse unknown ones."""
    if name not in _ADAPTERS:
        raise AgentConfigError(f"unknown agent {name!r} (known: {', '.join(sorted(_ADAPTERS))})")
    try:
        return _ADAPTERS[name](**options)
    except TypeError as exc:  # an option this agent does not take, e.g. max_turns for aider
        raise AgentConfigError(f"agent {name!r}: {exc}") from exc
