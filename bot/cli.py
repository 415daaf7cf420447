"""The `baton` command: web, worker, sandbox, status, demo."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from bot.agents import AgentConfigError
from bot.settings import Settings, SettingsError, load_settings
from bot.store import Store, StoreError

log = logging.getLogger("baton")
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class CommandError(Exception):
    """A command cannot go on; its message is the one line the operator sees."""


def configure_logging(verbose: bool = False) -> None:
    """Log one line per event to stderr."""
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format=LOG_FORMAT)


def _connected_store(settings: Settings) -> Store:
    store = Store.from_url(settings.redis_url, settings.lock_ttl_ms)
    store.ping()
    return store


def cmd_web(args: argparse.Namespace) -> int:
    """Serve webhooks."""
    from aiohttp import web

    from bot.dispatch import Dispatcher
    from bot.web import create_app

    settings = load_settings()
    store = _connected_store(settings)
    app = create_app(settings, store, Dispatcher.from_url(settings.redis_url, settings))
    log.info("baton web listening on %s:%d", args.host, settings.port)
    web.run_app(app, host=args.host, port=settings.port, access_log=None, print=None)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Work jobs off Baton's queues."""
    from rq import Worker

    from bot.agents import adapter_for
    from bot.dispatch import QUEUES, Dispatcher
    from bot.intake import ForwarderProcess

    settings = load_settings()
    _connected_store(settings).ensure_intake_group()
    settings.app_id  # noqa: B018 - a worker without App credentials can do nothing useful
    settings.private_key  # noqa: B018
    if set(args.queues) & {"baton-agents"}:
        adapter_for(settings)  # refuse to start with an agent that cannot run
    unknown = set(args.queues) - set(QUEUES)
    if unknown:
        raise CommandError(f"unknown queue(s) {sorted(unknown)}; Baton's queues are {QUEUES}")
    # Import the jobs once here, so each job's forked work horse starts with them loaded.
    import jobs.chains
    import jobs.labels
    import jobs.run
    import jobs.settle
    import jobs.steering
    import jobs.sweep  # noqa: F401

    dispatch = Dispatcher.from_url(settings.redis_url, settings)
    dispatch.sweep_now()
    dispatch.schedule_sweep()
    worker = Worker([dispatch.queues[name] for name in args.queues], connection=dispatch.connection)
    # Beside each worker, a forwarder turns accepted deliveries into jobs (bot/intake.py).
    forwarder = ForwarderProcess(args.verbose)
    try:
        worker.work(burst=args.burst, with_scheduler=True, logging_level="INFO")
    finally:
        forwarder.stop()
    return 0


def cmd_sandbox(args: argparse.Namespace) -> int:
    """Serve the sandbox GitHub."""
    from bot.sandbox.server import serve

    serve(args.port, args.data_dir, args.webhook_url, host=args.host)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Print what Baton is doing."""
    from rq import Worker

    from bot.chains import link_status
    from bot.dispatch import Dispatcher
    from bot.model import Run, utcnow
    from bot.render import duration

    settings = load_settings()
    store = _connected_store(settings)
    dispatch = Dispatcher.from_url(settings.redis_url, settings)
    now = utcnow()
    depths = ", ".join(f"{name} {count}" for name, count in dispatch.depths().items())
    print(f"queues: {depths}")
    print(f"workers: {len(Worker.all(connection=dispatch.connection))}")
    for what, at in sorted(store.marks().items()):
        print(f"last {what}: {at}")
    for repo, since, held_starts, settled in store.pauses():
        print(
            f"{repo}: paused since {since:%Y-%m-%d %H:%M} UTC — nothing admitted "
            f"({held_starts} held), {settled} settled"
        )
    for held, issues in (("halted", store.halts()), ("waiting", store.waits())):
        for issue, until in issues:
            print(f"{held} until {until:%Y-%m-%d %H:%M} UTC: {issue}")
    for chain in store.chains():
        links = ", ".join(
            f"#{n} {link_status(store.latest_run(chain.issue(n)), issue_open=True).value}"
            for n in chain.links
        )
        print(f"chain {chain.chain_id}: {links}")
    runs = store.recent_runs(args.limit)
    if not runs:
        print("no runs yet")
    by_repo: dict[str, list[Run]] = {}
    for run in runs:
        by_repo.setdefault(run.issue.repo, []).append(run)
    for repo, repo_runs in sorted(by_repo.items()):
        live = sum(1 for run in repo_runs if run.state.is_live)
        print(f"{repo}: {live} live, recent runs:")
        for run in repo_runs:
            pr = f" {run.pr_url}" if run.pr_url else ""
            reason = f" ({run.failure_class}: {run.reason})" if run.failure_class else ""
            took = duration(run.wall_clock(now))
            print(
                f"  #{run.issue.number} attempt {run.attempt:<3} {run.state.value:<15} "
                f"{took:>9}{' so far' if run.state.is_live else ''}{pr}{reason}"
            )
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    """Resume every halted issue whose usage window has reopened (safe to run from cron)."""
    from datetime import UTC, datetime

    from bot.dispatch import Dispatcher
    from bot.model import utcnow
    from bot.recovery import Services, halted_plan, resume

    settings = load_settings()
    store = _connected_store(settings)
    now = datetime.fromisoformat(args.now) if args.now else utcnow()
    if now.tzinfo is None:
        now = now.replace(tzinfo=UTC)
    plan = halted_plan(store, now, args.issues)
    unknown = sorted(set(args.issues) - {str(h.issue) for h in plan.due})
    services = Services(settings, store, Dispatcher.from_url(settings.redis_url, settings))
    for halt in plan.due:
        assert halt.run is not None
        if args.dry_run:
            verb = "would resume"
        else:
            verb = "resumed" if resume(services, halt) else "already resuming"
        print(
            f"{verb} {halt.issue} (halted attempt {halt.run.attempt}, "
            f"due {halt.resume_at:%Y-%m-%d %H:%M} UTC)"
        )
    if not plan.due:
        if plan.waiting:
            first = plan.waiting[0]
            print(f"nothing is due: next is {first.issue} at {first.resume_at:%Y-%m-%d %H:%M} UTC")
        else:
            print("nothing is due: no issue is halted")
    for name in unknown:
        print(f"{name} is not halted", file=sys.stderr)
    return 2 if unknown else 0


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run one pass of the reconcile sweep now (workers also run it every few minutes)."""
    import asyncio

    from bot.dispatch import Dispatcher
    from bot.recovery import Services
    from bot.sweep import sweep

    settings = load_settings()
    store = _connected_store(settings)
    services = Services(settings, store, Dispatcher.from_url(settings.redis_url, settings))
    report = asyncio.run(sweep(services))
    if report is None:
        print(f"skipped: {store.sweep_lease_holder() or 'another sweep'} is sweeping now")
    else:
        print(f"swept: {report.summary()}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the whole loop on the sandbox GitHub."""
    from bot.demo import run_demo

    return run_demo(keep=args.keep, workdir=args.workdir)


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser for every subcommand."""
    parser = argparse.ArgumentParser(prog="baton", description=__doc__)
    parser.add_argument("-v", "--verbose", action="store_true", help="log debug detail")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, handler: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
        command = sub.add_parser(name, help=handler.__doc__, description=handler.__doc__)
        command.set_defaults(handler=handler)
        return command

    web = add("web", cmd_web)
    web.add_argument("--host", default="0.0.0.0", help="address to listen on (port from PORT)")  # noqa: S104
    worker = add("worker", cmd_worker)
    worker.add_argument(
        "--queues",
        nargs="+",
        default=["baton-events", "baton-maintenance", "baton-agents"],
        help="queues to work, in priority order",
    )
    worker.add_argument("--burst", action="store_true", help="stop when the queues are empty")
    sandbox = add("sandbox", cmd_sandbox)
    sandbox.add_argument("--port", type=int, default=8765)
    sandbox.add_argument("--host", default="127.0.0.1")
    sandbox.add_argument("--data-dir", type=Path, required=True)
    sandbox.add_argument("--webhook-url", default=None)
    status = add("status", cmd_status)
    status.add_argument("--limit", type=int, default=20, help="how many recent runs to list")
    resume = add("resume", cmd_resume)
    resume.add_argument(
        "issues",
        nargs="*",
        metavar="OWNER/REPO#N",
        help="resume these halted issues now, whatever their time",
    )
    resume.add_argument("--dry-run", action="store_true", help="say what would resume, do nothing")
    resume.add_argument("--now", default=None, help="judge what is due as of this ISO 8601 time")
    add("sweep", cmd_sweep)
    demo = add("demo", cmd_demo)
    demo.add_argument("--keep", action="store_true", help="leave the processes running at the end")
    demo.add_argument("--workdir", type=Path, default=None, help="where to keep the demo's files")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the baton command line."""
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    try:
        return int(args.handler(args))
    except (SettingsError, StoreError, AgentConfigError, CommandError) as exc:
        print(f"baton {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
