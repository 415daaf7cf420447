"""Agent adapters: each turns one agent CLI's own output into an AgentResult."""

from __future__ import annotations

from bot.agents.base import Adapter, AgentConfigError, AgentRequest
from bot.agents.command import CommandAdapter
from bot.settings import Settings

__all__ = ["Adapter", "AgentConfigError", "AgentRequest", "adapter_for"]


def adapter_for(settings: Settings) -> Adapter:
    """Return the adapter the settings select."""
    if settings.agent == "command":
        return CommandAdapter(settings.agent_command)
    raise AgentConfigError(f"unknown agent {settings.agent!r}")
