"""Per-repository configuration: the `.github/baton.yml` file on a repository's default branch.

Pure: parsing takes the file's text and returns a RepoConfig or raises a ConfigError
that names each bad key and its line. Every key is optional; an unset key leaves the
deployment's own setting in force. A file can lower the deployment's limits, never raise
them, can raise the role needed to steer Baton, never lower it, and names commands for
the worker only where the deployment allows it.
"""

from __future__ import annotations

import difflib
import shlex
import types
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo

from bot.domain.commands import Role, role_rank
from bot.ops.settings import Settings

CONFIG_PATH = ".github/baton.yml"

_Path = tuple[str | int, ...]


class _FileModel(BaseModel):
    """A mapping in the file: unknown keys are errors, and values are never coerced."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _null_is_left_out(cls, data: object) -> object:
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


def _splits_into_words(command: str) -> str:
    """Refuse a setup command that cannot be split into words, or holds none."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise ValueError(f"cannot split `{command}` into words: {exc}") from exc
    if not words:
        raise ValueError("a setup command is empty")
    return command


class AgentConfig(_FileModel):
    """Which agent runs on the repository's issues, and how."""

    adapter: Literal["command", "claude", "codex", "aider"] | None = Field(
        default=None,
        description="The agent CLI Baton runs; `command`, unless the deployment runs it "
        "already, needs `BATON_ALLOW_REPO_COMMANDS`. Unset: `BATON_AGENT`.",
    )
    command: str | None = Field(
        default=None,
        description="The command line the `command` adapter runs in the worktree, "
        "with the brief on stdin; anything but the deployment's own needs "
        "`BATON_ALLOW_REPO_COMMANDS`. Unset: `BATON_AGENT_COMMAND`.",
    )
    model: str | None = Field(
        default=None,
        description="The model the `claude`, `codex` and `aider` adapters ask for. "
        "Unset: `BATON_AGENT_MODEL` for the deployment's own agent, and the CLI's default "
        "for another adapter.",
    )
    account: str | None = Field(
        default=None,
        description="The provider account the agent spends; runs on the same account "
        "share its usage windows. Unset: the adapter's name.",
    )
    max_turns: int | None = Field(
        default=None,
        gt=0,
        description="The most turns the agent may take in one run (`claude` and `codex`). "
        "It can lower `BATON_AGENT_MAX_TURNS`, never raise it. Unset: `BATON_AGENT_MAX_TURNS`.",
    )


_LabelName = Annotated[str, Field(min_length=1, max_length=50)]  # GitHub's own limits


class LabelsConfig(_FileModel):
    """The labels Baton reads and shows an issue's state with, on this repository."""

    queue: _LabelName | None = Field(
        default=None,
        description="The label a maintainer adds to hand an issue to Baton; it works a few "
        "seconds after the file reaches the default branch. Unset: `BATON_QUEUE_LABEL` "
        "(`baton:queue`).",
    )
    in_progress: _LabelName | None = Field(
        default=None,
        description="Shown while an attempt runs. Unset: `BATON_IN_PROGRESS_LABEL`.",
    )
    review: _LabelName | None = Field(
        default=None,
        description="Shown once the pull request is green and waits for review. "
        "Unset: `BATON_REVIEW_LABEL`.",
    )
    halted: _LabelName | None = Field(
        default=None,
        description="Shown while a usage window holds the issue. Unset: `BATON_HALTED_LABEL`.",
    )
    escalated: _LabelName | None = Field(
        default=None,
        description="Shown when Baton hands the issue to a maintainer. "
        "Unset: `BATON_ESCALATED_LABEL`.",
    )

    @model_validator(mode="after")
    def _distinct(self) -> LabelsConfig:
        named = [value for value in vars(self).values() if value is not None]
        if len(set(named)) != len(named):
            raise ValueError("each of Baton's labels needs a name of its own")
        return self


class RepoConfig(_FileModel):
    """A repository's own settings for Baton, read from `.github/baton.yml`."""

    labels: LabelsConfig = Field(
        default_factory=LabelsConfig,
        description="The labels Baton uses on this repository: the `labels.*` keys.",
    )
    agent: AgentConfig = Field(
        default_factory=AgentConfig,
        description="The agent Baton runs on this repository's issues: the `agent.*` keys.",
    )
    max_attempts: int | None = Field(
        default=None,
        ge=1,
        description="Failed attempts before an issue escalates. It can lower "
        "`BATON_MAX_ATTEMPTS`, never raise it. Unset: `BATON_MAX_ATTEMPTS`.",
    )
    max_continuations: int | None = Field(
        default=None,
        ge=0,
        description="Continuations on the same branch before an issue escalates. It can "
        "lower `BATON_MAX_CONTINUATIONS`, never raise it. Unset: `BATON_MAX_CONTINUATIONS`.",
    )
    max_resume_reentries: int | None = Field(
        default=None,
        ge=0,
        description="Resumptions after usage windows before an issue escalates. It can "
        "lower `BATON_MAX_RESUME_REENTRIES`, never raise it. "
        "Unset: `BATON_MAX_RESUME_REENTRIES`.",
    )
    wall_clock_minutes: float | None = Field(
        default=None,
        gt=0,
        description="The agent's wall-clock cap per run, in minutes. It can lower "
        "`BATON_AGENT_WALL_CLOCK_MINUTES`, never raise it. "
        "Unset: `BATON_AGENT_WALL_CLOCK_MINUTES`.",
    )
    max_cost_usd: float | None = Field(
        default=None,
        gt=0,
        description="The most an issue may spend on the agent, in US dollars, summed over "
        "its attempts since a maintainer last queued it; a run that would start past it "
        "is not started and the issue escalates. It can lower `BATON_MAX_COST_USD`, never "
        "raise it. Unset: `BATON_MAX_COST_USD` (no cost cap, unless set).",
    )
    monthly_budget_usd: float | None = Field(
        default=None,
        gt=0,
        description="The most this repository's agents may spend, in US dollars, over the "
        "rolling 30 days (UTC days: today and the 29 before it); once spent, a newly queued "
        "issue waits, saying until when, and starts when enough of the oldest spend has left "
        "the window. Issues already started go on, within `max_cost_usd`. It can lower "
        "`BATON_MONTHLY_BUDGET_USD`, never raise it. Unset: `BATON_MONTHLY_BUDGET_USD` "
        "(no budget, unless set).",
    )
    halt_on_usage_window: bool | None = Field(
        default=None,
        description="When the agent's provider account meets a usage window, halt the "
        "issue and resume it when the window reopens; `false`: escalate instead, for "
        "maintainers who do not want unattended resumes. Unset: "
        "`BATON_HALT_ON_USAGE_WINDOW` (true unless the deployment says otherwise).",
    )
    strict_preflight: bool = Field(
        default=False,
        description="Chains: pre-flight warnings (links out of dependency order, closed "
        "issues, links that mention the same files) refuse the chain instead of only being "
        "reported on the tracking issue.",
    )
    audit: Literal["advisory", "hold"] = Field(
        default="advisory",
        description="What the settlement audit of a green pull request does with what it "
        "flags (tests deleted or skipped, assertions removed or loosened, CI or thresholds "
        "turned down, a diff it cannot read whole): `advisory` lists the flags in the status "
        "comments and leaves the run as it is; `hold` also keeps a flagged pull request "
        "from the review label and escalates it once, with the flags as the reason.",
    )
    audit_scope: bool = Field(
        default=False,
        description="The settlement audit also flags each changed file the issue's text "
        "does not mention (by path, file name or folder; a test file by the file it tests).",
    )
    draft_until_green: bool = Field(
        default=False,
        description="Open each pull request as a draft, and mark it ready for review once "
        "its checks settle green, so reviewers are not asked to look at a failing one. A "
        "pull request once ready stays ready: a continuation after requested changes never "
        "turns it back into a draft.",
    )
    escalation_mentions: list[str] | None = Field(
        default=None,
        description="Logins @mentioned in escalation comments. Unset: `BATON_ESCALATION_MENTIONS`.",
    )
    max_concurrent_runs: int | None = Field(
        default=None,
        ge=1,
        description="The most agent runs at once on this repository's issues; an issue "
        "queued past it waits for a run to end. It can lower "
        "`BATON_MAX_CONCURRENT_RUNS_PER_REPO`, never raise it. "
        "Unset: `BATON_MAX_CONCURRENT_RUNS_PER_REPO` "
        "(no limit but the deployment's workers, unless set).",
    )
    required_checks: list[str] | None = Field(
        default=None,
        description="The checks a pull request must pass to count as green, by check-run "
        "name or commit-status context. Only these are waited for, and only their failures "
        "go back to the agent. Unset: `BATON_REQUIRED_CHECKS` (every check suite and commit "
        "status on the head, unless set).",
    )
    no_checks_after_seconds: float | None = Field(
        default=None,
        gt=0,
        description="With no `required_checks`, how long after a push a head on which no "
        "check suite and no commit status has appeared counts as green (the repository "
        "runs no CI for it). Unset: `BATON_NO_CHECKS_AFTER_SECONDS` (120).",
    )
    update_branch: bool = Field(
        default=False,
        description="When the base branch moves and one of Baton's open pull requests is only "
        "behind it (no conflict), merge the base into the pull request's branch, as GitHub's "
        "Update branch button does, and settle the new head's checks. Off: such a pull request is "
        "left as it is. A pull request that conflicts goes back to the agent either way, as "
        "a `merge-conflict` continuation.",
    )
    steer_min_role: Role | None = Field(
        default=None,
        description="The least repository role (`read`, `triage`, `write`, `maintain`, "
        "`admin`) whose queue labels, requested changes, review comments and comment "
        "commands Baton acts on in this repository. It can raise `BATON_STEER_MIN_ROLE`, "
        "never lower it. Unset: `BATON_STEER_MIN_ROLE` (`write`).",
    )
    setup: list[Annotated[str, AfterValidator(_splits_into_words)]] | None = Field(
        default=None,
        description="Commands run in order in the worktree before each attempt's agent starts "
        "(install dependencies, generate code). Each is split into words as a shell would "
        "and run as its own process, with the agent's environment and no shell: for `&&` or "
        "pipes, write `sh -c '...'`. A command that fails ends the attempt as an environment "
        "failure, tried again later. Needs `BATON_ALLOW_REPO_COMMANDS`. Unset: no setup.",
    )


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One thing wrong with the file: the dotted key ("" for the whole file) and its line."""

    key: str
    problem: str
    line: int | None = None

    def __str__(self) -> str:
        separator = " " if self.line is not None else ": "
        return f"`{CONFIG_PATH}`{separator}{self.within_file}"

    @property
    def within_file(self) -> str:
        """Return the problem where the file is already named: line, key and what is wrong."""
        where = "" if self.line is None else f"line {self.line}: "
        return f"{where}`{self.key}`: {self.problem}" if self.key else f"{where}{self.problem}"


class ConfigError(Exception):
    """The file is not a valid configuration; the first problem is on the error itself."""

    def __init__(self, problems: Sequence[ConfigProblem]) -> None:
        if not problems:
            raise ValueError("a ConfigError needs at least one problem")
        super().__init__(tuple(problems))
        self.problems: tuple[ConfigProblem, ...] = tuple(problems)
        first = self.problems[0]
        self.key: str = first.key
        self.problem: str = first.problem
        self.line: int | None = first.line

    def __str__(self) -> str:
        more = len(self.problems) - 1
        if not more:
            return str(self.problems[0])
        return f"{self.problems[0]} (and {more} more problem{'s' if more > 1 else ''})"


class InvalidRepoConfig(Exception):
    """A version of a repository's file did not validate: its blob and what is wrong."""

    def __init__(self, blob_sha: str, error: ConfigError) -> None:
        super().__init__(blob_sha, error)
        self.blob_sha = blob_sha
        self.error = error

    def __str__(self) -> str:
        return str(self.error)


# The keys that can only lower a deployment's limit, and the setting each one lowers.
_CAPPED_KEYS: tuple[tuple[str, str], ...] = (
    ("max_attempts", "max_attempts"),
    ("max_continuations", "max_continuations"),
    ("max_resume_reentries", "max_resume_reentries"),
    ("max_cost_usd", "max_cost_usd"),
    ("monthly_budget_usd", "monthly_budget_usd"),
    ("max_concurrent_runs", "max_concurrent_runs_per_repo"),
    ("wall_clock_minutes", "agent_wall_clock_minutes"),
    ("agent.max_turns", "agent_max_turns"),
)

_COMMANDS_OFF = "repository commands are off on this deployment (`BATON_ALLOW_REPO_COMMANDS`)"


def check_repo_limits(settings: Settings, config: RepoConfig) -> list[ConfigProblem]:
    """Return what the file asks for beyond what the deployment allows; empty when nothing.

    A capped key may lower the deployment's value or repeat it, never raise it; where
    the deployment sets no cap, any value lowers it. `steer_min_role` may raise the role
    the deployment asks of whoever steers Baton, never lower it. `agent.adapter` names one
    of the deployment's agents (`BATON_AGENTS`). Commands the worker would run for
    the repository (`agent.adapter: command`, `agent.command`, `setup`) need
    `allow_repo_commands`, unless they are what the deployment runs already.
    """
    problems = []
    for key, name in _CAPPED_KEYS:
        asked = _value_of(config, key)
        limit = getattr(settings, name)
        if asked is not None and limit is not None and asked > limit:
            variable = Settings.model_fields[name].validation_alias
            problem = (
                f"asks for {_number(asked)}, above this deployment's limit of "
                f"{_number(limit)} (`{variable}`)"
            )
            problems.append(ConfigProblem(key, problem))
    asked_role, least = config.steer_min_role, settings.steer_min_role
    if asked_role is not None and role_rank(asked_role) < role_rank(least):
        variable = Settings.model_fields["steer_min_role"].validation_alias
        problem = f"asks for `{asked_role}`, below this deployment's `{least}` (`{variable}`)"
        problems.append(ConfigProblem("steer_min_role", problem))
    adapter = config.agent.adapter
    if adapter is not None and adapter not in settings.agents:
        # Which agent runs decides which provider host its jail may reach: the deployment's.
        offered = ", ".join(settings.agents)
        problem = (
            f"asks for `{adapter}`, which this deployment does not run (`BATON_AGENTS`: {offered})"
        )
        problems.append(ConfigProblem("agent.adapter", problem))
    if not settings.allow_repo_commands:
        agent = config.agent
        commands = {
            "agent.adapter": agent.adapter == "command" and settings.agent != "command",
            "agent.command": agent.command not in (None, settings.agent_command),
            "setup": bool(config.setup),
        }
        problems += [ConfigProblem(key, _COMMANDS_OFF) for key, asked in commands.items() if asked]
    return problems


def _value_of(config: RepoConfig, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value


def _number(value: float) -> str:
    """Write a limit as the file would: 10, not 10.0."""
    return str(int(value)) if float(value).is_integer() else str(value)


def apply_repo_config(settings: Settings, config: RepoConfig) -> Settings:
    """Return the settings one repository's attempts run under.

    The file overrides the deployment's settings key by key. What it asks for beyond
    the deployment's limits (check_repo_limits) is left at the deployment's value:
    whoever starts work for the repository refuses such a file before anything runs.
    """
    agent = config.agent
    asked: dict[str, tuple[str, object]] = {  # the file's key: the setting, its value
        "agent.adapter": ("agent", agent.adapter),
        "agent.command": ("agent_command", agent.command),
        "agent.model": ("agent_model", agent.model),
        "agent.account": ("agent_account", agent.account),
        "agent.max_turns": ("agent_max_turns", agent.max_turns),
        "max_attempts": ("max_attempts", config.max_attempts),
        "max_continuations": ("max_continuations", config.max_continuations),
        "max_resume_reentries": ("max_resume_reentries", config.max_resume_reentries),
        "wall_clock_minutes": ("agent_wall_clock_minutes", config.wall_clock_minutes),
        "max_cost_usd": ("max_cost_usd", config.max_cost_usd),
        "monthly_budget_usd": ("monthly_budget_usd", config.monthly_budget_usd),
        "escalation_mentions": ("escalation_mentions", config.escalation_mentions),
        "halt_on_usage_window": ("halt_on_usage_window", config.halt_on_usage_window),
        "max_concurrent_runs": ("max_concurrent_runs_per_repo", config.max_concurrent_runs),
        "required_checks": ("required_checks", config.required_checks),
        "no_checks_after_seconds": ("no_checks_after_seconds", config.no_checks_after_seconds),
        "steer_min_role": ("steer_min_role", config.steer_min_role),
        "labels.queue": ("queue_label", config.labels.queue),
        "labels.in_progress": ("in_progress_label", config.labels.in_progress),
        "labels.review": ("review_label", config.labels.review),
        "labels.halted": ("halted_label", config.labels.halted),
        "labels.escalated": ("escalated_label", config.labels.escalated),
    }
    refused = {problem.key for problem in check_repo_limits(settings, config)}
    update = {
        name: value
        for key, (name, value) in asked.items()
        if value is not None and key not in refused
    }
    adapter = update.get("agent", settings.agent)
    if adapter != settings.agent:
        # Another adapter spends another account, and asks for its own model (the
        # file's, or its CLI's default): the deployment's are its default agent's.
        if agent.account is None:
            update["agent_account"] = adapter
        if agent.model is None:
            update["agent_model"] = None
    return settings.model_copy(update=update)


@dataclass(frozen=True, slots=True)
class RepoFile:
    """One valid version of a repository's file: its configuration, blob and text.

    A repository without the file has the default configuration, no blob and no text.
    """

    config: RepoConfig = field(default_factory=RepoConfig)
    blob_sha: str = ""
    text: str = ""

    def refused_by(self, settings: Settings) -> InvalidRepoConfig | None:
        """Return why the deployment refuses this file, each problem at its key's line.

        None when the file asks for nothing beyond the deployment's limits.
        """
        problems = check_repo_limits(settings, self.config)
        if not problems:
            return None
        lines = key_lines(self.text)
        located = [replace(problem, line=lines.get(problem.key)) for problem in problems]
        located.sort(key=lambda p: (p.line is None, p.line or 0))
        return InvalidRepoConfig(self.blob_sha, ConfigError(located))


def key_lines(text: str) -> dict[str, int]:
    """Return the line of each dotted key in the file's text; empty when it is not YAML."""
    where = _Where()
    try:
        loader = yaml.SafeLoader(text)
        try:
            list(_walk(loader.get_single_node(), (), where, set()))  # walked for its lines
        finally:
            loader.dispose()
    except yaml.YAMLError:
        return {}
    return {
        _dotted(path): line
        for path, line in where.lines.items()
        if all(isinstance(part, str) for part in path)
    }


def parse_repo_config(text: str) -> RepoConfig:
    """Return the configuration the file's text holds; raise ConfigError naming what is wrong.

    An empty file, or one holding only comments, is the default configuration.
    """
    where = _Where()
    try:
        loader = yaml.SafeLoader(text)
        try:
            node = loader.get_single_node()
            duplicates = list(_walk(node, (), where, set()))
            data: object = None if node is None else loader.construct_document(node)
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([_yaml_problem(exc)]) from exc
    except yaml.reader.ReaderError as exc:  # a control character: it has a position, no line
        problem = f"invalid YAML: unacceptable character #x{exc.character:04x}: {exc.reason}"
        line = text.count("\n", 0, exc.position) + 1
        raise ConfigError([ConfigProblem("", _one_line(problem), line)]) from exc
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigProblem("", _one_line(f"invalid YAML: {exc}"))]) from exc
    if data is None or node is None:
        return RepoConfig()
    if not isinstance(data, dict):
        what = "a list" if isinstance(data, list) else _kind(node.tag)
        problem = f"the file must be a mapping of keys to values, not {what}"
        raise ConfigError([ConfigProblem("", problem, node.start_mark.line + 1)])
    problems = list(duplicates)
    try:
        config = RepoConfig.model_validate(data)
    except ValidationError as exc:
        problems += [_validation_problem(err, where) for err in exc.errors()]
    else:
        if not problems:
            return config
    problems.sort(key=lambda p: (p.line is None, p.line or 0))
    raise ConfigError(problems)


@dataclass
class _Where:
    """Where things are in the file: the line of each key path and list item.

    YAML reads some keys as values (`yes`, `1`, `null`); those are kept apart, in file
    order under their mapping's path, with the key's text and the type YAML gave it.
    So are the plain values YAML reads as something other than a string.
    """

    lines: dict[_Path, int] = field(default_factory=dict)
    odd_keys: dict[_Path, list[tuple[str, int, str]]] = field(default_factory=dict)
    odd_values: dict[_Path, tuple[str, str]] = field(default_factory=dict)

    def line(self, path: _Path) -> int | None:
        """Return the line of the path, or of the nearest enclosing key that has one."""
        for end in range(len(path), 0, -1):
            if path[:end] in self.lines:
                return self.lines[path[:end]]
        return None


_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _walk(node: Any, path: _Path, where: _Where, seen: set[int]) -> Iterable[ConfigProblem]:
    """Record where every mapping key and list item under node is; yield duplicate keys."""
    if node is None or id(node) in seen:  # an alias may point back at its own anchor
        return
    seen.add(id(node))
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _MERGE_TAG:
                continue
            key: _Path = (*path, key_node.value)
            line: int = key_node.start_mark.line + 1
            if key_node.tag != _STR_TAG:
                kind = _kind(key_node.tag)
                where.odd_keys.setdefault(path, []).append((key_node.value, line, kind))
            elif key in where.lines:
                yield ConfigProblem(
                    _dotted(key), f"duplicate key (first given on line {where.lines[key]})", line
                )
            where.lines[key] = line
            yield from _walk(value_node, key, where, seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            item_path: _Path = (*path, index)
            where.lines[item_path] = item.start_mark.line + 1
            yield from _walk(item, item_path, where, seen)
    elif isinstance(node, yaml.ScalarNode) and node.tag != _STR_TAG:
        where.odd_values[path] = (node.value, _kind(node.tag))


def _kind(tag: object) -> str:
    """Return what YAML read a plain scalar as, from its resolved tag."""
    name = str(tag).rsplit(":", 1)[-1]
    return _KINDS.get(name, f"a {name}")


_KINDS = {
    "str": "a string",
    "int": "a number",
    "float": "a number",
    "bool": "a boolean",
    "null": "null",
    "timestamp": "a date",
}


def _yaml_problem(exc: Any) -> ConfigProblem:
    """Turn a YAML syntax error into a problem at the line the parser stopped on."""
    mark = exc.problem_mark or exc.context_mark
    line = None if mark is None else int(mark.line) + 1
    problem = str(exc.problem or "invalid YAML")
    if exc.context:
        context = str(exc.context)
        if exc.context_mark is not None and exc.context_mark.line + 1 != line:
            context += f" (line {exc.context_mark.line + 1})"
        problem = f"{context}: {problem}"
    return ConfigProblem("", _one_line(f"invalid YAML: {problem}"), line)


def _validation_problem(err: Any, where: _Where) -> ConfigProblem:
    """Turn one pydantic error into a problem on the dotted key, at the line it is on."""
    loc: _Path = tuple(err["loc"])
    if err["type"] == "invalid_key" and where.odd_keys.get(loc[:-1]):
        text, line, kind = where.odd_keys[loc[:-1]].pop(0)
        return ConfigProblem(
            _dotted((*loc[:-1], text)),
            f"unknown key: YAML reads `{text}` as {kind}, not a name",
            line,
        )
    problem = str(err["msg"])
    if err["type"] == "extra_forbidden" and loc:
        problem = _unknown_key(loc)
    elif err["type"] == "model_type":
        problem = "Input should be a mapping of keys to values"
    elif err["type"] == "string_type" and loc in where.odd_values:
        text, kind = where.odd_values[loc]
        problem += f" (YAML reads `{text}` as {kind}: quote it)"
    return ConfigProblem(_dotted(loc), _one_line(problem), where.line(loc))


def _unknown_key(loc: _Path) -> str:
    """Say that the key is unknown, and which key was probably meant."""
    model: type[BaseModel] = RepoConfig
    for part in loc[:-1]:
        info = model.model_fields.get(str(part))
        annotation = None if info is None else info.annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return "unknown key"
        model = annotation
    known = list(model.model_fields)
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    if close:
        return f"unknown key (did you mean `{close[0]}`?)"
    return f"unknown key (known keys: {', '.join(known)})"


def _dotted(path: _Path) -> str:
    return ".".join(str(part) for part in path)


def _one_line(text: str) -> str:
    return " ".join(text.split())


EXAMPLE_CONFIG = """\
# .github/baton.yml
agent:
  adapter: claude
  # command: my-agent --brief "$BATON_BRIEF"  # read only by the command adapter
  model: claude-sonnet-4-5
  account: team-claude
  max_turns: 80
max_attempts: 2
max_continuations: 3
max_resume_reentries: 1
wall_clock_minutes: 45
max_cost_usd: 20
monthly_budget_usd: 500
halt_on_usage_window: true
strict_preflight: false
audit: hold
audit_scope: true
draft_until_green: true
escalation_mentions:
  - octocat
  - hubot
max_concurrent_runs: 2
required_checks:
  - test (3.12)
  - lint
no_checks_after_seconds: 300  # used only without required_checks
update_branch: true
steer_min_role: maintain
setup:  # where the deployment sets BATON_ALLOW_REPO_COMMANDS
  - npm ci
  - sh -c 'make generate && make schema'
labels:
  queue: agent:go
  in_progress: agent:working
  review: agent:review
  halted: agent:halted
  escalated: agent:help
"""


def config_reference() -> str:
    """Return the Markdown reference of `.github/baton.yml`, generated from the model."""
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    for key, info in _fields(RepoConfig, ""):
        description = (info.description or "").replace("|", r"\|")
        rows.append(f"| `{key}` | {_type_name(info)} | {_default(info)} | {description} |")
    parts = [
        "<!-- Generated from bot/domain/repo_config.py by config_reference();"
        " do not edit by hand. -->",
        "",
        f"# Repository configuration: `{CONFIG_PATH}`",
        "",
        f"A repository tunes how Baton works on its issues with a file at `{CONFIG_PATH}`, "
        "read from the repository's default branch. Every key is optional: a key left out, "
        "or set to `null`, takes its default, and where the default is *unset* the "
        "deployment's own setting (the environment variable the description names) applies. "
        "A file that is empty or holds only comments changes nothing. An unknown key or a "
        "value of the wrong type is an error, reported with the key and its line.",
        "",
        "A key that sets a limit (attempts, continuations, resumptions, cost, monthly "
        "budget, run slots, wall clock, turns) can lower the deployment's own limit or "
        "repeat it, never raise it; where the deployment sets none, any value is a "
        "lowering. `steer_min_role` is "
        "the other way round: it can raise the role needed to steer Baton, never lower "
        "it. Commands the worker "
        "runs for the repository (`agent.adapter: command`, `agent.command`, `setup`) are "
        "honoured only where the deployment sets `BATON_ALLOW_REPO_COMMANDS`. A file that "
        "asks for more is refused like an invalid one: one comment names each key, the "
        "value asked for and the deployment's limit, and nothing starts.",
        "",
        "## Keys",
        "",
        *rows,
        "",
        "## Example",
        "",
        "```yaml",
        EXAMPLE_CONFIG.rstrip("\n"),
        "```",
        "",
    ]
    return "\n".join(parts)


def _fields(model: type[BaseModel], prefix: str) -> Iterable[tuple[str, FieldInfo]]:
    """Yield every key of the model, dotted, with the keys of nested models after their own."""
    for name, info in model.model_fields.items():
        yield prefix + name, info
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            yield from _fields(annotation, f"{prefix}{name}.")


def _type_name(info: FieldInfo) -> str:
    name = _annotation_name(info.annotation)
    for bound in info.metadata:
        if isinstance(bound, annotated_types.Gt):
            name += f" > {bound.gt}"
        elif isinstance(bound, annotated_types.Ge):
            name += f" ≥ {bound.ge}"
        elif isinstance(bound, annotated_types.Lt):
            name += f" < {bound.lt}"
        elif isinstance(bound, annotated_types.Le):
            name += f" ≤ {bound.le}"
    return name


_NAMES: dict[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _annotation_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Annotated:  # a validated value: named by what it is
        return _annotation_name(args[0])
    if origin in (Union, types.UnionType):
        return " or ".join(_annotation_name(arg) for arg in args if arg is not type(None))
    if origin is Literal:
        return "one of " + ", ".join(f"`{arg}`" for arg in args)
    if origin is list:
        return f"list of {_annotation_name(args[0])}s"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    return _NAMES.get(annotation, str(annotation))


def _default(info: FieldInfo) -> str:
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        return "`{}`"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    return f"`{value}`"
