"""Process settings, read from the environment and from a .env file in the working directory."""

from __future__ import annotations

import contextlib
import re
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    Field,
    IPvAnyNetwork,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bot.domain.commands import Role
from bot.domain.ingress import DEFAULT_TRUSTED, MIN_OPERATOR_TOKEN_CHARS
from bot.domain.model import AgentName, Labels, Limits, Policy
from bot.ops.logs import LogFormat, mask_secrets

# GitHub's rule for an account's login: alphanumerics and single hyphens, at most 39.
ACCOUNT_LOGIN = re.compile(r"[A-Za-z0-9](?:-?[A-Za-z0-9]){0,38}")


class SettingsError(Exception):
    """A setting is missing or malformed; the message names the variable."""


def operator_token_too_short(length: int) -> str:
    """Say why an operator token of this length is refused, and how to make one."""
    return (
        f"BATON_OPERATOR_TOKEN is {length} characters: use {MIN_OPERATOR_TOKEN_CHARS} or more "
        "random ones (e.g. `openssl rand -hex 32`)"
    )


class Settings(BaseSettings):
    """Everything a Baton process needs to know about its deployment."""

    # A variable set in the environment wins over the same one in ./.env (`baton setup` writes it).
    model_config = SettingsConfigDict(
        extra="ignore", populate_by_name=True, env_file=".env", env_file_encoding="utf-8"
    )

    github_app_id: str | None = Field(default=None, validation_alias="GITHUB_APP_ID")
    github_private_key: SecretStr | None = Field(
        default=None, validation_alias="GITHUB_PRIVATE_KEY"
    )
    github_private_key_path: Path | None = Field(
        default=None, validation_alias="GITHUB_PRIVATE_KEY_PATH"
    )
    github_webhook_secret: SecretStr | None = Field(
        default=None, validation_alias="GITHUB_WEBHOOK_SECRET"
    )
    github_api_url: str = Field(default="https://api.github.com", validation_alias="GITHUB_API_URL")
    redis_url: str = Field(default="redis://127.0.0.1:6379/0", validation_alias="REDIS_URL")
    redis_tls_verify: bool = Field(
        default=True,
        validation_alias="BATON_REDIS_TLS_VERIFY",
        description="Whether a `rediss://` Redis's certificate is verified. `false` keeps the "
        "connection encrypted without verifying it, for a Redis whose certificate is "
        "self-signed, such as Heroku Redis's.",
    )
    data_dir: Path = Field(default=Path("var/baton"), validation_alias="BATON_DATA_DIR")
    transcript_store: str = Field(
        default="redis",
        validation_alias="BATON_TRANSCRIPT_STORE",
        description="Where each attempt's transcript is kept when the attempt ends (masked, "
        "its last 1 MB), for every web process and `baton transcript` to read: `redis`, or "
        "`dir:<absolute path>`, a directory every machine reaches (a shared volume, or an "
        "object store mounted as one).",
    )
    transcript_days: int = Field(
        default=14,
        ge=1,
        validation_alias="BATON_TRANSCRIPT_DAYS",
        description="How many days a kept transcript can be read: Redis expires it then; in a "
        "directory, older files are deleted as new ones are written.",
    )
    port: int = Field(default=8000, validation_alias="PORT")
    log_format: LogFormat = Field(
        default="json",
        validation_alias="BATON_LOG_FORMAT",
        description="How processes log: `json` (one object per line, with the delivery, "
        "repository, issue, run and job it concerns) or `text`; secrets are masked in both.",
    )

    bot_login: str | None = Field(
        default=None,
        validation_alias="BATON_BOT_LOGIN",
        description="The App's bot login (`<slug>[bot]`); learnt from GET /app when unset.",
    )
    operator_token: SecretStr | None = Field(
        default=None,
        validation_alias="BATON_OPERATOR_TOKEN",
        description="The token that opens the web process's /status page and /metrics, "
        f"at least {MIN_OPERATOR_TOKEN_CHARS} characters; unset, both answer 404.",
    )
    trusted_proxy_header: str = Field(
        default="X-Forwarded-For",
        validation_alias="BATON_TRUSTED_PROXY_HEADER",
        description="The header a trusted proxy names the client in (its last entry, for a "
        "list): wrong operator tokens count against that client, not the proxy, so one "
        "client behind it cannot lock the operator out (`Fly-Client-IP` on Fly).",
    )
    trusted_proxies: Annotated[list[IPvAnyNetwork], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_TRUSTED),
        validation_alias="BATON_TRUSTED_PROXIES",
        description="The networks whose peers are trusted proxies, comma-separated; unset, "
        "loopback and private addresses (a proxy on the machine, a platform's router).",
    )
    queue_label: str = Field(default="baton:queue", validation_alias="BATON_QUEUE_LABEL")
    in_progress_label: str = Field(
        default="baton:in-progress", validation_alias="BATON_IN_PROGRESS_LABEL"
    )
    review_label: str = Field(default="baton:review", validation_alias="BATON_REVIEW_LABEL")
    halted_label: str = Field(default="baton:halted", validation_alias="BATON_HALTED_LABEL")
    escalated_label: str = Field(
        default="baton:escalated", validation_alias="BATON_ESCALATED_LABEL"
    )
    max_attempts: int = Field(default=3, ge=1, validation_alias="BATON_MAX_ATTEMPTS")
    max_continuations: int = Field(default=3, ge=0, validation_alias="BATON_MAX_CONTINUATIONS")
    max_resume_reentries: int = Field(
        default=2, ge=0, validation_alias="BATON_MAX_RESUME_REENTRIES"
    )
    resume_buffer_seconds: float = Field(
        default=120.0,
        ge=0,
        validation_alias="BATON_RESUME_BUFFER_SECONDS",
        description="How long after a usage window's reset a halted issue resumes.",
    )
    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        validation_alias="BATON_MAX_COST_USD",
        description="The most an issue may spend on the agent, summed over its attempts "
        "since it was queued; unset, no cap.",
    )
    monthly_budget_usd: float | None = Field(
        default=None,
        gt=0,
        validation_alias="BATON_MONTHLY_BUDGET_USD",
        description="The most the deployment's agents may spend, in US dollars, over the "
        "rolling 30 days (UTC days: today and the 29 before it); once spent, no new issue "
        "starts until that spend falls below it, while issues already started go on. "
        "Unset, no budget.",
    )
    halt_on_usage_window: bool = Field(
        default=True,
        validation_alias="BATON_HALT_ON_USAGE_WINDOW",
        description="Halt at a provider's usage window and resume when it reopens; "
        "false escalates instead.",
    )
    max_concurrent_runs_per_repo: int | None = Field(
        default=None,
        ge=1,
        validation_alias="BATON_MAX_CONCURRENT_RUNS_PER_REPO",
        description="The most agent runs at once on one repository's issues; unset, "
        "no limit but the workers.",
    )
    required_checks: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        validation_alias="BATON_REQUIRED_CHECKS",
        description="Check-run names or commit-status contexts a pull request must pass to "
        "be green, comma-separated; unset, every check on the head counts.",
    )
    no_checks_after_seconds: float = Field(
        default=120.0,
        gt=0,
        validation_alias="BATON_NO_CHECKS_AFTER_SECONDS",
        description="With no required checks, a pushed head on which no check suite and no "
        "commit status has appeared this long after the push counts as green: its "
        "repository (or its base branch, for a stacked link) runs no CI.",
    )
    write_interval_seconds: float = Field(
        default=1.0,
        ge=0,
        validation_alias="BATON_WRITE_INTERVAL_SECONDS",
        description="The least time between two writes (POST, PATCH, PUT, DELETE) to one "
        "installation, over every worker: GitHub asks integrations to wait a second.",
    )
    write_per_minute: int = Field(
        default=80,
        ge=1,
        validation_alias="BATON_WRITE_PER_MINUTE",
        description="The most writes to one installation in any minute: GitHub's secondary "
        "limit is 80.",
    )
    write_per_hour: int = Field(
        default=500,
        ge=1,
        validation_alias="BATON_WRITE_PER_HOUR",
        description="The most writes to one installation in any hour: GitHub's secondary "
        "limit is 500.",
    )
    lock_ttl_seconds: float = Field(
        default=60.0,
        gt=0,
        validation_alias="BATON_LOCK_TTL_SECONDS",
        description="How long an issue's claim outlives its worker's last heartbeat; a run "
        "whose worker died is found orphaned by the next sweep after that.",
    )
    checkpoint_seconds: float = Field(
        default=300.0,
        gt=0,
        validation_alias="BATON_CHECKPOINT_SECONDS",
        description="How often the agent's work is pushed while it works: its commits to "
        "the issue's branch; its uncommitted edits are kept in Redis for the next attempt.",
    )
    shutdown_grace_seconds: float = Field(
        default=25.0,
        gt=0,
        validation_alias="BATON_SHUTDOWN_GRACE_SECONDS",
        description="How long a worker told to stop (SIGTERM) gives its running agent "
        "to checkpoint and hand the issue to another worker before it exits; keep it "
        "below the platform's own (Heroku kills 30 s after SIGTERM; Fly after its "
        "kill_timeout; systemd after TimeoutStopSec).",
    )
    sweep_interval_seconds: float = Field(
        default=300.0,
        gt=0,
        validation_alias="BATON_SWEEP_INTERVAL_SECONDS",
        description="How often the clock runs the reconcile sweep (and once as it starts).",
    )
    takeover_check_seconds: float = Field(
        default=5.0,
        gt=0,
        validation_alias="BATON_TAKEOVER_CHECK_SECONDS",
        description="How often the clock looks in Redis for claims that lapsed (a worker "
        "died) and has their runs continued at once, between full sweeps.",
    )
    redelivery_interval_seconds: float = Field(
        default=600.0,
        ge=0,
        validation_alias="BATON_REDELIVERY_INTERVAL_SECONDS",
        description="How often the clock lists the App's failed webhook deliveries and asks "
        "GitHub to deliver each lost event again, once (GitHub never does by itself); 0 "
        "turns it off.",
    )
    redelivery_window_hours: float = Field(
        default=6.0,
        gt=0,
        le=72,
        validation_alias="BATON_REDELIVERY_WINDOW_HOURS",
        description="How far back a redelivery pass looks: deliveries older than this are "
        "left alone (GitHub redelivers those of the last 3 days).",
    )
    redelivery_per_pass: int = Field(
        default=50,
        ge=1,
        validation_alias="BATON_REDELIVERY_PER_PASS",
        description="The most events one redelivery pass asks for again, oldest first; the "
        "rest wait for the next pass, so an outage's backlog is replayed at a pace.",
    )
    backoff_base_seconds: float = Field(
        default=60.0, gt=0, validation_alias="BATON_BACKOFF_BASE_SECONDS"
    )
    escalation_mentions: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        validation_alias="BATON_ESCALATION_MENTIONS",
        description="Logins @mentioned in escalation comments, comma-separated.",
    )
    steer_min_role: Role = Field(
        default="write",
        validation_alias="BATON_STEER_MIN_ROLE",
        description="The least repository role (`read`, `triage`, `write`, `maintain`, "
        "`admin`) whose queue labels, requested changes, review comments and comment "
        "commands Baton acts on; a repository's file can raise it, never lower it.",
    )
    trusted_bots: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        validation_alias="BATON_TRUSTED_BOTS",
        description="Bot logins (`<app>[bot]`) Baton acts on as on a collaborator with the "
        "role, comma-separated; every other bot is ignored.",
    )
    max_budget_grant: int = Field(
        default=10,
        ge=0,
        validation_alias="BATON_MAX_BUDGET_GRANT",
        description="The most continuations `/baton budget +N` may add to one issue, "
        "summed over every grant.",
    )

    agent: AgentName = Field(
        default="command",
        validation_alias="BATON_AGENT",
        description="The agent an issue runs unless one is picked for it.",
    )
    agents: Annotated[list[AgentName], NoDecode] = Field(
        default_factory=list,
        validation_alias="BATON_AGENTS",
        description="The agents this deployment runs, comma-separated, `BATON_AGENT` among "
        "them: `/baton start --agent NAME` and an issue's agent label pick one of them for "
        "the issue. Unset, `BATON_AGENT` alone.",
    )
    agent_binary: str | None = Field(
        default=None,
        validation_alias="BATON_AGENT_BINARY",
        description="The CLI `BATON_AGENT` runs, when not `claude`, `codex` or `aider` on PATH.",
    )
    agent_binaries: Annotated[dict[AgentName, str], NoDecode] = Field(
        default_factory=dict,
        validation_alias="BATON_AGENT_BINARIES",
        description="The CLI each other agent of `BATON_AGENTS` runs, when not on PATH under "
        "its own name, as comma-separated `name=path` pairs "
        "(`codex=/opt/codex/bin/codex,aider=/usr/local/bin/aider`).",
    )
    agent_label_prefix: str = Field(
        default="baton:agent:",
        min_length=1,
        validation_alias="BATON_AGENT_LABEL_PREFIX",
        description="The label an issue's agent is picked with, before the agent's name "
        "(`baton:agent:codex`).",
    )
    agent_account: str | None = Field(
        default=None,
        validation_alias="BATON_AGENT_ACCOUNT",
        description="The provider account the agent spends; runs on one account share its "
        "usage windows. Default: the adapter's name.",
    )
    agent_model: str | None = Field(default=None, validation_alias="BATON_AGENT_MODEL")
    codex_base_url: str | None = Field(
        default=None,
        pattern=r"^https?://[^\s/?#]+(/[^\s?#]*)?$",
        validation_alias="BATON_CODEX_BASE_URL",
        description="The Responses API endpoint codex talks to instead of OpenAI's (a proxy, "
        "a gateway or a local model server), e.g. `http://10.0.0.5:8080/v1`; its host:port "
        "is let through the agent's proxy.",
    )
    agent_max_turns: int | None = Field(
        default=None, gt=0, validation_alias="BATON_AGENT_MAX_TURNS"
    )
    agent_command: str | None = Field(default=None, validation_alias="BATON_AGENT_COMMAND")
    agent_passthrough_env: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        validation_alias="BATON_AGENT_PASSTHROUGH_ENV",
        description="Names of variables (provider API keys) handed to the agent; "
        "GitHub credentials and App secrets are never handed over.",
    )
    agent_keys_in_proxy: bool = Field(
        default=True,
        validation_alias="BATON_AGENT_KEYS_IN_PROXY",
        description="Keep the provider key out of the sandbox where the CLI allows it "
        "(Claude Code's ANTHROPIC_API_KEY and ANTHROPIC_AUTH_TOKEN, Codex's CODEX_API_KEY "
        "and OPENAI_API_KEY): the agent holds a "
        "placeholder and the proxy adds the key to its provider's requests.",
    )
    agent_wall_clock_minutes: float = Field(
        default=60.0, gt=0, validation_alias="BATON_AGENT_WALL_CLOCK_MINUTES"
    )
    agent_sandbox: Literal["bwrap", "off"] = Field(
        default="bwrap",
        validation_alias="BATON_AGENT_SANDBOX",
        description="How every process Baton starts for the agent is contained: `bwrap` "
        "(bubblewrap: its own user, PID, IPC, UTS and network namespaces, and a filesystem "
        "that shows only the system, its toolchain and its worktree) or `off`, which runs "
        "agents with the worker's own reach and is reported as a warning everywhere.",
    )
    agent_network: Literal["allowlist", "open", "none"] = Field(
        default="allowlist",
        validation_alias="BATON_AGENT_NETWORK",
        description="The agent's network, through a proxy Baton runs outside the sandbox: "
        "`allowlist` reaches only its provider's hosts and `BATON_AGENT_ALLOWED_HOSTS`, "
        "`open` proxied HTTP(S) to any public host (no raw TCP, ssh or git://, no private "
        "ranges), `none` nothing. The host's loopback services are never reachable unless "
        "listed.",
    )
    agent_allowed_hosts: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        validation_alias="BATON_AGENT_ALLOWED_HOSTS",
        description="More `host[:port]` entries the agent may reach (port 443 when left "
        "out), comma-separated; a loopback address may be named on purpose, e.g. a local "
        "model server.",
    )
    agent_extra_paths: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        validation_alias="BATON_AGENT_EXTRA_PATHS",
        description="Host directories the agent may read and write at the same path, "
        "comma-separated (caches such as `~/.cache/pip`).",
    )
    allow_repo_commands: bool = Field(
        default=False,
        validation_alias="BATON_ALLOW_REPO_COMMANDS",
        description="Honour `agent.adapter: command`, `agent.command` and `setup` from a "
        "repository's own file; they always run in the agent's sandbox.",
    )
    git_author_name: str | None = Field(
        default=None,
        validation_alias="BATON_GIT_AUTHOR_NAME",
        description="Who the commits Baton and its agent make are by; unset, the App's bot "
        "login (`<slug>[bot]`).",
    )
    git_author_email: str | None = Field(
        default=None,
        validation_alias="BATON_GIT_AUTHOR_EMAIL",
        description="Their email; unset, the bot's noreply address "
        "(`<id>+<slug>[bot]@users.noreply.github.com`), which GitHub links to the App.",
    )

    push_to: str = Field(
        default="same",
        validation_alias="BATON_PUSH_TO",
        description="Where Baton pushes its work branches: `same`, the repository itself, or "
        "`fork:OWNER`, a fork of each repository under the account OWNER, where the App is "
        "installed too. From a fork, the agent's code meets the repository's CI as an "
        "outside contributor's does: with no secrets and a read-only token, behind GitHub's "
        "approval for outside contributors (docs/security.md, Fork mode).",
    )

    @field_validator(
        "agents",
        "agent_passthrough_env",
        "escalation_mentions",
        "trusted_bots",
        "required_checks",
        "agent_allowed_hosts",
        "agent_extra_paths",
        "trusted_proxies",
        mode="before",
    )
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        if isinstance(value, str):
            return [name.strip() for name in value.split(",") if name.strip()]
        return value

    @field_validator("agent_binaries", mode="before")
    @classmethod
    def _name_path_pairs(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        pairs = {}
        for entry in (part.strip() for part in value.split(",")):
            name, equals, path = entry.partition("=")
            if not entry:
                continue
            if not equals or not name.strip() or not path.strip():
                raise ValueError(f"{entry!r}: write each agent's CLI as `name=path`")
            pairs[name.strip()] = path.strip()
        return pairs

    @field_validator("agent_allowed_hosts", mode="after")
    @classmethod
    def _host_ports(cls, entries: list[str]) -> list[str]:
        from bot.agents.egress import parse_host_port  # the proxy's own reading of an entry

        for entry in entries:
            parse_host_port(entry)  # a ValueError names the entry
        return entries

    @field_validator("push_to", mode="after")
    @classmethod
    def _push_to(cls, value: str) -> str:
        owner = value.removeprefix("fork:")
        if value == "same" or (owner != value and ACCOUNT_LOGIN.fullmatch(owner)):
            return value
        raise ValueError(f"{value!r}: use `same` or `fork:OWNER`, OWNER an account's login")

    @field_validator("transcript_store", mode="after")
    @classmethod
    def _transcript_store(cls, value: str) -> str:
        directory = value.removeprefix("dir:")
        if value == "redis" or (directory != value and Path(directory).is_absolute()):
            return value
        raise ValueError(f"{value!r}: use `redis` or `dir:<absolute path>`")

    @field_validator("data_dir", "agent_extra_paths", mode="after")
    @classmethod
    def _absolute(cls, value: Path | list[Path]) -> Path | list[Path]:
        # Absolute once: git's alternates and the agent's sandbox name these paths.
        if isinstance(value, Path):
            return value.absolute()
        return [path.absolute() for path in value]

    @model_validator(mode="after")
    def _unverified_tls(self) -> Settings:
        # The add-on sets REDIS_URL itself, so the setting, not the URL, says so.
        url = urlsplit(self.redis_url)
        if self.redis_tls_verify or url.scheme != "rediss" or "ssl_cert_reqs=" in url.query:
            return self
        query = "&".join(part for part in (url.query, "ssl_cert_reqs=none") if part)
        self.redis_url = urlunsplit(url._replace(query=query))
        return self

    @model_validator(mode="after")
    def _offered_agents(self) -> Settings:
        # The default agent first, so `agents[0]` names it in every copy of these settings.
        offered = list(dict.fromkeys(self.agents)) or [self.agent]
        if self.agent not in offered:
            raise ValueError(
                f"BATON_AGENTS ({', '.join(offered)}) must name BATON_AGENT ({self.agent}), "
                "the agent an issue runs unless one is picked for it"
            )
        self.agents = [self.agent, *(name for name in offered if name != self.agent)]
        if "command" in self.agents[1:] and self.agent_command is None:
            raise ValueError("BATON_AGENTS offers `command`, which needs BATON_AGENT_COMMAND")
        return self

    @model_validator(mode="after")
    def _each_agents_binary(self) -> Settings:
        # One map of every agent's binary: a copy of these settings running another agent
        # finds that agent's own, never BATON_AGENT's.
        binaries = dict(self.agent_binaries)
        for name in binaries:
            if name == "command":
                raise ValueError(
                    "BATON_AGENT_BINARIES names `command`, which runs BATON_AGENT_COMMAND"
                )
            if name not in self.agents:
                raise ValueError(
                    f"BATON_AGENT_BINARIES names {name}, which is not one of BATON_AGENTS "
                    f"({', '.join(self.agents)})"
                )
        binary = self.agent_binary if self.agent != "command" else None  # command runs none
        if binary is not None and binaries.get(self.agent, binary) != binary:
            raise ValueError(
                f"BATON_AGENT_BINARY and BATON_AGENT_BINARIES give {self.agent} two CLIs: set one"
            )
        if binary is not None:
            binaries[self.agent] = binary
        self.agent_binaries = binaries
        return self

    @model_validator(mode="after")
    def _one_private_key(self) -> Settings:
        if self.github_private_key is not None and self.github_private_key_path is not None:
            raise ValueError("set GITHUB_PRIVATE_KEY or GITHUB_PRIVATE_KEY_PATH, not both")
        return self

    @cached_property
    def private_key(self) -> str:
        """Return the App's PEM private key, from the variable or the file it names."""
        if self.github_private_key is not None:
            return self.github_private_key.get_secret_value()
        if self.github_private_key_path is not None:
            try:
                return self.github_private_key_path.read_text()
            except OSError as exc:
                raise SettingsError(
                    f"GITHUB_PRIVATE_KEY_PATH={self.github_private_key_path} "
                    f"cannot be read: {exc.strerror}"
                ) from exc
        raise SettingsError("GITHUB_PRIVATE_KEY or GITHUB_PRIVATE_KEY_PATH must be set")

    @property
    def app_id(self) -> str:
        """Return the App id, or say which variable to set."""
        if not self.github_app_id:
            raise SettingsError("GITHUB_APP_ID must be set")
        return self.github_app_id

    @property
    def app_identity(self) -> str | None:
        """Return which App on which GitHub this is (`1234@https://api.github.com`), if set."""
        if not self.github_app_id:
            return None
        return f"{self.github_app_id}@{self.github_api_url.rstrip('/')}"

    @property
    def webhook_secret(self) -> str:
        """Return the webhook secret: there is no serving webhooks without one."""
        if self.github_webhook_secret is None:
            raise SettingsError(
                "GITHUB_WEBHOOK_SECRET must be set: Baton refuses unsigned webhooks"
            )
        return self.github_webhook_secret.get_secret_value()

    @property
    def operator_secret(self) -> str | None:
        """Return the operator token (None when the operator pages are off); refuse a short one."""
        if self.operator_token is None:
            return None
        token = self.operator_token.get_secret_value()
        if len(token) < MIN_OPERATOR_TOKEN_CHARS:
            raise SettingsError(operator_token_too_short(len(token)))
        return token

    @property
    def labels(self) -> Labels:
        """Return the labels Baton shows an issue's state with."""
        return Labels(
            queue=self.queue_label,
            in_progress=self.in_progress_label,
            review=self.review_label,
            halted=self.halted_label,
            escalated=self.escalated_label,
            agent_prefix=self.agent_label_prefix,
        )

    @property
    def limits(self) -> Limits:
        """Return the budgets every issue gets."""
        return Limits(
            max_attempts=self.max_attempts,
            max_continuations=self.max_continuations,
            max_reentries=self.max_resume_reentries,
            max_cost_usd=self.max_cost_usd,
            halt_on_usage_window=self.halt_on_usage_window,
        )

    @property
    def policy(self) -> Policy:
        """Return what applies to an attempt under these settings."""
        return Policy(
            limits=self.limits,
            account=self.agent_account or self.agent,
            escalation_mentions=tuple(self.escalation_mentions),
            labels=self.labels,
            required_checks=tuple(self.required_checks),
            no_checks_after_s=self.no_checks_after_seconds,
        )

    @property
    def agent_program(self) -> str:
        """Return the CLI the agent runs: its own binary where one is set, else its name."""
        return self.agent_binaries.get(self.agent, self.agent)

    def running(self, agent: AgentName, deployment: Settings) -> Settings:
        """Return these settings with agent running in place of the one they name.

        deployment is the process's own settings: the agent they name (`BATON_AGENT`)
        keeps its model and account; any other asks its CLI's default model and spends
        an account of its own name. Each agent runs its own binary (agent_program).
        """
        if agent == self.agent:
            return self
        own = agent == deployment.agent
        return self.model_copy(
            update={
                "agent": agent,
                "agent_model": deployment.agent_model if own else None,
                "agent_account": deployment.agent_account if own else None,
            }
        )

    @property
    def fork_owner(self) -> str | None:
        """Return the account whose forks hold Baton's work branches; None: the repository's."""
        return self.push_to.removeprefix("fork:") if self.push_to != "same" else None

    @property
    def transcript_dir(self) -> Path | None:
        """Return the directory transcripts are kept in; None when Redis keeps them."""
        if self.transcript_store == "redis":
            return None
        return Path(self.transcript_store.removeprefix("dir:"))

    @property
    def lock_ttl_ms(self) -> int:
        """Return the claim's lifetime without a heartbeat, in milliseconds."""
        return int(self.lock_ttl_seconds * 1000)

    @property
    def agent_wall_clock_seconds(self) -> float:
        """Return the agent's wall-clock cap in seconds."""
        return self.agent_wall_clock_minutes * 60


def load_settings() -> Settings:
    """Read settings from the environment, turning a validation error into one line.

    From then on, the deployment's secrets are masked in every log line.
    """
    try:
        settings = Settings()
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in err['loc']) or 'settings'}: {err['msg']}"
            for err in exc.errors()
        )
        raise SettingsError(f"invalid settings: {problems}") from exc
    secrets = (settings.github_webhook_secret, settings.github_private_key, settings.operator_token)
    mask_secrets(secret.get_secret_value() for secret in secrets if secret is not None)
    if settings.github_private_key_path is not None:
        with contextlib.suppress(SettingsError):  # what needs the key says why it is unreadable
            mask_secrets([settings.private_key])
    return settings
