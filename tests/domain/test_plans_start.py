"""`/baton start` and the agent an issue runs: the command, the label, the precedence, the settings.

Pure: the command as parsed, the plan's answer from the facts, the rule that picks an
attempt's agent, and the settings that name the agents a deployment runs.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import pytest

from bot.agents import adapter_for
from bot.agents.aider import AiderAdapter
from bot.agents.claude import ClaudeAdapter
from bot.agents.codex import CodexAdapter
from bot.domain import render
from bot.domain.commands import (
    Command,
    Refused,
    Standing,
    agent_labels,
    choose_agent,
    judge,
    parse_command,
    unknown_agent_reply,
)
from bot.domain.effects import Effect, Enqueue, PostComment, React, SetLabel
from bot.domain.issue_text import snapshot
from bot.domain.jobs import queue_chain_job, run_issue_job
from bot.domain.model import AgentName, IssueRef, Labels, Run, RunState
from bot.domain.plans.commands import Answer, CommandFacts, Learn, answer
from bot.domain.repo_config import apply_repo_config, parse_repo_config
from bot.domain.resources import Issue, IssuePullRequest, Label
from bot.ops.settings import Settings, SettingsError, load_settings

SETTINGS = Settings(agent="command", agent_command="true", agents=["command", "codex", "aider"])
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
ISSUE = IssueRef(installation_id=3, repo="octo/widgets", number=7)
PULL = IssueRef(installation_id=3, repo="octo/widgets", number=12)
COMMENT = 99
KEY = f"command-{COMMENT}"
LABELS = Labels()
WRITER = judge("octo-writer", False, "write", "write", ())
READER = judge("octo-reader", False, "read", "write", ())


def opened(
    body: str = "Make it greet.", state: str = "open", labels: tuple[str, ...] = ()
) -> Issue:
    return Issue(
        number=ISSUE.number,
        title="Greet",
        body=body,
        state=state,
        labels=tuple(Label(name=name) for name in labels),
    )


def facts(
    text: str,
    found: Issue | None = None,
    standing: Standing = WRITER,
    latest: Run | None = None,
    commented: IssueRef = ISSUE,
) -> CommandFacts:
    command = parse_command(text)
    assert command is not None
    return CommandFacts(
        command=command,
        standing=standing,
        text=text,
        comment_id=COMMENT,
        commented=commented,
        issue=ISSUE,
        run=latest,
        labels=LABELS,
        now=NOW,
        found=found,
    )


def react(content: str, on: IssueRef = ISSUE) -> React:
    return React(repo=on.repo, comment_id=COMMENT, content=content)


def started(*effects: Effect, agent: str | None = None) -> Answer:
    picked = f" with {agent}" if agent is not None else ""
    return Answer(
        reaction="+1",
        effects=(*effects, react("+1")),
        note=f"octo/widgets#7: queued by @octo-writer with `/baton start`{picked}",
    )


def told(reply: str, on: IssueRef = ISSUE) -> Answer:
    return Answer(
        reaction="confused", effects=(react("confused", on), PostComment(issue=on, body=reply))
    )


# --- the command, as written ---------------------------------------------------------------


PARSED: dict[str, Command | Refused] = {
    "/baton start": Command(name="start"),
    "/baton start --agent codex": Command(name="start", agent="codex"),
    "/baton start --agent=Codex": Command(name="start", agent="codex"),
    "/baton start --agent": Refused(
        text="/baton start --agent", reason="say which agent, e.g. `--agent codex`"
    ),
    "/baton start --agent `@octo/team`": Refused(
        text="/baton start --agent `@octo/team`", reason="say which agent, e.g. `--agent codex`"
    ),
    "/baton start now": Refused(
        text="/baton start now", reason="`/baton start` takes only `--agent NAME`"
    ),
    "/baton start --agent codex aider": Refused(
        text="/baton start --agent codex aider", reason="`/baton start` takes only `--agent NAME`"
    ),
}


@pytest.mark.parametrize(("text", "parsed"), PARSED.items(), ids=PARSED.keys())
def test_start_takes_an_agent_and_nothing_else(text: str, parsed: Command | Refused) -> None:
    assert parse_command(text) == parsed


# --- what Baton does about it --------------------------------------------------------------


def queued(found: Issue, agent: str | None = None) -> tuple[SetLabel, Enqueue]:
    text = snapshot(found.title, found.body, NOW, "octo-writer", "command")
    shown = sorted(found.label_names | {LABELS.queue})
    job = run_issue_job(
        SETTINGS, ISSUE, KEY, queued_by="octo-writer", text=text, labels=shown, agent=agent
    )
    live = frozenset(found.label_names)
    return SetLabel(issue=ISSUE, labels=LABELS, label=LABELS.queue, live=live), Enqueue(job=job)


def test_start_reads_the_issue_first() -> None:
    assert answer(SETTINGS, facts("/baton start")) == Learn(fact="issue")


def test_start_labels_the_issue_and_runs_it_as_queued_by_the_steerer_now() -> None:
    found = opened(labels=("bug", "baton:escalated"))
    assert answer(SETTINGS, facts("/baton start", found)) == started(*queued(found))
    [_, enqueue] = queued(found)
    # The run's arguments: who queued it, the text as read when the command was handled.
    assert enqueue.job.args[5:10] == (
        "octo-writer",
        "Greet",
        "Make it greet.",
        NOW.isoformat(),
        "command",
    )


def test_start_with_an_agent_the_deployment_runs_carries_it_to_the_run() -> None:
    found = opened()
    given = facts("/baton start --agent codex", found)
    assert answer(SETTINGS, given) == started(*queued(found, "codex"), agent="codex")
    [_, enqueue] = queued(found, "codex")
    assert enqueue.job.args[-1] == "codex"
    assert enqueue.job.job_id == run_issue_job(SETTINGS, ISSUE, KEY).job_id  # one start per comment


def test_an_agent_the_deployment_does_not_run_is_refused_naming_those_it_runs() -> None:
    reply = unknown_agent_reply("claude", SETTINGS.agents)
    assert answer(SETTINGS, facts("/baton start --agent claude", opened())) == told(reply)
    assert "`command`, `codex`, `aider`" in reply and "`claude`" in reply
    assert answer(SETTINGS, facts("/baton start --agent gpt")) == told(
        unknown_agent_reply("gpt", SETTINGS.agents)
    )


def test_start_on_a_pull_request_or_a_closed_issue_is_refused_with_why() -> None:
    on_baton_pull = answer(SETTINGS, facts("/baton start", commented=PULL))
    assert isinstance(on_baton_pull, Answer) and on_baton_pull.reaction == "confused"
    [_, said] = on_baton_pull.effects
    assert "queues an issue" in getattr(said, "body", "")
    pull = opened().model_copy(update={"pull_request": IssuePullRequest()})
    on_pull = answer(SETTINGS, facts("/baton start", pull))
    assert isinstance(on_pull, Answer) and on_pull.reaction == "confused"
    closed = answer(SETTINGS, facts("/baton start", opened(state="closed")))
    assert isinstance(closed, Answer) and closed.reaction == "confused"
    assert "the issue is closed" in getattr(closed.effects[-1], "body", "")
    assert not any(isinstance(e, SetLabel | Enqueue) for e in (*on_pull.effects, *closed.effects))


def test_start_while_a_run_works_on_the_issue_does_nothing() -> None:
    live = Run.claimed(ISSUE, 1, "baton/issue-7-greet", NOW)
    assert answer(SETTINGS, facts("/baton start", opened(), latest=live)) == Answer(
        reaction="confused", effects=(react("confused"),)
    )
    ended = live.model_copy(update={"state": RunState.FAILED})
    assert answer(SETTINGS, facts("/baton start", opened(), latest=ended)) == started(
        *queued(opened())
    )


def test_start_from_a_reader_is_refused_and_does_nothing() -> None:
    refused = answer(SETTINGS, facts("/baton start", opened(), standing=READER))
    assert refused == Answer(
        reaction="confused",
        effects=(react("confused"),),
        note=f"octo/widgets#7: refused '/baton start' from @octo-reader: {READER}",
        level=logging.WARNING,
    )


def test_start_of_an_issue_naming_a_chain_queues_the_chain() -> None:
    found = opened(body="Depends on #3")
    text = snapshot(found.title, found.body, NOW, "octo-writer", "command")
    label = SetLabel(issue=ISSUE, labels=LABELS, label=LABELS.queue, live=frozenset())
    chain = Enqueue(job=queue_chain_job(ISSUE, KEY, "octo-writer", text))
    assert answer(SETTINGS, facts("/baton start", found)) == started(label, chain)
    with_agent = answer(SETTINGS, facts("/baton start --agent codex", found))
    assert isinstance(with_agent, Answer) and with_agent.reaction == "confused"


# --- which agent an attempt runs -----------------------------------------------------------

OFFERED: tuple[AgentName, ...] = ("command", "codex", "aider")


def test_the_agent_is_the_kept_then_the_asked_then_the_labelled_then_the_repositorys() -> None:
    assert choose_agent(OFFERED, "command") == "command"
    assert choose_agent(OFFERED, "claude") == "claude"  # the repository's file named it
    assert choose_agent(OFFERED, "command", labelled="aider") == "aider"
    assert choose_agent(OFFERED, "command", asked="codex", labelled="aider") == "codex"
    assert choose_agent(OFFERED, "command", kept="aider", asked="codex") == "aider"


def test_an_agent_the_deployment_does_not_run_is_passed_over() -> None:
    assert choose_agent(OFFERED, "command", kept="claude", labelled="aider") == "aider"
    assert choose_agent(OFFERED, "command", asked="gpt") == "command"
    assert choose_agent(OFFERED, "claude", labelled="claude") == "claude"  # the repository's own


def test_agent_labels_name_their_agent_by_the_prefix() -> None:
    carried = {"bug", "baton:agent:codex", "Baton:Agent:Aider", "baton:agent:", "baton:queue"}
    assert agent_labels(carried, "baton:agent:") == {
        "baton:agent:codex": "codex",
        "Baton:Agent:Aider": "aider",
    }
    assert agent_labels(carried, "agent/") == {}


def test_the_status_comment_names_the_agent() -> None:
    run = Run.claimed(ISSUE, 1, "baton/issue-7-greet", NOW)
    assert "Agent:" not in render.status_comment(run, NOW)
    named = run.model_copy(update={"agent": "codex"})
    assert "Agent: `codex`" in render.status_comment(named, NOW)
    assert render.status_key(named, None, None) != render.status_key(run, None, None)


# --- the agents a deployment runs ----------------------------------------------------------


def loaded(monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    for name in ("BATON_AGENT", "BATON_AGENTS", "BATON_AGENT_BINARY", "BATON_AGENT_BINARIES"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return load_settings()


def test_the_deployment_runs_its_default_agent_alone_unless_it_names_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert loaded(monkeypatch).agents == ["command"]
    claude = loaded(monkeypatch, BATON_AGENT="claude", BATON_AGENTS="codex, claude,codex")
    assert claude.agents == ["claude", "codex"]  # the default first, each once


REFUSED_SETTINGS = {
    "agents without the default": (
        {"BATON_AGENTS": "codex"},
        "BATON_AGENTS (codex) must name BATON_AGENT (command)",
    ),
    "an unknown agent": ({"BATON_AGENTS": "command,gpt"}, "BATON_AGENTS.1"),
    "command offered without its command": (
        {"BATON_AGENT": "claude", "BATON_AGENTS": "claude,command"},
        "BATON_AGENTS offers `command`, which needs BATON_AGENT_COMMAND",
    ),
    "a binary without a name": ({"BATON_AGENT_BINARIES": "/opt/codex"}, "`name=path`"),
    "a binary for an agent not run": (
        {"BATON_AGENT_BINARIES": "codex=/opt/codex"},
        "BATON_AGENT_BINARIES names codex, which is not one of BATON_AGENTS (command)",
    ),
    "a binary for command": (
        {"BATON_AGENTS": "command,codex", "BATON_AGENT_BINARIES": "command=/bin/sh"},
        "BATON_AGENT_BINARIES names `command`",
    ),
    "two binaries for the default": (
        {
            "BATON_AGENT": "claude",
            "BATON_AGENT_BINARY": "/opt/a/claude",
            "BATON_AGENT_BINARIES": "claude=/opt/b/claude",
        },
        "BATON_AGENT_BINARY and BATON_AGENT_BINARIES give claude two CLIs",
    ),
}


@pytest.mark.parametrize(("env", "said"), REFUSED_SETTINGS.values(), ids=REFUSED_SETTINGS.keys())
def test_agent_settings_that_cannot_work_are_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], said: str
) -> None:
    with pytest.raises(SettingsError, match="invalid settings") as refused:
        loaded(monkeypatch, **env)
    assert said in str(refused.value)


def binary_of(settings: Settings) -> str:
    adapter = adapter_for(settings)
    assert isinstance(adapter, AiderAdapter | ClaudeAdapter | CodexAdapter)
    return adapter.binary


def test_each_agent_runs_its_own_binary(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = loaded(
        monkeypatch,
        BATON_AGENT="claude",
        BATON_AGENT_BINARY="/opt/claude/bin/claude",
        BATON_AGENTS="claude,codex,aider",
        BATON_AGENT_BINARIES="aider=/opt/aider/bin/aider",
    )
    assert binary_of(settings) == "/opt/claude/bin/claude"
    aider = settings.running("aider", settings)
    assert binary_of(aider) == "/opt/aider/bin/aider"
    # Found on PATH under its own name: never the default agent's binary.
    assert binary_of(settings.running("codex", settings)) == "codex"
    # So too for the agent a repository's file picks.
    config = parse_repo_config("agent:\n  adapter: codex\n")
    assert binary_of(apply_repo_config(settings, config)) == "codex"


def test_another_agent_asks_its_own_default_model_and_spends_its_own_account() -> None:
    deployment = Settings(
        agent="claude", agents=["claude", "codex"], agent_model="opus", agent_account="team"
    )
    codex = deployment.running("codex", deployment)
    assert (codex.agent, codex.agent_model, codex.policy.account) == ("codex", None, "codex")
    back = codex.running("claude", deployment)
    assert (back.agent, back.agent_model, back.policy.account) == ("claude", "opus", "team")
    assert deployment.running("claude", deployment) is deployment
