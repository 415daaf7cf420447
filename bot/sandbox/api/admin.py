"""Test and operator endpoints under /_sandbox/ (admin token only).

Besides deliveries, faults, call counts, secondary-limit figures and configuration, they
do what a maintainer or GitHub itself does outside the REST API an App sees, with GitHub's
effects (lifecycle): delete or transfer an issue, rename or delete a repository, suspend,
unsuspend or remove an App's installation, re-run a check from a pull request's page.
"""

from __future__ import annotations

import datetime
import re
from typing import Literal

from aiohttp import web
from pydantic import BaseModel, Field

from bot.sandbox import checks, forks, lifecycle
from bot.sandbox.api.apps import ACCOUNT_NAME, REPO_NAME
from bot.sandbox.api.checks import run_of, suite_of
from bot.sandbox.auth import LINT_APP_ID
from bot.sandbox.faults import ApiFault
from bot.sandbox.hub import Hub, hub_of, login_of, require_role
from bot.sandbox.render import suite_outcome
from bot.sandbox.rest import (
    ApiError,
    int_param,
    json_response,
    or_not_found,
    read_body,
    read_json,
)
from bot.sandbox.state import Installation, Issue, Plan, Repo
from bot.sandbox.webhooks import Delivery, WebhookFaults

routes = web.RouteTableDef()

_API_FAULT_FIELDS = set(ApiFault.model_fields) - {"fired"}
# GitHub: alphanumerics and underscores, not starting with a number or GITHUB_.
SECRET_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class FaultsBody(BaseModel):
    """Body of POST /_sandbox/faults: an API fault rule, webhook faults, and/or a seed."""

    seed: int | None = None
    webhooks: WebhookFaults | None = None
    fresh_token_seconds: float | None = Field(default=None, ge=0)


class CollaboratorBody(BaseModel):
    """Body of PUT /_sandbox/repos/{owner}/{repo}/collaborators/{username}."""

    permission: Literal["read", "triage", "write", "maintain", "admin"] = "write"


class SecretBody(BaseModel):
    """Body of PUT /_sandbox/repos/{owner}/{repo}/secrets/{name}: the secret's plain value."""

    value: str = Field(min_length=1, max_length=48 * 1024)  # GitHub's limit is 48 KB


class InstallBody(BaseModel):
    """Body of POST /_sandbox/installations: the account to install Baton's App on."""

    account: str = Field(pattern=ACCOUNT_NAME)


class ConfigBody(BaseModel):
    """Body of PATCH /_sandbox/config: the fields it names change."""

    webhook_url: str | None = None
    rate_limit: int | None = Field(default=None, ge=1)
    token_lifetime_seconds: float | None = Field(default=None, gt=0)
    secondary_per_minute: int | None = Field(default=None, gt=0)
    secondary_per_hour: int | None = Field(default=None, gt=0)
    secondary_concurrent: int | None = Field(default=None, gt=0)


class PlanBody(BaseModel):
    """Body of PUT /_sandbox/users/{username}/plan."""

    plan: Plan


class TransferBody(BaseModel):
    """Body of POST /_sandbox/repos/{owner}/{repo}/issues/{issue_number}/transfer."""

    repository: str  # a repository of the same owner, by name


class RenameBody(BaseModel):
    """Body of PATCH /_sandbox/repos/{owner}/{repo}."""

    name: str = Field(pattern=REPO_NAME)


@routes.get("/_sandbox/deliveries")
async def list_deliveries(request: web.Request) -> web.Response:
    """List recorded deliveries, oldest first, optionally filtered by event and action."""
    hub = hub_of(request)
    query = request.query
    found = [
        d.model_dump()
        for d in hub.webhooks.deliveries
        if query.get("event", d.event) == d.event and query.get("action", d.action) == d.action
    ]
    return json_response(found)


def _find(request: web.Request) -> Delivery:
    wanted = request.match_info["delivery_id"]
    return or_not_found(
        next((d for d in hub_of(request).webhooks.deliveries if str(d.id) == wanted), None)
    )


@routes.get("/_sandbox/deliveries/{delivery_id}")
async def get_delivery(request: web.Request) -> web.Response:
    """Show one delivery with the exact request it made."""
    hub = hub_of(request)
    delivery = _find(request)
    body = hub.webhooks.body(delivery)
    data = delivery.model_dump()
    data["request"] = {"headers": hub.webhooks.headers(delivery, body), "payload": body.decode()}
    return json_response(data)


@routes.post("/_sandbox/deliveries/{delivery_id}/redeliver")
async def redeliver(request: web.Request) -> web.Response:
    """Deliver a recorded delivery again (same guid and body)."""
    attempt = hub_of(request).webhooks.redeliver(_find(request))
    return json_response(attempt.model_dump(), status=202)


def _faults_response(hub: Hub) -> web.Response:
    return json_response(
        {
            "api": [rule.model_dump() for rule in hub.faults.rules],
            "webhooks": hub.webhooks.faults.model_dump(),
            "fresh_token_seconds": hub.faults.fresh_token_seconds,
        }
    )


@routes.post("/_sandbox/faults")
async def add_faults(request: web.Request) -> web.Response:
    """Add an API fault rule, set webhook or fresh-token faults, and/or reseed the faults."""
    hub = hub_of(request)
    data = await read_json(request)
    body = await read_body(request, FaultsBody, "Fault")
    if isinstance(data, dict) and _API_FAULT_FIELDS & data.keys():
        hub.faults.rules.append(await read_body(request, ApiFault, "Fault"))
    if body.webhooks is not None:
        hub.webhooks.faults = body.webhooks
    if body.fresh_token_seconds is not None:
        hub.faults.fresh_token_seconds = body.fresh_token_seconds
    if body.seed is not None:
        hub.rng.seed(body.seed)
    return _faults_response(hub)


@routes.get("/_sandbox/faults")
async def get_faults(request: web.Request) -> web.Response:
    """Show the active fault rules."""
    return _faults_response(hub_of(request))


@routes.delete("/_sandbox/faults")
async def clear_faults(request: web.Request) -> web.Response:
    """Remove every fault."""
    hub = hub_of(request)
    hub.faults.rules.clear()
    hub.faults.fresh_token_seconds = 0.0
    hub.webhooks.faults = WebhookFaults()
    return web.Response(status=204)


@routes.get("/_sandbox/calls")
async def get_calls(request: web.Request) -> web.Response:
    """Count REST API calls by caller kind and `METHOD path-template`, and per installation."""
    return json_response(hub_of(request).calls.snapshot())


@routes.delete("/_sandbox/calls")
async def reset_calls(request: web.Request) -> web.Response:
    """Forget the counted calls."""
    hub_of(request).calls.reset()
    return web.Response(status=204)


@routes.delete("/_sandbox/rate-limits")
async def reset_rate_limits(request: web.Request) -> web.Response:
    """Give every installation and App its whole rate limit back, secondary limits included."""
    hub = hub_of(request)
    hub.limits.reset()
    hub.secondary.reset()
    return web.Response(status=204)


@routes.get("/_sandbox/limits")
async def get_limits(request: web.Request) -> web.Response:
    """Show each installation's secondary-limit figures: its 403 answers, its content
    writes, their peaks in any 60 s and any 3600 s, and its most requests at once."""
    return json_response(hub_of(request).secondary.snapshot())


@routes.put("/_sandbox/repos/{owner}/{repo}/collaborators/{username}")
async def add_collaborator(request: web.Request) -> web.Response:
    """Give a user a role on a repository."""
    hub = hub_of(request)
    repo = or_not_found(hub.repo(request.match_info["owner"], request.match_info["repo"]))
    body = await read_body(request, CollaboratorBody, "Collaborator")
    login = request.match_info["username"]
    hub.user(login)
    repo.collaborators[login] = body.permission
    return web.Response(status=204)


@routes.put("/_sandbox/repos/{owner}/{repo}/secrets/{name}")
async def set_secret(request: web.Request) -> web.Response:
    """Set a repository's Actions secret, as its settings page does (GitHub's REST API takes
    it sealed with the repository's public key; the sandbox takes it plain)."""
    hub = hub_of(request)
    repo = or_not_found(hub.repo(request.match_info["owner"], request.match_info["repo"]))
    name = request.match_info["name"]
    if not SECRET_NAME.fullmatch(name) or name.upper().startswith("GITHUB_"):
        raise ApiError(422, f"Secret names can only contain alphanumerics or underscores: {name}")
    body = await read_body(request, SecretBody, "Secret")
    created = name.upper() not in repo.secrets
    repo.secrets[name.upper()] = body.value
    hub.changed()
    return web.Response(status=201 if created else 204)


@routes.post("/_sandbox/repos/{owner}/{repo}/pulls/{issue_number}/approve-workflows")
async def approve_workflows(request: web.Request) -> web.Response:
    """Run the CI a fork's pull request waits with, as "Approve and run workflows" on its
    page does: 204, or 422 when nothing waits (GitHub's approve refuses a run not waiting)."""
    hub = hub_of(request)
    repo = _repo(request)
    issue = _issue(request, repo)
    if issue.pull is None or not await forks.approve(hub, repo, issue, login_of(request)):
        raise ApiError(422, "No workflow run of this pull request awaits approval.")
    return web.Response(status=204)


@routes.put("/_sandbox/users/{username}/plan")
async def set_plan(request: web.Request) -> web.Response:
    """Put an account on a GitHub plan (every account starts on `free`)."""
    hub = hub_of(request)
    body = await read_body(request, PlanBody, "Plan")
    hub.user(request.match_info["username"]).plan = body.plan
    hub.changed()
    return web.Response(status=204)


@routes.put("/_sandbox/apps/{app_slug}/installations/{account}")
async def install_app(request: web.Request) -> web.Response:
    """Install one of the sandbox's other Apps (the linter, or one registered) on an account.

    Baton's own App is installed with an account's first repository; an App installed
    here gets a check suite on every push if it may write checks, as on GitHub.
    """
    hub = hub_of(request)
    slug = request.match_info["app_slug"]
    apps = [LINT_APP_ID, *(app.id for app in hub.state.apps)]
    app_id = or_not_found(next((a for a in apps if hub.app_facts(a).slug == slug), None))
    hub.user(request.match_info["account"])
    inst = hub.ensure_installation(request.match_info["account"], app_id)
    hub.changed()
    return json_response(hub.render.installation(inst), status=201)


@routes.get("/_sandbox/config")
async def get_config(request: web.Request) -> web.Response:
    """Show the runtime configuration."""
    return _config_response(hub_of(request))


def _config_response(hub: Hub) -> web.Response:
    return json_response(
        {
            "webhook_url": hub.webhooks.url,
            "rate_limit": hub.limits.installation_limit,
            "token_lifetime_seconds": hub.auth.token_lifetime.total_seconds(),
            "secondary_per_minute": hub.secondary.per_minute,
            "secondary_per_hour": hub.secondary.per_hour,
            "secondary_concurrent": hub.secondary.concurrent,
        }
    )


@routes.patch("/_sandbox/config")
async def update_config(request: web.Request) -> web.Response:
    """Change the runtime configuration: the webhook URL, installations' hourly rate limit,
    token lifetime, and installations' secondary limits (writes a minute and an hour,
    requests at once)."""
    hub = hub_of(request)
    body = await read_body(request, ConfigBody, "Config")
    if "webhook_url" in body.model_fields_set:
        hub.webhooks.url = body.webhook_url
    if body.rate_limit is not None:
        hub.limits.installation_limit = body.rate_limit
    if body.token_lifetime_seconds is not None:
        hub.auth.token_lifetime = datetime.timedelta(seconds=body.token_lifetime_seconds)
    _set_secondary(hub, body)
    return _config_response(hub)


def _set_secondary(hub: Hub, body: ConfigBody) -> None:
    limits = hub.secondary
    limits.per_minute = body.secondary_per_minute or limits.per_minute
    limits.per_hour = body.secondary_per_hour or limits.per_hour
    limits.concurrent = body.secondary_concurrent or limits.concurrent


def _repo(request: web.Request) -> Repo:
    hub = hub_of(request)
    return or_not_found(hub.repo(request.match_info["owner"], request.match_info["repo"]))


def _issue(request: web.Request, repo: Repo) -> Issue:
    return or_not_found(repo.issues.get(int_param(request, "issue_number")))


def _installation(request: web.Request) -> Installation:
    wanted = int_param(request, "installation_id")
    found = (i for i in hub_of(request).state.installations if i.id == wanted)
    return or_not_found(next(found, None))


@routes.delete("/_sandbox/repos/{owner}/{repo}/issues/{issue_number}")
async def delete_issue(request: web.Request) -> web.Response:
    """Delete an issue, as a repository admin can on GitHub."""
    repo = _repo(request)
    lifecycle.delete_issue(hub_of(request), repo, _issue(request, repo), login_of(request))
    return web.Response(status=204)


@routes.post("/_sandbox/repos/{owner}/{repo}/issues/{issue_number}/transfer")
async def transfer_issue(request: web.Request) -> web.Response:
    """Transfer an issue to another repository of the same owner; answer the moved issue."""
    hub = hub_of(request)
    repo = _repo(request)
    issue = _issue(request, repo)
    body = await read_body(request, TransferBody, "Issue")
    target = or_not_found(hub.repo(repo.owner, body.repository))
    moved = await lifecycle.transfer_issue(hub, repo, issue, target, login_of(request))
    return json_response(hub.render.issue(target, moved), status=201)


@routes.patch("/_sandbox/repos/{owner}/{repo}")
async def rename_repo(request: web.Request) -> web.Response:
    """Rename a repository; answer it under its new name."""
    hub = hub_of(request)
    repo = _repo(request)
    body = await read_body(request, RenameBody, "Repository")
    await lifecycle.rename_repo(hub, repo, body.name)
    return json_response(hub.render.repo(repo))


@routes.delete("/_sandbox/repos/{owner}/{repo}")
async def delete_repo(request: web.Request) -> web.Response:
    """Delete a repository."""
    await lifecycle.delete_repo(hub_of(request), _repo(request))
    return web.Response(status=204)


@routes.post("/_sandbox/installations")
async def install_baton(request: web.Request) -> web.Response:
    """Install Baton's App on another account, as its owner does on GitHub (a fork's
    home, say): 201 with the installation, or 200 with the one it already has."""
    hub = hub_of(request)
    body = await read_body(request, InstallBody, "Installation")
    inst, made = lifecycle.install(hub, body.account, login_of(request))
    hub.changed()
    return json_response(hub.render.installation(inst), status=201 if made else 200)


@routes.put("/_sandbox/installations/{installation_id}/suspended")
async def suspend_installation(request: web.Request) -> web.Response:
    """Suspend an installation (GitHub's PUT /app/installations/{id}/suspended)."""
    lifecycle.suspend(hub_of(request), _installation(request), login_of(request))
    return web.Response(status=204)


@routes.delete("/_sandbox/installations/{installation_id}/suspended")
async def unsuspend_installation(request: web.Request) -> web.Response:
    """Lift an installation's suspension."""
    lifecycle.unsuspend(hub_of(request), _installation(request), login_of(request))
    return web.Response(status=204)


@routes.delete("/_sandbox/installations/{installation_id}")
async def uninstall(request: web.Request) -> web.Response:
    """Remove the App from an account (GitHub's DELETE /app/installations/{id})."""
    lifecycle.uninstall(hub_of(request), _installation(request), login_of(request))
    return web.Response(status=204)


@routes.post("/_sandbox/repos/{owner}/{repo}/check-runs/{check_run_id}/rerequest")
async def rerequest_check_run(request: web.Request) -> web.Response:
    """Re-run a completed check run, as a person with write access does from a PR's page.

    Its App gets `check_run.rerequested` from that person (GitHub's "Re-run"); a run
    still under way is not rerequestable, as on GitHub (422).
    """
    hub = hub_of(request)
    repo = _repo(request)
    require_role(request, repo, "write", "re-run checks")
    run = run_of(request, repo)
    if run.status != "completed":
        raise ApiError(422, "This check run is not rerequestable.")
    await checks.rerequest(hub, repo, run, login_of(request))
    return json_response({}, status=201)


@routes.post("/_sandbox/repos/{owner}/{repo}/check-suites/{check_suite_id}/rerequest")
async def rerequest_check_suite(request: web.Request) -> web.Response:
    """Re-run all of a completed suite's checks, as "Re-run all checks" on a PR's page does.

    Its App gets `check_suite.rerequested` from that person; a suite still under way is
    not rerequestable (422).
    """
    hub = hub_of(request)
    repo = _repo(request)
    require_role(request, repo, "write", "re-run checks")
    suite = suite_of(request, repo)
    if suite_outcome(suite, repo.runs_of(suite.id))[0] != "completed":
        raise ApiError(422, "This check suite is not rerequestable.")
    await checks.rerequest_suite(hub, repo, suite, login_of(request))
    return json_response({}, status=201)
