"""app.yml as a contract: the events Baton routes, and exactly the permissions it needs.

The sandbox enforces App permissions the way GitHub does (every route declares what it
needs, bot/sandbox/permissions.py), so the end-to-end suite fails when app.yml lacks one.
What Baton needs is derived here statically: every GitHub call site in Baton's code,
resolved to the sandbox route it reaches, plus git fetch and push, plus what each
subscribed event requires. A static derivation covers every code path, where recording
calls during the tests would only cover the paths the tests happen to take. The same
scan holds every call site to the one module that makes Baton's REST calls
(bot/edges/api.py) and to the App's authentication (bot/edges/github.py).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from gidgethub.apps import get_jwt
from uritemplate import URITemplate
from uritemplate.variable import VariableValueDict

from bot.devkit.maintainer import Maintainer
from bot.domain.manifest import AppManifest, load_manifest
from bot.edges.git import GitError
from bot.sandbox import git_http
from bot.sandbox.hub import HUB
from bot.sandbox.middleware import ADMIN_PREFIX, PAGE_ROUTE
from bot.sandbox.permissions import Requirement, read, requirement_of, write
from bot.sandbox.server import create_app, running
from handlers import router
from tests.support import GITHUB_FIXTURES

ROOT = Path(__file__).resolve().parents[2]
BATON_SOURCES = [
    path
    for folder in ("bot", "handlers", "jobs")
    for path in sorted((ROOT / folder).rglob("*.py"))
    # The sandbox and the local stack's maintainer are GitHub and its users, not the App.
    if not {"sandbox", "devkit"} & set(path.relative_to(ROOT).parts)
]
GIDGETHUB_VERBS = {"getitem", "getiter", "getstatus", "post", "patch", "put", "delete"}
GITHUB_CLIENTS = {"gh", "client"}
# The only modules that call GitHub: its REST calls, and the App's own authentication.
GITHUB_MODULES = {"bot/edges/api.py", "bot/edges/github.py"}
# Call sites whose URL is an API URL GitHub handed back rather than a template in the code.
URL_EXPRESSIONS = {
    "existing[0].url": "/repos/octo/hello/pulls/1",
}
# GraphQL is one endpoint, and each mutation asks its own permission (GitHub's reference
# for each mutation; the sandbox's /graphql checks them as it resolves them).
GRAPHQL_PERMISSIONS = {
    "markPullRequestReadyForReview": Requirement((write("pull_requests"),)),
}
# What GitHub requires of an App to deliver each event to it.
EVENT_PERMISSIONS = {
    "issues": Requirement((read("issues"),)),
    "issue_comment": Requirement((read("issues"), read("pull_requests"))),
    "pull_request": Requirement((read("pull_requests"),)),
    "pull_request_review": Requirement((read("pull_requests"),)),
    "check_suite": Requirement((read("checks"),)),
    "check_run": Requirement((read("checks"),)),
    "status": Requirement((read("statuses"),)),
    "push": Requirement((read("contents"),)),
}


@dataclass(frozen=True)
class Call:
    """One GitHub call site in Baton's code."""

    where: str
    method: str
    path: str

    @property
    def module(self) -> str:
        return self.where.split(":", 1)[0]


def routed_events() -> set[str]:
    """Return the events Baton's router has handlers for."""
    return set(router._shallow_routes) | set(router._deep_routes)


def github_calls() -> list[Call]:
    """Find every gidgethub call in Baton's code, with the path it requests."""
    found = []
    for source in BATON_SOURCES:
        for node in ast.walk(ast.parse(source.read_text())):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in GIDGETHUB_VERBS
                and node.args
            ):
                continue
            where = f"{source.relative_to(ROOT)}:{node.lineno}"
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                if not first.value.startswith("/"):
                    continue
                path = expand(first.value)
            elif is_github_client(node.func.value):
                expression = ast.unparse(first)
                assert expression in URL_EXPRESSIONS, (
                    f"{where} calls GitHub at {expression}: add it to URL_EXPRESSIONS"
                )
                path = URL_EXPRESSIONS[expression]
            else:
                continue
            method = "GET" if node.func.attr.startswith("get") else node.func.attr.upper()
            found.append(Call(where, method, path))
    return found


def graphql_calls() -> list[Call]:
    """Find every GraphQL call in Baton's code, with the root field its document asks for.

    The document is a string constant of the calling module, passed by name.
    """
    found = []
    for source in BATON_SOURCES:
        tree = ast.parse(source.read_text())
        documents = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "graphql"
            ):
                continue
            if ast.unparse(node.func.value) == "super()":
                continue  # GitHubClient's retrying graphql, passing its caller's document on
            where = f"{source.relative_to(ROOT)}:{node.lineno}"
            first = node.args[0] if node.args else None
            assert isinstance(first, ast.Name) and first.id in documents, (
                f"{where}: pass the GraphQL document as a module constant"
            )
            root = re.search(r"(mutation|query)\b[^{]*\{\s*(\w+)", documents[first.id])
            assert root is not None, f"{where}: no root field in {first.id}"
            found.append(Call(where, root[1], root[2]))
    return found


def is_github_client(receiver: ast.expr) -> bool:
    """Tell whether an expression is a GitHub client: gh, self.gh, client, app.app_client()."""
    named = ast.unparse(receiver)
    return named.split(".")[-1] in GITHUB_CLIENTS or named.endswith(".app_client()")


def expand(template: str) -> str:
    """Fill a gidgethub URI template with sample values and drop its query."""
    parsed = URITemplate(template)
    values: VariableValueDict = {
        name: "octo/hello" if name == "repo" else "1" for name in parsed.variable_names
    }
    return str(parsed.expand(values)).split("?", 1)[0]


async def route_requirement(app: web.Application, method: str, path: str) -> Requirement:
    """Return what the sandbox route serving `method path` requires."""
    match = await app.router.resolve(make_mocked_request(method, path, app=app))
    assert match.http_exception is None, f"the sandbox does not serve {method} {path}"
    requirement = requirement_of(match.handler)
    assert requirement is not None, f"{method} {path} declares no permission"
    return requirement


def baton_runs_git(subcommand: str) -> bool:
    """Tell whether Baton's git wrapper runs a git subcommand against GitHub."""
    tree = ast.parse((ROOT / "bot" / "edges" / "git.py").read_text())
    return any(
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "run"
        and any(isinstance(a, ast.Constant) and a.value == subcommand for a in node.args)
        for node in ast.walk(tree)
    )


@pytest.fixture
def sandbox_app(tmp_path: Path) -> web.Application:
    return create_app(tmp_path / "sandbox", None, "http://sandbox.invalid")


# ---------------------------------------------------------------- events


def test_app_yml_subscribes_to_exactly_the_events_baton_routes() -> None:
    subscribed = set(load_manifest().default_events)
    assert routed_events() - subscribed == set(), "routed but not subscribed in app.yml"
    assert subscribed - routed_events() == set(), "subscribed in app.yml but never routed"


def test_every_subscribed_event_has_the_permission_github_requires_for_it() -> None:
    manifest = load_manifest()
    for event in manifest.default_events:
        assert EVENT_PERMISSIONS[event].met_by(manifest.default_permissions), event


# ---------------------------------------------------------------- route declarations


def test_permissions_compare_by_level_and_any_one_alternative_suffices() -> None:
    assert write("issues").granted_by({"issues": "write"})
    assert read("issues").granted_by({"issues": "write"})
    assert not write("issues").granted_by({"issues": "read"})
    assert not read("checks").granted_by({"issues": "write"})
    either = Requirement((write("issues"), write("pull_requests")))
    assert either.met_by({"pull_requests": "write"})
    assert not either.met_by({"issues": "read", "pull_requests": "read"})
    assert either.header() == "issues=write; pull_requests=write"
    assert Requirement((), "an App JWT").met_by({})


def test_every_sandbox_route_declares_a_permission_github_knows(
    sandbox_app: web.Application,
) -> None:
    spec = json.loads((GITHUB_FIXTURES / "openapi-subset.json").read_text())
    known = spec["components"]["schemas"]["app-permissions"]["properties"]
    for route in sandbox_app.router.routes():
        info = route.resource.canonical if route.resource else ""
        if info.startswith(ADMIN_PREFIX) or route.name == PAGE_ROUTE:
            continue  # the sandbox's admin API and pages for people: no App token reaches them
        requirement = requirement_of(route.handler)
        assert requirement is not None, f"{route.method} {info} declares no permission"
        assert requirement.any_of or requirement.reason, f"{route.method} {info}"
        for permission in requirement.any_of:
            assert permission.level in known[permission.name]["enum"], (info, permission)


# ---------------------------------------------------------------- one place calls GitHub


def test_github_is_called_from_the_rest_module_and_the_app_authentication_alone() -> None:
    calls = github_calls()
    elsewhere = [call.where for call in calls if call.module not in GITHUB_MODULES]
    assert elsewhere == [], f"call GitHub through bot/edges/api.py, not from {elsewhere}"
    assert {call.module for call in calls} == GITHUB_MODULES, "the scan sees no call in one"


def test_graphql_is_called_from_the_rest_module_alone_and_each_mutation_is_known() -> None:
    calls = graphql_calls()
    assert calls, "the scan sees no GraphQL call"
    assert {call.module for call in calls} == {"bot/edges/api.py"}
    assert {call.path for call in calls} <= set(GRAPHQL_PERMISSIONS)


# ---------------------------------------------------------------- least privilege


async def test_app_yml_grants_exactly_what_baton_needs(sandbox_app: web.Application) -> None:
    calls = github_calls()
    assert len(calls) > 20, "the call-site scan found too little to be looking at Baton"
    needs: dict[str, Requirement] = {}
    for call in calls:
        needs[f"{call.method} {call.path} ({call.where})"] = await route_requirement(
            sandbox_app, call.method, call.path
        )
    assert baton_runs_git("fetch") and baton_runs_git("push")
    for call in graphql_calls():
        needs[f"GraphQL {call.path} ({call.where})"] = GRAPHQL_PERMISSIONS[call.path]
    needs["git fetch"] = git_http.FETCH
    needs["git push"] = git_http.PUSH
    manifest = load_manifest()
    for event in manifest.default_events:
        needs[f"the {event} event"] = EVENT_PERMISSIONS[event]

    granted = manifest.default_permissions
    unmet = [what for what, requirement in needs.items() if not requirement.met_by(granted)]
    assert unmet == [], f"app.yml lacks what these need: {unmet}"
    for name, level in granted.items():
        lowered = {k: v for k, v in granted.items() if k != name}
        if level == "write":
            lowered[name] = "read"
        still_met = all(requirement.met_by(lowered) for requirement in needs.values())
        assert not still_met, f"app.yml grants {name}: {level}, more than Baton needs"


# ---------------------------------------------------------------- enforcement


def with_permissions(**permissions: str) -> AppManifest:
    """Return app.yml with some permissions changed."""
    manifest = load_manifest()
    changed = {**manifest.default_permissions, **permissions}
    return manifest.model_copy(update={"default_permissions": changed})


@dataclass
class Installed:
    """A sandbox with one repository holding a pushed feature branch, and the App's JWT."""

    url: str
    maintainer: Maintainer
    session: aiohttp.ClientSession
    jwt: str

    async def token(self, permissions: dict[str, str] | None = None) -> str:
        body: dict[str, Any] = {} if permissions is None else {"permissions": permissions}
        async with self.session.post(
            f"{self.url}/app/installations/1/access_tokens",
            json=body,
            headers={"Authorization": f"Bearer {self.jwt}"},
        ) as reply:
            assert reply.status == 201, await reply.text()
            return str((await reply.json())["token"])

    async def open_pull(self, token: str) -> Reply:
        pull = {"title": "Feature", "head": "feature", "base": "main"}
        async with self.session.post(
            f"{self.url}/repos/maintainer/demo/pulls",
            json=pull,
            headers={"Authorization": f"token {token}"},
        ) as reply:
            return Reply(reply.status, dict(reply.headers), await reply.json())


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: dict[str, Any]


Start = Callable[[AppManifest | None], AbstractAsyncContextManager[Installed]]


@pytest.fixture
def installed(tmp_path: Path) -> Start:
    """Start a sandbox whose App has a manifest's permissions, with maintainer/demo in it."""

    @asynccontextmanager
    async def start(manifest: AppManifest | None) -> AsyncIterator[Installed]:
        async with running(tmp_path / "sandbox", None, manifest=manifest) as app:
            settings = app[HUB].settings()
            url, admin = settings["GITHUB_API_URL"], settings["SANDBOX_ADMIN_TOKEN"]
            async with aiohttp.ClientSession() as session:
                maintainer = Maintainer(session, url, admin)
                await maintainer.create_repo("demo", {"README.md": "# demo\n"}, tmp_path)
                seed = tmp_path / "seed-demo"
                await maintainer.git.run(seed, "checkout", "--quiet", "-b", "feature")
                (seed / "feature.txt").write_text("more\n")
                await maintainer.git.run(seed, "add", "--all")
                await maintainer.git.run(seed, "commit", "--quiet", "-m", "Add a feature")
                clone_url = f"{url}/maintainer/demo.git"
                await maintainer.git.run(seed, "push", "--quiet", clone_url, "feature", token=admin)
                key = Path(settings["GITHUB_PRIVATE_KEY_PATH"]).read_text()
                yield Installed(url, maintainer, session, get_jwt(app_id="1", private_key=key))

    return start


async def test_an_installation_without_pull_requests_write_cannot_open_a_pull_request(
    installed: Start,
) -> None:
    async with installed(with_permissions(pull_requests="read")) as sandbox:
        token = await sandbox.token()
        refused = await sandbox.open_pull(token)
        assert refused.status == 403
        assert refused.body["message"] == "Resource not accessible by integration"
        assert refused.body["documentation_url"].startswith("https://docs.github.com/")
        assert refused.headers["X-Accepted-GitHub-Permissions"] == "pull_requests=write"
        listed = await sandbox.maintainer.gh.getitem(
            "/repos/maintainer/demo/pulls", oauth_token=token
        )
        assert listed == []


async def test_a_token_holds_only_the_permissions_it_was_minted_with(
    installed: Start,
) -> None:
    async with installed(None) as sandbox:
        narrowed = await sandbox.token({"issues": "write", "contents": "read"})
        assert (await sandbox.open_pull(narrowed)).status == 403
        full = await sandbox.token()
        assert (await sandbox.open_pull(full)).status == 201
        async with sandbox.session.post(
            f"{sandbox.url}/app/installations/1/access_tokens",
            json={"permissions": {"administration": "write"}},
            headers={"Authorization": f"Bearer {sandbox.jwt}"},
        ) as reply:
            assert reply.status == 422


async def test_pushing_needs_contents_write(installed: Start, tmp_path: Path) -> None:
    async with installed(with_permissions(contents="read")) as sandbox:
        token = await sandbox.token()
        seed = tmp_path / "seed-demo"
        clone_url = f"{sandbox.url}/maintainer/demo.git"
        await sandbox.maintainer.git.run(seed, "fetch", "--quiet", clone_url, token=token)
        with pytest.raises(GitError, match="403"):
            await sandbox.maintainer.git.run(
                seed, "push", "--quiet", clone_url, "feature:refs/heads/by-app", token=token
            )
