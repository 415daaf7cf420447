"""Check suites and runs: created by apps or by the sandbox's own CI, announced by webhooks."""

from __future__ import annotations

import asyncio
import logging

from bot.sandbox import ci, pulls
from bot.sandbox.auth import APP_ID, CI_APP_ID, CI_BOT_LOGIN
from bot.sandbox.git_backend import GitError
from bot.sandbox.hub import Hub
from bot.sandbox.render import latest_runs, suite_outcome
from bot.sandbox.rest import Json
from bot.sandbox.state import CheckOutput, CheckRun, CheckSuite, Repo, utc_now

log = logging.getLogger(__name__)

# How many checks of one suite run at once (the hub bounds how many suites run at once).
MATRIX_CONCURRENCY = 4


async def _pull_refs(hub: Hub, repo: Repo, sha: str, branch: str | None) -> list[Json]:
    tips = await hub.git(repo).branches()
    return [
        hub.render.pull_minimal(repo, issue, pulls.base_sha(issue, tips))
        for issue in pulls.open_pulls(repo)
        if issue.pull is not None
        and issue.pull.head_repo_id is None
        and issue.pull.head_sha == sha
        and issue.pull.head_ref == branch
    ]


async def run_json(hub: Hub, repo: Repo, run: CheckRun) -> Json:
    """Render a check run."""
    suite = repo.suite(run.suite_id)
    assert suite is not None
    refs = await _pull_refs(hub, repo, suite.head_sha, suite.head_branch)
    return hub.render.check_run(repo, run, suite, repo.runs_of(suite.id), refs)


async def suite_json(hub: Hub, repo: Repo, suite: CheckSuite, webhook: bool = False) -> Json:
    """Render a check suite."""
    refs = await _pull_refs(hub, repo, suite.head_sha, suite.head_branch)
    head = await hub.git(repo).commit(suite.head_sha)
    return hub.render.check_suite(repo, suite, repo.runs_of(suite.id), refs, head, webhook=webhook)


async def branch_of(hub: Hub, repo: Repo, sha: str) -> str | None:
    """Name a branch whose tip is `sha`, preferring the default branch."""
    tips = await hub.git(repo).branches()
    names = sorted(name for name, tip in tips.items() if tip == sha)
    return repo.default_branch if repo.default_branch in names else next(iter(names), None)


def suite_for(
    hub: Hub, repo: Repo, app_id: int, sha: str, branch: str | None, before: str | None
) -> tuple[CheckSuite, bool]:
    """Return the app's suite for a commit and whether it is new (one per app and commit)."""
    for suite in repo.check_suites:
        if suite.app_id == app_id and suite.head_sha == sha:
            return suite, False
    now = utc_now()
    suite = CheckSuite(
        id=hub.state.next_id(),
        app_id=app_id,
        head_sha=sha,
        head_branch=branch,
        before=before,
        after=sha,
        created_at=now,
        updated_at=now,
    )
    repo.check_suites.append(suite)
    return suite, True


async def create_run(hub: Hub, repo: Repo, suite: CheckSuite, run: CheckRun, sender: str) -> None:
    """Add a run to a suite and announce it (and its completion, if it is born completed)."""
    repo.check_runs.append(run)
    suite.updated_at = utc_now()
    suite.requeued = False
    hub.emit(repo, "check_run", sender, {"check_run": await run_json(hub, repo, run)}, "created")
    if run.status == "completed":
        await announce_completion(hub, repo, run, sender)


async def run_updated(
    hub: Hub, repo: Repo, run: CheckRun, was_completed: bool, sender: str
) -> None:
    """Note an App's update of its run: its suite reports again, a completion is announced."""
    suite = repo.suite(run.suite_id)
    assert suite is not None
    suite.requeued = False
    suite.updated_at = utc_now()
    if run.status == "completed" and not was_completed:
        await announce_completion(hub, repo, run, sender)


async def announce_completion(hub: Hub, repo: Repo, run: CheckRun, sender: str) -> None:
    """Announce a run that has just completed, and its suite if that completes with it."""
    hub.emit(repo, "check_run", sender, {"check_run": await run_json(hub, repo, run)}, "completed")
    suite = repo.suite(run.suite_id)
    assert suite is not None
    suite.updated_at = utc_now()
    if suite_outcome(suite, repo.runs_of(suite.id))[0] == "completed":
        body = {"check_suite": await suite_json(hub, repo, suite, webhook=True)}
        hub.emit(repo, "check_suite", sender, body, "completed")


async def rerequest(hub: Hub, repo: Repo, run: CheckRun, sender: str) -> None:
    """Ask the App that made a completed run to run it again, as "Re-run" on a PR page does.

    GitHub ("Rerequest a check run", and the check_run webhook): the run's suite "is reset
    to queued and the conclusion is cleared. The check run itself is not updated", and
    `rerequested` goes to "Only the GitHub App that created the check run", sent by the
    person who asked. Here that App is Baton (the webhook goes out), or the sandbox's CI,
    which runs the check again in a new run of the same name, as GitHub Actions re-runs a
    job. A run of any other App gets no webhook: the sandbox delivers to Baton alone.
    """
    suite = repo.suite(run.suite_id)
    assert suite is not None
    body = {"check_run": await run_json(hub, repo, run)}
    _requeue(suite)
    if run.app_id == APP_ID:
        hub.emit(repo, "check_run", sender, body, "rerequested")
    elif run.app_id == CI_APP_ID:
        await _run_again(hub, repo, suite, [run])


async def rerequest_suite(hub: Hub, repo: Repo, suite: CheckSuite, sender: str) -> None:
    """Ask a suite's App to run all its checks again, as "Re-run all checks" does.

    GitHub ("Rerequest a check suite"): it "will trigger a check_suite webhook event with
    the action rerequested" to the suite's App, and "its status is reset to queued and the
    conclusion is cleared." Baton gets the webhook; the sandbox's CI runs each of the
    suite's latest checks again.
    """
    _requeue(suite)
    if suite.app_id == APP_ID:
        rendered = await suite_json(hub, repo, suite, webhook=True)
        for field in ("rerequestable", "runs_rerequestable"):  # the rerequested form has neither
            rendered.pop(field)
        hub.emit(repo, "check_suite", sender, {"check_suite": rendered}, "rerequested")
    elif suite.app_id == CI_APP_ID:
        await _run_again(hub, repo, suite, latest_runs(repo.runs_of(suite.id)))


def _requeue(suite: CheckSuite) -> None:
    suite.requeued = True
    suite.updated_at = utc_now()


async def _run_again(hub: Hub, repo: Repo, suite: CheckSuite, runs: list[CheckRun]) -> None:
    """Run CI checks again, each in a new run of the same name in the same suite."""
    again = [
        CheckRun(
            id=hub.state.next_id(),
            suite_id=suite.id,
            app_id=CI_APP_ID,
            name=run.name,
            head_sha=run.head_sha,
        )
        for run in runs
    ]
    for run in again:
        await create_run(hub, repo, suite, run, CI_BOT_LOGIN)
    hub.spawn(_run_checks(hub, repo.id, {run.id for run in again}))


async def queue_suites(
    hub: Hub, repo: Repo, branch: str, before: str, after: str, sender: str
) -> None:
    """Create a queued check suite, with no runs, for every App that may write checks.

    GitHub ("Using the REST API to interact with checks"): "By default, GitHub creates a
    check suite automatically when code is pushed to the repository. This default flow
    sends the check_suite event (with requested action) to all GitHub App's that have the
    checks:write permission." An App that never creates a run leaves its suite queued
    with no runs; one that does finds it here. Only Baton's own `requested` reaches
    Baton's webhook.
    """
    for app_id in hub.checks_apps(repo.owner):
        suite, new = suite_for(hub, repo, app_id, after, branch, before)
        if new and app_id == APP_ID:
            body = {"check_suite": await suite_json(hub, repo, suite, webhook=True)}
            hub.emit(repo, "check_suite", sender, body, "requested")


async def start_ci(hub: Hub, repo: Repo, branch: str, before: str, after: str, sender: str) -> None:
    """Create the CI suite for a newly pushed head, one queued run per check, and start them.

    A head without `.sandbox/ci` gets no suite at all, as a commit no CI looks at has none
    on GitHub. A fork runs none: Actions is off in a fork until its owner turns it on.
    """
    if repo.parent_id is not None:
        return
    names = await ci.planned_checks(hub.git(repo), after)
    if not names:
        return
    suite, new = suite_for(hub, repo, CI_APP_ID, after, branch, before)
    if not new:
        return
    await announce_suite(hub, repo, suite, sender)
    await start_runs(hub, repo, suite, names)


async def announce_suite(hub: Hub, repo: Repo, suite: CheckSuite, sender: str) -> None:
    """Send the `check_suite` `requested` webhook of a new CI suite."""
    body = {"check_suite": await suite_json(hub, repo, suite, webhook=True)}
    hub.emit(repo, "check_suite", sender, body, "requested")


async def start_runs(hub: Hub, repo: Repo, suite: CheckSuite, names: list[str]) -> None:
    """Add one queued CI run per check to a suite and start them."""
    runs = [
        CheckRun(
            id=hub.state.next_id(),
            suite_id=suite.id,
            app_id=CI_APP_ID,
            name=name,
            head_sha=suite.head_sha,
        )
        for name in names
    ]
    for run in runs:
        await create_run(hub, repo, suite, run, CI_BOT_LOGIN)
    hub.spawn(_run_checks(hub, repo.id, {run.id for run in runs}))


def resume_ci(hub: Hub) -> None:
    """Restart the CI runs a previous process left unfinished, suite by suite."""
    for repo in hub.state.repos:
        unfinished: dict[int, set[int]] = {}
        for run in repo.check_runs:
            if run.app_id == CI_APP_ID and run.status != "completed":
                unfinished.setdefault(run.suite_id, set()).add(run.id)
        for _, run_ids in sorted(unfinished.items()):
            hub.spawn(_run_checks(hub, repo.id, run_ids))


async def _run_checks(hub: Hub, repo_id: int, run_ids: set[int]) -> None:
    """Check out the commit of some CI runs (of one suite) once and run them, a few at a time."""
    repo = next(r for r in hub.state.repos if r.id == repo_id)
    runs = [r for r in repo.check_runs if r.id in run_ids and r.status != "completed"]
    if not runs:
        return
    finishing = asyncio.Lock()  # one run at a time completes, so the suite completes once
    suite = repo.suite(runs[0].suite_id)
    secrets = {} if suite is None or suite.from_fork else repo.secrets

    async def finish(run: CheckRun, result: ci.CiResult) -> None:
        async with finishing:
            run.status = "completed"
            run.conclusion = result.conclusion
            run.completed_at = utc_now()
            run.output = CheckOutput(title=result.title, summary=result.summary, text=result.text)
            await announce_completion(hub, repo, run, CI_BOT_LOGIN)
            hub.changed()

    async with hub.ci_slots:
        try:
            async with ci.checkout(hub.git(repo), runs[0].head_sha) as work:
                slots = asyncio.Semaphore(MATRIX_CONCURRENCY)

                async def one(run: CheckRun) -> None:
                    async with slots:
                        run.status = "in_progress"
                        run.started_at = utc_now()
                        hub.changed()
                        try:
                            result = await ci.run_check(work, run.name, hub.ci_timeout, secrets)
                        except Exception as exc:
                            log.exception("CI run %s crashed", run.id)
                            result = _crashed(exc)
                    await finish(run, result)

                await asyncio.gather(*(one(run) for run in runs))
        except GitError as exc:
            for run in runs:
                await finish(run, ci.checkout_failed(str(exc)))
        except Exception as exc:
            log.exception("CI suite %s crashed", runs[0].suite_id)
            for run in runs:
                if run.status != "completed":
                    await finish(run, _crashed(exc))


def _crashed(exc: Exception) -> ci.CiResult:
    return ci.CiResult("failure", "CI crashed", f"The sandbox could not run CI: {exc}", "")
