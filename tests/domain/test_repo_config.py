"""The per-repository configuration file: parsing, errors with their lines, the reference."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from bot.domain.model import Labels
from bot.domain.repo_config import (
    CONFIG_PATH,
    EXAMPLE_CONFIG,
    AgentConfig,
    ConfigError,
    ConfigProblem,
    LabelsConfig,
    RepoConfig,
    RepoFile,
    apply_repo_config,
    check_repo_limits,
    config_reference,
    key_lines,
    parse_repo_config,
)
from bot.ops.settings import Settings

DOCS = Path(__file__).parents[2] / "docs" / "config.md"

FULL = """\
agent:
  adapter: command
  command: my-agent --brief "$BATON_BRIEF"
  model: opus
  account: team-claude
  max_turns: 40
max_attempts: 2
max_continuations: 0
max_resume_reentries: 5
wall_clock_minutes: 30.5
max_cost_usd: 12
monthly_budget_usd: 250
halt_on_usage_window: false
strict_preflight: true
audit: hold
audit_scope: true
draft_until_green: true
escalation_mentions: [octocat, hubot]
max_concurrent_runs: 2
required_checks: [test, lint]
no_checks_after_seconds: 30
update_branch: true
steer_min_role: admin
setup: [npm ci, "sh -c 'make generate'"]
labels:
  queue: agent:go
  in_progress: agent:working
  review: agent:review
  halted: agent:halted
  escalated: agent:help
"""


def error_of(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_repo_config(text)
    return caught.value


@pytest.mark.parametrize("text", ["", "\n\n", "# nothing here yet\n  # indented\n", "---\n", "~\n"])
def test_an_empty_file_is_the_defaults(text: str) -> None:
    config = parse_repo_config(text)
    assert config == RepoConfig()
    assert config.agent == AgentConfig()
    assert config.halt_on_usage_window is None
    assert config.max_attempts is None
    assert config.max_cost_usd is None


def test_a_full_file_gives_every_value() -> None:
    config = parse_repo_config(FULL)
    assert config == RepoConfig(
        agent=AgentConfig(
            adapter="command",
            command='my-agent --brief "$BATON_BRIEF"',
            model="opus",
            account="team-claude",
            max_turns=40,
        ),
        max_attempts=2,
        max_continuations=0,
        max_resume_reentries=5,
        wall_clock_minutes=30.5,
        max_cost_usd=12.0,
        monthly_budget_usd=250.0,
        halt_on_usage_window=False,
        strict_preflight=True,
        audit="hold",
        audit_scope=True,
        draft_until_green=True,
        escalation_mentions=["octocat", "hubot"],
        max_concurrent_runs=2,
        required_checks=["test", "lint"],
        no_checks_after_seconds=30,
        update_branch=True,
        steer_min_role="admin",
        setup=["npm ci", "sh -c 'make generate'"],
        labels=LabelsConfig(
            queue="agent:go",
            in_progress="agent:working",
            review="agent:review",
            halted="agent:halted",
            escalated="agent:help",
        ),
    )
    assert all(
        getattr(config, name) != info.get_default(call_default_factory=True)
        for name, info in RepoConfig.model_fields.items()
    )
    for section in (config.agent, config.labels):
        assert all(
            getattr(section, name) != info.get_default()
            for name, info in type(section).model_fields.items()
        )


@pytest.mark.parametrize("text", ["", FULL, EXAMPLE_CONFIG])
def test_a_config_round_trips_through_json(text: str) -> None:
    config = parse_repo_config(text)
    assert RepoConfig.model_validate_json(config.model_dump_json()) == config


def test_null_is_the_same_as_leaving_a_key_out() -> None:
    text = "agent:\nmax_attempts: ~\nhalt_on_usage_window: null\nmax_cost_usd:\n"
    assert parse_repo_config(text) == RepoConfig()


def test_the_config_is_frozen() -> None:
    config = parse_repo_config(FULL)
    with pytest.raises(ValueError, match="frozen"):
        config.max_attempts = 9  # type: ignore[misc]


def test_an_unknown_top_level_key_is_named_with_its_line() -> None:
    error = error_of("max_attempts: 2\n\nmax_atempts: 3\n")
    assert (error.key, error.line) == ("max_atempts", 3)
    assert "unknown key" in error.problem
    assert "`max_attempts`" in error.problem  # the key it most likely meant


def test_an_unknown_key_inside_agent_is_dotted() -> None:
    error = error_of("agent:\n  adapter: claude\n  turns: 5\n")
    assert (error.key, error.line) == ("agent.turns", 3)
    assert "unknown key" in error.problem
    assert "max_turns" in error.problem


def test_a_key_yaml_reads_as_a_value_is_unknown() -> None:
    error = error_of("max_attempts: 2\nyes: 1\n")
    assert (error.key, error.line) == ("yes", 2)
    assert "boolean" in error.problem


def test_a_value_out_of_range_names_the_key_its_line_and_the_problem() -> None:
    error = error_of("max_attempts: 2\nagent:\n  adapter: claude\n\n  max_turns: -1\n")
    assert (error.key, error.line) == ("agent.max_turns", 5)
    assert error.problem == "Input should be greater than 0"


@pytest.mark.parametrize(
    ("text", "key", "words"),
    [
        ("max_attempts: '3'\n", "max_attempts", "valid integer"),
        ("max_attempts: yes\n", "max_attempts", "valid integer"),
        ("halt_on_usage_window: 1\n", "halt_on_usage_window", "valid boolean"),
        ("escalation_mentions: octocat\n", "escalation_mentions", "valid list"),
        ("agent: claude\n", "agent", "mapping"),
        ("agent:\n  adapter: gpt\n", "agent.adapter", "'claude'"),
        ("agent:\n  command: yes\n", "agent.command", "quote it"),
        ("agent:\n  model: 3.5\n", "agent.model", "quote it"),
        ("wall_clock_minutes: 0\n", "wall_clock_minutes", "greater than 0"),
        ("max_cost_usd: -5\n", "max_cost_usd", "greater than 0"),
        ("max_continuations: -1\n", "max_continuations", "greater than or equal to 0"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_not_coerced(text: str, key: str, words: str) -> None:
    error = error_of(text)
    assert error.key == key
    assert error.line == text.count("\n")
    assert words in error.problem


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("sh -c 'make", "cannot split `sh -c 'make` into words: No closing quotation"),
        ("  ", "empty"),
    ],
)
def test_a_setup_command_that_cannot_be_split_is_named_with_its_line(
    command: str, words: str
) -> None:
    error = error_of(f"setup:\n  - npm ci\n  - {command!r}\n")
    assert (error.key, error.line) == ("setup.1", 3)
    assert words in error.problem


def test_a_list_item_error_points_at_the_item() -> None:
    error = error_of("escalation_mentions:\n  - octocat\n  - 42\n")
    assert (error.key, error.line) == ("escalation_mentions.1", 3)
    assert "valid string" in error.problem


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("max_attempts: 3\nagent: : claude\n", 2),
        ("agent:\n  model: opus\n max_turns: 3\n", 3),
        ("agent:\n\tmodel: opus\n", 2),
        ("agent:\n  command: 'my-agent\n", 3),
        ("max_attempts: 3\n---\nmax_attempts: 4\n", 2),
        ("max_attempts: 3\nescalation_mentions: \x07\n", 2),
    ],
)
def test_invalid_yaml_gives_its_line(text: str, line: int) -> None:
    error = error_of(text)
    assert error.key == ""
    assert error.line == line
    assert error.problem.startswith("invalid YAML")
    assert "\n" not in str(error)


@pytest.mark.parametrize(
    ("text", "what"),
    [("- max_attempts: 3\n", "a list"), ("max_attempts\n", "a string"), ("3\n", "a number")],
)
def test_a_file_that_is_not_a_mapping_is_refused(text: str, what: str) -> None:
    error = error_of(text)
    assert (error.key, error.line) == ("", 1)
    assert error.problem == f"the file must be a mapping of keys to values, not {what}"


def test_every_problem_is_reported_in_file_order() -> None:
    text = (
        "bogus: 1\n"  # 1
        "agent:\n"  # 2
        "  max_turns: 0\n"  # 3
        "  adapter: gpt\n"  # 4
        "max_attempts: 0\n"  # 5
        "escalation_mentions: [a, 2]\n"  # 6
    )
    error = error_of(text)
    assert [(p.key, p.line) for p in error.problems] == [
        ("bogus", 1),
        ("agent.max_turns", 3),
        ("agent.adapter", 4),
        ("max_attempts", 5),
        ("escalation_mentions.1", 6),
    ]
    assert (error.key, error.problem, error.line) == (
        error.problems[0].key,
        error.problems[0].problem,
        error.problems[0].line,
    )
    assert str(error).endswith("(and 4 more problems)")


def test_a_duplicate_key_is_a_problem() -> None:
    error = error_of("max_attempts: 2\nagent:\n  model: a\nmax_attempts: 3\n")
    assert (error.key, error.line) == ("max_attempts", 4)
    assert "duplicate key" in error.problem
    assert "line 1" in error.problem


def test_the_message_is_one_line_naming_the_file_line_and_key() -> None:
    error = error_of("agent:\n  adapter: claude\n  model: opus\n  max_turns: 0\n")
    assert str(error) == (
        f"`{CONFIG_PATH}` line 4: `agent.max_turns`: Input should be greater than 0"
    )
    assert "\n" not in str(error)


def test_a_problem_without_a_key_or_a_line_still_reads_as_one_line() -> None:
    assert str(ConfigProblem("", "unreadable")) == f"`{CONFIG_PATH}`: unreadable"
    assert (
        str(ConfigProblem("agent.model", "bad", 2)) == f"`{CONFIG_PATH}` line 2: `agent.model`: bad"
    )


def test_an_error_survives_pickling() -> None:
    error = error_of("max_attempts: 0\nbogus: 1\n")
    copy = pickle.loads(pickle.dumps(error))  # noqa: S301
    assert (copy.key, copy.line, copy.problems) == (error.key, error.line, error.problems)
    assert str(copy) == str(error)


def test_the_example_is_a_valid_config_setting_every_key() -> None:
    config = parse_repo_config(EXAMPLE_CONFIG)
    assert config.agent.adapter == "claude"
    for name in RepoConfig.model_fields:
        assert f"\n{name}:" in EXAMPLE_CONFIG
    for name in [*AgentConfig.model_fields, *LabelsConfig.model_fields]:
        assert f"\n  {name}:" in EXAMPLE_CONFIG or f"\n  # {name}:" in EXAMPLE_CONFIG


def test_the_reference_names_every_key() -> None:
    reference = config_reference()
    for name, info in RepoConfig.model_fields.items():
        assert f"| `{name}` |" in reference
        assert info.description and info.description in reference
    for name, info in AgentConfig.model_fields.items():
        assert f"| `agent.{name}` |" in reference
        assert info.description and info.description in reference
    assert CONFIG_PATH in reference
    assert "default branch" in reference
    assert EXAMPLE_CONFIG in reference


def test_the_docs_are_the_generated_reference() -> None:
    assert DOCS.read_text() == config_reference(), (
        "docs/config.md is out of date; regenerate it with "
        "python -c 'from bot.domain.repo_config import config_reference; "
        'print(config_reference(), end="")\' > docs/config.md'
    )


def deployment(**env: str) -> Settings:
    return Settings(**{"BATON_AGENT": "claude", "BATON_AGENT_WALL_CLOCK_MINUTES": "60", **env})


def test_a_repository_without_a_file_runs_under_the_deployments_settings() -> None:
    settings = deployment(BATON_MAX_COST_USD="10", BATON_HALT_ON_USAGE_WINDOW="false")
    assert apply_repo_config(settings, RepoConfig()) == settings


def test_the_file_overrides_the_deployment_key_by_key() -> None:
    config = parse_repo_config(
        "agent:\n  model: opus\n  max_turns: 12\nmax_cost_usd: 3\n"
        "halt_on_usage_window: false\nescalation_mentions: [octocat]\n"
    )
    applied = apply_repo_config(deployment(BATON_MAX_ATTEMPTS="5"), config)
    assert (applied.agent, applied.agent_model, applied.agent_max_turns) == ("claude", "opus", 12)
    assert applied.limits.max_attempts == 5
    assert applied.limits.max_cost_usd == 3.0
    assert applied.limits.halt_on_usage_window is False
    assert applied.policy.escalation_mentions == ("octocat",)


def test_required_checks_and_run_slots_come_from_the_file_or_the_deployment() -> None:
    deployed = deployment(BATON_REQUIRED_CHECKS="ci, docs", BATON_MAX_CONCURRENT_RUNS_PER_REPO="4")
    assert deployed.policy.required_checks == ("ci", "docs")
    config = parse_repo_config("required_checks: [test]\nmax_concurrent_runs: 1\n")
    applied = apply_repo_config(deployed, config)
    assert applied.policy.required_checks == ("test",)
    assert applied.max_concurrent_runs_per_repo == 1
    assert apply_repo_config(deployed, RepoConfig()).max_concurrent_runs_per_repo == 4


# Every key that can only lower a limit: the key, its variable, the deployment's value
# in these tests, and the setting the key lowers.
CAPPED = [
    ("max_attempts", "BATON_MAX_ATTEMPTS", 3, "max_attempts"),
    ("max_continuations", "BATON_MAX_CONTINUATIONS", 3, "max_continuations"),
    ("max_resume_reentries", "BATON_MAX_RESUME_REENTRIES", 2, "max_resume_reentries"),
    ("max_cost_usd", "BATON_MAX_COST_USD", 10, "max_cost_usd"),
    ("monthly_budget_usd", "BATON_MONTHLY_BUDGET_USD", 100, "monthly_budget_usd"),
    (
        "max_concurrent_runs",
        "BATON_MAX_CONCURRENT_RUNS_PER_REPO",
        4,
        "max_concurrent_runs_per_repo",
    ),
    ("wall_clock_minutes", "BATON_AGENT_WALL_CLOCK_MINUTES", 60, "agent_wall_clock_minutes"),
    ("agent.max_turns", "BATON_AGENT_MAX_TURNS", 40, "agent_max_turns"),
]


FLOAT_KEYS = {"max_cost_usd", "monthly_budget_usd", "wall_clock_minutes"}


def file_setting(key: str, value: int) -> RepoConfig:
    """Return the configuration of a file that sets only the dotted key, to a number."""
    number = float(value) if key in FLOAT_KEYS else value  # the file's values are strict
    if key.startswith("agent."):
        return RepoConfig.model_validate({"agent": {key.removeprefix("agent."): number}})
    return RepoConfig.model_validate({key: number})


@pytest.mark.parametrize(("key", "variable", "limit", "setting"), CAPPED)
@pytest.mark.parametrize("asked", ["lower", "equal"])
def test_a_file_may_lower_a_limit_or_repeat_it(
    key: str, variable: str, limit: int, setting: str, asked: str
) -> None:
    settings = deployment(**{variable: str(limit)})
    value = limit - 1 if asked == "lower" else limit
    config = file_setting(key, value)
    assert check_repo_limits(settings, config) == []
    assert getattr(apply_repo_config(settings, config), setting) == value


@pytest.mark.parametrize(("key", "variable", "limit", "setting"), CAPPED)
def test_a_file_raising_a_limit_is_refused_and_the_limit_kept(
    key: str, variable: str, limit: int, setting: str
) -> None:
    settings = deployment(**{variable: str(limit)})
    asked = limit * 10
    config = file_setting(key, asked)
    assert check_repo_limits(settings, config) == [
        ConfigProblem(
            key, f"asks for {asked}, above this deployment's limit of {limit} (`{variable}`)"
        )
    ]
    assert getattr(apply_repo_config(settings, config), setting) == limit


@pytest.mark.parametrize(
    ("key", "setting"),
    [
        ("max_cost_usd", "max_cost_usd"),
        ("monthly_budget_usd", "monthly_budget_usd"),
        ("max_concurrent_runs", "max_concurrent_runs_per_repo"),
        ("agent.max_turns", "agent_max_turns"),
    ],
)
def test_any_value_lowers_a_limit_the_deployment_leaves_unset(key: str, setting: str) -> None:
    settings = deployment()
    assert getattr(settings, setting) is None
    config = file_setting(key, 1000)
    assert check_repo_limits(settings, config) == []
    assert getattr(apply_repo_config(settings, config), setting) == 1000


ROLES = ["read", "triage", "write", "maintain", "admin"]


@pytest.mark.parametrize(
    ("deployed", "asked"),
    [(d, a) for d in ROLES for a in ROLES if ROLES.index(a) >= ROLES.index(d)],
)
def test_a_file_may_raise_the_role_that_steers_baton_or_repeat_it(
    deployed: str, asked: str
) -> None:
    settings = deployment(BATON_STEER_MIN_ROLE=deployed)
    config = parse_repo_config(f"steer_min_role: {asked}\n")
    assert check_repo_limits(settings, config) == []
    assert apply_repo_config(settings, config).steer_min_role == asked


@pytest.mark.parametrize(
    ("deployed", "asked"), [(d, a) for d in ROLES for a in ROLES if ROLES.index(a) < ROLES.index(d)]
)
def test_a_file_lowering_the_role_that_steers_baton_is_refused_and_the_role_kept(
    deployed: str, asked: str
) -> None:
    settings = deployment(BATON_STEER_MIN_ROLE=deployed)
    config = parse_repo_config(f"steer_min_role: {asked}\n")
    assert check_repo_limits(settings, config) == [
        ConfigProblem(
            "steer_min_role",
            f"asks for `{asked}`, below this deployment's `{deployed}` (`BATON_STEER_MIN_ROLE`)",
        )
    ]
    assert apply_repo_config(settings, config).steer_min_role == deployed
    refused = RepoFile(config, "blob", "max_attempts: 1\nsteer_min_role: " + asked).refused_by(
        settings
    )
    assert refused is not None and refused.error.problems[0].line == 2


def test_the_role_that_steers_baton_is_write_unless_the_deployment_says_otherwise() -> None:
    assert deployment().steer_min_role == "write"
    assert apply_repo_config(deployment(), RepoConfig()).steer_min_role == "write"
    error = error_of("steer_min_role: owner\n")
    assert (error.key, error.line) == ("steer_min_role", 1)
    with pytest.raises(ValueError, match="BATON_STEER_MIN_ROLE"):
        deployment(BATON_STEER_MIN_ROLE="owner")


def test_a_fractional_limit_is_named_as_written() -> None:
    settings = deployment(BATON_MAX_COST_USD="2.5")
    (problem,) = check_repo_limits(settings, RepoConfig(max_cost_usd=7.25))
    assert problem.problem == (
        "asks for 7.25, above this deployment's limit of 2.5 (`BATON_MAX_COST_USD`)"
    )


WITH_COMMAND = {"BATON_AGENTS": "claude,command", "BATON_AGENT_COMMAND": "ops-agent"}
COMMANDS = [
    ("agent.adapter", RepoConfig(agent=AgentConfig(adapter="command"))),
    ("agent.command", RepoConfig(agent=AgentConfig(command="my-agent --fast"))),
    ("setup", RepoConfig(setup=["npm ci"])),
]


@pytest.mark.parametrize(("key", "config"), COMMANDS)
def test_repository_commands_are_refused_unless_the_deployment_allows_them(
    key: str, config: RepoConfig
) -> None:
    # A claude deployment that offers a command agent too; commands off by default.
    refused = deployment(**WITH_COMMAND)
    assert check_repo_limits(refused, config) == [
        ConfigProblem(
            key, "repository commands are off on this deployment (`BATON_ALLOW_REPO_COMMANDS`)"
        )
    ]
    applied = apply_repo_config(refused, config)
    assert (applied.agent, applied.agent_command) == ("claude", "ops-agent")
    assert applied.policy.account == "claude"
    allowed = deployment(**WITH_COMMAND, BATON_ALLOW_REPO_COMMANDS="true")
    assert check_repo_limits(allowed, config) == []


def test_allowed_repository_commands_are_applied() -> None:
    allowed = deployment(**WITH_COMMAND, BATON_ALLOW_REPO_COMMANDS="true")
    config = RepoConfig(agent=AgentConfig(adapter="command", command="my-agent --fast"))
    applied = apply_repo_config(allowed, config)
    assert (applied.agent, applied.agent_command) == ("command", "my-agent --fast")
    assert applied.policy.account == "command"


def test_a_file_may_name_the_commands_the_deployment_runs_already() -> None:
    settings = Settings(BATON_AGENT="command", BATON_AGENT_COMMAND="ops-agent")
    config = RepoConfig(agent=AgentConfig(adapter="command", command="ops-agent"), setup=[])
    assert check_repo_limits(settings, config) == []
    assert apply_repo_config(settings, config) == settings


def test_a_refused_file_still_names_its_labels() -> None:
    config = parse_repo_config("max_attempts: 9\nlabels:\n  queue: agent:go\n")
    applied = apply_repo_config(deployment(), config)
    assert (applied.max_attempts, applied.queue_label) == (3, "agent:go")


REFUSED = """\
labels:
  queue: agent:go
agent:
  model: opus
  max_turns: 500
max_attempts: 10
setup:
  - npm ci
"""


def test_a_refused_file_names_each_key_at_its_line() -> None:
    settings = deployment(BATON_AGENT_MAX_TURNS="100")
    file = RepoFile(parse_repo_config(REFUSED), "blob-1", REFUSED)
    refused = file.refused_by(settings)
    assert refused is not None and refused.blob_sha == "blob-1"
    assert [problem.within_file for problem in refused.error.problems] == [
        "line 5: `agent.max_turns`: asks for 500, above this deployment's limit of 100 "
        "(`BATON_AGENT_MAX_TURNS`)",
        "line 6: `max_attempts`: asks for 10, above this deployment's limit of 3 "
        "(`BATON_MAX_ATTEMPTS`)",
        "line 7: `setup`: repository commands are off on this deployment "
        "(`BATON_ALLOW_REPO_COMMANDS`)",
    ]
    allowing = {"BATON_AGENT_MAX_TURNS": "500", "BATON_MAX_ATTEMPTS": "10"}
    assert file.refused_by(deployment(**allowing, BATON_ALLOW_REPO_COMMANDS="true")) is None


def test_a_repository_without_a_file_is_never_refused() -> None:
    assert RepoFile().refused_by(deployment(BATON_MAX_ATTEMPTS="1")) is None


def test_key_lines_gives_each_dotted_key_its_line() -> None:
    assert key_lines(REFUSED) == {
        "labels": 1,
        "labels.queue": 2,
        "agent": 3,
        "agent.model": 4,
        "agent.max_turns": 5,
        "max_attempts": 6,
        "setup": 7,
    }
    assert key_lines("") == {}
    assert key_lines("a: [\n") == {}


CODEX_TOO = {"BATON_AGENTS": "claude,codex"}


@pytest.mark.parametrize(
    ("agent", "env", "account"),
    [
        (AgentConfig(), {}, "claude"),
        (AgentConfig(), {"BATON_AGENT_ACCOUNT": "team"}, "team"),
        (AgentConfig(account="mine"), {"BATON_AGENT_ACCOUNT": "team"}, "mine"),
        (AgentConfig(adapter="codex"), {"BATON_AGENT_ACCOUNT": "team"}, "codex"),
        (AgentConfig(adapter="claude"), {"BATON_AGENT_ACCOUNT": "team"}, "team"),
    ],
)
def test_the_provider_account_follows_the_adapter_unless_named(
    agent: AgentConfig, env: dict[str, str], account: str
) -> None:
    settings = apply_repo_config(deployment(**env, **CODEX_TOO), RepoConfig(agent=agent))
    assert settings.policy.account == account


@pytest.mark.parametrize(
    ("agent", "model"),
    [
        (AgentConfig(), "claude-opus-4-1"),  # the deployment's agent keeps its model
        (AgentConfig(adapter="claude"), "claude-opus-4-1"),
        (AgentConfig(adapter="codex"), None),  # another asks its CLI's default
        (AgentConfig(adapter="codex", model="gpt-5-codex"), "gpt-5-codex"),
    ],
)
def test_the_deployments_model_is_its_own_agents_only(
    agent: AgentConfig, model: str | None
) -> None:
    settings = apply_repo_config(
        deployment(BATON_AGENT_MODEL="claude-opus-4-1", **CODEX_TOO), RepoConfig(agent=agent)
    )
    assert settings.agent_model == model


def test_a_file_may_choose_only_an_agent_the_deployment_runs() -> None:
    """`adapter: aider` where BATON_AGENTS is claude: its model would pick the proxy's host."""
    config = RepoConfig(agent=AgentConfig(adapter="aider", model="attacker/model"))
    assert check_repo_limits(deployment(), config) == [
        ConfigProblem(
            "agent.adapter",
            "asks for `aider`, which this deployment does not run (`BATON_AGENTS`: claude)",
        )
    ]
    assert apply_repo_config(deployment(), config).agent == "claude"


def test_a_repository_s_labels_replace_the_deployment_s_one_by_one() -> None:
    applied = apply_repo_config(
        deployment(BATON_REVIEW_LABEL="ready"), parse_repo_config("labels:\n  queue: agent:go\n")
    )
    assert applied.policy.labels == Labels(queue="agent:go", review="ready")
    assert applied.labels.active == {"agent:go", "baton:in-progress", "ready", "baton:halted"}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("labels:\n  queue: go\n  review: go\n", "each of Baton's labels needs a name of its own"),
        ("labels:\n  queue: ''\n", "at least 1 character"),
        ("labels:\n  queue: " + "x" * 51 + "\n", "at most 50 characters"),
    ],
)
def test_labels_must_be_distinct_and_fit_github(text: str, words: str) -> None:
    error = error_of(text)
    assert error.key.startswith("labels") and words in error.problem


@pytest.mark.parametrize(
    ("url", "verify", "expected"),
    [
        (
            "rediss://u:p@redis.example:6380",
            "false",
            "rediss://u:p@redis.example:6380?ssl_cert_reqs=none",
        ),
        ("rediss://h:1/0?db=0", "false", "rediss://h:1/0?db=0&ssl_cert_reqs=none"),
        ("rediss://h:1/0", "true", "rediss://h:1/0"),  # verified: the default
        ("redis://h:1/0", "false", "redis://h:1/0"),  # no TLS to verify
        ("rediss://h:1/0?ssl_cert_reqs=required", "false", "rediss://h:1/0?ssl_cert_reqs=required"),
    ],
)
def test_a_redis_with_a_self_signed_certificate_is_used_encrypted_unverified(
    url: str, verify: str, expected: str
) -> None:
    """Heroku Redis's certificates are self-signed and its add-on sets REDIS_URL itself."""
    assert Settings(REDIS_URL=url, BATON_REDIS_TLS_VERIFY=verify).redis_url == expected
