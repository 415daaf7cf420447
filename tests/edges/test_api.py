"""Baton's REST calls on the sandbox GitHub: each returns its typed resource, read right.

Every public function of bot/edges/api.py is called once against the real sandbox, and
every HTTP answer it reads is held to GitHub's OpenAPI description (the subset in
tests/fixtures/github): a facade function added without a call here fails the test.
"""

from __future__ import annotations

import base64
import inspect
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import aiohttp
import pytest
from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from openapi_schema_validator import OAS30Validator
from pydantic import ValidationError

from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.check_run import CheckPhase, CheckRunView
from bot.domain.manifest import load_manifest
from bot.domain.model import IssueRef
from bot.domain.plans.redelivery import HookDelivery
from bot.domain.resources import (
    CommitStatus,
    DiffFile,
    Installation,
    Label,
    Repository,
)
from bot.edges import api
from bot.edges.github import USER_AGENT, GitHubApp, GitHubClient, github_app
from bot.edges.store import Store
from bot.ops.metrics import Tally
from bot.ops.settings import Settings
from bot.sandbox.auth import APP_CLIENT_ID
from tests.sandbox.test_deliveries import HOOK_DELIVERY_FIELDS
from tests.sandbox.test_git_backend import allow_null_in_nullable_enums
from tests.support import GITHUB_FIXTURES

REPO = "maintainer/widgets"
BRANCH = "baton/issue-1-fix-the-widget"
CONFIG = "max_attempts: 2\n"
CI_PASS = "#!/bin/sh\necho checking\nexit 0\n"
# Every public function of the facade: each must be called by the test below.
FACADE = {
    name
    for name, function in vars(api).items()
    if not name.startswith("_")
    and (inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function))
    and function.__module__ == api.__name__
}
SCHEMAS = "#/components/schemas/"
CONTENTS = ("GET", "/repos/{owner}/{repo}/contents/{path}")
WORKFLOW = "on: push\njobs:\n  test:\n    runs-on: ubuntu-latest\n"

# Operations Baton calls that the subset of GitHub's description leaves out. Each answer
# is held to the schema GitHub documents it with, where the subset has that schema.
UNDESCRIBED: dict[tuple[str, str], dict[str, Any] | None] = {
    ("GET", "/app/installations"): {"type": "array", "items": {"$ref": SCHEMAS + "installation"}},
    ("GET", "/installation/repositories"): {
        "type": "object",
        "required": ["total_count", "repositories"],
        "properties": {
            "repositories": {"type": "array", "items": {"$ref": SCHEMAS + "repository"}}
        },
    },
    # GitHub answers a public-user, which carries every field of a simple-user.
    ("GET", "/users/{username}"): {"$ref": SCHEMAS + "simple-user"},
    ("GET", "/repos/{owner}/{repo}/issues"): {
        "type": "array",
        "items": {"$ref": SCHEMAS + "issue"},
    },
    ("GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}"): {
        "$ref": SCHEMAS + "issue-comment"
    },
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/events"): None,  # no schema either
    ("POST", "/app-manifests/{code}/conversions"): {"$ref": SCHEMAS + "integration"},
    # "Delete a reference": its `{ref}` (heads/baton/…) spans segments, as a file's path
    # does; GitHub answers 204, with no body.
    ("DELETE", "/repos/{owner}/{repo}/git/refs/{path}"): None,
    # GraphQL's one endpoint: its answer is the data the document selected.
    ("POST", "/graphql"): {"type": "object", "required": ["data"]},
    # 202 Accepted: {"message": "Updating pull request branch.", "url": ...}.
    ("PUT", "/repos/{owner}/{repo}/pulls/{pull_number}/update-branch"): {
        "type": "object",
        "properties": {"message": {"type": "string"}, "url": {"type": "string"}},
    },
    # GitHub's hook-delivery-item, required fields as its REST reference lists them.
    ("GET", "/app/hook/deliveries"): {
        "type": "array",
        "items": {
            "type": "object",
            "required": list(HOOK_DELIVERY_FIELDS),
            "properties": {
                "id": {"type": "integer"},
                "guid": {"type": "string"},
                "delivered_at": {"type": "string", "format": "date-time"},
                "redelivery": {"type": "boolean"},
                "status_code": {"type": "integer"},
                "event": {"type": "string"},
                "action": {"type": "string", "nullable": True},
            },
        },
    },
    # 202 Accepted, with an empty object.
    ("POST", "/app/hook/deliveries/{delivery_id}/attempts"): {"type": "object"},
}


@dataclass(frozen=True)
class Exchange:
    """One request a GitHub client made, and GitHub's answer as it came over the wire."""

    method: str
    url: str
    body: bytes
    status: int
    headers: Mapping[str, str]
    answer: bytes


@dataclass
class FacadeCaller:
    """Calls the facade's functions, noting each one called."""

    called: set[str] = field(default_factory=set)

    async def __call__(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.called.add(function.__name__)
        if inspect.isasyncgenfunction(function):
            return [item async for item in function(*args, **kwargs)]
        return await function(*args, **kwargs)


class Description:
    """GitHub's OpenAPI description (the subset), matching and validating recorded exchanges."""

    def __init__(self, url: str) -> None:
        spec = json.loads((GITHUB_FIXTURES / "openapi-subset.json").read_text())
        spec["servers"].append({"url": url})
        allow_null_in_nullable_enums(spec)
        # Upstream, a new check run's body has a discriminator naming no schema for its
        # inline alternatives, so openapi-core refuses every body; its oneOf says the same.
        created = spec["paths"]["/repos/{owner}/{repo}/check-runs"]["post"]["requestBody"]
        created["content"]["application/json"]["schema"].pop("discriminator")
        self.spec = spec
        self.api = OpenAPI.from_dict(spec)
        self.url = url
        self.operations = {
            (method.upper(), path)
            for path, operations in spec["paths"].items()
            for method in operations
            if method != "parameters"
        }

    def operation_of(self, exchange: Exchange) -> tuple[tuple[str, str], dict[str, str]]:
        """Return the operation an exchange called and its path's parameters, unquoted."""
        path = urlsplit(exchange.url).path
        for method, template in sorted(self.operations | UNDESCRIBED.keys()):
            if method != exchange.method:
                continue
            # A file's path spans segments; every other parameter is one.
            pattern = re.sub(
                r"\{(\w+)\}",
                lambda m: f"(?P<{m[1]}>{'.+' if m[1] == 'path' else '[^/]+'})",
                template,
            )
            matched = re.fullmatch(pattern, path)
            if matched:
                params = {name: unquote(value) for name, value in matched.groupdict().items()}
                return (method, template), params
        raise AssertionError(f"{exchange.method} {path}: add the operation to UNDESCRIBED")

    def validate(self, exchange: Exchange) -> tuple[str, str]:
        """Hold one exchange to the description; return the operation it called."""
        operation, params = self.operation_of(exchange)
        if exchange.status == 304:
            return operation  # a conditional read, unchanged: its answer was validated before
        answer = json.loads(exchange.answer) if exchange.answer else None  # 204: no body
        if operation == CONTENTS and isinstance(answer, list):
            # A directory: the description's oneOf of an array and objects, which
            # openapi-core reads as objects alone, so its array is held to it here.
            directory = {"$ref": SCHEMAS + "content-directory"}
            OAS30Validator({**directory, "components": self.spec["components"]}).validate(answer)
            return operation
        if operation in UNDESCRIBED:
            schema = UNDESCRIBED[operation]
            if schema is not None:
                OAS30Validator({**schema, "components": self.spec["components"]}).validate(answer)
            return operation
        # openapi-core matches a parameter that spans segments only with '/' as %2F.
        path = operation[1].format(**{k: quote(v, safe="") for k, v in params.items()})
        query = dict(parse_qsl(urlsplit(exchange.url).query))
        request = MockRequest(
            self.url, exchange.method, path, args=query, data=exchange.body or None
        )
        self.api.validate_request(request)
        content_type = exchange.headers.get("Content-Type", "").split(";")[0]
        self.api.validate_response(
            request,
            MockResponse(exchange.answer, exchange.status, dict(exchange.headers), content_type),
        )
        return operation


@pytest.fixture
def exchanges(monkeypatch: pytest.MonkeyPatch) -> list[Exchange]:
    """Record every request any GitHub client of Baton's makes, with its answer's bytes."""
    recorded: list[Exchange] = []
    request = GitHubClient._request

    async def recording(
        self: GitHubClient, method: str, url: str, headers: Mapping[str, str], body: bytes = b""
    ) -> tuple[int, Mapping[str, str], bytes]:
        status, answer_headers, answer = await request(self, method, url, headers, body)
        recorded.append(Exchange(method, url, body, status, dict(answer_headers), answer))
        return status, answer_headers, answer

    monkeypatch.setattr(GitHubClient, "_request", recording)
    return recorded


async def pushed_branch(maintainer: Maintainer, workdir: Path) -> str:
    """Push a branch with one new file on top of main; return its head."""
    seed, git = workdir / "seed-widgets", maintainer.git
    await git.run(seed, "checkout", "--quiet", "-b", BRANCH)
    (seed / "widget.py").write_text("STEADY = True\n")
    await git.run(seed, "add", "--all")
    await git.run(seed, "commit", "--quiet", "-m", "Steady the widget")
    clone_url = f"{maintainer.api_url}/{REPO}.git"
    await git.run(seed, "push", "--quiet", clone_url, BRANCH, token=maintainer.token)
    return (await git.run(seed, "rev-parse", "HEAD")).strip()


async def manifest_code(session: aiohttp.ClientSession, url: str) -> str:
    """Register an App from a manifest as a person would; return the code GitHub sends back."""
    manifest = {"name": "Widget helper", "url": "https://example.invalid", "redirect_url": url}
    async with session.post(
        f"{url}/settings/apps/new", data={"manifest": json.dumps(manifest)}, allow_redirects=False
    ) as reply:
        assert reply.status == 302, await reply.text()
        return dict(parse_qsl(urlsplit(reply.headers["Location"]).query))["code"]


async def _labelled_delivery(
    call: FacadeCaller, as_app: GitHubClient, redelivery: bool = False
) -> HookDelivery | None:
    """Return the newest delivery of the issue's labeling, first or again, if made yet."""
    deliveries = await call(api.recent_deliveries, as_app, datetime.now(UTC), timedelta(hours=1))
    return next(
        (
            d
            for d in deliveries
            if (d.event, d.action, d.redelivery) == ("issues", "labeled", redelivery)
        ),
        None,
    )


async def completed_suite(maintainer: Maintainer, sha: str) -> bool:
    found = await maintainer.gh.getitem(
        "/repos/{+repo}/commits/{sha}/check-suites", {"repo": REPO, "sha": sha}
    )
    return any(
        suite["app"]["slug"] == "sandbox-ci" and suite["status"] == "completed"
        for suite in found["check_suites"]
    )


async def test_every_facade_call_reads_a_typed_resource_github_describes(
    app: GitHubApp,
    maintainer: Maintainer,
    store: Store,
    sandbox: dict[str, str],
    exchanges: list[Exchange],
    tmp_path: Path,
) -> None:
    files = {
        "README.md": "# widgets\n",
        ".github/baton.yml": CONFIG,
        ".github/workflows/ci.yml": WORKFLOW,
        ".github/workflows/notes.txt": "not a workflow\n",
        ".sandbox/ci": CI_PASS,
    }
    await maintainer.create_repo("widgets", files, tmp_path)
    opened = await maintainer.open_issue(REPO, "Fix the widget", "It wobbles.")
    number = int(opened["number"])
    ref = IssueRef(installation_id=1, repo=REPO, number=number)
    await maintainer.add_label(REPO, number, "baton:queue")
    head = await pushed_branch(maintainer, tmp_path)
    await maintainer.gh.post(
        "/repos/{+repo}/statuses/{sha}",
        {"repo": REPO, "sha": head},
        data={"state": "failure", "context": "lint", "description": "two warnings"},
    )
    call = FacadeCaller()
    as_app = app.app_client()
    gh = await app.for_installation(1)

    # ------------------------------------------------ the App and its installations
    baton = await call(api.read_app, as_app)
    assert (baton.id, baton.slug) == (1, "baton")
    first = await call(api.first_installation, as_app)
    assert isinstance(first, Installation) and first.account is not None
    assert (first.id, first.account.login, first.suspended_at) == (1, "maintainer", None)
    assert [i.id for i in await call(api.list_installations, as_app)] == [1]
    token = await call(api.create_installation_token, as_app, 1)
    # The test's sandbox has no webhook URL: GitHub records each delivery, answered by no one.
    labelled = await eventually(lambda: _labelled_delivery(call, as_app), "the label's delivery")
    assert (labelled.redelivery, labelled.succeeded) == (False, False)
    await call(api.redeliver, as_app, labelled.id)
    again = await eventually(lambda: _labelled_delivery(call, as_app, True), "the redelivery")
    assert (again.guid, again.id > labelled.id) == (labelled.guid, True)
    assert token.permissions == load_manifest().default_permissions
    repos = await call(api.list_installation_repositories, gh)
    assert [(r.full_name, r.default_branch) for r in repos] == [(REPO, "main")]
    assert repos[0].clone_url == f"{maintainer.api_url}/{REPO}.git"
    person = await call(api.read_user, gh, "maintainer")
    assert (person.login, person.type) == ("maintainer", "User")
    assert await call(api.learn_app_id, app, store) == baton.id == store.app_id(app.identity)
    bot_id = await call(api.learn_bot_user_id, app, store, 1)
    assert store.bot_user_id() == bot_id
    assert (await api.read_user(gh, "baton[bot]")).id == bot_id
    session = maintainer.session
    code = await manifest_code(session, sandbox["GITHUB_API_URL"])
    anonymous = GitHubClient(session, USER_AGENT, tally=Tally(), base_url=maintainer.api_url)
    registered = await call(api.convert_manifest_code, anonymous, code)
    assert (registered.name, registered.slug) == ("Widget helper", "widget-helper")
    assert registered.pem.startswith("-----BEGIN RSA PRIVATE KEY-----")

    # ------------------------------------------------ issues, labels and comments
    issue = await call(api.read_issue, gh, ref)
    assert (issue.number, issue.title, issue.body, issue.state) == (
        number,
        "Fix the widget",
        "It wobbles.",
        "open",
    )
    assert issue.labels == (Label(name="baton:queue"),) and issue.label_names == {"baton:queue"}
    assert issue.user is not None and issue.user.login == "maintainer"
    assert not issue.is_pull_request
    assert issue.repository_url == f"{maintainer.api_url}/repos/{REPO}"
    queued = await call(api.list_open_issues, gh, REPO, "baton:queue")
    assert [i.number for i in queued] == [number]
    events = await call(api.list_issue_events, gh, ref)
    labelled = [e for e in events if e.event == "labeled"]
    assert [(e.label, e.actor and e.actor.login) for e in labelled] == [
        (Label(name="baton:queue"), "maintainer")
    ]
    carried = await call(api.add_label, gh, ref, "baton:in-progress")
    assert carried == {"baton:queue", "baton:in-progress"}
    await call(api.remove_label, gh, ref, "baton:queue")
    await api.remove_label(gh, ref, "baton:queue")  # gone already: what was wanted
    assert await maintainer.labels(REPO, number) == {"baton:in-progress"}
    await call(api.swap_labels, gh, ref, add="baton:review", remove={"baton:in-progress"})
    assert await maintainer.labels(REPO, number) == {"baton:review"}
    await call(api.post_comment, gh, ref, "Working on it.")
    status_id = await call(api.upsert_comment, gh, REPO, number, None, "Status: queued")
    assert await api.upsert_comment(gh, REPO, number, status_id, "Status: running") == status_id
    bodies = [c["body"] for c in await maintainer.comments(REPO, number)]
    assert bodies == ["Working on it.", "Status: running"]
    comment = await call(api.read_comment, gh, REPO, status_id)
    assert (comment.id, comment.user.login, comment.user.type, comment.body) == (
        status_id,
        "baton[bot]",
        "Bot",
        "Status: running",
    )
    await call(api.create_reaction, gh, REPO, status_id, "+1")
    assert await maintainer.reactions(REPO, status_id) == ["+1"]

    # ------------------------------------------------ the repository
    repository = await call(api.read_repository, gh, store, REPO)
    assert repository == repos[0] and isinstance(repository, Repository)
    calls_before = len(exchanges)
    assert await api.read_repository(gh, store, REPO) == repository  # read within the hour
    assert len(exchanges) == calls_before
    role = await call(api.read_collaborator_permission, gh, REPO, "maintainer")
    assert role.permission == "admin"
    config = await call(api.read_content_file, gh, REPO, ".github/baton.yml", "main")
    assert base64.b64decode(config.content).decode() == CONFIG and len(config.sha) == 40
    loaded = await call(api.load_repo_config, gh, store, REPO, "main")
    assert (loaded.blob_sha, loaded.text, loaded.config.max_attempts) == (config.sha, CONFIG, 2)
    workflows = await call(api.read_workflows, gh, REPO, "main")
    assert workflows == {".github/workflows/ci.yml": WORKFLOW}
    assert await api.read_workflows(gh, REPO, "no-such-ref") == {}  # GitHub's 404: none

    # ------------------------------------------------ a fork, for fork mode
    forks_installation = await maintainer.install("widget-forks")
    await maintainer.fork(REPO, "widget-forks")
    found = await call(api.read_repo_installation, as_app, "widget-forks/widgets")
    assert found.id == forks_installation
    as_forks = await app.for_installation(found.id)
    forked = await call(api.read_forked, as_forks, "widget-forks/widgets")
    assert forked.parent is not None and forked.parent.full_name == REPO
    assert (await api.read_forked(gh, REPO)).parent is None
    found_fork = await call(api.read_fork_of, app, "widget-forks/widgets", REPO)
    assert found_fork is not None and found_fork[1] == forks_installation
    assert await api.read_fork_of(app, "widget-forks/widgets", "maintainer/other") is None
    assert await api.read_fork_of(app, "widget-forks/absent", REPO) is None  # GitHub's 404
    assert await call(api.delete_branch, as_forks, "widget-forks/widgets", BRANCH)
    assert not await api.delete_branch(as_forks, "widget-forks/widgets", BRANCH)  # gone: 422

    # ------------------------------------------------ the pull request
    opening = {
        "branch": BRANCH,
        "head_owner": "maintainer",
        "base": "main",
        "title": "Fix the widget (#1)",
        "body": "Closes #1",
    }
    pull = await call(api.open_or_update_pr, gh, ref, **opening, draft=True)
    assert (pull.state, pull.head.ref, pull.body) == ("open", BRANCH, "Closes #1")
    assert pull.draft is True and pull.node_id
    assert pull.url == f"{maintainer.api_url}/repos/{REPO}/pulls/{pull.number}"
    assert pull.html_url.endswith(f"/{REPO}/pull/{pull.number}")
    # GitHub refuses a second pull request for the branch: the open one is updated.
    again = await api.open_or_update_pr(gh, ref, **{**opening, "body": "Closes #1, again"})
    assert (again.number, again.body) == (pull.number, "Closes #1, again")
    taken_over = await api.open_or_update_pr(gh, ref, **opening, number=pull.number)
    assert (taken_over.number, taken_over.body) == (pull.number, "Closes #1")
    read = await call(api.read_pull, gh, REPO, pull.number)
    assert (read.number, read.state, read.merged, read.head.ref) == (
        pull.number,
        "open",
        False,
        BRANCH,
    )
    assert await call(api.mark_ready_for_review, gh, pull.node_id) is False
    assert (await api.read_pull(gh, REPO, pull.number)).draft is False
    # An update leaves a pull request ready for review: it never turns back into a draft.
    ready = await api.open_or_update_pr(gh, ref, **opening, number=pull.number, draft=True)
    assert ready.draft is False
    stamped = await call(api.update_pull, gh, REPO, pull.number, body="Closes #1\n\nStack: 1")
    assert (stamped.body, stamped.state) == ("Closes #1\n\nStack: 1", "open")
    diff = await call(api.list_pull_files, gh, REPO, pull.number)
    assert diff == [
        DiffFile(
            filename="widget.py",
            status="added",
            additions=1,
            deletions=0,
            patch="@@ -0,0 +1 @@\n+STEADY = True",
        )
    ]
    line = {"path": "widget.py", "line": 1, "body": "Steadier than this."}
    submitted = await maintainer.review(REPO, pull.number, "REQUEST_CHANGES", "Not yet.", [line])
    reviews = await call(api.list_reviews, gh, REPO, pull.number)
    assert [(r.id, r.state, r.commit_id, r.body) for r in reviews] == [
        (submitted["id"], "CHANGES_REQUESTED", head, "Not yet.")
    ]
    assert reviews[0].user is not None and reviews[0].user.login == "maintainer"
    assert reviews[0].submitted_at is not None
    notes = await call(api.list_review_comments, gh, REPO, pull.number)
    assert [(n.path, n.line, n.body, n.pull_request_review_id) for n in notes] == [
        ("widget.py", 1, "Steadier than this.", submitted["id"])
    ]

    # ------------------------------------------------ checks and statuses
    await eventually(lambda: completed_suite(maintainer, head), "the CI's check suite")
    suites = await call(api.list_check_suites, gh, REPO, head)
    # Baton's own suite, queued on the push, holds no run until Baton makes one.
    assert [
        (s.app.slug if s.app else None, s.status, s.conclusion, s.latest_check_runs_count)
        for s in suites
    ] == [("baton", "queued", None, 0), ("sandbox-ci", "completed", "success", 1)]
    combined = await call(api.read_combined_status, gh, REPO, head)
    assert (combined.state, combined.total_count) == ("failure", 1)
    assert combined.statuses == (
        CommitStatus(context="lint", state="failure", description="two warnings"),
    )
    checks = await call(api.read_head_checks, gh, REPO, head)
    assert (checks.suites, checks.combined_status) == (suites, combined)
    runs = await call(api.list_check_runs, gh, REPO, head)
    assert [(r.status, r.conclusion) for r in runs] == [("completed", "success")]
    assert runs[0].id > 0 and runs[0].name and runs[0].output is not None
    waiting = CheckRunView(phase=CheckPhase.CHECKING, title="Waiting", summary="CI", text="")
    mine = await call(api.create_check_run, gh, REPO, head, waiting, f"{ref}/1")
    assert (mine.name, mine.status, mine.conclusion) == ("Baton", "in_progress", None)
    assert mine.app is not None and mine.app.id == baton.id
    green = waiting.model_copy(update={"phase": CheckPhase.GREEN, "title": "Green"})
    done = await call(api.update_check_run, gh, REPO, mine.id, green)
    assert (done.id, done.status, done.conclusion) == (mine.id, "completed", "success")
    assert done.output is not None and done.output.title == "Green"

    # main has nothing the branch lacks: GitHub refuses to update it, and says why.
    refused = await call(api.update_pull_branch, gh, REPO, pull.number, head)
    assert refused is not None and "no new commits" in refused

    assert call.called == FACADE, f"not called here: {sorted(FACADE - call.called)}"
    description = Description(sandbox["GITHUB_API_URL"])
    seen = {description.validate(exchange) for exchange in exchanges}
    assert seen >= UNDESCRIBED.keys(), sorted(UNDESCRIBED.keys() - seen)
    assert not UNDESCRIBED.keys() & description.operations, "described now: validate it"


async def test_a_missing_field_reads_as_baton_always_read_it(
    app: GitHubApp, maintainer: Maintainer, tmp_path: Path
) -> None:
    await maintainer.create_repo("widgets", {"README.md": "# widgets\n"}, tmp_path)
    await maintainer.gh.post("/repos/{+repo}/issues", {"repo": REPO}, data={"title": "Bare"})
    gh = await app.for_installation(1)
    issue = await api.read_issue(gh, IssueRef(installation_id=1, repo=REPO, number=1))
    assert (issue.body, issue.labels, issue.label_names) == (None, (), set())
    with pytest.raises(ValidationError, match="frozen"):
        issue.title = "changed"  # type: ignore[misc]


async def test_the_apps_id_comes_from_github_once_even_for_a_client_id(
    sandbox: dict[str, str], maintainer: Maintainer, store: Store, redis_url: str
) -> None:
    """GITHUB_APP_ID may be the App's client ID, the JWT issuer GitHub recommends: the
    numeric id that names Baton's own check suites and runs is GET /app's, read once."""
    await maintainer.gh.delete("/_sandbox/calls")
    env = {k: v for k, v in sandbox.items() if k != "SANDBOX_ADMIN_TOKEN"}
    settings = Settings(**{**env, "GITHUB_APP_ID": APP_CLIENT_ID}, REDIS_URL=redis_url)
    async with github_app(settings, store) as app:
        assert await api.learn_app_id(app, store) == 1
        assert await api.learn_app_id(app, store) == 1
    counted = await maintainer.gh.getitem("/_sandbox/calls")
    assert counted["app"]["calls"] == {"GET /app": 1}
