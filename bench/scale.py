"""Baton at scale: N issues over M repositories with K workers on the sandbox GitHub.

Each N gets a stack of its own (a private redis-server, the sandbox, `baton web`
and K `baton worker`s, as `baton demo` runs them) and M repositories whose
`.sandbox/ci` passes once an issue's file is there. The agent is the `command`
adapter running an instant shell command that reads its brief and writes one file,
so what is measured is Baton's own work. The maintainer opens the N issues, then
puts `baton:queue` on each (bounded concurrency), and timing starts at the first
label. An issue is settled when its latest run is pushed-green and the issue carries
`baton:review` (or when Baton hands it to a human); pull requests are not merged.
Baton runs with its defaults, among them no per-repository run limit, so the K
workers are the limit; only a failed attempt is tried again after 0.2 s rather than
a minute, and the periodic sweep is scheduled out of the run. The sandbox's hourly
rate limit is raised out of reach, so calls are counted, never paced. Per N it prints:

- wall time, first label to the last issue settled;
- orchestration overhead per issue: wall time x K / N, less the agent's own time
  per issue (the agent's start to exit, from the run records): the worker-seconds
  an issue costs beyond its agent; beside it, from the run records alone, claim to
  pushed-green less the agent;
- GitHub API calls per issue: Baton's REST calls (installation and App tokens)
  counted by the sandbox from before the issues were opened until Baton is idle
  again, less any the sandbox reports as 304 Not Modified;
- idle sweep calls per repository per hour: two `baton sweep` passes once every
  issue is settled, each counted alone (until Baton is idle again, so what the
  sweep enqueued counts too), scaled by the default BATON_SWEEP_INTERVAL_SECONDS;
- duplicate runs: issues with more than one attempt in the run records, and issues
  with more than one RQ run job started (finished, failed or running);
- Redis memory per issue: `INFO memory` used_memory after the issues settled, less
  before they were opened, over N.

Goals beside each figure: overhead per issue flat in N (within 20% of the smallest
N's), no duplicate runs, at most 12 calls per issue, at most 2 idle sweep calls per
repository per hour. Missed goals are reported, never raised.

    python bench/scale.py [--issues 10,100,500] [--repos 10] [--workers 4]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import redis
from rq import Queue

from bot.devkit.devstack import LocalBaton, start_redis_server
from bot.devkit.maintainer import Maintainer
from bot.domain.jobs import AGENTS, QUEUES, job_id
from bot.domain.model import IssueRef, Run, RunState
from bot.edges.store import Store
from bot.ops.settings import Settings

QUEUE_LABEL = "baton:queue"
REVIEW_LABEL = "baton:review"
# Reads its brief, writes the one file CI looks for, and says so (its report for the PR).
AGENT = (
    'test -s "$BATON_BRIEF" && mkdir -p done && '
    'printf "issue %s\\n" "$BATON_ISSUE" > "done/issue-$BATON_ISSUE.txt" && '
    'echo "Wrote done/issue-$BATON_ISSUE.txt."'
)
PROJECT = {
    "README.md": "# scale\n",
    ".sandbox/ci": "#!/bin/sh\nset -e\nls done/issue-*.txt > /dev/null\n",
}
BATON_KINDS = ("installation", "app")  # the sandbox's caller kinds for Baton's own tokens
MAINTAINER_CONCURRENCY = 8
IDLE_FOR_S = 1.5  # no call and no job for this long: Baton is idle
NEVER_S = 10 * 365 * 24 * 3600  # the stack's own sweep schedule, out of the measurement
UNLIMITED_CALLS = 10**9
FLAT_WITHIN = 1.2
MAX_CALLS_PER_ISSUE = 12
MAX_IDLE_SWEEP_CALLS = 2.0
SWEEP_INTERVAL_S = float(Settings.model_fields["sweep_interval_seconds"].default)


@dataclass
class Calls:
    """Baton's REST calls as the sandbox counted them: by endpoint, and its 304s apart."""

    by_endpoint: Counter[str] = field(default_factory=Counter)
    not_modified: int = 0
    not_modified_reported: bool = False

    @property
    def counted(self) -> int:
        """Return the calls that count against the rate limit (a 304 does not)."""
        return self.by_endpoint.total()


@dataclass
class Sweep:
    """One idle sweep pass: what it printed and the calls it caused."""

    printed: str
    calls: Calls


@dataclass
class Figures:
    """What one N measured."""

    issues: int
    repos: int
    workers: int
    wall_s: float
    settled: int
    agent_s: float
    claim_to_green_s: float | None
    failures: Counter[str]
    calls: Calls
    sweeps: list[Sweep]
    attempts: Counter[int]
    run_jobs: Counter[int]
    memory_before: int
    memory_after: int

    @property
    def overhead_s(self) -> float:
        """Return worker-seconds per issue beyond the agent's own time."""
        return self.wall_s * self.workers / self.issues - self.agent_s

    def duplicates(self) -> tuple[int, int]:
        """Return how many issues had more than one attempt, and more than one run job."""
        return (
            sum(1 for n in self.attempts.values() if n > 1),
            sum(1 for n in self.run_jobs.values() if n > 1),
        )


def verdict(met: bool) -> str:
    return "goal met" if met else "goal missed"


def read_calls(snapshot: dict[str, Any]) -> Calls:
    """Return Baton's calls from a `GET /_sandbox/calls` answer.

    Each caller kind has its calls per endpoint; a sandbox that counts each installation
    on its own (`installations`, what GitHub's rate limit is kept by) is read by those,
    and one that answers conditional requests counts its 304 Not Modified answers apart
    (`not_modified`), outside the calls.
    """
    calls = Calls()
    for kind in BATON_KINDS:
        entry = snapshot.get(kind) or {}
        for tally in entry.get("installations", {}).values() or [entry]:
            calls.by_endpoint.update({str(k): int(v) for k, v in tally.get("calls", {}).items()})
            if "not_modified" in tally:
                calls.not_modified_reported = True
                calls.not_modified += int(tally["not_modified"])
    return calls


class Bench:
    """One stack for one N: the maintainer's client, the store and the sandbox's counts."""

    def __init__(self, baton: LocalBaton, maintainer: Maintainer) -> None:
        self.baton, self.maintainer = baton, maintainer
        self.store = Store.from_url(baton.redis_url)
        self.redis = redis.Redis.from_url(baton.redis_url)

    async def calls(self) -> Calls:
        return read_calls(await self.maintainer.gh.getitem("/_sandbox/calls"))

    async def reset_calls(self) -> None:
        await self.maintainer.gh.delete("/_sandbox/calls")

    def used_memory(self) -> int:
        memory: dict[str, Any] = self.redis.info("memory")
        return int(memory["used_memory"])

    def jobs_pending(self) -> int:
        """Return the deliveries not yet turned into jobs, and the jobs queued or running."""
        queues = [Queue(name, connection=self.redis) for name in QUEUES]
        jobs = sum(int(q.count) + int(q.started_job_registry.count) for q in queues)
        return jobs + self.store.intake_backlog()

    async def idle(self, within: float = 120.0) -> None:
        """Return once Baton has made no call and had no job for IDLE_FOR_S."""
        deadline = time.monotonic() + within
        last: tuple[int, int] | None = None
        since = time.monotonic()
        while time.monotonic() < deadline:
            self.baton.check_alive()
            now = ((await self.calls()).by_endpoint.total(), self.jobs_pending())
            if now != last or now[1]:
                last, since = now, time.monotonic()
            elif time.monotonic() - since >= IDLE_FOR_S:
                return
            await asyncio.sleep(0.25)
        raise TimeoutError(f"Baton still busy after {within:.0f}s")

    def sweep_once(self) -> str:
        """Run `baton sweep` as an operator would, waiting out a sweep already running."""
        for _ in range(60):
            result = subprocess.run(
                [sys.executable, "-m", "bot", "sweep"],
                env=self.baton.baton_env(),
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            if result.returncode != 0:
                raise SystemExit(f"baton sweep failed:\n{result.stderr}")
            if not result.stdout.startswith("skipped"):
                return result.stdout.strip()
            time.sleep(0.5)
        raise SystemExit("baton sweep: another sweep held the lease for 30s")

    async def sweep(self) -> Sweep:
        await self.reset_calls()
        printed = await asyncio.to_thread(self.sweep_once)
        await self.idle()
        return Sweep(printed, await self.calls())


async def bounded(work: Iterable[Awaitable[object]], limit: int) -> None:
    """Await every step, at most limit at once."""
    gate = asyncio.Semaphore(limit)

    async def one(step: Awaitable[object]) -> None:
        async with gate:
            await step

    await asyncio.gather(*(one(step) for step in work))


def settled(run: Run | None) -> bool:
    """Return whether an issue's latest run is as far as it goes: green, or handed to a human.

    A failed run that Baton tries again is not settled: its next attempt is awaited.
    """
    return run is not None and (
        run.state is RunState.PUSHED_GREEN or (run.state.is_terminal and run.escalated)
    )


def outcome(run: Run | None) -> str:
    """Return what an issue that did not go green ended as, in a few words."""
    if run is None:
        return "never claimed"
    why = f" {run.failure_class}" if run.failure_class else ""
    reason = (run.reason or "").strip().splitlines()
    return f"{run.state.value}{why}: {reason[0][:100] if reason else 'no reason recorded'}"


async def reviewable(maintainer: Maintainer, repos: list[str]) -> set[tuple[str, int]]:
    """Return the issues that carry the review label."""
    found = set()
    for repo in repos:
        url = "/repos/{+repo}/issues{?labels,per_page}"
        async for issue in maintainer.gh.getiter(
            url, {"repo": repo, "labels": REVIEW_LABEL, "per_page": 100}
        ):
            if "pull_request" not in issue:
                found.add((repo, int(issue["number"])))
    return found


async def wait_settled(
    bench: Bench, issues: list[IssueRef], repos: list[str], within: float
) -> tuple[float, int]:
    """Wait until every issue is settled and labelled; return when, and how many went green.

    The run records are read until every issue is settled, then the labels until every
    green one carries the review label (or the time is up).
    """
    deadline = time.monotonic() + within
    pending, labelled = list(issues), set()
    while time.monotonic() < deadline:
        bench.baton.check_alive()
        pending = [i for i in pending if not settled(bench.store.latest_run(i))]
        if not pending:
            green = {(i.repo, i.number) for i in issues if is_green(bench.store.latest_run(i))}
            labelled = green & await reviewable(bench.maintainer, repos)
            if labelled == green:
                break
        await asyncio.sleep(0.25)
    return time.monotonic(), len(labelled)


def is_green(run: Run | None) -> bool:
    return run is not None and run.state is RunState.PUSHED_GREEN


def failures(store: Store, issues: list[IssueRef]) -> Counter[str]:
    """Return how the issues whose latest run is not green ended, by outcome."""
    found: Counter[str] = Counter()
    for issue in issues:
        run = store.latest_run(issue)
        if not is_green(run):
            found[outcome(run)] += 1
    return found


def run_jobs_started(connection: redis.Redis, issue: IssueRef) -> int:
    """Return how many RQ run jobs for the issue have started (finished, failed or running)."""
    queue = Queue(AGENTS, connection=connection)
    prefix = job_id("run", issue.repo, issue.number) + "-"
    registries = (
        queue.finished_job_registry,
        queue.failed_job_registry,
        queue.started_job_registry,
    )
    return sum(
        1 for registry in registries for job in registry.get_job_ids() if job.startswith(prefix)
    )


def agent_seconds(run: Run) -> float:
    return run.agent_result.duration.total_seconds() if run.agent_result else 0.0


def claim_to_green_seconds(run: Run) -> float | None:
    """Return claim to pushed-green less the agent's time, for a run that went green."""
    green = [change.at for change in run.history if change.state is RunState.PUSHED_GREEN]
    if not green:
        return None
    return (green[0] - run.started_at).total_seconds() - agent_seconds(run)


async def measure(n: int, repos: int, workers: int, workdir: Path) -> Figures:
    redis_url, redis_process = start_redis_server(workdir / "redis")
    baton = LocalBaton(
        workdir=workdir,
        redis_url=redis_url,
        agent_command=AGENT,
        # A failed attempt is tried again at once, not after minutes, so the run ends.
        # Baton's calls are counted, not paced: its write pace is lifted as the sandbox's
        # limits are below.
        extra_env={
            "BATON_SWEEP_INTERVAL_SECONDS": str(NEVER_S),
            "BATON_BACKOFF_BASE_SECONDS": "0.2",
            "BATON_WRITE_INTERVAL_SECONDS": "0",
            "BATON_WRITE_PER_MINUTE": str(UNLIMITED_CALLS),
            "BATON_WRITE_PER_HOUR": str(UNLIMITED_CALLS),
        },
    )
    try:
        baton.start(workers=workers)
        async with aiohttp.ClientSession() as session:
            maintainer = Maintainer(session, baton.sandbox_url, baton.admin_token)
            bench = Bench(baton, maintainer)
            return await measure_on(bench, n, repos, workers)
    except Exception:
        print(baton.logs(), file=sys.stderr)
        raise
    finally:
        baton.stop()
        redis_process.stop()


async def measure_on(bench: Bench, n: int, repo_count: int, workers: int) -> Figures:
    maintainer = bench.maintainer
    names = [f"scale-{r + 1}" for r in range(repo_count)]
    made: list[str] = []

    async def create(name: str) -> None:
        repo = await maintainer.create_repo(name, PROJECT, bench.baton.workdir)
        made.append(str(repo["full_name"]))

    # Baton's calls are measured, not paced: no installation's hourly budget runs out here,
    # nor its secondary limits (the soak, bench/soak.py, measures Baton under those).
    # (A sandbox without rate limits ignores the fields; webhook_url is sent back unchanged.)
    config = await maintainer.gh.getitem("/_sandbox/config")
    unlimited = {
        "rate_limit": UNLIMITED_CALLS,
        "secondary_per_minute": UNLIMITED_CALLS,
        "secondary_per_hour": UNLIMITED_CALLS,
        "secondary_concurrent": UNLIMITED_CALLS,
    }
    await maintainer.gh.patch(
        "/_sandbox/config", data={"webhook_url": config["webhook_url"], **unlimited}
    )
    await bounded([create(name) for name in names], MAINTAINER_CONCURRENCY)
    repos = sorted(made)
    await bench.idle()  # the pushes and the workers' start-up sweeps are done
    memory_before = bench.used_memory()
    await bench.reset_calls()

    issues: list[IssueRef] = []

    async def open_issue(number: int) -> None:
        repo = repos[number % repo_count]
        issue = await maintainer.open_issue(repo, f"Scale issue {number}", "Write its file.")
        issues.append(IssueRef(installation_id=1, repo=repo, number=int(issue["number"])))

    await bounded([open_issue(k) for k in range(n)], MAINTAINER_CONCURRENCY)
    began = time.monotonic()
    await bounded(
        [maintainer.add_label(i.repo, i.number, QUEUE_LABEL) for i in issues],
        MAINTAINER_CONCURRENCY,
    )
    ended, labelled = await wait_settled(bench, issues, repos, within=120 + 3 * n)
    await bench.idle()
    calls = await bench.calls()
    memory_after = bench.used_memory()

    attempts: Counter[int] = Counter()
    run_jobs: Counter[int] = Counter()
    agent_total, record_overheads = 0.0, []
    for k, issue in enumerate(issues):
        runs = bench.store.runs(issue)
        attempts[k] = len(runs)
        run_jobs[k] = run_jobs_started(bench.redis, issue)
        agent_total += sum(agent_seconds(run) for run in runs)
        record_overheads += [s for run in runs if (s := claim_to_green_seconds(run)) is not None]
    sweeps = [await bench.sweep(), await bench.sweep()]
    return Figures(
        issues=n,
        repos=repo_count,
        workers=workers,
        wall_s=ended - began,
        settled=labelled,
        agent_s=agent_total / n,
        claim_to_green_s=sum(record_overheads) / len(record_overheads)
        if record_overheads
        else None,
        failures=failures(bench.store, issues),
        calls=calls,
        sweeps=sweeps,
        attempts=attempts,
        run_jobs=run_jobs,
        memory_before=memory_before,
        memory_after=memory_after,
    )


def report(figures: Figures, base: Figures) -> None:
    f = figures
    n = f.issues
    print(f"\n== N={n} issues over {f.repos} repositories, {f.workers} workers")
    print(f"  settled (pushed-green and {REVIEW_LABEL})  {f.settled}/{n}")
    for what, count in f.failures.most_common(5):
        print(f"      {count} not green: {what}")
    print(f"  wall time, first label to last settled   {f.wall_s:8.1f} s")
    ratio = f.overhead_s / base.overhead_s
    print(
        f"  orchestration overhead per issue         {f.overhead_s:8.2f} s  "
        f"(wall x {f.workers} / {n} - agent {f.agent_s:.3f} s)  "
        f"ratio to N={base.issues} {ratio:.2f}  "
        f"[goal <= {FLAT_WITHIN:.2f}: {verdict(ratio <= FLAT_WITHIN)}]"
    )
    if f.claim_to_green_s is not None:
        print(
            f"  claim to pushed-green less the agent     {f.claim_to_green_s:8.2f} s  (run records)"
        )
    per_issue = f.calls.counted / n
    note = (
        f", {f.calls.not_modified} 304s apart"
        if f.calls.not_modified_reported
        else ", the sandbox reports no 304s"
    )
    print(
        f"  GitHub API calls per issue               {per_issue:8.1f}    "
        f"({f.calls.counted} counted{note})  "
        f"[goal <= {MAX_CALLS_PER_ISSUE}: {verdict(per_issue <= MAX_CALLS_PER_ISSUE)}]"
    )
    for endpoint, count in f.calls.by_endpoint.most_common(10):
        print(f"      {count / n:6.2f}  {endpoint}")
    hourly = 3600 / SWEEP_INTERVAL_S
    for number, sweep in enumerate(f.sweeps, 1):
        per_repo_hour = sweep.calls.counted / f.repos * hourly
        print(
            f"  idle sweep {number}: calls per repo per hour   {per_repo_hour:8.1f}    "
            f"({sweep.calls.counted} counted, {sweep.calls.not_modified} 304s, "
            f"every {SWEEP_INTERVAL_S:.0f}s)  "
            f"[goal <= {MAX_IDLE_SWEEP_CALLS:.0f}: "
            f"{verdict(per_repo_hour <= MAX_IDLE_SWEEP_CALLS)}]"
        )
        print(f"      {sweep.printed}")
        for endpoint, count in sweep.calls.by_endpoint.most_common(4):
            print(f"      {count:6d}  {endpoint}")
    attempts, jobs = f.duplicates()
    print(
        f"  duplicate runs: issues with >1 attempt   {attempts:8d}    "
        f"with >1 run job started {jobs} "
        f"({f.run_jobs.total()} run jobs for {n} issues)  "
        f"[goal 0: {verdict(attempts == 0 and jobs == 0)}]"
    )
    memory = (f.memory_after - f.memory_before) / n
    print(
        f"  Redis memory per issue                   {memory / 1024:8.1f} KiB "
        f"({f.memory_before / 2**20:.1f} MiB before, {f.memory_after / 2**20:.1f} MiB after)"
    )


async def main(counts: list[int], repos: int, workers: int) -> None:
    print(
        f"agent: {shlex.quote(AGENT)}\n"
        f"settled = latest run pushed-green and the issue labelled {REVIEW_LABEL} (no merges)"
    )
    results: list[Figures] = []
    for n in counts:
        with tempfile.TemporaryDirectory(prefix="baton-bench-") as tmp:
            results.append(await measure(n, repos, workers, Path(tmp)))
        report(results[-1], results[0])
    print(
        "\nsummary: N, wall s, overhead s/issue (ratio), calls/issue, "
        "idle sweep calls/repo/h (pass 1 / 2), duplicate-run issues, Redis KiB/issue"
    )
    for f in results:
        sweeps = " / ".join(
            f"{s.calls.counted / f.repos * 3600 / SWEEP_INTERVAL_S:.1f}" for s in f.sweeps
        )
        memory = (f.memory_after - f.memory_before) / f.issues / 1024
        print(
            f"  N={f.issues:<4} {f.wall_s:7.1f}  {f.overhead_s:6.2f} "
            f"({f.overhead_s / results[0].overhead_s:4.2f})  "
            f"{f.calls.counted / f.issues:5.1f}  {sweeps}  {max(f.duplicates())}  {memory:.1f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--issues", default="10,100,500", help="comma-separated issue counts")
    parser.add_argument("--repos", type=int, default=10)
    parser.add_argument("--workers", type=int, default=4)
    args = parser.parse_args()
    counts = sorted(int(n) for n in args.issues.split(",") if n.strip())
    asyncio.run(main(counts, args.repos, args.workers))
