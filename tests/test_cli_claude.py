"""The real Claude Code CLI through Baton's adapter, in Baton's jail, against a scripted provider.

Each test runs `claude -p` exactly as the runner does: a checkout provisioned by Baton's
Workspace, the agent's own home, the jail with its allow-list proxy, and the provider's
address and key passed through the agent's environment. The provider (tests/providers/
anthropic.py) plays the model: it calls Claude Code's own tools, or answers the way
Anthropic answers when something is wrong. The tests assert what Baton concluded (the
AgentResult, and the recovery `classify` picks), against what the CLI really did: what
it sent the provider, what it left in the checkout, what Baton's collect takes from it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
import redis

from bot import render
from bot.agents import (
    adapter_for,
    agent_home,
    egress_for_run,
    egress_policy_for,
    programs_of,
)
from bot.agents.base import AgentRequest
from bot.agents.claude import ClaudeAdapter
from bot.agents.egress import ANTHROPIC, EgressPolicy
from bot.classify import RunFacts, classify
from bot.devstack import LocalBaton
from bot.git import Git, Identity, Workspace
from bot.jail import jails_for
from bot.model import (
    AgentResult,
    Classification,
    FailureClass,
    IssueRef,
    Recovery,
    Run,
    RunState,
    utcnow,
)
from bot.sandbox.maintainer import Maintainer, eventually
from bot.settings import Settings
from bot.store import Store
from tests.conftest import RedisServer
from tests.providers.anthropic import (
    Cut,
    ScriptedAnthropic,
    Step,
    bash,
    credit_too_low,
    overloaded,
    serving,
    text,
    throttled,
    tool,
    unauthorized,
    window_closed,
)

ROOT = Path(__file__).parents[1]
CLAUDE = ROOT / ".agents" / "npm" / "node_modules" / ".bin" / "claude"
INSTALL = "bash .ci/install-agent-clis"
REPO = "octo/calc"
NUMBER = 7
BRANCH = "baton/issue-7-add"
IDENTITY = Identity("Baton", "baton@example.invalid")
API_KEY = {"ANTHROPIC_API_KEY": "sk-ant-api03-scripted"}
# A Claude subscription (`claude setup-token`): its usage windows come as rate-limit headers.
SUBSCRIPTION = {"CLAUDE_CODE_OAUTH_TOKEN": "sk-ant-oat01-scripted"}
PROJECT = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "test_calc.py": (
        "import unittest\n\nfrom calc import add\n\n\n"
        "class AddTest(unittest.TestCase):\n"
        "    def test_add(self):\n"
        "        self.assertEqual(add(2, 3), 5)\n"
    ),
    ".gitignore": "__pycache__/\n",
}
RUN_TESTS = "python3 -B -m unittest -v test_calc 2>&1"


@pytest.fixture(scope="module")
def claude() -> Path:
    """Return the pinned Claude Code CLI; skip (outside CI) or fail (in CI) without it."""
    if CLAUDE.exists():
        return CLAUDE
    reason = f"Claude Code is not installed: run `{INSTALL}`"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
async def provider() -> AsyncIterator[ScriptedAnthropic]:
    async with serving() as scripted:
        yield scripted


@dataclass
class Outcome:
    """One agent run as Baton saw it, and what the checkout and the provider show of it."""

    result: AgentResult
    classification: Classification | None  # None when the run is a success Baton pushes
    start: str
    head: str
    new_commits: int
    changed: list[str]
    worktree: Path
    request: AgentRequest
    argv: list[str]


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


class Rig:
    """Baton's side of one issue: its settings, mirror, checkout and agent home."""

    def __init__(self, root: Path, claude: Path, provider: ScriptedAnthropic, **env: str) -> None:
        self.root = root
        self.provider = provider
        self.settings = Settings(
            BATON_DATA_DIR=root / "data",
            BATON_AGENT="claude",
            BATON_AGENT_BINARY=str(claude),
            BATON_AGENT_ALLOWED_HOSTS=provider.host_port,
            BATON_AGENT_PASSTHROUGH_ENV=",".join(["ANTHROPIC_BASE_URL", *API_KEY, *SUBSCRIPTION]),
            BATON_AGENT_WALL_CLOCK_MINUTES=2,
            **env,
        )
        self.jails = jails_for(self.settings)
        self.workspace = Workspace(Git(IDENTITY), self.settings.data_dir, self.jails)
        self.runs = 0

    async def provision(self) -> str:
        """Make the origin, Baton's mirror of it, and the issue's checkout; return the base."""
        seed = self.root / "seed"
        seed.mkdir()
        git(seed, "init", "-q", "-b", "main")
        for name, content in PROJECT.items():
            (seed / name).write_text(content)
        git(seed, "add", "-A")
        maintainer = ("-c", "user.name=Maintainer", "-c", "user.email=m@example.invalid")
        git(seed, *maintainer, "commit", "-qm", "Calculator")
        origin = self.root / "origin.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(origin)], check=True)
        mirror = await self.workspace.refresh_mirror(REPO, str(origin), "unused-token")
        base = await self.workspace.rev_parse(mirror, "refs/remotes/origin/main")
        await self.workspace.provision(REPO, NUMBER, BRANCH, base)
        return base

    @property
    def home(self) -> Path:
        return agent_home(self.settings.data_dir, REPO, NUMBER)

    async def run(self, start: str, *, resume: str | None = None, brief: str = "") -> Outcome:
        """Run the agent once as `_run_agent` does, then collect its work as Baton does."""
        self.runs += 1
        worktree = self.workspace.worktree_path(REPO, NUMBER)
        run_dir = self.settings.data_dir / "runs" / f"run-{self.runs}"
        io_dir = run_dir / "io"
        io_dir.mkdir(parents=True)
        brief_path = run_dir / "brief.md"
        brief_path.write_text(brief or f"Fix issue #{NUMBER}: add() subtracts. Run the tests.")
        found = egress_policy_for(self.settings)
        assert found is not None and ANTHROPIC in found.allowed
        # The provider is on loopback: Anthropic's own host is left out, so that anything the
        # CLI sends anywhere but its provider is refused by the proxy and named.
        policy = EgressPolicy(mode=found.mode, allowed=found.allowed - {ANTHROPIC})
        adapter = adapter_for(self.settings)
        assert isinstance(adapter, ClaudeAdapter)
        async with egress_for_run(policy, f"{REPO}#{NUMBER}") as (egress_dir, proxy):
            jail = self.jails.make(
                worktree=worktree,
                home=self.home,
                scratch=run_dir / "jail",
                readable=(self.workspace.mirror_path(REPO) / "objects", brief_path),
                writable=(io_dir,),
                network=self.settings.agent_network,
                egress_dir=egress_dir,
                programs=programs_of(self.settings),
            )
            assert jail is not None
            request = AgentRequest(
                run_id=f"run-{self.runs}",
                issue_number=NUMBER,
                attempt=self.runs,
                worktree=worktree,
                brief_path=brief_path,
                run_dir=run_dir,
                deadline=utcnow() + timedelta(seconds=self.settings.agent_wall_clock_seconds),
                home=self.home,
                passthrough_env=tuple(self.settings.agent_passthrough_env),
                resume_session_id=resume,
                jail=jail,
            )
            result = await adapter.run(request)
            assert proxy is not None
            result = result.model_copy(update={"refused_hosts": list(proxy.refused)})
        head = await self.workspace.collect(
            REPO, NUMBER, start, leftovers=f"Work on #{NUMBER} (Baton)"
        )
        new_commits = await self.workspace.commits_since(REPO, start, head)
        mirror = self.workspace.mirror_path(REPO)
        changed = git(mirror, "diff", "--name-only", start, head).split()
        classification = None
        if result.status != "success" or not new_commits:
            facts = RunFacts(
                ending="agent",
                stop_reason=result.stop_reason,
                new_commits=new_commits,
                resets_at=result.resets_at,
                detail=result.result_text or "",
            )
            classification = classify(facts)
        argv = adapter.argv(request)
        return Outcome(
            result, classification, start, head, new_commits, changed, worktree, request, argv
        )


RigFor = Callable[..., Rig]


@pytest.fixture
def rig_for(
    tmp_path: Path, claude: Path, provider: ScriptedAnthropic, monkeypatch: pytest.MonkeyPatch
) -> RigFor:
    """Return a maker of Baton's side of one issue, with more settings if given; its
    provider is reached through ANTHROPIC_BASE_URL, and no credential is set yet."""
    for name in (*API_KEY, *SUBSCRIPTION, "ANTHROPIC_AUTH_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ANTHROPIC_BASE_URL", provider.base_url)
    return lambda **env: Rig(tmp_path, claude, provider, **env)


@pytest.fixture
def rig(rig_for: RigFor) -> Rig:
    return rig_for()


def credentials(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def edit_calc(worktree: Path) -> list[Step]:
    """Return the steps that fix add() with Claude Code's own Read and Edit tools."""
    path = str(worktree / "calc.py")
    return [
        tool("Read", file_path=path),
        tool("Edit", file_path=path, old_string="return a - b", new_string="return a + b"),
    ]


def quiet(outcome: Outcome) -> None:
    """Assert the CLI reached nothing but its provider and was refused nothing."""
    assert outcome.result.refused_hosts == []
    telemetry = outcome.request.home / "claude" / "telemetry"
    assert not telemetry.exists() or not any(telemetry.iterdir())


# ---------------------------------------------------------------- success


async def test_a_file_edited_with_the_clis_own_tools_is_a_success_baton_commits(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials(monkeypatch, API_KEY)
    start = await rig.provision()
    worktree = rig.workspace.worktree_path(REPO, NUMBER)
    notes = str(worktree / "NOTES.md")
    rig.provider.script(
        *edit_calc(worktree),
        tool("Write", file_path=notes, content="add() now adds.\n"),
        text("add() returned a - b; it now returns a + b."),
    )
    outcome = await rig.run(start)

    result = outcome.result
    assert (result.status, result.stop_reason, result.failure_class) == (
        "success",
        "completed",
        None,
    )
    assert result.exit_code == 0
    assert result.result_text == "add() returned a - b; it now returns a + b."
    assert result.turns == 4 and result.cost_usd is not None and result.cost_usd > 0
    assert result.session_id and result.denials == []
    quiet(outcome)
    # The edit really happened, through the CLI's tools, and the provider heard back of it.
    assert (worktree / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    results = [seen.last_tool_result_text() for seen in rig.provider.loop_requests[1:]]
    assert "return a - b" in results[0] and "updated successfully" in results[1]
    assert rig.provider.overrun == 0
    # Baton committed what the agent left, and nothing of the CLI's own bookkeeping.
    assert outcome.new_commits == 1 and outcome.classification is None
    assert outcome.changed == ["NOTES.md", "calc.py"]
    assert sorted(p.name for p in worktree.iterdir()) == sorted([".git", *PROJECT, "NOTES.md"])


async def test_the_agent_runs_the_tests_and_commits_in_the_jail(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials(monkeypatch, API_KEY)
    start = await rig.provision()
    worktree = rig.workspace.worktree_path(REPO, NUMBER)
    rig.provider.script(
        bash(RUN_TESTS, "Run the tests"),
        *edit_calc(worktree),
        bash(RUN_TESTS, "Run the tests again"),
        bash("git commit -qam 'Make add() add' && git log -1 --format='%an <%ae> %s'", "Commit"),
        text("Fixed add(); the tests pass and the fix is committed."),
    )
    outcome = await rig.run(start)

    result = outcome.result
    assert (result.status, result.stop_reason) == ("success", "completed")
    # Every shell command ran: none was refused for want of an approval nobody can give.
    assert result.denials == []
    assert "bypassPermissions" in outcome.argv
    outputs = [seen.last_tool_result_text() for seen in rig.provider.loop_requests[1:]]
    assert "FAILED (failures=1)" in outputs[0]
    assert "Ran 1 test" in outputs[3] and outputs[3].rstrip().endswith("OK")
    # The agent's commit carries the checkout's identity; no GIT_AUTHOR_* was needed.
    assert outputs[4] == "Baton <baton@example.invalid> Make add() add"
    assert not {n for n in ClaudeAdapter().environment(outcome.request) if n.startswith("GIT_")}
    quiet(outcome)
    assert outcome.new_commits == 1 and outcome.changed == ["calc.py"]
    mirror = rig.workspace.mirror_path(REPO)
    assert git(mirror, "log", "-1", "--format=%an <%ae>|%s", outcome.head) == (
        "Baton <baton@example.invalid>|Make add() add"
    )
    assert git(outcome.worktree, "status", "--porcelain", "--ignored") == ""


async def test_a_refused_tool_call_is_recorded_with_the_run(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials(monkeypatch, API_KEY)
    start = await rig.provision()
    worktree = rig.workspace.worktree_path(REPO, NUMBER)
    # The operator's agent home forbids pushing; every agent home is made from it.
    settings = rig.home / "claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"permissions": {"deny": ["Bash(git push:*)"]}}))
    rig.provider.script(
        *edit_calc(worktree),
        bash("git push origin HEAD", "Push"),
        bash("git push --force origin HEAD:main", "Push harder"),
        text("Fixed add(); pushing was not allowed."),
    )
    outcome = await rig.run(start)

    result = outcome.result
    assert (result.status, result.stop_reason) == ("success", "completed")
    assert result.denials == [
        "Bash: git push origin HEAD",
        "Bash: git push --force origin HEAD:main",
    ]
    told = rig.provider.loop_requests[3].last_tool_result_text()
    assert "denied" in told
    assert outcome.new_commits == 1 and outcome.changed == ["calc.py"]
    # The issue's status comment says so; the run record keeps the commands.
    issue = IssueRef(installation_id=1, repo=REPO, number=NUMBER)
    run = Run.claimed(issue, 1, BRANCH, utcnow()).model_copy(update={"agent_result": result})
    assert "2 shell commands were refused by the agent CLI's permission rules" in (
        render.status_comment(run, utcnow())
    )
    assert Run.model_validate_json(run.model_dump_json()).agent_result == result


async def test_a_continuation_resumes_the_previous_session(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials(monkeypatch, API_KEY)
    start = await rig.provision()
    worktree = rig.workspace.worktree_path(REPO, NUMBER)
    rig.provider.script(*edit_calc(worktree), text("Changed calc.py; tests not run yet."))
    first = await rig.run(start, brief="Attempt 1: fix add().")
    assert first.result.status == "success" and first.result.session_id

    # The continuation gets a fresh checkout of the pushed work, at the same path.
    await rig.workspace.provision(REPO, NUMBER, BRANCH, first.head)
    rig.provider.script(bash(RUN_TESTS, "Run the tests"), text("The tests pass now."))
    second = await rig.run(first.head, resume=first.result.session_id, brief="Attempt 2: check.")

    assert f"--resume={first.result.session_id}" in second.argv
    assert second.result.status == "success"
    assert second.result.session_id == first.result.session_id
    # The provider saw the first attempt's conversation carried into the second.
    conversation = json.dumps(rig.provider.loop_requests[3].body["messages"])
    assert "Attempt 1: fix add()." in conversation and "Attempt 2: check." in conversation
    assert "Changed calc.py; tests not run yet." in conversation
    assert "OK" in rig.provider.loop_requests[4].last_tool_result_text()


# ---------------------------------------------------------------- caps


async def test_a_turn_cap_with_work_committed_continues_from_it(
    rig_for: RigFor, provider: ScriptedAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials(monkeypatch, API_KEY)
    rig = rig_for(BATON_AGENT_MAX_TURNS="2")
    start = await rig.provision()
    provider.script(
        bash("echo 'add() subtracts' > NOTES.md && git add NOTES.md && git commit -qm Notes"),
        bash(RUN_TESTS),
        bash(RUN_TESTS),
        then=bash("true"),
    )
    outcome = await rig.run(start)

    result = outcome.result
    assert (result.status, result.stop_reason, result.failure_class) == (
        "failed",
        "max_turns",
        "turn-cap",
    )
    assert "Reached maximum number of turns (2)" in result.evidence
    assert len(provider.loop_requests) == 2
    assert outcome.new_commits == 1
    assert outcome.classification is not None
    assert outcome.classification.failure_class is FailureClass.TURN_CAP_PROGRESS
    assert outcome.classification.recovery is Recovery.CONTINUE


# ---------------------------------------------------------------- provider trouble


@pytest.mark.parametrize(
    ("claim", "hours", "words"),
    [("five_hour", 3, "session limit"), ("seven_day", 80, "weekly limit")],
    ids=["five-hour", "weekly"],
)
async def test_a_closed_usage_window_halts_until_it_reopens(
    rig: Rig, monkeypatch: pytest.MonkeyPatch, claim: str, hours: int, words: str
) -> None:
    credentials(monkeypatch, SUBSCRIPTION)
    start = await rig.provision()
    reopens = int(time.time()) + hours * 3600
    rig.provider.script(then=window_closed(claim, reopens))
    outcome = await rig.run(start)

    result = outcome.result
    assert (result.status, result.stop_reason, result.failure_class) == (
        "failed",
        "provider_window",
        "provider-window",
    )
    assert result.resets_at == datetime.fromtimestamp(reopens, UTC)
    assert result.result_text is not None and f"You've hit your {words}" in result.result_text
    assert any(f'"rateLimitType": "{claim}"' in line for line in result.evidence)
    # A closed window is not retried: one request, then the CLI said so and stopped.
    assert len(rig.provider.loop_requests) == 1
    assert rig.provider.loop_requests[0].headers.get("Authorization") == (
        f"Bearer {SUBSCRIPTION['CLAUDE_CODE_OAUTH_TOKEN']}"
    )
    assert outcome.classification is not None
    assert outcome.classification.failure_class is FailureClass.PROVIDER_WINDOW
    assert outcome.classification.recovery is Recovery.HALT
    quiet(outcome)


TROUBLE = [
    pytest.param(
        API_KEY, credit_too_low(), "provider_credit", FailureClass.PROVIDER_CREDIT, 1,
        id="credit-too-low",
    ),
    pytest.param(
        API_KEY, throttled(), "provider_transient", FailureClass.PROVIDER_TRANSIENT, 4,
        id="throttle-429",
    ),
    # A subscription's 429 that names no window: Claude Code says "not your usage limit".
    pytest.param(
        SUBSCRIPTION, throttled(), "provider_transient", FailureClass.PROVIDER_TRANSIENT, 1,
        id="subscription-throttle-429",
    ),
    # Waiting cannot fix a revoked key: a human is told, as for credit.
    pytest.param(
        API_KEY, unauthorized(), "auth", FailureClass.PROVIDER_CREDIT, 4, id="bad-key"
    ),
    pytest.param(
        API_KEY, overloaded(), "provider_transient", FailureClass.PROVIDER_TRANSIENT, 3,
        id="overloaded-529",
    ),
]  # fmt: skip
RECOVERY = {
    FailureClass.PROVIDER_CREDIT: Recovery.ESCALATE,
    FailureClass.PROVIDER_TRANSIENT: Recovery.BACKOFF,
}


@pytest.mark.parametrize(("account", "answer", "stop_reason", "failure", "requests"), TROUBLE)
async def test_provider_trouble_is_classified_as_the_cli_reports_it(
    rig: Rig,
    monkeypatch: pytest.MonkeyPatch,
    account: dict[str, str],
    answer: Step,
    stop_reason: str,
    failure: FailureClass,
    requests: int,
) -> None:
    credentials(monkeypatch, account)
    start = await rig.provision()
    rig.provider.script(then=answer)
    outcome = await rig.run(start)

    result = outcome.result
    assert (result.status, result.stop_reason) == ("failed", stop_reason)
    assert result.exit_code == 1 and result.resets_at is None
    # Claude Code retried what it retries (CLAUDE_CODE_MAX_RETRIES=3), then gave up.
    assert len(rig.provider.loop_requests) == requests
    assert outcome.new_commits == 0 and outcome.classification is not None
    assert outcome.classification.failure_class is failure
    assert outcome.classification.recovery is RECOVERY[failure]


async def test_a_stream_cut_once_is_retried_by_the_cli_and_the_run_succeeds(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials(monkeypatch, API_KEY)
    start = await rig.provision()
    worktree = rig.workspace.worktree_path(REPO, NUMBER)
    rig.provider.script(Cut(), *edit_calc(worktree), text("Fixed add()."))
    outcome = await rig.run(start)

    assert (outcome.result.status, outcome.result.stop_reason) == ("success", "completed")
    steps = [type(seen.step).__name__ for seen in rig.provider.loop_requests]
    assert steps == ["Cut", "Reply", "Reply", "Reply"]
    assert outcome.new_commits == 1 and outcome.changed == ["calc.py"]


async def test_a_stream_cut_every_time_is_a_transient_failure(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    credentials(monkeypatch, API_KEY)
    start = await rig.provision()
    rig.provider.script(then=Cut())
    outcome = await rig.run(start)

    assert (outcome.result.status, outcome.result.stop_reason) == ("failed", "provider_transient")
    assert outcome.classification is not None
    assert outcome.classification.recovery is Recovery.BACKOFF


# ---------------------------------------------------------------- the whole loop


async def test_a_labelled_issue_is_fixed_by_claude_code_and_goes_to_review(
    claude: Path,
    provider: ScriptedAnthropic,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    """The sandbox GitHub, Baton's web process and a worker, every one a real process; the
    worker runs Claude Code in its jail, which edits the code and runs the tests itself."""
    redis.Redis.from_url(redis_server.url).flushall()
    key = API_KEY["ANTHROPIC_API_KEY"]
    baton = LocalBaton(
        workdir=tmp_path,
        redis_url=redis_server.url,
        agent_command="",
        extra_env={
            "BATON_AGENT": "claude",
            "BATON_AGENT_BINARY": str(claude),
            "BATON_AGENT_PASSTHROUGH_ENV": "ANTHROPIC_BASE_URL,ANTHROPIC_API_KEY",
            "BATON_AGENT_ALLOWED_HOSTS": provider.host_port,
            "BATON_AGENT_WALL_CLOCK_MINUTES": "2",
            "ANTHROPIC_BASE_URL": provider.base_url,
            "ANTHROPIC_API_KEY": key,
        },
    )
    provider.script(
        bash(RUN_TESTS, "Run the tests"),
        bash(f"sed -i 's/return a - b/return a + b/' calc.py && {RUN_TESTS}", "Fix and test"),
        bash("git commit -qam 'Make add() add'", "Commit the fix"),
        text("add() subtracted; it adds now, and the tests pass."),
    )
    await asyncio.to_thread(baton.start, 1)
    try:
        async with aiohttp.ClientSession() as session:
            maintainer = Maintainer(session, baton.sandbox_url, baton.admin_token)
            files = {**PROJECT, ".sandbox/ci": f"#!/bin/sh\nset -e\n{RUN_TESTS}\n"}
            repo = str((await maintainer.create_repo("calc", files, tmp_path))["full_name"])
            issue = await maintainer.open_issue(repo, "add() subtracts", "2 + 3 is not -1.")
            number = int(issue["number"])
            await maintainer.add_label(repo, number, "baton:queue")

            store = Store.from_url(redis_server.url)
            ref = IssueRef(installation_id=1, repo=repo, number=number)

            async def settled() -> Run | None:
                run = store.latest_run(ref)
                done = (RunState.PUSHED_GREEN, RunState.FAILED, RunState.NO_CHANGE)
                return run if run is not None and run.state in done else None

            run = await eventually(settled, "the run settling", 120)
            assert run.state is RunState.PUSHED_GREEN, (run.reason, baton.logs())
            labels = await eventually(
                lambda: _labels_if(maintainer, repo, number, {"baton:review"}), "review label"
            )
            assert labels == {"baton:review"}
            [pull] = await maintainer.pulls(repo)
            comments = [c["body"] for c in await maintainer.comments(repo, number)]
    finally:
        await asyncio.to_thread(baton.stop)

    agent = run.agent_result
    assert agent is not None
    assert (agent.agent, agent.status, agent.stop_reason) == ("claude", "success", "completed")
    assert agent.denials == [] and agent.refused_hosts == [] and agent.session_id
    outputs = [seen.last_tool_result_text() for seen in provider.loop_requests[1:]]
    assert "FAILED (failures=1)" in outputs[0] and outputs[1].rstrip().endswith("OK")
    assert provider.overrun == 0
    assert run.changed_files == ["calc.py"]
    assert pull["head"]["sha"] == run.head_sha
    assert "add() subtracted; it adds now, and the tests pass." in pull["body"]
    assert any("pushed-green" in body for body in comments)


async def _labels_if(
    maintainer: Maintainer, repo: str, number: int, wanted: set[str]
) -> set[str] | None:
    labels = await maintainer.labels(repo, number)
    return labels if labels == wanted else None
