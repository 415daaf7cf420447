"""Checks and statuses endpoints: check runs and suites, commit statuses."""

from __future__ import annotations

import datetime
import re
from typing import Literal

from aiohttp import web
from pydantic import AwareDatetime, BaseModel, Field, field_validator

from bot.sandbox import checks
from bot.sandbox.hub import Hub, actor_of, hub_of, login_of, repo_of
from bot.sandbox.permissions import read, requires, write
from bot.sandbox.render import latest_runs
from bot.sandbox.rest import (
    ApiError,
    int_param,
    invalid,
    json_response,
    or_not_found,
    paginate,
    read_body,
)
from bot.sandbox.state import (
    CheckOutput,
    CheckRun,
    CheckSuite,
    CommitStatus,
    Repo,
    iso,
    utc_now,
)

routes = web.RouteTableDef()

RUN = "/repos/{owner}/{repo}/check-runs/{check_run_id:\\d+}"
SUITE = "/repos/{owner}/{repo}/check-suites/{check_suite_id:\\d+}"
COMMIT = "/repos/{owner}/{repo}/commits/{ref:.+}"
# What an App may set ("Create a check run"): "Only GitHub Actions can set a status of
# `waiting`, `pending`, or `requested`", and "You cannot change a check run conclusion to
# `stale`, only GitHub can set this."
CheckStatus = Literal["queued", "in_progress", "completed"]
Conclusion = Literal[
    "action_required", "cancelled", "failure", "neutral", "success", "skipped", "timed_out"
]
# A summary, and a text, hold at most 65535 bytes: GitHub counts the UTF-8 encoding
# ("Maximum length: 65535 characters" in the reference; the check fails on bytes).
OUTPUT_LIMIT = 65535
_FULL_SHA = re.compile(r"[0-9a-f]{40}")


class OutputBody(BaseModel):
    """The output block of a check run request: title and summary required, as GitHub's are."""

    title: str
    summary: str
    text: str | None = None

    @field_validator("summary", "text")
    @classmethod
    def _fits(cls, value: str | None) -> str | None:
        if value is not None and len(value.encode()) > OUTPUT_LIMIT:
            raise ValueError(f"is longer than {OUTPUT_LIMIT} bytes")
        return value


class CheckRunBody(BaseModel):
    """Body of check run creation and updates."""

    name: str | None = None
    head_sha: str | None = None
    details_url: str | None = None
    external_id: str | None = None
    status: CheckStatus | None = None
    conclusion: Conclusion | None = None
    started_at: AwareDatetime | None = None
    completed_at: AwareDatetime | None = None
    output: OutputBody | None = None


class StatusBody(BaseModel):
    """Body of POST /repos/{owner}/{repo}/statuses/{sha}."""

    state: Literal["error", "failure", "pending", "success"]
    target_url: str | None = None
    description: str | None = None
    context: str = Field(default="default", min_length=1)


def _calling_app(request: web.Request) -> int:
    """Return the App an installation token belongs to; people cannot write checks."""
    actor = actor_of(request)
    if actor is None or actor.kind != "installation" or actor.app_id is None:
        raise ApiError(403, "You must authenticate via a GitHub App.")
    return actor.app_id


def _when(moment: datetime.datetime | None) -> str | None:
    return iso(moment) if moment is not None else None


def _apply(run: CheckRun, body: CheckRunBody) -> None:
    """Copy a request's check run fields onto a run, completing it when a conclusion arrives.

    GitHub: conclusion is "Required if you provide `completed_at` or a `status` of
    `completed`", and "Providing `conclusion` will automatically set the `status`
    parameter to `completed`." A run moved back to queued or in progress loses its
    conclusion, so that completing it again is announced again. A request refused
    changes nothing of the run, as on GitHub.
    """
    updated = run.model_copy(deep=True)
    _update(updated, body)
    for field in type(run).model_fields:
        setattr(run, field, getattr(updated, field))


def _update(run: CheckRun, body: CheckRunBody) -> None:
    for field in ("name", "details_url", "external_id"):
        if (value := getattr(body, field)) is not None:
            setattr(run, field, value)
    run.started_at = _when(body.started_at) or run.started_at
    run.completed_at = _when(body.completed_at) or run.completed_at
    if body.output is not None:
        run.output = CheckOutput(
            title=body.output.title, summary=body.output.summary, text=body.output.text
        )
    if body.status is not None and body.conclusion is None:
        run.status = body.status
        run.conclusion = None if body.status != "completed" else run.conclusion
    if body.conclusion is not None:
        run.status = "completed"
        run.conclusion = body.conclusion
    if run.conclusion is None and (run.status == "completed" or body.completed_at is not None):
        raise invalid("CheckRun", "conclusion", "missing_field")
    if run.status == "completed":
        run.completed_at = run.completed_at or utc_now()
    else:
        run.completed_at = None


def run_of(request: web.Request, repo: Repo) -> CheckRun:
    """Return the check run named in the path, or answer 404."""
    wanted = int_param(request, "check_run_id")
    return or_not_found(next((r for r in repo.check_runs if r.id == wanted), None))


def suite_of(request: web.Request, repo: Repo) -> CheckSuite:
    """Return the check suite named in the path, or answer 404."""
    return or_not_found(repo.suite(int_param(request, "check_suite_id")))


@routes.post("/repos/{owner}/{repo}/check-runs")
@requires(write("checks"))
async def create_check_run(request: web.Request) -> web.Response:
    """Create a check run for the calling App (its suite is created on demand)."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    app_id = _calling_app(request)
    body = await read_body(request, CheckRunBody, "CheckRun")
    if not body.name:
        raise invalid("CheckRun", "name", "missing_field")
    head = body.head_sha or ""
    if not _FULL_SHA.fullmatch(head) or await hub.git(repo).resolve(head) != head:
        raise ApiError(422, f"No commit found for SHA: {head}")
    suite, _ = checks.suite_for(
        hub, repo, app_id, head, await checks.branch_of(hub, repo, head), None
    )
    run = CheckRun(
        id=hub.state.next_id(), suite_id=suite.id, app_id=app_id, name=body.name, head_sha=head
    )
    _apply(run, body)
    await checks.create_run(hub, repo, suite, run, login_of(request))
    return json_response(await checks.run_json(hub, repo, run), status=201)


@routes.get(RUN)
@requires(read("checks"))
async def get_check_run(request: web.Request) -> web.Response:
    """Return one check run."""
    hub = hub_of(request)
    repo = repo_of(request)
    return json_response(await checks.run_json(hub, repo, run_of(request, repo)))


@routes.patch(RUN)
@requires(write("checks"))
async def update_check_run(request: web.Request) -> web.Response:
    """Update the calling App's own check run; another App's is refused as GitHub refuses it."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    app_id = _calling_app(request)
    run = run_of(request, repo)
    if run.app_id != app_id:
        raise ApiError(
            403,
            f"Invalid app_id `{run.app_id}` - check run can only be modified by the GitHub App "
            "that created it.",
        )
    body = await read_body(request, CheckRunBody, "CheckRun")
    was_completed = run.status == "completed"
    _apply(run, body)
    await checks.run_updated(hub, repo, run, was_completed, login_of(request))
    return json_response(await checks.run_json(hub, repo, run))


async def _commit_of(request: web.Request, hub: Hub, repo: Repo) -> str:
    return or_not_found(await hub.git(repo).resolve(request.match_info["ref"]))


async def _runs_response(
    request: web.Request, hub: Hub, repo: Repo, runs: list[CheckRun]
) -> web.Response:
    query = request.query
    runs = [
        r
        for r in runs
        if query.get("check_name", r.name) == r.name
        and query.get("status", r.status) == r.status
        and query.get("app_id", str(r.app_id)) == str(r.app_id)
    ]
    if query.get("filter", "latest") == "latest":
        runs = latest_runs(runs)
    runs.reverse()
    page, headers = paginate(request, hub.public_url, runs)
    rendered = [await checks.run_json(hub, repo, r) for r in page]
    return json_response({"total_count": len(runs), "check_runs": rendered}, headers=headers)


@routes.get(COMMIT + "/check-runs")
@requires(read("checks"))
async def list_check_runs_for_ref(request: web.Request) -> web.Response:
    """List the check runs of a commit (a sha or a branch name)."""
    hub = hub_of(request)
    repo = repo_of(request)
    sha = await _commit_of(request, hub, repo)
    return await _runs_response(
        request, hub, repo, [r for r in repo.check_runs if r.head_sha == sha]
    )


@routes.get(COMMIT + "/check-suites")
@requires(read("checks"))
async def list_check_suites_for_ref(request: web.Request) -> web.Response:
    """List the check suites of a commit."""
    hub = hub_of(request)
    repo = repo_of(request)
    sha = await _commit_of(request, hub, repo)
    query = request.query
    suites = [
        s
        for s in repo.check_suites
        if s.head_sha == sha
        and query.get("app_id", str(s.app_id)) == str(s.app_id)
        and (
            "check_name" not in query
            or any(r.name == query["check_name"] for r in repo.runs_of(s.id))
        )
    ]
    page, headers = paginate(request, hub.public_url, suites)
    rendered = [await checks.suite_json(hub, repo, s) for s in page]
    return json_response({"total_count": len(suites), "check_suites": rendered}, headers=headers)


@routes.get(SUITE)
@requires(read("checks"))
async def get_check_suite(request: web.Request) -> web.Response:
    """Return one check suite."""
    hub = hub_of(request)
    repo = repo_of(request)
    return json_response(await checks.suite_json(hub, repo, suite_of(request, repo)))


@routes.get(SUITE + "/check-runs")
@requires(read("checks"))
async def list_check_runs_in_suite(request: web.Request) -> web.Response:
    """List the check runs of one suite."""
    hub = hub_of(request)
    repo = repo_of(request)
    suite = suite_of(request, repo)
    return await _runs_response(request, hub, repo, repo.runs_of(suite.id))


@routes.post("/repos/{owner}/{repo}/statuses/{sha}")
@requires(write("statuses"))
async def create_status(request: web.Request) -> web.Response:
    """Set a commit status and send the `status` webhook."""
    hub = hub_of(request)
    repo = repo_of(request, write=True)
    git = hub.git(repo)
    sha = await git.resolve(request.match_info["sha"])
    if sha is None or not sha.startswith(request.match_info["sha"]):
        raise ApiError(422, f"No commit found for SHA: {request.match_info['sha']}")
    body = await read_body(request, StatusBody, "Status")
    status = CommitStatus(
        id=hub.state.next_id(),
        sha=sha,
        state=body.state,
        context=body.context,
        description=body.description,
        target_url=body.target_url,
        creator=login_of(request),
        created_at=utc_now(),
    )
    repo.statuses.append(status)
    tips = await git.branches()
    commit = hub.render.commit(repo, await git.commit(sha), webhook=True)
    payload = {
        "id": status.id,
        "sha": sha,
        "name": repo.full_name,
        "target_url": status.target_url,
        "context": status.context,
        "description": status.description,
        "state": status.state,
        "commit": commit,
        "branches": [
            {
                "name": name,
                "commit": {"sha": tip, "url": f"{hub.render.repo_api(repo)}/commits/{tip}"},
                "protected": False,
            }
            for name, tip in sorted(tips.items())
            if tip == sha
        ][:10],
        "created_at": status.created_at,
        "updated_at": status.created_at,
    }
    hub.emit(repo, "status", status.creator, payload)
    return json_response(hub.render.status(repo, status), status=201)


def _latest_statuses(repo: Repo, sha: str) -> list[CommitStatus]:
    newest: dict[str, CommitStatus] = {}
    for status in repo.statuses:
        if status.sha == sha:
            newest[status.context] = status
    return sorted(newest.values(), key=lambda s: s.id, reverse=True)


@routes.get(COMMIT + "/status")
@requires(read("statuses"))
async def combined_status(request: web.Request) -> web.Response:
    """Combine the latest status per context of a commit."""
    hub = hub_of(request)
    repo = repo_of(request)
    sha = await _commit_of(request, hub, repo)
    latest = _latest_statuses(repo, sha)
    page, headers = paginate(request, hub.public_url, latest)
    return json_response(hub.render.combined_status(repo, sha, latest, list(page)), headers=headers)


@routes.get(COMMIT + "/statuses")
@requires(read("statuses"))
async def list_statuses(request: web.Request) -> web.Response:
    """List every status of a commit, newest first."""
    hub = hub_of(request)
    repo = repo_of(request)
    sha = await _commit_of(request, hub, repo)
    found = [s for s in reversed(repo.statuses) if s.sha == sha]
    page, headers = paginate(request, hub.public_url, found)
    return json_response([hub.render.status(repo, s) for s in page], headers=headers)
