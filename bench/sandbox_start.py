"""The agent's start time with and without its sandbox, measured in one run.

Starts the `command` adapter's process exactly as a run does (the jail built for the
attempt, then `run_process`), with a command that exits at once, so what is timed is
the cost of starting: building the jail's view, bubblewrap's namespaces and mounts,
and, with network, the proxy Baton serves and the bridge inside the jail. Rounds
alternate between the modes, so a slow moment of the machine falls on all alike.
Target (DESIGN.md): the sandbox adds under 100 ms to an agent's start.

    python bench/sandbox_start.py [--rounds 40]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from bot.agents import AgentRequest, egress_for_run, egress_policy_for
from bot.agents.command import CommandAdapter
from bot.agents.jail import jails_for, sandbox_problem
from bot.domain.model import utcnow
from bot.ops.settings import Settings

MODES = ("off", "none", "allowlist")


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


async def main(rounds: int) -> None:
    problem = sandbox_problem()
    if problem is not None:
        raise SystemExit(f"the sandbox cannot start here: {problem}")
    with tempfile.TemporaryDirectory(prefix="baton-bench-") as tmp:
        root = Path(tmp)
        (root / "worktree").mkdir()
        timings: dict[str, list[float]] = {mode: [] for mode in MODES}
        for mode in MODES:  # one warm-up each: the toolchain scan is cached per process
            await start_once(mode, root, -1)
        for n in range(rounds):
            for mode in MODES:
                timings[mode].append(await start_once(mode, root, n))
    base = statistics.median(timings["off"])
    print(f"agent start to exit, {rounds} rounds each (median, p90)")
    for mode in MODES:
        values = sorted(timings[mode])
        median, p90 = statistics.median(values), values[int(len(values) * 0.9) - 1]
        label = "no sandbox" if mode == "off" else f"bwrap, network {mode}"
        added = (median - base) * 1000
        print(
            f"  {label:<26} {median * 1000:7.1f} ms  p90 {p90 * 1000:7.1f} ms  "
            f"ratio {median / base:5.2f}  added {added:+6.1f} ms"
        )
    worst = max(statistics.median(timings[m]) for m in MODES[1:]) - base
    verdict = "meets" if worst < 0.1 else "misses"
    print(f"the sandbox adds {worst * 1000:.1f} ms at most: {verdict} the 100 ms target")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    asyncio.run(main(parser.parse_args().rounds))
