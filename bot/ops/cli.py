"""The `baton` command: web, worker, sandbox, status, demo."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from bot.agents import AgentConfigError
from bot.domain.manifest import DEFAULT_MANIFEST_PATH
from bot.edges.store import Store, StoreError
from bot.ops.logs import configure_logging
from bot.ops.settings import Settings, SettingsError, load_settings
from bot.ops.terminal import escape_controls

log = logging.getLogger("baton")


class CommandError(Exception):
    """A command cannot go on; its message is the one line the operator sees."""


def _connected_store(settings: Settings) -> Store:
    store = Store.from_url(settings.redis_url, settings.lock_ttl_ms)
    store.ping()
    return store


def cmd_web(args: argparse.Namespace) -> int:
    """Serve webhooks."""
    from aiohttp import web

    from bot.edges.queue import Dispatcher
    from bot.web.app import create_app
    from handlers import router

    settings = load_settings()
    store = _connected_store(settings)
    app = create_app(settings, store, Dispatcher.from_url(settings.redis_url, settings), router)
    log.info("baton web listening on %s:%d", args.host, settings.port)
    web.run_app(app, host=args.host, port=settings.port, access_log=None, print=None)
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """Work jobs off Baton's queues; on SIGTERM, hand running work over within the grace."""
    from bot.agents import adapter_for
    from bot.domain.jobs import AGENTS, QUEUES, RETIRED_QUEUES
    from bot.edges.intake import ForwarderProcess
    from bot.edges.queue import Dispatcher
    from bot.ops.worker import BatonWorker

    settings = load_settings()
    store = _connected_store(settings)
    store.ensure_intake_group()
    settings.app_id  # noqa: B018 - a worker without App credentials can do nothing useful
    settings.private_key  # noqa: B018
    if AGENTS in args.queues:
        for agent in settings.agents:  # refuse to start with an agent that cannot run
            adapter_for(settings.running(agent, settings))
        _check_sandbox(settings)
    retired = [name for name in args.queues if name in RETIRED_QUEUES]
    if retired:
        log.warning("%s carry no jobs now (the clock sweeps): drop them from --queues", retired)
    args.queues = [name for name in args.queues if name not in RETIRED_QUEUES]
    unknown = set(args.queues) - set(QUEUES)
    if unknown:
        raise CommandError(f"unknown queue(s) {sorted(unknown)}; Baton's queues are {QUEUES}")
    # Import the jobs once here, so each job's forked work horse starts with them loaded.
    import jobs.chains
    import jobs.config
    import jobs.labels
    import jobs.mergeable
    import jobs.pulls
    import jobs.run
    import jobs.settle
    import jobs.status
    import jobs.steering  # noqa: F401

    dispatch = Dispatcher.from_url(settings.redis_url, settings)
    # Beside each worker, a forwarder turns accepted deliveries into jobs (bot/edges/intake.py).
    forwarder = ForwarderProcess(args.verbose)
    try:
        worker = BatonWorker(
            [dispatch.queues[name] for name in args.queues],
            connection=dispatch.connection,
            grace_seconds=settings.shutdown_grace_seconds,
            report_uncontained=(
                store.report_uncontained
                if settings.agent_sandbox == "off" and AGENTS in args.queues
                else None
            ),
            on_stop=forwarder.winding_down,
        )
        worker.work(burst=args.burst, with_scheduler=True, logging_level="INFO")
    finally:
        forwarder.stop()
    return 0


def _check_sandbox(settings: Settings) -> None:
    """Refuse to run agents in a sandbox that does not work; say so when it is off."""
    from bot.agents.jail import sandbox_problem

    if settings.agent_sandbox == "off":
        log.warning(
            "BATON_AGENT_SANDBOX=off: agents run uncontained, with this worker's files, "
            "network and processes within their reach"
        )
        return
    problem = sandbox_problem()
    if problem is not None:
        raise CommandError(f"this worker cannot contain its agents: {problem}")


def cmd_clock(args: argparse.Namespace) -> int:
    """Keep time: sweep on schedule, take over lapsed claims, move scheduled jobs onto queues."""
    import signal
    import threading
    from types import FrameType

    from bot.edges.queue import Dispatcher
    from bot.ops.clock import keep_time
    from bot.workflows.services import Services

    settings = load_settings()
    store = _connected_store(settings)
    settings.app_id  # noqa: B018 - the sweep reads GitHub as the App
    settings.private_key  # noqa: B018
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        log.info("baton clock stopping (%s)", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    log.info(
        "baton clock: sweeping every %.0fs, checking for lapsed claims every %.0fs",
        settings.sweep_interval_seconds,
        settings.takeover_check_seconds,
    )
    keep_time(Services(settings, store, Dispatcher.from_url(settings.redis_url, settings)), stop)
    return 0


def cmd_sandbox(args: argparse.Namespace) -> int:
    """Serve the sandbox GitHub."""
    from bot.domain.manifest import ManifestError, load_manifest
    from bot.sandbox.server import serve

    try:
        manifest = load_manifest(args.manifest)
    except ManifestError as exc:
        raise CommandError(str(exc)) from exc
    serve(
        args.port,
        args.data_dir,
        args.webhook_url,
        host=args.host,
        manifest=manifest,
        token_lifetime_s=args.token_lifetime,
    )
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """Print what Baton is doing."""
    from bot.domain.model import utcnow
    from bot.edges.queue import Dispatcher
    from bot.web.overview import deployment_warnings, gather_overview
    from bot.web.status_page import render_status_text

    settings = load_settings()
    store = _connected_store(settings)
    dispatch = Dispatcher.from_url(settings.redis_url, settings)
    now = utcnow()
    overview = gather_overview(
        store,
        dispatch,
        now,
        args.limit,
        deployment_warnings(settings),
        settings.app_identity,
        settings.monthly_budget_usd,
    )
    print(escape_controls(render_status_text(overview, now)), end="")
    return 0


def cmd_transcript(args: argparse.Namespace) -> int:
    """Print an attempt's transcript as its worker kept it (masked, its last 1 MB)."""
    from bot.domain.model import utcnow
    from bot.domain.transcript import NoTranscript, issue_named
    from bot.edges.store.transcripts import find_transcript, transcripts_for

    settings = load_settings()
    store = _connected_store(settings)
    try:
        found = find_transcript(
            store,
            transcripts_for(settings, store),
            issue_named(args.issue),
            args.attempt,
            settings.transcript_days,
            utcnow(),
        )
    except NoTranscript as exc:
        raise CommandError(str(exc)) from exc
    run = found.run
    agent = run.agent_result.agent if run.agent_result is not None else "no agent"
    print(f"{run.issue} attempt {run.attempt} ({agent}, {run.state.value})", file=sys.stderr)
    # The agent's bytes, but never its terminal commands (OSC 52 sets the clipboard).
    sys.stdout.write(found.transcript if args.raw else escape_controls(found.transcript))
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    """Resume every halted issue whose usage window has reopened (safe to run from cron)."""
    from datetime import UTC, datetime

    from bot.domain.model import utcnow
    from bot.edges.queue import Dispatcher
    from bot.workflows.conclude import halted_plan, resume
    from bot.workflows.services import Services

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
    """Run one pass of the reconcile sweep now (the clock runs one every few minutes)."""
    import asyncio

    from bot.edges.queue import Dispatcher
    from bot.workflows.services import Services
    from bot.workflows.sweep import sweep

    settings = load_settings()
    store = _connected_store(settings)
    services = Services(settings, store, Dispatcher.from_url(settings.redis_url, settings))
    report = asyncio.run(sweep(services))
    if report is None:
        print(f"skipped: {store.sweep_lease_holder() or 'another sweep'} is sweeping now")
    else:
        print(f"swept: {report.summary()}")
    return 0


def cmd_redeliver(args: argparse.Namespace) -> int:
    """Ask GitHub now for the webhook events Baton never got (the clock does every few minutes)."""
    import asyncio

    from bot.edges.queue import Dispatcher
    from bot.workflows.redelivery import redeliver_lost
    from bot.workflows.services import Services

    settings = load_settings()
    store = _connected_store(settings)
    services = Services(settings, store, Dispatcher.from_url(settings.redis_url, settings))
    done = asyncio.run(redeliver_lost(services))
    print(
        f"lost deliveries: {done.failed} of {done.listed} in the last "
        f"{settings.redelivery_window_hours:g} h; asked again {done.asked}, "
        f"refused {done.refused}, left {done.left}"
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the whole loop on the sandbox GitHub."""
    from bot.devkit.demo import run_demo

    return run_demo(keep=args.keep, workdir=args.workdir)


def cmd_setup(args: argparse.Namespace) -> int:
    """Register Baton's GitHub App from app.yml and write its credentials to the env file."""
    from bot.domain.manifest import ManifestError, api_url_for
    from bot.ops.setup import SetupOptions, run_setup

    options = SetupOptions(
        port=args.port,
        github_url=args.github_url.rstrip("/"),
        api_url=args.api_url or api_url_for(args.github_url),
        org=args.org,
        env_file=args.env_file.resolve(),
        webhook_url=args.webhook_url,
        manifest_path=args.manifest,
    )
    try:
        run_setup(options)
    except ManifestError as exc:
        raise CommandError(str(exc)) from exc
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check settings, Redis, git, the App's credentials, the agent, its sandbox and the disk."""
    from bot.ops.doctor import run_doctor

    return run_doctor()


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
        default=["baton-events", "baton-agents"],
        help="queues to work, in priority order",
    )
    worker.add_argument("--burst", action="store_true", help="stop when the queues are empty")
    add("clock", cmd_clock)
    sandbox = add("sandbox", cmd_sandbox)
    sandbox.add_argument("--port", type=int, default=8765)
    sandbox.add_argument("--host", default="127.0.0.1")
    sandbox.add_argument("--data-dir", type=Path, required=True)
    sandbox.add_argument("--webhook-url", default=None)
    sandbox.add_argument(
        "--manifest",
        type=Path,
        default=DEFAULT_MANIFEST_PATH,
        help="the App manifest whose permissions and events Baton's App gets (app.yml)",
    )
    sandbox.add_argument(
        "--token-lifetime",
        type=float,
        default=3600,
        metavar="SECONDS",
        help="how long installation tokens live (github.com: 3600)",
    )
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
    transcript = add("transcript", cmd_transcript)
    transcript.add_argument("issue", metavar="OWNER/REPO#N", help="the issue")
    transcript.add_argument(
        "--attempt", type=int, default=None, metavar="K", help="which attempt (default: its latest)"
    )
    transcript.add_argument(
        "--raw",
        action="store_true",
        help="write the transcript's bytes as kept, control characters too (for a file)",
    )
    add("sweep", cmd_sweep)
    add("redeliver", cmd_redeliver)
    demo = add("demo", cmd_demo)
    demo.add_argument("--keep", action="store_true", help="leave the processes running at the end")
    demo.add_argument("--workdir", type=Path, default=None, help="where to keep the demo's files")
    setup = add("setup", cmd_setup)
    setup.add_argument("--port", type=int, default=3000, help="port of the local setup page")
    setup.add_argument("--github-url", default="https://github.com", help="the GitHub to use")
    setup.add_argument("--api-url", default=None, help="its REST API (default: derived)")
    setup.add_argument("--org", default=None, help="register the App for this organization")
    setup.add_argument("--env-file", type=Path, default=Path(".env"), help="where to write")
    setup.add_argument("--webhook-url", default=None, help="where GitHub delivers webhooks")
    setup.add_argument("--manifest", type=Path, default=DEFAULT_MANIFEST_PATH, help="app.yml")
    add("doctor", cmd_doctor)
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
