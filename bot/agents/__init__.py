"""Agent adapters: each turns one agent CLI's own output into an AgentResult."""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from bot.agents import aider, claude, codex
from bot.agents.aider import AiderAdapter
from bot.agents.base import Adapter, AgentConfigError, AgentRequest
from bot.agents.claude import ClaudeAdapter
from bot.agents.codex import CodexAdapter, native_executable
from bot.agents.codex import endpoint as codex_endpoint
from bot.agents.codex import programs as codex_programs
from bot.agents.command import CommandAdapter
from bot.agents.egress import (
    Egress,
    EgressPolicy,
    HeldKeys,
    held_keys,
    parse_host_port,
    provider_hosts,
    serve_egress,
)
from bot.agents.home import FreshHome, HomeLayout, agent_home, fresh_agent_home
from bot.agents.jail import EGRESS_SOCKET_NAME
from bot.ops.settings import Settings

__all__ = [
    "TESTED_VERSIONS",
    "Adapter",
    "AgentConfigError",
    "AgentRequest",
    "adapter_for",
    "agent_home",
    "build_adapter",
    "egress_for_run",
    "egress_policy_for",
    "home_for_run",
    "programs_of",
    "reporters_of",
]

_ADAPTERS: dict[str, Callable[..., Adapter]] = {
    "command": CommandAdapter,
    "claude": ClaudeAdapter,
    "codex": CodexAdapter,
    "aider": AiderAdapter,
}

# The CLI versions Baton's tests drive for real (pinned by .ci/install-agent-clis): for each
# adapter, the version tested and the range `baton doctor` accepts without a warning, where
# `x` stands for any number.
TESTED_VERSIONS: dict[str, tuple[str, str]] = {
    "claude": ("2.1.197", "2.1.x"),
    "codex": ("0.171.0", "0.171.x"),  # its events and error texts change between minors
    "aider": ("0.86.2", "0.86.x"),  # its printed lines and retry loop are what Baton reads
}


def adapter_for(settings: Settings) -> Adapter:
    """Return the adapter the settings select, with the options they give it.

    Its CLI is that agent's own (`BATON_AGENT_BINARY` is the default agent's only): an
    agent picked for an issue or by a repository's file runs its own binary, or its
    name on PATH. A name is looked up here, on the worker's PATH: in the jail a writable
    directory on the PATH (a repository's cache) could hold a `claude` of the agent's.
    """
    if settings.agent == "command":
        return CommandAdapter(settings.agent_command)
    binary = shutil.which(settings.agent_program) or settings.agent_program
    options: dict[str, Any] = {"model": settings.agent_model, "binary": binary}
    if settings.agent != "aider":  # aider has no turns to cap: its wall clock bounds it
        options["max_turns"] = settings.agent_max_turns
    if settings.agent == "codex" and settings.codex_base_url:
        options["base_url"] = settings.codex_base_url
    return build_adapter(settings.agent, **options)


def build_adapter(name: str, **options: Any) -> Adapter:
    """Return the named adapter built from its constructor's options; refuse unknown ones."""
    if name not in _ADAPTERS:
        raise AgentConfigError(f"unknown agent {name!r} (known: {', '.join(sorted(_ADAPTERS))})")
    try:
        return _ADAPTERS[name](**options)
    except TypeError as exc:  # an option this agent does not take, e.g. max_turns for aider
        raise AgentConfigError(f"agent {name!r}: {exc}") from exc


def programs_of(
    settings: Settings, setup_commands: Sequence[str] = (), operator_command: str | None = None
) -> tuple[str, ...]:
    """Return the programs the agent's jail must show: the adapter's CLI, or what commands name.

    The operator's own command line (operator_command, the deployment's
    BATON_AGENT_COMMAND) may name its programs and scripts by absolute path, and those
    are shown read-only. A command from a repository's file shows only its first word,
    looked up on PATH: it never chooses which host paths the jail shows.
    """
    if settings.agent == "codex":  # npm's launcher, and the executable it would run
        named: list[str] = list(codex_programs(settings.agent_program))
    elif settings.agent != "command":
        named = [settings.agent_program]
    elif settings.agent_command is not None and settings.agent_command == operator_command:
        named = _operator_programs(settings.agent_command)
    else:
        named = _repository_program(settings.agent_command or "")
    for command in setup_commands:
        named += _repository_program(command)
    return tuple(dict.fromkeys(named))


# What each CLI's next run keeps of its agent home, and which of its files stay read-only.
_HOMES: dict[str, HomeLayout] = {"claude": claude.HOME, "codex": codex.HOME, "aider": aider.HOME}


def home_for_run(settings: Settings, repo: str, number: int) -> FreshHome:
    """Make the issue's agent home again from the operator's template for one run of the
    agent the settings select, keeping what that CLI needs from its last run."""
    layout = _HOMES.get(settings.agent, HomeLayout())
    return fresh_agent_home(settings.data_dir, repo, number, layout)


def reporters_of(settings: Settings) -> tuple[str, ...]:
    """Return the executable whose stdout is the agent's report, for the CLIs that report
    on it (Claude Code, Codex): it runs sealed, so no tool can write that report.

    The command adapter's whole process tree is the agent, and aider is Python reading a
    script: each reports what it likes, which Baton bounds as a claim.
    """
    if settings.agent == "codex":
        return (native_executable(settings.agent_program),)
    if settings.agent == "claude":
        return (settings.agent_program,)
    return ()


def _words(command: str) -> list[str]:
    try:
        return shlex.split(command)
    except ValueError:
        return []


def _operator_programs(command: str) -> list[str]:
    words = _words(command)
    return words[:1] + [word for word in words[1:] if word.startswith("/") and Path(word).is_file()]


def _repository_program(command: str) -> list[str]:
    words = _words(command)
    return words[:1] if words and "/" not in words[0] else []


def egress_policy_for(settings: Settings) -> EgressPolicy | None:
    """Return what the agent may reach through Baton's proxy; None when it reaches nothing."""
    if settings.agent_sandbox == "off" or settings.agent_network == "none":
        return None
    allowed = [*provider_hosts(settings.agent, settings.agent_model)]
    allowed += [parse_host_port(entry) for entry in settings.agent_allowed_hosts]
    if settings.agent == "codex" and settings.codex_base_url:
        allowed.append(codex_endpoint(settings.codex_base_url))
    held = HeldKeys(env={}, credentials=())
    if settings.agent_keys_in_proxy:
        passed = {n: os.environ[n] for n in settings.agent_passthrough_env if n in os.environ}
        try:
            # Codex's endpoint is Baton's setting, written into its config: not its env.
            named = settings.codex_base_url if settings.agent == "codex" else None
            held = held_keys(settings.agent, passed, named)
        except ValueError as exc:
            raise AgentConfigError(str(exc)) from exc
    return EgressPolicy(
        mode=settings.agent_network,
        allowed=frozenset(allowed),
        credentials=held.credentials,
        agent_env=held.env,
    )


@asynccontextmanager
async def egress_for_run(
    policy: EgressPolicy | None, run_label: str
) -> AsyncIterator[tuple[Path | None, Egress | None]]:
    """Serve the agent's proxy for one run: its socket's directory, and the proxy itself.

    The socket lives in a directory of its own under the system's tmp, which keeps
    its path short enough for a Unix socket and out of the data directory.
    """
    if policy is None:
        yield None, None
        return
    directory = Path(tempfile.mkdtemp(prefix="baton-egress-"))
    try:
        async with serve_egress(policy, directory / EGRESS_SOCKET_NAME, run_label) as proxy:
            yield directory, proxy
    finally:
        shutil.rmtree(directory, ignore_errors=True)
