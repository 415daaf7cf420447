"""What the tests of the real agent CLIs share (tests/test_cli_*.py).

Each of those tests runs a CLI exactly as Baton's runner does: a checkout provisioned by
Baton's Workspace, the issue's own agent home, the jail with its allow-list proxy, and a
scripted provider (tests/providers/) on loopback playing the model. What does not depend
on the CLI is here: the CLI as Baton's settings name it, found installed (`Cli`), Baton's
side of one issue (`IssueRig`), one run of the adapter and what Baton concludes of it
(`Outcome`), and the whole loop on a local Baton (`to_review`). A module of one CLI says
what is particular to it: its `Cli`, its provider, its checks.
"""

from __future__ import annotations

import asyncio
import shlex
import subprocess
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

import aiohttp
import pytest
import redis

from bot.agents import (
    adapter_for,
    agent_home,
    egress_for_run,
    egress_policy_for,
    home_for_run,
    programs_of,
    reporters_of,
)
from bot.agents.base import AgentRequest
from bot.agents.egress import EgressPolicy, HostPort, parse_host_port
from bot.agents.jail import Jail, jails_for, sandbox_problem
from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.classify import RunFacts, classify
from bot.domain.model import AgentResult, Classification, IssueRef, Run, RunState, utcnow
from bot.edges.git import Git, Identity, Workspace
from bot.edges.store import Store
from bot.ops.settings import Settings
from tests.conftest import RedisServer

ROOT = Path(__file__).parents[1]
INSTALL = "bash .ci/install-agent-clis"
IDENTITY = Identity("Baton", "baton@example.invalid")


def credentials(monkeypatch: pytest.MonkeyPatch, env: Mapping[str, str]) -> None:
    """Set these variables where the agent's passthrough finds them."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@dataclass(frozen=True)
class Issue:
    """An issue a CLI is given to fix: the repository it is about (its name, its files,
    the subject of their one commit, the check its CI runs), what the issue says, and the
    branch and first brief Baton gives it (`{number}` in them is the issue's number)."""

    repo: str
    files: Mapping[str, str]
    subject: str
    check: str
    title: str
    body: str
    branch: str
    brief: str

    def branch_of(self, number: int) -> str:
        return self.branch.format(number=number)

    def brief_of(self, number: int) -> str:
        return self.brief.format(number=number)


# The calculator whose add() subtracts, which Claude Code and codex fix.
PROBE = "probe.txt"  # what forge_and_kill found, in the checkout
RUN_TESTS = "python3 -B -m unittest -v test_calc 2>&1"
CALC = Issue(
    repo="octo/calc",
    files={
        "calc.py": "def add(a, b):\n    return a - b\n",
        "test_calc.py": (
            "import unittest\n\nfrom calc import add\n\n\n"
            "class AddTest(unittest.TestCase):\n"
            "    def test_add(self):\n"
            "        self.assertEqual(add(2, 3), 5)\n"
        ),
        ".gitignore": "__pycache__/\n",
    },
    subject="Calculator",
    check=RUN_TESTS,
    title="add() subtracts",
    body="2 + 3 is not -1.",
    branch="baton/issue-{number}-add",
    brief="Fix issue #{number}: add() subtracts. Run the tests.",
)


class Provider(Protocol):
    """A scripted provider, as Baton's settings name it."""

    @property
    def host_port(self) -> str: ...


class CliAdapter(Protocol):
    """An adapter of a real CLI: it runs the CLI, and says the command line it ran."""

    async def run(self, request: AgentRequest) -> AgentResult: ...

    def argv(self, request: AgentRequest) -> list[str]: ...


@dataclass(frozen=True)
class Cli:
    """A real agent CLI as Baton runs it: its name in BATON_AGENT, the adapter Baton picks
    for it, where its pinned install is (`title` names it when it is not), and the
    variables Baton passes through to it."""

    agent: str
    title: str
    binary: Path
    adapter: type[CliAdapter]
    passthrough: tuple[str, ...]
    with_sandbox: bool = False  # it runs only where this machine can build a sandbox

    def installed(self) -> Cli:
        """Return the CLI; skip without its install, or, with_sandbox, without a sandbox
        this machine can build (in CI, tests/conftest.py fails a real-CLI test that skips)."""
        installed(self.binary, self.title, self.with_sandbox)
        return self


def installed(binary: Path, title: str, with_sandbox: bool = False) -> Path:
    """Return a CLI's binary; skip without its install, or, with_sandbox, without a sandbox."""
    problem = None
    if not binary.exists():
        problem = f"{title} is not installed: run `{INSTALL}`"
    elif with_sandbox:
        problem = sandbox_problem()
    if problem is not None:
        pytest.skip(problem)
    return binary


ProviderT = TypeVar("ProviderT", bound=Provider)


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

    @property
    def transcript(self) -> str:
        """Return what the CLI printed, as the runner keeps it."""
        return self.request.transcript_path.read_text()


class IssueRig(Generic[ProviderT]):
    """Baton's side of one issue: its settings, mirror, checkout and agent home.

    Its agent is cli, with settings of its own (env) besides these. The provider is on
    loopback: the provider's public hosts, which Baton's policy allows the CLI, are left
    out of the run's, so that anything the CLI sends anywhere but its provider is refused
    by the proxy and named.
    """

    def __init__(
        self,
        root: Path,
        provider: ProviderT,
        issue: Issue,
        cli: Cli,
        *,
        public: Collection[HostPort],
        number: int = 7,
        wall_clock_minutes: float = 2,
        env: Mapping[str, Any] | None = None,
    ) -> None:
        self.root = root
        self.provider = provider
        self.issue = issue
        self.adapter = cli.adapter
        self.public = frozenset(public)
        self.number = number
        self.settings = Settings(
            BATON_DATA_DIR=root / "data",
            BATON_AGENT=cli.agent,
            BATON_AGENT_BINARY=str(cli.binary),
            BATON_AGENT_ALLOWED_HOSTS=provider.host_port,
            BATON_AGENT_PASSTHROUGH_ENV=",".join(cli.passthrough),
            BATON_AGENT_WALL_CLOCK_MINUTES=wall_clock_minutes,
            **(env or {}),
        )
        self.jails = jails_for(self.settings)
        self.workspace = Workspace(Git(IDENTITY), self.settings.data_dir, self.jails)
        self.runs = 0

    @property
    def branch(self) -> str:
        return self.issue.branch_of(self.number)

    @property
    def home(self) -> Path:
        return agent_home(self.settings.data_dir, self.issue.repo, self.number)

    @property
    def worktree(self) -> Path:
        return self.workspace.worktree_path(self.issue.repo, self.number)

    @property
    def mirror(self) -> Path:
        return self.workspace.mirror_path(self.issue.repo)

    async def provision(self, files: Mapping[str, str] | None = None) -> str:
        """Make the origin, Baton's mirror of it, and the issue's checkout; return the base."""
        seed = self.root / "seed"
        seed.mkdir()
        git(seed, "init", "-q", "-b", "main")
        for name, content in (self.issue.files if files is None else files).items():
            (seed / name).parent.mkdir(parents=True, exist_ok=True)
            (seed / name).write_text(content)
        git(seed, "add", "-A")
        maintainer = ("-c", "user.name=Maintainer", "-c", "user.email=m@example.invalid")
        git(seed, *maintainer, "commit", "-qm", self.issue.subject)
        origin = self.root / "origin.git"
        subprocess.run(["git", "clone", "-q", "--bare", str(seed), str(origin)], check=True)
        repo = self.issue.repo
        mirror = await self.workspace.refresh_mirror(repo, str(origin), "unused-token")
        base = await self.workspace.rev_parse(mirror, "refs/remotes/origin/main")
        await self.workspace.provision(repo, self.number, self.branch, base)
        return base

    def policy(self) -> EgressPolicy:
        """Return the run's egress policy: Baton's, less the provider's public hosts."""
        found = egress_policy_for(self.settings)
        assert found is not None and self.public <= found.allowed
        assert parse_host_port(self.provider.host_port) in found.allowed
        return EgressPolicy(
            mode=found.mode,
            allowed=found.allowed - self.public,
            credentials=found.credentials,
            agent_env=found.agent_env,
        )

    def jail(
        self, run_dir: Path, brief_path: Path, egress_dir: Path | None, pinned: tuple[Path, ...]
    ) -> Jail:
        """Return the run's jail, as the runner makes it."""
        jail = self.jails.make(
            worktree=self.worktree,
            home=self.home,
            pinned=pinned,
            scratch=run_dir / "jail",
            readable=(self.mirror / "objects", brief_path),
            writable=(run_dir / "io",),
            network=self.settings.agent_network,
            egress_dir=egress_dir,
            programs=programs_of(self.settings),
            reporters=reporters_of(self.settings),
        )
        assert jail is not None
        return jail

    async def run(self, start: str, *, resume: str | None = None, brief: str = "") -> Outcome:
        """Run the agent once as `_run_agent` does, then collect its work as Baton does."""
        self.runs += 1
        label = f"{self.issue.repo}#{self.number}"
        run_dir = self.settings.data_dir / "runs" / f"issue-{self.number}-{self.runs}"
        (run_dir / "io").mkdir(parents=True)
        brief_path = run_dir / "brief.md"
        brief_path.write_text(brief or self.issue.brief_of(self.number))
        policy = self.policy()
        home = home_for_run(self.settings, self.issue.repo, self.number)
        adapter = adapter_for(self.settings)
        assert isinstance(adapter, self.adapter)
        async with egress_for_run(policy, label) as (egress_dir, proxy):
            request = AgentRequest(
                run_id=f"{label}/{self.runs}",
                issue_number=self.number,
                attempt=self.runs,
                worktree=self.worktree,
                brief_path=brief_path,
                run_dir=run_dir,
                deadline=utcnow() + timedelta(seconds=self.settings.agent_wall_clock_seconds),
                home=self.home,
                passthrough_env=tuple(self.settings.agent_passthrough_env),
                held_env=policy.agent_env,
                resume_session_id=resume,
                jail=self.jail(run_dir, brief_path, egress_dir, home.pinned),
            )
            result = await adapter.run(request)
            assert proxy is not None
            result = result.model_copy(update={"refused_hosts": list(proxy.refused)})
        return await self.collect(start, request, result, adapter.argv(request))

    async def collect(
        self, start: str, request: AgentRequest, result: AgentResult, argv: list[str]
    ) -> Outcome:
        """Collect the run's work as Baton does, and classify the run as it would."""
        repo = self.issue.repo
        leftovers = f"Work on #{self.number} (Baton)"
        head = await self.workspace.collect(repo, self.number, start, leftovers=leftovers)
        new_commits = await self.workspace.commits_since(repo, start, head)
        changed = git(self.mirror, "diff", "--name-only", start, head).split()
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
        worktree = self.worktree
        return Outcome(
            result, classification, start, head, new_commits, changed, worktree, request, argv
        )


def forge_and_kill(line: str, cli: str) -> str:
    """Return a shell command that forges the CLI's report, as an injected agent would:
    line written into the stdout of every process in the jail, then the CLI killed so
    that the forged line would be its last. Which writes failed goes to PROBE."""
    quoted = shlex.quote(line)
    return f"""
for proc in $(ls -d /proc/[0-9]* | sort -t/ -k3 -n); do
  name=$(cat $proc/comm) target=$(readlink $proc/fd/1 2>/dev/null)
  if (echo {quoted} > $proc/fd/1) 2>/dev/null; then echo "wrote $name $target" >> {PROBE}
  else echo "refused $name" >> {PROBE}; fi
done
for comm in /proc/[0-9]*/comm; do
  if [ "$(cat "$comm")" = {cli} ]; then pid=${{comm#/proc/}}; kill -9 "${{pid%%/*}}"; fi
done
"""


def forgery_seen(worktree: Path) -> list[str]:
    """Return, one line a process, whether forge_and_kill could write its stdout."""
    return (worktree / PROBE).read_text().splitlines()


def plain_request(worktree: Path, home: Path, run_dir: Path) -> AgentRequest:
    """Return a request for calling an adapter's parts alone: no jail, no time to run."""
    return AgentRequest(
        run_id="octo/repo#7/1",
        issue_number=7,
        attempt=1,
        worktree=worktree,
        brief_path=run_dir / "brief.md",
        run_dir=run_dir,
        deadline=utcnow(),
        home=home,
    )


class Reviewed(NamedTuple):
    """An issue the whole loop took to review: its run, its pull request, its comments."""

    run: Run
    pull: dict[str, Any]
    comments: list[str]


async def to_review(
    workdir: Path,
    redis_server: RedisServer,
    issue: Issue,
    cli: Cli,
    provider: Provider,
    env: Mapping[str, str],
) -> Reviewed:
    """Take issue through the whole loop: the sandbox GitHub, Baton's web process and a
    worker, every one a real process, the worker's agent cli with these settings (env).

    A maintainer makes the repository (its CI runs the issue's check), opens the issue
    and labels it; the worker's run must push green and put the issue in review.
    """
    redis.Redis.from_url(redis_server.url).flushall()
    baton = LocalBaton(
        workdir=workdir,
        redis_url=redis_server.url,
        agent_command="",
        extra_env={
            "BATON_AGENT": cli.agent,
            "BATON_AGENT_BINARY": str(cli.binary),
            "BATON_AGENT_ALLOWED_HOSTS": provider.host_port,
            "BATON_AGENT_WALL_CLOCK_MINUTES": "2",
            **env,
        },
    )
    await asyncio.to_thread(baton.start, 1)
    try:
        async with aiohttp.ClientSession() as session:
            maintainer = Maintainer(session, baton.sandbox_url, baton.admin_token)
            files = {**issue.files, ".sandbox/ci": f"#!/bin/sh\nset -e\n{issue.check}\n"}
            name = issue.repo.split("/")[-1]
            repo = str((await maintainer.create_repo(name, files, workdir))["full_name"])
            opened = await maintainer.open_issue(repo, issue.title, issue.body)
            number = int(opened["number"])
            await maintainer.add_label(repo, number, "baton:queue")

            store = Store.from_url(redis_server.url)
            ref = IssueRef(installation_id=1, repo=repo, number=number)

            async def settled() -> Run | None:
                run = store.latest_run(ref)
                done = (RunState.PUSHED_GREEN, RunState.FAILED, RunState.NO_CHANGE)
                return run if run is not None and run.state in done else None

            run = await eventually(settled, "the run settling", 120)
            assert run.state is RunState.PUSHED_GREEN, (run.reason, baton.logs())

            async def in_review() -> set[str] | None:
                labels = await maintainer.labels(repo, number)
                return labels if labels == {"baton:review"} else None

            assert await eventually(in_review, "the review label") == {"baton:review"}
            [pull] = await maintainer.pulls(repo)

            async def status_says_green() -> list[str] | None:
                # The label and the status comment are separate writes: wait for both.
                bodies = [c["body"] for c in await maintainer.comments(repo, number)]
                return bodies if any("pushed-green" in body for body in bodies) else None

            comments = await eventually(status_says_green, "the status comment saying green")
    finally:
        await asyncio.to_thread(baton.stop)
    return Reviewed(run, pull, comments)
