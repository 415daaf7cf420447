"""Baton for an hour's worth of work at github.com's limits: the soak.

One stack (a private redis-server, the sandbox GitHub, `baton web`, a clock and
8 `baton worker`s, as `baton demo` runs them) works 300 issues over 30 repositories,
which belong to 10 accounts, so 10 installations share GitHub's limits three
repositories each. The sandbox runs as github.com does, only with tokens that live
10 minutes rather than 60, and a second App with `checks: write` gets a queued check
suite, never run, on every push. Baton runs with its defaults. Where the sandbox counts
content-creating requests against GitHub's secondary limits (80 a minute and 500 an
hour per installation, 100 at once) and says so at `GET /_sandbox/limits`, the soak
prints its figures; a sandbox that does not count them yet prints "not counted".

The agent is the `command` adapter running a shell script. It works as long as its
issue says (20-60 s), writes the one file the repository's CI looks at, and commits it
with a nonce, so every run of the agent leaves a commit of its own in the sandbox's
repository, reachable or not. One issue in five fails CI at its first attempt (its file
says `draft`), so Baton continues it on the same pull request. A few issues work longer
than a token lives: their pull requests open only if nothing holds a token across the
run.

It prints, each beside its goal:

- secondary-limit answers Baton received (goal 0);
- the peak content-creating writes one installation made in a minute (goal <= 80), and
  in an hour (goal <= 500);
- issues ended as they should: pushed-green and labelled for review, after one attempt,
  or two for an issue that fails CI once (goal all);
- duplicate pull requests: an issue with more than one (goal 0);
- pull requests missing: an issue gone green with no open pull request, the long runs
  apart (goal 0);
- agent runs per issue (commits by the agent in the sandbox's repositories) beside the
  attempts its run records show (goal equal);
- wall time, first label to last issue settled, beside the agents' own time (their sum
  over the 8 workers: the wall time with no overhead and no waiting).

    python -m bench.soak [--issues 300] [--repos 30] [--accounts 10] [--workers 8]
                         [--token-lifetime 600] [--long 3]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, TypeVar

import aiohttp
from gidgethub import GitHubException

from bench.scale import Bench, agent_seconds, bounded, is_green, outcome, reviewable, verdict
from bot.devkit.devstack import LocalBaton, start_redis_server
from bot.devkit.maintainer import Maintainer
from bot.domain.model import IssueRef

T = TypeVar("T")

QUEUE_LABEL = "baton:queue"
# Works as long as its issue says, writes the file CI reads (`draft` at a fail-once
# issue's first attempt) and commits it with a nonce: one commit per run of the agent.
AGENT = r"""
seconds=$(sed -n 's/^soak: sleep \([0-9][0-9]*\)$/\1/p' "$BATON_BRIEF" | head -n 1)
sleep "${seconds:-20}"
text=ok
if grep -q '^soak: fail-once$' "$BATON_BRIEF" && [ "$BATON_ATTEMPT" = 1 ]; then text=draft; fi
mkdir -p soak
printf '%s\n' "$text" > "soak/issue-$BATON_ISSUE.txt"
nonce=$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
git add -A
git -c user.name=Soak -c user.email=soak@example.invalid commit -q \
    -m "soak: issue $BATON_ISSUE attempt $BATON_ATTEMPT run $nonce"
echo "Wrote soak/issue-$BATON_ISSUE.txt ($text)."
"""
RUN_COMMIT = re.compile(r"^soak: issue (\d+) attempt (\d+) run ([0-9a-f]+)$")
PROJECT = {
    "README.md": "# soak\n",
    # Fails while any issue's file says draft (a fail-once issue's first attempt).
    ".sandbox/ci": "#!/bin/sh\nset -e\nls soak/issue-*.txt > /dev/null\n"
    "! grep -qx draft soak/*.txt\n",
}
MAINTAINER_CONCURRENCY = 8
FAIL_ONCE_EVERY = 5
SHORTEST_S, LONGEST_S = 20, 60
WRITES_PER_MINUTE, WRITES_PER_HOUR = 80, 500
PROGRESS_EVERY_S = 60.0


@dataclass(frozen=True)
class SoakIssue:
    """One issue of the soak and what its agent is told to do."""

    ref: IssueRef
    owner: str
    seconds: int
    fails_once: bool
    long: bool

    @property
    def attempts_due(self) -> int:
        return 2 if self.fails_once else 1

    def body(self) -> str:
        lines = [f"soak: sleep {self.seconds}"] + (["soak: fail-once"] if self.fails_once else [])
        return "Write this issue's file for the soak.\n\n" + "\n".join(lines) + "\n"


@dataclass
class Limits:
    """What the sandbox counted of Baton's writes, per installation."""

    secondary_answers: int = 0
    peak_per_minute: int = 0
    peak_per_hour: int = 0
    writes: int = 0


@dataclass
class Figures:
    issues: list[SoakIssue]
    workers: int
    wall_s: float
    ended_well: int
    wrong: Counter[str]
    limits: Limits | None
    duplicate_prs: int
    missing_prs: list[str]
    long_missing: list[str]
    agent_runs: dict[int, int]
    attempts: dict[int, int]
    agent_s: float
    notes: list[str] = field(default_factory=list)


def plan_issues(n: int, repos: list[tuple[str, str]], long: int, lifetime: int) -> list[SoakIssue]:
    """Return the soak's issues, numbered 0..n-1 until the sandbox numbers them.

    Spread evenly over the repositories; every FAIL_ONCE_EVERY-th fails CI once; `long`
    of them, spread over the run, work a minute longer than a token lives.
    """
    spread = max(1, n // max(long, 1))
    planned = []
    for k in range(n):
        owner, repo = repos[k % len(repos)]
        is_long = long > 0 and k % spread == spread // 2 and k // spread < long
        seconds = lifetime + 60 if is_long else SHORTEST_S + (k * 37) % (LONGEST_S - SHORTEST_S + 1)
        planned.append(
            SoakIssue(
                IssueRef(installation_id=1, repo=repo, number=k + 1),
                owner,
                seconds,
                fails_once=k % FAIL_ONCE_EVERY == 1,
                long=is_long,
            )
        )
    return planned


async def politely(step: Callable[[], Awaitable[T]], tries: int = 8) -> T:
    """Run one of the maintainer's own calls, waiting out a secondary rate limit as asked."""
    for _ in range(tries - 1):
        try:
            return await step()
        except GitHubException as exc:
            headers = getattr(exc, "headers", None) or {}
            if "secondary rate limit" not in str(exc).lower():
                raise
            await asyncio.sleep(float(headers.get("retry-after", 60)))
    return await step()


def read_limits(snapshot: dict[str, Any]) -> Limits:
    """Return Baton's figures from the sandbox's `GET /_sandbox/limits` answer."""
    limits = Limits()
    for tally in (snapshot.get("installations") or {}).values():
        limits.secondary_answers += int(tally.get("secondary_limit_answers", 0))
        limits.peak_per_minute = max(limits.peak_per_minute, int(tally.get("peak_per_minute", 0)))
        limits.peak_per_hour = max(limits.peak_per_hour, int(tally.get("peak_per_hour", 0)))
        limits.writes += int(tally.get("content_writes", 0))
    return limits


async def counted_limits(admin: Maintainer) -> Limits | None:
    """Return what the sandbox counted of the secondary limits; None if it counts nothing."""
    try:
        return read_limits(await admin.gh.getitem("/_sandbox/limits"))
    except GitHubException as exc:
        if getattr(exc, "status_code", None) != HTTPStatus.NOT_FOUND:
            raise
        return None


def agent_runs(git_root: Path) -> Counter[tuple[str, int]]:
    """Return each issue's agent runs: its commits in the sandbox's repositories.

    Every object pushed is counted, reachable or not, so a run whose branch was later
    pushed over still counts.
    """
    runs: Counter[tuple[str, int]] = Counter()
    for repo in sorted(git_root.glob("*/*.git")):
        name = f"{repo.parent.name}/{repo.name.removesuffix('.git')}"
        listed = subprocess.run(
            ["git", "-C", str(repo), "cat-file", "--batch-all-objects", "--batch-check"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        commits = "\n".join(line.split()[0] for line in listed.splitlines() if " commit " in line)
        subjects = subprocess.run(
            ["git", "-C", str(repo), "log", "--no-walk=unsorted", "--stdin", "--format=%s"],
            input=commits,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        nonces = {m.group(1, 3) for s in subjects.splitlines() if (m := RUN_COMMIT.match(s))}
        runs.update((name, int(number)) for number, _ in nonces)
    return runs


async def pulls_by_issue(maintainer: Maintainer, repo: str) -> dict[int, list[dict[str, Any]]]:
    """Return a repository's pull requests by the issue their Baton branch names."""
    found: dict[int, list[dict[str, Any]]] = {}
    for pull in await maintainer.pulls(repo, state="all"):
        match = re.match(r"baton/issue-(\d+)\b", str(pull["head"]["ref"]))
        if match:
            found.setdefault(int(match.group(1)), []).append(pull)
    return found


async def setup(bench: Bench, args: argparse.Namespace) -> list[SoakIssue]:
    """Create the accounts' repositories and open the issues (not yet queued)."""
    admin = bench.maintainer
    workdir = bench.baton.workdir
    owners = [f"soak-owner-{a + 1}" for a in range(args.accounts)]
    repos: list[tuple[str, str]] = []

    async def create(r: int) -> None:
        owner = owners[r % len(owners)]
        made = await politely(
            lambda: admin.as_user(owner).create_repo(f"soak-{r + 1}", PROJECT, workdir)
        )
        repos.append((owner, str(made["full_name"])))

    await bounded([create(r) for r in range(args.repos)], MAINTAINER_CONCURRENCY)
    repos.sort(key=lambda pair: int(pair[1].rsplit("-", 1)[1]))
    planned = plan_issues(args.issues, repos, args.long, args.token_lifetime)
    issues: list[SoakIssue] = []

    async def open_issue(item: SoakIssue) -> None:
        owner = admin.as_user(item.owner)
        title = f"Soak issue {item.ref.number}"
        opened = await politely(lambda: owner.open_issue(item.ref.repo, title, item.body()))
        # The store keeps an issue by repository and number, whatever its installation.
        ref = IssueRef(installation_id=1, repo=item.ref.repo, number=int(opened["number"]))
        issues.append(SoakIssue(ref, item.owner, item.seconds, item.fails_once, item.long))

    await bounded([open_issue(item) for item in planned], MAINTAINER_CONCURRENCY)
    return issues


async def wait_ended(bench: Bench, issues: list[SoakIssue], within: float) -> float:
    """Wait until every issue is green and labelled for review, or handed to a human."""
    deadline = time.monotonic() + within
    repos = sorted({i.ref.repo for i in issues})
    last_note = time.monotonic()
    while time.monotonic() < deadline:
        bench.baton.check_alive()
        runs = {i.ref: bench.store.latest_run(i.ref) for i in issues}
        done = [
            r for r, run in runs.items() if run is not None and (is_green(run) or run.escalated)
        ]
        if len(done) == len(issues):
            green = {(r.repo, r.number) for r, run in runs.items() if is_green(run)}
            if green <= await reviewable(bench.maintainer, repos):
                return time.monotonic()
        if time.monotonic() - last_note >= PROGRESS_EVERY_S:
            print(f"  ... {len(done)}/{len(issues)} ended", file=sys.stderr, flush=True)
            last_note = time.monotonic()
        await asyncio.sleep(2.0)
    return time.monotonic()


def judge(bench: Bench, issue: SoakIssue, labelled: set[tuple[str, int]]) -> str | None:
    """Return how an issue ended if not as it should, else None."""
    runs = bench.store.runs(issue.ref)
    latest = runs[-1] if runs else None
    if not is_green(latest) or (issue.ref.repo, issue.ref.number) not in labelled:
        return outcome(latest) if not is_green(latest) else "green, not labelled for review"
    if len(runs) != issue.attempts_due:
        return f"green after {len(runs)} attempts, {issue.attempts_due} due"
    return None


async def measure(args: argparse.Namespace, workdir: Path) -> Figures:
    redis_url, redis_process = start_redis_server(workdir / "redis")
    baton = LocalBaton(
        workdir=workdir,
        redis_url=redis_url,
        agent_command=AGENT,
        token_lifetime_s=args.token_lifetime,
    )
    try:
        baton.start(workers=args.workers)
        baton.start_clock()
        async with aiohttp.ClientSession() as session:
            bench = Bench(baton, Maintainer(session, baton.sandbox_url, baton.admin_token))
            return await measure_on(bench, args)
    except Exception:
        print(baton.logs(), file=sys.stderr)
        raise
    finally:
        baton.stop()
        redis_process.stop()


async def measure_on(bench: Bench, args: argparse.Namespace) -> Figures:
    admin = bench.maintainer
    issues = await setup(bench, args)
    await bench.idle(within=600)
    began = time.monotonic()

    async def queue(issue: SoakIssue) -> None:
        owner = admin.as_user(issue.owner)
        await politely(lambda: owner.add_label(issue.ref.repo, issue.ref.number, QUEUE_LABEL))

    await bounded([queue(issue) for issue in issues], MAINTAINER_CONCURRENCY)
    longest = max(i.seconds for i in issues)
    budget = 1800 + 4 * sum(i.seconds * i.attempts_due for i in issues) / args.workers + longest
    ended = await wait_ended(bench, issues, within=budget)
    await bench.idle(within=600)

    repos = sorted({i.ref.repo for i in issues})
    labelled = await reviewable(admin, repos)
    wrong: Counter[str] = Counter()
    for issue in issues:
        if (why := judge(bench, issue, labelled)) is not None:
            wrong[why] += 1
    pulls: dict[str, dict[int, list[dict[str, Any]]]] = {
        repo: await pulls_by_issue(admin, repo) for repo in repos
    }
    duplicates = sum(1 for by in pulls.values() for prs in by.values() if len(prs) > 1)
    missing: list[str] = []
    long_missing: list[str] = []
    for issue in issues:
        if not is_green(bench.store.latest_run(issue.ref)):
            continue
        prs = pulls[issue.ref.repo].get(issue.ref.number, [])
        if not any(pr["state"] == "open" for pr in prs):
            (long_missing if issue.long else missing).append(f"{issue.ref.repo}#{issue.ref.number}")
    runs = agent_runs(bench.baton.workdir / "sandbox" / "git")
    return Figures(
        issues=issues,
        workers=args.workers,
        wall_s=ended - began,
        ended_well=len(issues) - wrong.total(),
        wrong=wrong,
        limits=await counted_limits(admin),
        duplicate_prs=duplicates,
        missing_prs=missing,
        long_missing=long_missing,
        agent_runs={k: runs[(i.ref.repo, i.ref.number)] for k, i in enumerate(issues)},
        attempts={k: len(bench.store.runs(i.ref)) for k, i in enumerate(issues)},
        agent_s=sum(agent_seconds(run) for i in issues for run in bench.store.runs(i.ref)),
    )


def report_limits(lim: Limits | None) -> None:
    """Print what the sandbox counted of Baton's writes against GitHub's secondary limits."""
    if lim is None:
        print("  secondary limits                        not counted: the sandbox has no /limits")
        return
    print(
        f"  secondary-limit answers to Baton        {lim.secondary_answers:8d}    "
        f"[goal 0: {verdict(lim.secondary_answers == 0)}]"
    )
    print(
        f"  peak writes per installation a minute   {lim.peak_per_minute:8d}    "
        f"[goal <= {WRITES_PER_MINUTE}: {verdict(lim.peak_per_minute <= WRITES_PER_MINUTE)}]"
    )
    print(
        f"  peak writes per installation an hour    {lim.peak_per_hour:8d}    "
        f"({lim.writes} content writes in all)  "
        f"[goal <= {WRITES_PER_HOUR}: {verdict(lim.peak_per_hour <= WRITES_PER_HOUR)}]"
    )


def report(f: Figures, args: argparse.Namespace) -> None:
    n = len(f.issues)
    long = sum(1 for i in f.issues if i.long)
    fails = sum(1 for i in f.issues if i.fails_once)
    print(
        f"\n== {n} issues over {args.repos} repositories of {args.accounts} accounts, "
        f"{f.workers} workers; tokens live {args.token_lifetime} s; "
        f"{fails} fail CI once, {long} work {args.token_lifetime + 60} s"
    )
    report_limits(f.limits)
    print(
        f"  issues ended as they should             {f.ended_well:8d}/{n}  "
        f"[goal all: {verdict(f.ended_well == n)}]"
    )
    for what, count in f.wrong.most_common(6):
        print(f"      {count} {what}")
    print(
        f"  duplicate pull requests                 {f.duplicate_prs:8d}    "
        f"[goal 0: {verdict(f.duplicate_prs == 0)}]"
    )
    print(
        f"  pull requests missing                   {len(f.missing_prs):8d}    "
        f"(after a long run: {len(f.long_missing)} of {long})  "
        f"[goal 0: {verdict(not f.missing_prs and not f.long_missing)}]  "
        + " ".join((f.missing_prs + f.long_missing)[:5])
    )
    unequal = [k for k in f.attempts if f.agent_runs[k] != f.attempts[k]]
    print(
        f"  agent runs / attempts recorded          {sum(f.agent_runs.values()):8d}/"
        f"{sum(f.attempts.values())}  issues unequal {len(unequal)}  "
        f"[goal equal: {verdict(not unequal)}]"
    )
    ideal = f.agent_s / f.workers
    print(
        f"  wall time, first label to last ended    {f.wall_s:8.0f} s  "
        f"agents' own time {f.agent_s:.0f} s, over {f.workers} workers {ideal:.0f} s "
        f"(wall / that {f.wall_s / ideal if ideal else float('nan'):.2f})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--issues", type=int, default=300)
    parser.add_argument("--repos", type=int, default=30)
    parser.add_argument("--accounts", type=int, default=10)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--token-lifetime", type=int, default=600)
    parser.add_argument("--long", type=int, default=3, help="issues that outlive a token")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="baton-soak-") as tmp:
        figures = asyncio.run(measure(args, Path(tmp)))
    report(figures, args)


if __name__ == "__main__":
    main()
