"""The agent's start time with and without its sandbox, measured in one run.

Starts the `command` adapter's process exactly as a run does (the jail built for the
attempt, then `run_process`), with a command that exits at once, so what is timed is
the cost of starting: building the jail's view, bubblewrap's namespaces and mounts,
and, with network, the proxy Baton serves and the bridge inside the jail.

Two figures per mode, each with its ratio to the no-sandbox start measured in the same
run. Cold: a fresh process's first start, as a worker's first agent pays it (the scan
of the toolchain, cached per process afterwards, and the first imports); each is the
median of a few processes of its own. Warm: every later start, the median and p90 of
rounds that alternate between the modes, so a slow moment of the machine falls on all
alike. Target (DESIGN.md): the sandbox adds under 100 ms to an agent's start.

    python bench/sandbox_start.py [--rounds 40] [--cold-rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bot.agents import AgentRequest, egress_for_run, egress_policy_for
from bot.agents.command import CommandAdapter
from bot.agents.jail import jails_for, sandbox_problem
from bot.domain.model import utcnow
from bot.ops.settings import Settings

MODES = ("off", "none", "allowlist", "open")
TARGET_S = 0.1


async def start_once(mode: str, root: Path, round_number: int) -> float:
    """Return the seconds one agent start and exit took in mode."""
    sandbox = "off" if mode == "off" else "bwrap"
    network = "none" if mode == "off" else mode
    settings = Settings(
        BATON_DATA_DIR=root / "data",
        BATON_AGENT_SANDBOX=sandbox,
        BATON_AGENT_NETWORK=network,
        BATON_AGENT_COMMAND="true",
    )
    run_dir = root / "runs" / mode / str(round_number)
    worktree = root / "worktree"
    worktree.mkdir(exist_ok=True)
    (run_dir / "io").mkdir(parents=True)
    brief = run_dir / "io" / "brief.md"
    brief.write_text("Nothing to do.\n")
    began = time.perf_counter()
    async with egress_for_run(egress_policy_for(settings), "bench") as (egress_dir, _):
        jail = jails_for(settings).make(
            worktree=worktree,
            home=root / "home",
            scratch=run_dir / "jail",
            writable=(run_dir / "io",),
            network=settings.agent_network,
            egress_dir=egress_dir,
            programs=("true",),
        )
        request = AgentRequest(
            run_id="bench",
            issue_number=1,
            attempt=1,
            worktree=worktree,
            brief_path=brief,
            run_dir=run_dir,
            deadline=utcnow() + timedelta(minutes=1),
            home=root / "home",
            jail=jail,
        )
        result = await CommandAdapter("true").run(request)
    elapsed = time.perf_counter() - began
    if result.status != "success":
        raise SystemExit(f"{mode}: the agent did not start: {result.result_text} {result.evidence}")
    return elapsed


def cold_start(mode: str) -> float:
    """Return the seconds of a fresh process's first start in mode (timed in that process)."""
    done = subprocess.run(
        [sys.executable, __file__, "--cold", mode],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{mode}: the cold start failed: {done.stderr.strip()}")
    return float(done.stdout)


async def warm_starts(rounds: int) -> dict[str, list[float]]:
    """Return each mode's warm starts: rounds of them, after one warm-up each."""
    with tempfile.TemporaryDirectory(prefix="baton-bench-") as tmp:
        root = Path(tmp)
        timings: dict[str, list[float]] = {mode: [] for mode in MODES}
        for mode in MODES:  # the warm-up: the toolchain scan is cached per process
            await start_once(mode, root, -1)
        for n in range(rounds):
            for mode in MODES:
                timings[mode].append(await start_once(mode, root, n))
    return timings


def figure(seconds: float, base: float) -> str:
    """Return a time with its ratio to the no-sandbox one and what it adds to it."""
    return (
        f"{seconds * 1000:7.1f} ms  ratio {seconds / base:5.2f}  "
        f"added {(seconds - base) * 1000:+6.1f} ms"
    )


async def main(rounds: int, cold_rounds: int) -> None:
    problem = sandbox_problem()
    if problem is not None:
        raise SystemExit(f"the sandbox cannot start here: {problem}")
    colds: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(cold_rounds):
        for mode in MODES:
            colds[mode].append(cold_start(mode))
    cold = {mode: statistics.median(values) for mode, values in colds.items()}
    timings = await warm_starts(rounds)
    warm = {mode: statistics.median(values) for mode, values in timings.items()}
    print(
        f"agent start to exit: cold is a fresh process's first start (median of "
        f"{cold_rounds}); warm the median of {rounds} later starts, with their p90"
    )
    for mode in MODES:
        values = sorted(timings[mode])
        p90 = values[max(int(len(values) * 0.9) - 1, 0)]
        label = "no sandbox" if mode == "off" else f"bwrap, network {mode}"
        print(f"  {label:<26} cold {figure(cold[mode], cold['off'])}")
        print(f"  {'':<26} warm {figure(warm[mode], warm['off'])}  p90 {p90 * 1000:7.1f} ms")
    worst_warm = max(warm[m] for m in MODES[1:]) - warm["off"]
    worst_cold = max(cold[m] for m in MODES[1:]) - cold["off"]
    verdict = "meets" if worst_warm < TARGET_S else "misses"
    print(
        f"the sandbox adds {worst_warm * 1000:.1f} ms at most to a warm start ({verdict} the "
        f"{TARGET_S * 1000:.0f} ms target) and {worst_cold * 1000:.1f} ms to a cold one"
    )


def time_cold_start(mode: str) -> None:
    """Print the seconds this process's first start in mode took."""
    with tempfile.TemporaryDirectory(prefix="baton-bench-cold-") as tmp:
        print(asyncio.run(start_once(mode, Path(tmp), 0)))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--cold-rounds", type=int, default=3)
    parser.add_argument("--cold", choices=MODES, help=argparse.SUPPRESS)  # one cold start
    args = parser.parse_args()
    if args.cold:
        time_cold_start(args.cold)
    else:
        asyncio.run(main(args.rounds, args.cold_rounds))
