"""The sandbox GitHub, driven the way Baton drives GitHub: real HTTP, real git, signed webhooks."""

from __future__ import annotations

import asyncio
import base64
import gzip
import hashlib
import hmac
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
import gidgethub.aiohttp
import jwt
import pytest
from aiohttp import web
from gidgethub.apps import get_jwt
from jsonschema import Draft7Validator  # type: ignore[import-untyped]
from multidict import CIMultiDict
from openapi_core import OpenAPI
from openapi_core.testing import MockRequest, MockResponse
from openapi_schema_validator import OAS30Validator
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7
from yarl import URL

from bot.domain.manifest import load_manifest
from bot.sandbox import server
from bot.sandbox.git_backend import git_env
from bot.sandbox.hub import HUB, Hub
from tests.support import GITHUB_FIXTURES, payload

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "<the admin token>"
REPO = "/repos/maintainer/demo"
CI_PASS = "#!/bin/sh\necho checking\nexit 0\n"
CI_FAIL = "#!/bin/sh\necho 'test_thing FAILED' >&2\nexit 3\n"
# These tests drive every route as the App, so its App holds every permission a route asks;
# Baton's own permissions (app.yml) are held to in tests/ops/test_permissions.py and the e2e suite.
EVERY_ROUTE_MANIFEST = load_manifest().model_copy(
    update={
        "default_permissions": {
            "checks": "write",
            "contents": "write",
            "issues": "write",
            "metadata": "read",
            "pull_requests": "write",
            "statuses": "write",
        }
    }
)
Payload = dict[str, Any]


# ---------------------------------------------------------------- harness


@dataclass
class Received:
    """One webhook delivery as the receiver got it."""

    event: str
    guid: str
    headers: dict[str, str]
    body: bytes

    @property
    def payload(self) -> Payload:
        data: Payload = json.loads(self.body)
        return data

    @property
    def action(self) -> str | None:
        return self.payload.get("action")


async def eventually(
    probe: Callable[[], Awaitable[bool]], what: Callable[[], str], within: float = 20.0
) -> None:
    """Poll `probe` until it holds, failing with `what()` past the deadline."""
    deadline = time.monotonic() + within
    while not await probe():
        assert time.monotonic() < deadline, f"not within {within}s: {what()}"
        await asyncio.sleep(0.02)


@dataclass
class Receiver:
    """A webhook endpoint that checks both signatures, as a GitHub App must.

    It answers `answer` to every signed delivery it records (204 unless a test says).
    """

    url: str = ""
    secret: bytes = b""
    deliveries: list[Received] = field(default_factory=list)
    rejected: int = 0
    answer: int = 204

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        expected = {
            "X-Hub-Signature-256": "sha256="
            + hmac.new(self.secret, body, hashlib.sha256).hexdigest(),
            "X-Hub-Signature": "sha1=" + hmac.new(self.secret, body, hashlib.sha1).hexdigest(),
        }
        if not all(hmac.compare_digest(request.headers.get(h, ""), v) for h, v in expected.items()):
            self.rejected += 1
            return web.Response(status=401)
        headers = dict(request.headers)
        self.deliveries.append(
            Received(headers["X-GitHub-Event"], headers["X-GitHub-Delivery"], headers, body)
        )
        return web.Response(status=self.answer)

    def matching(
        self, event: str, action: str | None = None, where: Callable[[Payload], bool] | None = None
    ) -> list[Received]:
        return [
            d
            for d in self.deliveries
            if d.event == event
            and action in (None, d.action)
            and (where is None or where(d.payload))
        ]

    async def wait_for(
        self,
        event: str,
        action: str | None = None,
        where: Callable[[Payload], bool] | None = None,
        count: int = 1,
        within: float = 20.0,
    ) -> Received:
        """Wait until `count` matching deliveries arrived; return the first."""

        async def arrived() -> bool:
            return len(self.matching(event, action, where)) >= count

        await eventually(arrived, lambda: f"{count}x {event}/{action}; got {self.seen()}", within)
        return self.matching(event, action, where)[0]

    def seen(self) -> list[tuple[str, str | None]]:
        return [(d.event, d.action) for d in self.deliveries]


@dataclass
class Reply:
    status: int
    headers: CIMultiDict[str]  # case-insensitive, as HTTP header names are
    raw: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.raw) if self.raw else None


@dataclass
class Sandbox:
    """A running sandbox, a client session, the webhook receiver and a scratch directory."""

    app: web.Application
    session: aiohttp.ClientSession
    receiver: Receiver
    work: Path
    clones: int = 0

    @property
    def hub(self) -> Hub:
        return self.app[HUB]

    @property
    def url(self) -> str:
        return self.hub.public_url

    @property
    def admin(self) -> str:
        return self.hub.state.secrets.admin_token

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        auth: str | None = ADMIN,
        headers: dict[str, str] | None = None,
        follow: bool = True,
    ) -> Reply:
        """Send one API request; `path` is sent exactly as written (%2F stays %2F).

        Redirects are followed, as GitHub's clients follow them, unless `follow` is False.
        """
        sent = dict(headers or {})
        if auth is not None:
            sent["Authorization"] = f"token {self.admin if auth == ADMIN else auth}"
        data = None if body is None else json.dumps(body).encode()
        url = URL(self.url + path, encoded=True)
        async with self.session.request(
            method, url, data=data, headers=sent, allow_redirects=follow
        ) as response:
            return Reply(response.status, CIMultiDict(response.headers), await response.read())

    async def ok(
        self, method: str, path: str, body: Any = None, status: int = 200, **kwargs: Any
    ) -> Any:
        """Send a request that must answer `status`; return its JSON."""
        reply = await self.call(method, path, body, **kwargs)
        assert reply.status == status, (method, path, reply.status, reply.raw[:500])
        return reply.json

    async def new_repo(self, name: str = "demo") -> Payload:
        body = {"name": name, "auto_init": True}
        repo: Payload = await self.ok("POST", "/user/repos", body, status=201)
        return repo

    def jwt(self) -> str:
        return get_jwt(app_id="1", private_key=self.hub.key_path.read_bytes())

    async def installation_token(self, repo: str = "maintainer/demo") -> str:
        bearer = {"Authorization": f"Bearer {self.jwt()}"}
        inst = await self.ok("GET", f"/repos/{repo}/installation", auth=None, headers=bearer)
        path = f"/app/installations/{inst['id']}/access_tokens"
        made = await self.ok("POST", path, {}, status=201, auth=None, headers=bearer)
        return str(made["token"])

    async def git(self, *args: str, cwd: Path | None = None, check: bool = True) -> str:
        """Run the git client (asynchronously: the sandbox answers on this event loop)."""
        proc = await asyncio.create_subprocess_exec(
            "git",
            "-C",
            str(cwd or self.work),
            *args,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=git_env(),
        )
        out, _ = await proc.communicate()
        if check:
            assert proc.returncode == 0, f"git {' '.join(args)} failed: {out.decode()}"
        return out.decode()

    async def clone(self, repo: str = "maintainer/demo") -> Path:
        self.clones += 1
        target = self.work / f"clone-{self.clones}"
        await self.git("clone", "--quiet", f"{self.url}/{repo}.git", str(target))
        return target

    async def commit(self, clone: Path, files: Mapping[str, str | None], message: str) -> str:
        """Write (or, for None, delete) files and commit them; return the new sha."""
        for path, content in files.items():
            target = clone / path
            if content is None:
                target.unlink()
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
            target.chmod(0o755 if path == ".sandbox/ci" else 0o644)
        await self.git("add", "-A", cwd=clone)
        identity = ["-c", "user.name=Dev", "-c", "user.email=dev@example.com"]
        await self.git(*identity, "commit", "-qm", message, cwd=clone)
        return (await self.git("rev-parse", "HEAD", cwd=clone)).strip()

    async def push(self, clone: Path, *refspecs: str, auth: str = ADMIN) -> None:
        """Push with a token sent the way Baton sends it: an http.extraheader."""
        secret = self.admin if auth == ADMIN else auth
        basic = base64.b64encode(f"x-access-token:{secret}".encode()).decode()
        header = f"http.extraheader=Authorization: Basic {basic}"
        await self.git("-c", header, "push", "--quiet", "origin", *refspecs, cwd=clone)

    async def push_branch(
        self,
        branch: str,
        files: Mapping[str, str | None],
        auth: str = ADMIN,
        start: str = "main",
        repo: str = "maintainer/demo",
    ) -> tuple[Path, str]:
        """Clone, commit `files` on a new branch from `start`, push it; return clone and sha."""
        clone = await self.clone(repo)
        await self.git("checkout", "-q", "-b", branch, f"origin/{start}", cwd=clone)
        sha = await self.commit(clone, files, f"work on {branch}")
        await self.push(clone, branch, auth=auth)
        return clone, sha

    async def tip(self, branch: str) -> str:
        return str((await self.ok("GET", f"{REPO}/branches/{branch}"))["commit"]["sha"])


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    found = Receiver()
    app = web.Application()
    app.router.add_post("/webhook", found.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    assert site._server is not None
    found.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/webhook"  # type: ignore[attr-defined]
    yield found
    await runner.cleanup()


@asynccontextmanager
async def running_sandbox(
    data: Path, receiver: Receiver, work: Path, clones: int = 0
) -> AsyncIterator[Sandbox]:
    """Serve a sandbox from `data` with a client session, its webhooks checked by `receiver`."""
    running = server.running(data, receiver.url, manifest=EVERY_ROUTE_MANIFEST)
    async with running as app, aiohttp.ClientSession() as session:
        receiver.secret = app[HUB].state.secrets.webhook_secret.encode()
        yield Sandbox(app, session, receiver, work, clones)


@pytest.fixture
async def sandbox(tmp_path: Path, receiver: Receiver) -> AsyncIterator[Sandbox]:
    work = tmp_path / "work"
    work.mkdir()
    async with running_sandbox(tmp_path / "data", receiver, work) as started:
        yield started


# ---------------------------------------------------------------- auth


async def test_app_jwt_mints_an_installation_token_that_works(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    gh = gidgethub.aiohttp.GitHubAPI(sandbox.session, "baton-test", base_url=sandbox.url)
    app_jwt = sandbox.jwt()
    app = await gh.getitem("/app", jwt=app_jwt)
    assert (app["id"], app["slug"], app["name"]) == (1, "baton", "Baton")
    inst = await gh.getitem("/repos/maintainer/demo/installation", jwt=app_jwt)
    assert (inst["id"], inst["account"]["login"]) == (1, "maintainer")
    assert [i["id"] async for i in gh.getiter("/app/installations", jwt=app_jwt)] == [1]
    made = await gh.post(f"/app/installations/{inst['id']}/access_tokens", data={}, jwt=app_jwt)
    assert made["expires_at"].endswith("Z")

    repo = await gh.getitem("/repos/maintainer/demo", oauth_token=made["token"])
    assert repo["clone_url"] == f"{sandbox.url}/maintainer/demo.git"
    assert (repo["default_branch"], repo["full_name"]) == ("main", "maintainer/demo")
    assert gh.rate_limit is not None and gh.rate_limit.remaining > 0
    reply = await sandbox.call("GET", REPO, auth=made["token"])
    assert {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} <= set(reply.headers)
    assert int(reply.headers["X-RateLimit-Used"]) >= 2
    issue = await gh.post(f"{REPO}/issues", data={"title": "hi"}, oauth_token=made["token"])
    assert (issue["user"]["login"], issue["user"]["type"]) == ("baton[bot]", "Bot")


async def test_bad_credentials_are_refused_like_github(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    missing = await sandbox.call("GET", REPO, auth=None)
    assert missing.status == 401
    assert missing.json == {
        "message": "Bad credentials",
        "documentation_url": "https://docs.github.com/rest",
    }
    assert (await sandbox.call("GET", REPO, auth="ghs_unknown")).status == 401
    assert (await sandbox.call("GET", "/repos/maintainer/nope")).status == 404

    expired = await sandbox.installation_token()
    sandbox.hub.state.tokens[expired].expires_at = "2020-01-01T00:00:00Z"
    assert (await sandbox.call("GET", REPO, auth=expired)).status == 401

    key = sandbox.hub.key_path.read_bytes()
    now = int(time.time())
    refused = [
        jwt.encode({"iat": now, "exp": now + 3600, "iss": "1"}, key, algorithm="RS256"),
        jwt.encode({"iat": now - 900, "exp": now - 60, "iss": "1"}, key, algorithm="RS256"),
        jwt.encode({"iat": now, "exp": now + 60, "iss": "7"}, key, algorithm="RS256"),
    ]
    for token in refused:
        bearer = {"Authorization": f"Bearer {token}"}
        assert (await sandbox.call("GET", "/app", auth=None, headers=bearer)).status == 401
    # GitHub also takes the app id as a number; PyJWT only encodes strings, so sign directly.
    claims = json.dumps({"iat": now, "exp": now + 60, "iss": 1}).encode()
    numeric = jwt.api_jws.encode(claims, key, algorithm="RS256")
    bearer = {"Authorization": f"Bearer {numeric}"}
    assert (await sandbox.call("GET", "/app", auth=None, headers=bearer)).status == 200
    token = await sandbox.installation_token()
    assert (await sandbox.call("GET", "/app", auth=token)).status == 401


async def test_an_apps_jwt_may_name_it_by_its_client_id(sandbox: Sandbox) -> None:
    """Mirrors https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-a-json-web-token-jwt-for-a-github-app:
    `iss` is "The client ID or application ID of your GitHub App. Use of the client ID is
    recommended." GET /app (https://docs.github.com/en/rest/apps/apps#get-the-authenticated-app)
    answers the App's numeric `id`, its `client_id` and `slug`, whichever the JWT named; a
    client ID of no App is refused.
    """
    await sandbox.new_repo()
    key = sandbox.hub.key_path.read_bytes()
    by_number = await sandbox.ok(
        "GET",
        "/app",
        auth=None,
        headers={"Authorization": f"Bearer {get_jwt(app_id='1', private_key=key)}"},
    )
    client_id = by_number["client_id"]
    assert client_id.startswith("Iv23")
    named = {"Authorization": f"Bearer {get_jwt(app_id=client_id, private_key=key)}"}
    app = await sandbox.ok("GET", "/app", auth=None, headers=named)
    assert (app["id"], app["client_id"], app["slug"]) == (1, client_id, "baton")
    inst = await sandbox.ok("GET", f"{REPO}/installation", auth=None, headers=named)
    made = await sandbox.ok(
        "POST",
        f"/app/installations/{inst['id']}/access_tokens",
        {},
        status=201,
        auth=None,
        headers=named,
    )
    assert (await sandbox.call("GET", REPO, auth=made["token"])).status == 200
    stranger = {
        "Authorization": f"Bearer {get_jwt(app_id='Iv23liNoSuchApp00000', private_key=key)}"
    }
    assert (await sandbox.call("GET", "/app", auth=None, headers=stranger)).status == 401


async def test_installation_token_covers_only_its_account(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    as_alice = {"X-Sandbox-As": "alice"}
    body = {"name": "secret", "private": True}
    other = await sandbox.ok("POST", "/user/repos", body, status=201, headers=as_alice)
    assert other["owner"]["login"] == "alice"
    mine = await sandbox.installation_token()
    assert (await sandbox.call("GET", "/repos/alice/secret", auth=mine)).status == 404
    alices = await sandbox.installation_token("alice/secret")
    assert (await sandbox.call("GET", "/repos/alice/secret", auth=alices)).status == 200
    cross = await sandbox.call("POST", f"{REPO}/issues", {"title": "x"}, auth=alices)
    assert cross.status == 403


# ---------------------------------------------------------------- git over HTTP


async def test_clone_and_push_over_http(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    clone = await sandbox.clone()
    assert (clone / "README.md").read_text() == "# demo\n"

    sha = await sandbox.commit(clone, {"a.txt": "one\n"}, "first")
    refused = await sandbox.git("push", "origin", "HEAD:anon", cwd=clone, check=False)
    assert "could not read Username" in refused  # git was asked for credentials (401)
    assert "anon" not in await sandbox.git("ls-remote", "origin", cwd=clone)

    await sandbox.push(clone, "HEAD:refs/heads/by-admin")
    push = await sandbox.receiver.wait_for("push", where=lambda p: p["ref"].endswith("/by-admin"))
    assert (push.payload["after"], push.payload["created"]) == (sha, True)
    assert push.payload["sender"]["login"] == "maintainer"
    assert [(c["id"], c["added"]) for c in push.payload["commits"]] == [(sha, ["a.txt"])]

    token = await sandbox.installation_token()
    sha2 = await sandbox.commit(clone, {"a.txt": "two\n"}, "second")
    await sandbox.push(clone, "HEAD:refs/heads/by-app", auth=token)
    push = await sandbox.receiver.wait_for("push", where=lambda p: p["ref"].endswith("/by-app"))
    assert (push.payload["sender"]["login"], push.payload["after"]) == ("baton[bot]", sha2)
    assert await sandbox.tip("by-app") == sha2

    fresh = await sandbox.clone()
    await sandbox.git("fetch", "--quiet", "origin", "by-app", cwd=fresh)
    assert (await sandbox.git("rev-parse", "FETCH_HEAD", cwd=fresh)).strip() == sha2

    # Credentials in the URL: git first gets the 401 challenge, then answers it.
    with_password = sandbox.url.replace("://", f"://x-access-token:{token}@")
    url = f"{with_password}/maintainer/demo.git"
    await sandbox.git("push", "--quiet", url, "HEAD:refs/heads/by-url", cwd=clone)
    assert await sandbox.tip("by-url") == sha2


async def test_gzip_compressed_fetch_negotiation(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    head = await sandbox.tip("main")

    def pkt(line: str) -> bytes:
        return f"{len(line) + 4:04x}{line}".encode()

    body = pkt(f"want {head}\n") + b"0000" + pkt("done\n")
    headers = {
        "Content-Type": "application/x-git-upload-pack-request",
        "Content-Encoding": "gzip",
    }
    url = f"{sandbox.url}/maintainer/demo.git/git-upload-pack"
    async with sandbox.session.post(url, data=gzip.compress(body), headers=headers) as response:
        assert response.status == 200
        assert b"PACK" in await response.read()


# ---------------------------------------------------------------- issues, labels, comments


async def test_issue_labels_send_signed_labeled_webhooks(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    issue = await sandbox.ok("POST", f"{REPO}/issues", {"title": "Add a thing"}, status=201)
    assert (issue["number"], issue["state"]) == (1, "open")
    await sandbox.receiver.wait_for("issues", "opened")

    labels = await sandbox.ok("POST", f"{REPO}/issues/1/labels", {"labels": ["baton:queue"]})
    assert [label["name"] for label in labels] == ["baton:queue"]
    labeled = await sandbox.receiver.wait_for("issues", "labeled")
    assert labeled.payload["label"]["name"] == "baton:queue"
    assert labeled.payload["issue"]["number"] == 1
    assert labeled.payload["installation"]["id"] == 1
    assert labeled.payload["sender"]["login"] == "maintainer"
    assert labeled.headers["X-GitHub-Hook-Installation-Target-Type"] == "integration"
    assert labeled.headers["User-Agent"].startswith("GitHub-Hookshot/")
    assert sandbox.receiver.rejected == 0

    await sandbox.ok("POST", f"{REPO}/issues/1/labels", ["bug"])
    await sandbox.ok("POST", f"{REPO}/issues/1/labels", [{"name": "Enhancement"}])
    on_issue = await sandbox.ok("GET", f"{REPO}/issues/1/labels")
    assert [label["name"] for label in on_issue] == ["baton:queue", "bug", "enhancement"]

    left = await sandbox.ok("DELETE", f"{REPO}/issues/1/labels/baton%3Aqueue")
    assert [label["name"] for label in left] == ["bug", "enhancement"]
    unlabeled = await sandbox.receiver.wait_for("issues", "unlabeled")
    assert unlabeled.payload["label"]["name"] == "baton:queue"
    gone = await sandbox.call("DELETE", f"{REPO}/issues/1/labels/baton%3Aqueue")
    assert (gone.status, gone.json["message"]) == (404, "Label does not exist")

    replaced = await sandbox.ok("PUT", f"{REPO}/issues/1/labels", {"labels": ["wontfix"]})
    assert [label["name"] for label in replaced] == ["wontfix"]
    assert [i["number"] for i in await sandbox.ok("GET", f"{REPO}/issues?labels=wontfix")] == [1]
    body = {"state": "closed", "state_reason": "not_planned"}
    closed = await sandbox.ok("PATCH", f"{REPO}/issues/1", body)
    assert (closed["state"], closed["state_reason"]) == ("closed", "not_planned")
    event = await sandbox.receiver.wait_for("issues", "closed")
    assert event.payload["issue"]["state_reason"] == "not_planned"
    assert await sandbox.ok("GET", f"{REPO}/issues") == []


async def test_issue_edits_send_edited_webhooks_saying_what_changed_and_who(
    sandbox: Sandbox,
) -> None:
    await sandbox.new_repo()
    as_alice = {"X-Sandbox-As": "alice"}
    opened = {"title": "Typo", "body": "teh"}
    await sandbox.ok("POST", f"{REPO}/issues", opened, status=201, headers=as_alice)
    await sandbox.ok("PATCH", f"{REPO}/issues/1", {"body": "the"}, headers=as_alice)
    by_alice = await sandbox.receiver.wait_for("issues", "edited")
    assert by_alice.payload["changes"] == {"body": {"from": "teh"}}
    assert by_alice.payload["sender"]["login"] == "alice"
    assert by_alice.payload["issue"]["body"] == "the"
    # The keys of GitHub's own example, and the installation a delivery to an App carries.
    assert set(payload("issues/edited.json")) | {"installation"} == set(by_alice.payload)

    await sandbox.ok("PATCH", f"{REPO}/issues/1", {"title": "Typo in README", "body": "the"})
    by_maintainer = await sandbox.receiver.wait_for(
        "issues", "edited", where=lambda p: p["sender"]["login"] == "maintainer"
    )
    assert by_maintainer.payload["changes"] == {"title": {"from": "Typo"}}
    assert by_maintainer.payload["issue"]["title"] == "Typo in README"


async def test_a_merge_closes_the_issues_its_description_names_in_any_of_githubs_forms(
    sandbox: Sandbox,
) -> None:
    await sandbox.new_repo()
    await sandbox.new_repo("other")
    for _ in range(7):
        await sandbox.ok("POST", f"{REPO}/issues", {"title": "t"}, status=201)
    await sandbox.ok("POST", "/repos/maintainer/other/issues", {"title": "t"}, status=201)
    await sandbox.push_branch("work", {"fix.txt": "fixed\n"})
    body = "\n".join(
        [
            "Fixes #1",
            "resolved: GH-2",
            "CLOSES maintainer/demo#3",
            f"Fix {sandbox.url}/maintainer/demo/issues/4",
            "closes maintainer/other#1",
            "See #5: a plain reference closes nothing.",
            "F\u200dixes #6, the keyword broken by a zero-width joiner",
        ]
    )
    pull = {"title": "Work", "head": "work", "base": "main", "body": body}
    await sandbox.ok("POST", f"{REPO}/pulls", pull, status=201)
    await sandbox.ok("PUT", f"{REPO}/pulls/8/merge", {})
    states = [(await sandbox.ok("GET", f"{REPO}/issues/{n}"))["state"] for n in range(1, 8)]
    assert states == ["closed"] * 4 + ["open"] * 3
    assert (await sandbox.ok("GET", "/repos/maintainer/other/issues/1"))["state"] == "closed"


async def test_comments_and_reactions(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "t"}, status=201)
    as_alice = {"X-Sandbox-As": "alice"}
    comment = await sandbox.ok(
        "POST", f"{REPO}/issues/1/comments", {"body": "/baton retry"}, 201, headers=as_alice
    )
    created = await sandbox.receiver.wait_for("issue_comment", "created")
    assert created.payload["comment"]["body"] == "/baton retry"
    assert created.payload["sender"]["login"] == comment["user"]["login"] == "alice"

    path = f"{REPO}/issues/comments/{comment['id']}"
    await sandbox.ok("POST", f"{path}/reactions", {"content": "eyes"}, status=201)
    await sandbox.ok("POST", f"{path}/reactions", {"content": "eyes"}, status=200)
    assert (await sandbox.call("POST", f"{path}/reactions", {"content": "yay"})).status == 422
    assert [r["content"] for r in await sandbox.ok("GET", f"{path}/reactions")] == ["eyes"]
    assert (await sandbox.ok("GET", path))["reactions"]["eyes"] == 1

    assert (await sandbox.ok("PATCH", path, {"body": "running"}))["body"] == "running"
    edited = await sandbox.receiver.wait_for("issue_comment", "edited")
    assert edited.payload["changes"] == {"body": {"from": "/baton retry"}}
    assert (await sandbox.call("DELETE", path)).status == 204
    await sandbox.receiver.wait_for("issue_comment", "deleted")
    assert await sandbox.ok("GET", f"{REPO}/issues/1/comments") == []


async def test_collaborator_permissions(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    perm = await sandbox.ok("GET", f"{REPO}/collaborators/maintainer/permission")
    assert (perm["permission"], perm["user"]["login"]) == ("admin", "maintainer")
    bob = f"{REPO}/collaborators/bob/permission"
    assert (await sandbox.ok("GET", bob))["permission"] == "read"
    grant = {"permission": "maintain"}
    await sandbox.ok("PUT", "/_sandbox/repos/maintainer/demo/collaborators/bob", grant, 204)
    perm = await sandbox.ok("GET", bob)
    assert (perm["permission"], perm["role_name"]) == ("write", "maintain")


async def test_an_issues_events_say_who_labelled_it_in_githubs_shape(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    await sandbox.ok("PUT", "/_sandbox/repos/maintainer/demo/collaborators/tess", TRIAGE, 204)
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "t"}, status=201)
    as_tess = {"X-Sandbox-As": "tess"}
    await sandbox.ok("POST", f"{REPO}/issues/1/labels", ["baton:queue"], headers=as_tess)
    await sandbox.ok("DELETE", f"{REPO}/issues/1/labels/baton:queue")
    await sandbox.ok("POST", f"{REPO}/issues/1/labels", ["baton:queue", "bug"])
    await sandbox.ok("PATCH", f"{REPO}/issues/1", {"state": "closed"}, headers=as_tess)
    found = await sandbox.ok("GET", f"{REPO}/issues/1/events")
    assert [(e["event"], e["actor"]["login"], e.get("label", {}).get("name")) for e in found] == [
        ("labeled", "tess", "baton:queue"),
        ("unlabeled", "maintainer", "baton:queue"),
        ("labeled", "maintainer", "baton:queue"),
        ("labeled", "maintainer", "bug"),
        ("closed", "tess", None),
    ]
    first = found[0]
    assert set(first) == {
        "id",
        "node_id",
        "url",
        "actor",
        "event",
        "commit_id",
        "commit_url",
        "created_at",
        "performed_via_github_app",
        "label",
    }
    assert first["url"].endswith(f"/repos/maintainer/demo/issues/events/{first['id']}")
    assert (first["commit_id"], first["commit_url"], first["performed_via_github_app"]) == (
        None,
        None,
        None,
    )
    assert first["label"] == {"name": "baton:queue", "color": "ededed"}
    paged = await sandbox.call("GET", f"{REPO}/issues/1/events?per_page=2")
    assert len(paged.json) == 2 and 'rel="next"' in paged.headers["Link"]


READ, TRIAGE, WRITE = ({"permission": role} for role in ("read", "triage", "write"))


async def test_each_role_comments_reviews_and_labels_as_github_allows(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    for login, role in (("rita", READ), ("tess", TRIAGE), ("will", WRITE)):
        await sandbox.ok("PUT", f"/_sandbox/repos/maintainer/demo/collaborators/{login}", role, 204)
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "t"}, status=201)
    await sandbox.push_branch("feature", {"x.txt": "x\n"})
    pull = {"title": "F", "head": "feature", "base": "main"}
    await sandbox.ok("POST", f"{REPO}/pulls", pull, status=201)
    rita, tess, will = ({"X-Sandbox-As": login} for login in ("rita", "tess", "will"))
    queue = {"labels": ["baton:queue"]}

    # read: comments and reviews (with their webhooks sent by her), never labels.
    comment = await sandbox.ok(
        "POST", f"{REPO}/issues/1/comments", {"body": "hi"}, 201, headers=rita
    )
    sent = await sandbox.receiver.wait_for("issue_comment", "created")
    assert sent.payload["sender"]["login"] == comment["user"]["login"] == "rita"
    review = {"event": "REQUEST_CHANGES", "body": "Not like this."}
    await sandbox.ok("POST", f"{REPO}/pulls/2/reviews", review, headers=rita)
    submitted = await sandbox.receiver.wait_for("pull_request_review", "submitted")
    assert submitted.payload["sender"]["login"] == "rita"
    assert submitted.payload["review"]["user"]["login"] == "rita"
    assert submitted.payload["review"]["state"] == "changes_requested"
    for method, path, body in (
        ("POST", f"{REPO}/issues/1/labels", queue),
        ("PUT", f"{REPO}/issues/1/labels", queue),
        ("DELETE", f"{REPO}/issues/1/labels/bug", None),
        ("PUT", f"{REPO}/pulls/2/merge", {}),
        ("PATCH", f"{REPO}/issues/1", {"state": "closed"}),
    ):
        refused = await sandbox.call(method, path, body, headers=rita)
        assert refused.status == 403, (method, path)
    dropped = await sandbox.ok(
        "PATCH", f"{REPO}/issues/1", {"labels": ["baton:queue"]}, headers=rita
    )
    assert dropped["labels"] == []
    own = {"title": "Mine", "labels": ["baton:queue"]}
    mine = await sandbox.ok("POST", f"{REPO}/issues", own, status=201, headers=rita)
    assert mine["labels"] == []
    closed = await sandbox.ok(
        "PATCH", f"{REPO}/issues/{mine['number']}", {"state": "closed"}, headers=rita
    )
    assert closed["state"] == "closed"  # her own issue

    # triage: labels, but no merges.
    await sandbox.ok("POST", f"{REPO}/issues/1/labels", queue, headers=tess)
    labeled = await sandbox.receiver.wait_for("issues", "labeled")
    assert labeled.payload["sender"]["login"] == "tess"
    assert len(sandbox.receiver.matching("issues", "labeled")) == 1  # webhooks keep their order
    assert labeled.payload["label"]["name"] == "baton:queue"
    assert (await sandbox.call("PUT", f"{REPO}/pulls/2/merge", {}, headers=tess)).status == 403
    edit = {"body": "edited"}
    refused = await sandbox.call(
        "PATCH", f"{REPO}/issues/comments/{comment['id']}", edit, headers=tess
    )
    assert refused.status == 403  # another's comment

    # write: everything.
    await sandbox.ok("DELETE", f"{REPO}/issues/1/labels/baton:queue", headers=will)
    merged = await sandbox.ok("PUT", f"{REPO}/pulls/2/merge", {}, headers=will)
    assert merged["merged"] is True


# ---------------------------------------------------------------- pull requests


async def test_pull_request_lifecycle_with_a_real_merge(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "Do it"}, status=201)
    files = {"src/app.py": "print('hi')\n", "README.md": "# demo\n\nchanged\n"}
    clone, first = await sandbox.push_branch("feature", files)
    body = {"title": "Feature", "head": "feature", "base": "main", "body": "Done.\n\nCloses #1"}
    pr = await sandbox.ok("POST", f"{REPO}/pulls", body, status=201)
    assert (pr["number"], pr["head"]["sha"], pr["base"]["ref"]) == (2, first, "main")
    # GitHub computes mergeability in the background: null at first, then its value.
    assert (pr["mergeable"], pr["merged"], pr["commits"]) == (None, False, 1)
    assert (await sandbox.ok("GET", f"{REPO}/pulls/2"))["mergeable"] is True
    assert "pull_request" in await sandbox.ok("GET", f"{REPO}/issues/2")
    opened = await sandbox.receiver.wait_for("pull_request", "opened")
    assert opened.payload["pull_request"]["head"]["sha"] == first

    again = {"title": "again", "head": "maintainer:feature", "base": "main"}
    duplicate = await sandbox.call("POST", f"{REPO}/pulls", again)
    assert duplicate.status == 422
    message = duplicate.json["errors"][0]["message"]
    assert message == "A pull request already exists for maintainer:feature."
    for head in ("main", "missing"):
        body = {"title": "x", "head": head, "base": "main"}
        assert (await sandbox.call("POST", f"{REPO}/pulls", body)).status == 422

    await sandbox.git("mv", "src/app.py", "src/main.py", cwd=clone)
    head = await sandbox.commit(clone, {"README.md": None, "notes.txt": "n\n"}, "more")
    await sandbox.push(clone, "feature")
    sync = await sandbox.receiver.wait_for("pull_request", "synchronize")
    assert (sync.payload["before"], sync.payload["after"]) == (first, head)
    files_json = await sandbox.ok("GET", f"{REPO}/pulls/2/files")
    by_name = {f["filename"]: f for f in files_json}
    assert (by_name["README.md"]["status"], by_name["README.md"]["deletions"]) == ("removed", 1)
    assert by_name["src/main.py"]["status"] == "added"
    assert by_name["src/main.py"]["patch"] == "@@ -0,0 +1 @@\n+print('hi')"
    assert by_name["notes.txt"]["raw_url"].endswith(f"/raw/{head}/notes.txt")
    listed = await sandbox.ok("GET", f"{REPO}/pulls?head=maintainer:feature")
    assert [p["number"] for p in listed] == [2]

    stale = await sandbox.call("PUT", f"{REPO}/pulls/2/merge", {"sha": first})
    assert stale.status == 409
    merged = await sandbox.ok("PUT", f"{REPO}/pulls/2/merge", {"sha": head})
    assert merged["merged"] is True
    await sandbox.git("fetch", "--quiet", "origin", "main", cwd=clone)
    commit, *parents = (
        await sandbox.git("rev-list", "--parents", "-n1", "FETCH_HEAD", cwd=clone)
    ).split()
    assert commit == merged["sha"] and parents[1] == head and len(parents) == 2

    closed = await sandbox.receiver.wait_for("pull_request", "closed")
    assert closed.payload["pull_request"]["merged"] is True
    issue_closed = await sandbox.receiver.wait_for("issues", "closed")
    assert issue_closed.payload["issue"]["number"] == 1
    assert issue_closed.payload["issue"]["state_reason"] == "completed"
    await sandbox.receiver.wait_for("push", where=lambda p: p["after"] == merged["sha"])
    pull = await sandbox.ok("GET", f"{REPO}/pulls/2")
    assert (pull["merged"], pull["state"]) == (True, "closed")
    assert pull["merge_commit_sha"] == merged["sha"]


async def test_squash_merge_and_conflicts(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    clone, _ = await sandbox.push_branch("left", {"README.md": "left\n"})
    await sandbox.push_branch("right", {"README.md": "right\n"})
    for branch in ("left", "right"):
        body = {"title": branch, "head": branch, "base": "main"}
        await sandbox.ok("POST", f"{REPO}/pulls", body, status=201)

    squashed = await sandbox.ok("PUT", f"{REPO}/pulls/1/merge", {"merge_method": "squash"})
    await sandbox.git("fetch", "--quiet", "origin", "main", cwd=clone)
    commit, *parents = (
        await sandbox.git("rev-list", "--parents", "-n1", "FETCH_HEAD", cwd=clone)
    ).split()
    assert commit == squashed["sha"] and len(parents) == 1
    subject = await sandbox.git("log", "-1", "--format=%s", "FETCH_HEAD", cwd=clone)
    assert subject.strip() == "left (#1)"

    moved = await sandbox.ok("GET", f"{REPO}/pulls/2")  # its base moved: computed anew
    assert (moved["mergeable"], moved["mergeable_state"]) == (None, "unknown")
    pull = await sandbox.ok("GET", f"{REPO}/pulls/2")
    assert (pull["mergeable"], pull["mergeable_state"]) == (False, "dirty")
    conflict = await sandbox.call("PUT", f"{REPO}/pulls/2/merge", {})
    assert (conflict.status, conflict.json["message"]) == (405, "Pull Request is not mergeable")

    closed = await sandbox.ok("PATCH", f"{REPO}/pulls/2", {"state": "closed"})
    assert (closed["state"], closed["merged"]) == ("closed", False)
    assert (await sandbox.ok("PATCH", f"{REPO}/pulls/2", {"state": "open"}))["state"] == "open"
    await sandbox.receiver.wait_for("pull_request", "reopened")


async def test_reviews_and_head_branch_deletion(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    await sandbox.push_branch("bot-work", {"x.py": "a = 1\nb = 2\n"}, auth=token)
    body = {"title": "Bot", "head": "bot-work", "base": "main"}
    await sandbox.ok("POST", f"{REPO}/pulls", body, status=201, auth=token)
    own = await sandbox.call("POST", f"{REPO}/pulls/1/reviews", {"event": "APPROVE"}, auth=token)
    assert own.status == 422

    line_comment = {"path": "x.py", "line": 2, "body": "rename b"}
    review_body = {"event": "REQUEST_CHANGES", "body": "not yet", "comments": [line_comment]}
    review = await sandbox.ok("POST", f"{REPO}/pulls/1/reviews", review_body)
    assert review["state"] == "CHANGES_REQUESTED"
    submitted = await sandbox.receiver.wait_for("pull_request_review", "submitted")
    assert submitted.payload["review"]["state"] == "changes_requested"
    [comment] = await sandbox.ok("GET", f"{REPO}/pulls/1/comments")
    assert (comment["path"], comment["line"], comment["body"]) == ("x.py", 2, "rename b")
    assert comment["diff_hunk"] == "@@ -0,0 +1,2 @@\n+a = 1\n+b = 2"
    off_diff = {"event": "COMMENT", "comments": [{"path": "x.py", "line": 9, "body": "?"}]}
    assert (await sandbox.call("POST", f"{REPO}/pulls/1/reviews", off_diff)).status == 422
    reviews = await sandbox.ok("GET", f"{REPO}/pulls/1/reviews")
    assert [r["state"] for r in reviews] == ["CHANGES_REQUESTED"]

    deleted = await sandbox.call("DELETE", f"{REPO}/git/refs/heads%2Fbot-work", auth=token)
    assert deleted.status == 204
    push = await sandbox.receiver.wait_for("push", where=lambda p: p["deleted"])
    assert (push.payload["ref"], push.payload["head_commit"]) == ("refs/heads/bot-work", None)
    closed = await sandbox.receiver.wait_for("pull_request", "closed")
    assert closed.payload["pull_request"]["merged"] is False
    assert (await sandbox.call("DELETE", f"{REPO}/git/refs/heads/bot-work")).status == 422


async def test_stacked_pull_request_is_retargeted_when_its_base_goes(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    clone, _ = await sandbox.push_branch("step-1", {"one.txt": "1\n"})
    await sandbox.git("checkout", "-q", "-b", "step-2", cwd=clone)
    await sandbox.commit(clone, {"two.txt": "2\n"}, "step 2")
    await sandbox.push(clone, "step-2")
    for head, base in (("step-1", "main"), ("step-2", "step-1")):
        body = {"title": head, "head": head, "base": base}
        await sandbox.ok("POST", f"{REPO}/pulls", body, status=201)
    assert [f["filename"] for f in await sandbox.ok("GET", f"{REPO}/pulls/2/files")] == ["two.txt"]

    await sandbox.ok("PUT", f"{REPO}/pulls/1/merge", {})
    await sandbox.ok("DELETE", f"{REPO}/git/refs/heads/step-1", status=204)
    edited = await sandbox.receiver.wait_for("pull_request", "edited")
    assert edited.payload["changes"]["base"]["ref"]["from"] == "step-1"
    stacked = await sandbox.ok("GET", f"{REPO}/pulls/2")
    assert (stacked["state"], stacked["base"]["ref"]) == ("open", "main")
    assert [f["filename"] for f in await sandbox.ok("GET", f"{REPO}/pulls/2/files")] == ["two.txt"]


async def test_first_push_to_an_empty_repository(sandbox: Sandbox) -> None:
    await sandbox.ok("POST", "/user/repos", {"name": "demo"}, status=201)
    clone = sandbox.work / "fresh"
    await sandbox.git("init", "--quiet", "--initial-branch=trunk", str(clone))
    await sandbox.git("remote", "add", "origin", f"{sandbox.url}/maintainer/demo.git", cwd=clone)
    sha = await sandbox.commit(clone, {"README.md": "# fresh\n"}, "first")
    await sandbox.push(clone, "trunk")
    push = await sandbox.receiver.wait_for("push")
    assert (push.payload["created"], push.payload["head_commit"]["id"]) == (True, sha)
    assert (await sandbox.ok("GET", REPO))["default_branch"] == "trunk"
    assert await sandbox.tip("trunk") == sha


async def test_compare_contents_and_statuses(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    clone, sha = await sandbox.push_branch("feat/x", {"docs/guide.md": "# Guide\n"})

    compared = await sandbox.ok("GET", f"{REPO}/compare/main...feat%2Fx")
    assert (compared["status"], compared["ahead_by"], compared["behind_by"]) == ("ahead", 1, 0)
    assert [f["filename"] for f in compared["files"]] == ["docs/guide.md"]
    blob = (await sandbox.git("rev-parse", f"{sha}:docs/guide.md", cwd=clone)).strip()
    for path in ("docs/guide.md", "docs%2Fguide.md"):
        content = await sandbox.ok("GET", f"{REPO}/contents/{path}?ref=feat/x")
        assert base64.b64decode(content["content"]) == b"# Guide\n"
        assert (content["sha"], content["encoding"], content["type"]) == (blob, "base64", "file")
    assert (await sandbox.call("GET", f"{REPO}/contents/docs/guide.md")).status == 404
    listing = await sandbox.ok("GET", f"{REPO}/contents/docs?ref=feat%2Fx")
    assert [(e["name"], e["type"]) for e in listing] == [("guide.md", "file")]

    combined = await sandbox.ok("GET", f"{REPO}/commits/{sha}/status")
    assert (combined["state"], combined["total_count"]) == ("pending", 0)
    for context, state in (("lint", "success"), ("docs", "error"), ("lint", "pending")):
        body = {"state": state, "context": context}
        await sandbox.ok("POST", f"{REPO}/statuses/{sha}", body, status=201)
    combined = await sandbox.ok("GET", f"{REPO}/commits/feat%2Fx/status")
    assert (combined["state"], combined["total_count"]) == ("failure", 2)
    assert {s["context"]: s["state"] for s in combined["statuses"]} == {
        "lint": "pending",
        "docs": "error",
    }
    status = await sandbox.receiver.wait_for("status", where=lambda p: p["context"] == "docs")
    assert status.payload["branches"][0]["name"] == "feat/x"


# ---------------------------------------------------------------- CI and checks


def suite_of(sha: str) -> Callable[[Payload], bool]:
    return lambda p: bool(p["check_suite"]["head_sha"] == sha)


def run_of(sha: str) -> Callable[[Payload], bool]:
    return lambda p: bool(p["check_run"]["head_sha"] == sha)


async def test_ci_reports_success_and_failure_as_check_suites(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    _, green = await sandbox.push_branch("green", {".sandbox/ci": CI_PASS})
    _, red = await sandbox.push_branch("red", {".sandbox/ci": CI_FAIL})
    await sandbox.ok("POST", f"{REPO}/pulls", {"title": "red", "head": "red", "base": "main"}, 201)

    passed = await sandbox.receiver.wait_for("check_suite", "completed", where=suite_of(green))
    suite = passed.payload["check_suite"]
    assert (suite["conclusion"], suite["head_branch"]) == ("success", "green")
    assert (suite["app"]["id"], suite["app"]["slug"]) == (2, "sandbox-ci")
    failed = await sandbox.receiver.wait_for("check_suite", "completed", where=suite_of(red))
    assert failed.payload["check_suite"]["conclusion"] == "failure"
    assert failed.payload["check_suite"]["pull_requests"][0]["number"] == 1
    run = await sandbox.receiver.wait_for("check_run", "completed", where=run_of(red))
    assert run.payload["check_run"]["name"] == "ci"
    assert "test_thing FAILED" in run.payload["check_run"]["output"]["text"]
    await sandbox.receiver.wait_for("check_suite", "requested", where=suite_of(red))
    await sandbox.receiver.wait_for("check_run", "created", where=run_of(red))

    runs = await sandbox.ok("GET", f"{REPO}/commits/red/check-runs")
    assert [(r["name"], r["status"], r["conclusion"]) for r in runs["check_runs"]] == [
        ("ci", "completed", "failure")
    ]
    assert runs["check_runs"][0]["pull_requests"][0]["number"] == 1
    suites = await sandbox.ok("GET", f"{REPO}/commits/{green}/check-suites")
    # Baton's own suite stays queued with no runs: it has checks: write and made none.
    assert [(s["app"]["slug"], s["conclusion"]) for s in suites["check_suites"]] == [
        ("baton", None),
        ("sandbox-ci", "success"),
    ]
    suite_runs = await sandbox.ok("GET", f"{REPO}/check-suites/{suite['id']}/check-runs")
    assert suite_runs["total_count"] == 1
    by_id = await sandbox.ok("GET", f"{REPO}/check-suites/{suite['id']}")
    assert (by_id["status"], by_id["head_sha"]) == ("completed", green)


async def test_ci_past_its_time_limit_times_out(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    sandbox.hub.ci_timeout = 1.0
    _, slow = await sandbox.push_branch("slow", {".sandbox/ci": "#!/bin/sh\nsleep 30\n"})
    timed = await sandbox.receiver.wait_for("check_suite", "completed", where=suite_of(slow))
    assert timed.payload["check_suite"]["conclusion"] == "timed_out"


async def test_an_app_reports_its_own_check_runs(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    body = {"name": "baton", "head_sha": await sandbox.tip("main"), "status": "in_progress"}
    run = await sandbox.ok("POST", f"{REPO}/check-runs", body, status=201, auth=token)
    assert (run["status"], run["app"]["slug"]) == ("in_progress", "baton")
    assert (await sandbox.call("POST", f"{REPO}/check-runs", body)).status == 403
    update = {"conclusion": "neutral", "output": {"title": "t", "summary": "s"}}
    done = await sandbox.ok("PATCH", f"{REPO}/check-runs/{run['id']}", update, auth=token)
    assert (done["status"], done["conclusion"]) == ("completed", "neutral")
    ours = await sandbox.receiver.wait_for(
        "check_suite", "completed", where=lambda p: p["check_suite"]["app"]["id"] == 1
    )
    assert ours.payload["check_suite"]["conclusion"] == "neutral"


# ---------------------------------------------------------------- pagination, faults, deliveries


async def test_pagination_link_headers_drive_getiter(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    for n in range(41):  # plus GitHub's 9 default labels: 50
        body = {"name": f"label-{n:02d}", "color": "#00ff00"}
        await sandbox.ok("POST", f"{REPO}/labels", body, status=201)
    first = await sandbox.call("GET", f"{REPO}/labels?per_page=10")
    base = f"{sandbox.url}{REPO}/labels"
    assert first.headers["Link"] == (
        f'<{base}?per_page=10&page=2>; rel="next", <{base}?per_page=10&page=5>; rel="last"'
    )
    middle = await sandbox.call("GET", f"{REPO}/labels?per_page=10&page=3")
    assert 'rel="prev"' in middle.headers["Link"] and 'rel="first"' in middle.headers["Link"]

    gh = gidgethub.aiohttp.GitHubAPI(
        sandbox.session, "baton-test", oauth_token=sandbox.admin, base_url=sandbox.url
    )
    names = [label["name"] async for label in gh.getiter(f"{REPO}/labels?per_page=10")]
    assert len(set(names)) == 50 and "label-40" in names


async def test_api_fault_injection(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    rule = {"method": "GET", "path": r"^/repos/[^/]+/demo$", "status": 502, "rate": 1.0}
    await sandbox.ok("POST", "/_sandbox/faults", rule)
    assert [(await sandbox.call("GET", REPO)).status for _ in range(3)] == [502, 502, 502]
    assert (await sandbox.call("GET", f"{REPO}/labels")).status == 200
    await sandbox.ok("DELETE", "/_sandbox/faults", status=204)
    assert (await sandbox.call("GET", REPO)).status == 200

    limit = {"path": "/issues$", "status": 403, "retry_after": 7, "count": 1}
    await sandbox.ok("POST", "/_sandbox/faults", limit)
    limited = await sandbox.call("POST", f"{REPO}/issues", {"title": "x"})
    assert (limited.status, limited.headers["Retry-After"]) == (403, "7")
    assert "secondary rate limit" in limited.json["message"]
    assert (await sandbox.call("POST", f"{REPO}/issues", {"title": "x"})).status == 201

    await sandbox.ok("POST", "/_sandbox/faults", {"path": "/labels$", "status": 500, "rate": 0.5})
    drawn = []
    for _ in range(2):
        await sandbox.ok("POST", "/_sandbox/faults", {"seed": 42})
        drawn.append([(await sandbox.call("GET", f"{REPO}/labels")).status for _ in range(12)])
    assert drawn[0] == drawn[1] and set(drawn[0]) == {200, 500}

    slow = {"path": "/rate_limit$", "delay_ms": 300}
    await sandbox.ok("POST", "/_sandbox/faults", slow)
    started = time.monotonic()
    assert (await sandbox.call("GET", "/rate_limit")).status == 200
    assert time.monotonic() - started >= 0.3  # the injected delay happened (a lower bound)
    rules = (await sandbox.ok("GET", "/_sandbox/faults"))["api"]
    assert [rule["fired"] for rule in rules if rule["delay_ms"]] == [1]


async def test_call_counts_by_actor(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    await sandbox.ok("DELETE", "/_sandbox/calls", status=204)
    await sandbox.ok("GET", REPO, auth=token)
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "x"}, status=201, auth=token)
    await sandbox.ok("GET", f"{REPO}/issues/1", auth=token)
    await sandbox.ok("GET", REPO)
    calls = await sandbox.ok("GET", "/_sandbox/calls")
    counted = {
        "total": 3,
        "calls": {
            "GET /repos/{owner}/{repo}": 1,
            "GET /repos/{owner}/{repo}/issues/{issue_number}": 1,
            "POST /repos/{owner}/{repo}/issues": 1,
        },
        "not_modified": 0,
    }
    assert calls["installation"] == {**counted, "installations": {"1": counted}}
    assert calls["admin"]["total"] == 1


async def test_redelivery_duplicates_and_reordering(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "one"}, status=201)
    first = await sandbox.receiver.wait_for("issues", "opened")
    [record] = await sandbox.ok("GET", "/_sandbox/deliveries?event=issues&action=opened")
    assert (record["guid"], record["status_code"]) == (first.guid, 204)
    assert record["duration"] is not None
    again = await sandbox.ok("POST", f"/_sandbox/deliveries/{record['id']}/redeliver", status=202)
    assert (again["guid"], again["redelivery"]) == (first.guid, True)
    await sandbox.receiver.wait_for("issues", "opened", count=2)
    copies = sandbox.receiver.matching("issues", "opened")
    assert copies[1].guid == first.guid and copies[1].body == first.body

    def numbered(n: int) -> Callable[[Payload], bool]:
        return lambda p: bool(p["issue"]["number"] == n)

    await sandbox.ok("POST", "/_sandbox/faults", {"webhooks": {"duplicate_rate": 1.0}})
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "two"}, status=201)
    await sandbox.receiver.wait_for("issues", "opened", where=numbered(2), count=2)
    twice = sandbox.receiver.matching("issues", "opened", where=numbered(2))
    assert twice[0].guid == twice[1].guid

    await sandbox.ok("POST", "/_sandbox/faults", {"webhooks": {"reorder": True}})
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "three", "labels": ["bug"]}, 201)
    await sandbox.receiver.wait_for("issues", "opened", where=numbered(3))
    order = [d.action for d in sandbox.receiver.matching("issues", where=numbered(3))]
    assert order == ["labeled", "opened"]

    await sandbox.ok("DELETE", "/_sandbox/faults", status=204)
    await sandbox.ok("PATCH", "/_sandbox/config", {"webhook_url": None})
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "four"}, status=201)
    await sandbox.hub.webhooks.idle()
    last = (await sandbox.ok("GET", "/_sandbox/deliveries?event=issues"))[-1]
    assert last["status_code"] is None and "no webhook URL" in last["status"]


# ---------------------------------------------------------------- persistence and serving


async def test_state_survives_a_restart(tmp_path: Path, receiver: Receiver) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    work.mkdir()
    async with running_sandbox(data, receiver, work) as before:
        await before.new_repo()
        issue = {"title": "remember me", "labels": ["baton:queue"]}
        await before.ok("POST", f"{REPO}/issues", issue, status=201)
        token = await before.installation_token()
        app_jwt = before.jwt()
        settings = before.hub.settings()
        state = data / "state.json"

        async def on_disk() -> bool:
            return "remember me" in await asyncio.to_thread(state.read_text)

        # Written shortly after the mutation, without waiting for a shutdown.
        await eventually(on_disk, lambda: "the new issue in state.json")
    async with running_sandbox(data, receiver, work, clones=1) as after:
        assert {**after.hub.settings(), "GITHUB_API_URL": ""} == {**settings, "GITHUB_API_URL": ""}
        issue = await after.ok("GET", f"{REPO}/issues/1", auth=token)
        assert (issue["title"], issue["labels"][0]["name"]) == ("remember me", "baton:queue")
        bearer = {"Authorization": f"Bearer {app_jwt}"}
        assert (await after.call("GET", "/app", auth=None, headers=bearer)).status == 200
        assert ((await after.clone()) / "README.md").exists()
        second = await after.ok("POST", f"{REPO}/issues", {"title": "next"}, status=201)
        assert second["number"] == 2


async def test_ci_interrupted_by_a_restart_runs_again(tmp_path: Path, receiver: Receiver) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    work.mkdir()
    async with running_sandbox(data, receiver, work) as before:
        await before.new_repo()
        slow_ci = "#!/bin/sh\nsleep 1\necho finished\n"
        _, sha = await before.push_branch("slow", {".sandbox/ci": slow_ci})

        async def running() -> bool:
            runs = await before.ok("GET", f"{REPO}/commits/{sha}/check-runs")
            return bool(runs["check_runs"][0]["status"] == "in_progress")

        await eventually(running, lambda: "the CI run starting")
    assert not receiver.matching("check_run", "completed", where=run_of(sha))
    async with server.running(data, receiver.url):
        done = await receiver.wait_for("check_run", "completed", where=run_of(sha))
    assert done.payload["check_run"]["conclusion"] == "success"
    assert "finished" in done.payload["check_run"]["output"]["text"]


def read_app_env(data: Path) -> tuple[dict[str, str], str]:
    """Read app.env as Baton would, and sign an App JWT with the key it names."""
    env = dict(line.split("=", 1) for line in (data / "app.env").read_text().splitlines())
    key = Path(env["GITHUB_PRIVATE_KEY_PATH"]).read_bytes()
    return env, get_jwt(app_id=env["GITHUB_APP_ID"], private_key=key)


async def test_serve_writes_app_env_and_stops_on_sigterm(tmp_path: Path) -> None:
    data = tmp_path / "data"

    async def serve_once() -> dict[str, str]:
        proc = await asyncio.create_subprocess_exec(
            *(sys.executable, "-m", "bot", "sandbox", "--port", "0", "--data-dir", str(data)),
            cwd=ROOT,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdout is not None
        line = (await asyncio.wait_for(proc.stdout.readline(), 30)).decode()
        assert line.startswith("sandbox GitHub listening on http://127.0.0.1:")
        env, app_jwt = read_app_env(data)
        assert env["GITHUB_API_URL"] in line and env["GITHUB_APP_ID"] == "1"
        bearer = {"Authorization": f"Bearer {app_jwt}"}
        async with (
            aiohttp.ClientSession() as session,
            session.get(env["GITHUB_API_URL"] + "/app", headers=bearer) as response,
        ):
            assert response.status == 200
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        return env

    first, second = await serve_once(), await serve_once()
    for name in ("GITHUB_WEBHOOK_SECRET", "SANDBOX_ADMIN_TOKEN", "GITHUB_PRIVATE_KEY_PATH"):
        assert first[name] == second[name]
    assert os.stat(first["GITHUB_PRIVATE_KEY_PATH"]).st_mode & 0o077 == 0


# ---------------------------------------------------------------- shapes: GitHub's descriptions


def allow_null_in_nullable_enums(node: Any) -> None:
    """Work around an upstream quirk of the OpenAPI description: nullable enums without null.

    The fixtures' README names check-run.conclusion; issue.state_reason has the same defect.
    GitHub sends null there (a queued run, an open issue), and OpenAPI 3.0 accepts null in an
    enum only when the enum lists it.
    """
    if isinstance(node, dict):
        if node.get("nullable") and "enum" in node and None not in node["enum"]:
            node["enum"].append(None)
        for value in node.values():
            allow_null_in_nullable_enums(value)
    elif isinstance(node, list):
        for value in node:
            allow_null_in_nullable_enums(value)


class Shapes:
    """Call the API and check each request and response against GitHub's OpenAPI description."""

    CHECK_RUNS_POST = ("POST", "/repos/{owner}/{repo}/check-runs")

    def __init__(self, sandbox: Sandbox) -> None:
        spec = json.loads((GITHUB_FIXTURES / "openapi-subset.json").read_text())
        spec["servers"].append({"url": sandbox.url})
        allow_null_in_nullable_enums(spec)
        self.spec = spec
        self.api = OpenAPI.from_dict(spec)
        self.sandbox = sandbox
        self.operations = {
            (method.upper(), path)
            for path, operations in spec["paths"].items()
            for method in operations
            if method != "parameters"
        }
        self.covered: set[tuple[str, str]] = set()

    async def call(
        self,
        method: str,
        template: str,
        params: Mapping[str, object],
        status: int = 200,
        query: dict[str, str] | None = None,
        body: Any = None,
        auth: str | None = ADMIN,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """Make one call; `params` fill the path template."""
        # Multi-segment parameters (a contents path, branch, ref, basehead) travel with '/'
        # as %2F: the only form openapi-core matches.
        path = template.format(**{k: quote(str(v), safe="") for k, v in params.items()})
        target = path + (f"?{urlencode(query)}" if query else "")
        reply = await self.sandbox.call(method, target, body, auth=auth, headers=headers)
        assert reply.status == status, (method, target, reply.status, reply.raw[:400])
        data = None if body is None else json.dumps(body).encode()
        request = MockRequest(self.sandbox.url, method, path, args=query, data=data)
        if (method, template) == self.CHECK_RUNS_POST:
            self.check_runs_body(body)
        else:
            self.api.validate_request(request)
        content_type = reply.headers.get("Content-Type", "").split(";")[0]
        self.api.validate_response(
            request, MockResponse(reply.raw, reply.status, dict(reply.headers), content_type)
        )
        self.covered.add((method, template))
        return reply.json

    def check_runs_body(self, body: Any) -> None:
        """Use plain JSON Schema: the upstream discriminator makes openapi-core reject any body."""
        operation = self.spec["paths"]["/repos/{owner}/{repo}/check-runs"]["post"]
        schema = dict(operation["requestBody"]["content"]["application/json"]["schema"])
        schema.pop("discriminator")
        OAS30Validator(schema).validate(body)


async def test_rest_shapes_match_the_openapi_description(sandbox: Sandbox) -> None:
    shapes = Shapes(sandbox)
    repo = {"owner": "maintainer", "repo": "demo"}
    as_app = {"Authorization": f"Bearer {sandbox.jwt()}"}
    new_repo = {"name": "demo", "description": "d", "auto_init": True}
    await shapes.call("POST", "/user/repos", {}, 201, body=new_repo)
    await shapes.call("GET", "/app", {}, auth=None, headers=as_app)
    installation = "/repos/{owner}/{repo}/installation"
    inst = await shapes.call("GET", installation, repo, auth=None, headers=as_app)
    tokens = "/app/installations/{installation_id}/access_tokens"
    only_demo = {"repositories": ["demo"]}
    made = await shapes.call(
        "POST",
        tokens,
        {"installation_id": inst["id"]},
        201,
        body=only_demo,
        auth=None,
        headers=as_app,
    )
    bot = made["token"]
    await shapes.call("GET", "/rate_limit", {}, auth=bot)
    await shapes.call("GET", "/repos/{owner}/{repo}", repo, auth=bot)

    files = {"docs/a.md": "# A\n", ".sandbox/ci": CI_PASS}
    _, head = await sandbox.push_branch("feat/one", files, auth=bot)
    branch = {**repo, "branch": "feat/one"}
    await shapes.call("GET", "/repos/{owner}/{repo}/branches/{branch}", branch)
    basehead = {**repo, "basehead": "main...feat/one"}
    await shapes.call("GET", "/repos/{owner}/{repo}/compare/{basehead}", basehead)
    contents = {**repo, "path": "docs/a.md"}
    query = {"ref": "feat/one"}
    await shapes.call("GET", "/repos/{owner}/{repo}/contents/{path}", contents, query=query)
    permission = "/repos/{owner}/{repo}/collaborators/{username}/permission"
    await shapes.call("GET", permission, {**repo, "username": "maintainer"})

    label = {"name": "baton:queue", "color": "0e8a16"}
    await shapes.call("POST", "/repos/{owner}/{repo}/labels", repo, 201, body=label)
    await shapes.call("GET", "/repos/{owner}/{repo}/labels", repo, query={"per_page": "5"})
    issue_body = {"title": "Do", "body": "it", "labels": ["bug"]}
    await shapes.call("POST", "/repos/{owner}/{repo}/issues", repo, 201, body=issue_body, auth=bot)
    issue = {**repo, "issue_number": 1}
    issue_path = "/repos/{owner}/{repo}/issues/{issue_number}"
    await shapes.call("GET", issue_path, issue)
    await shapes.call("PATCH", issue_path, issue, body={"title": "Do it"})
    await shapes.call("POST", issue_path + "/labels", issue, body={"labels": ["baton:queue"]})
    await shapes.call("POST", issue_path + "/labels", issue, body=["later"])
    await shapes.call("GET", issue_path + "/labels", issue)
    label_path = issue_path + "/labels/{name}"
    await shapes.call("DELETE", label_path, {**issue, "name": "baton:queue"})
    hello = {"body": "hi"}
    comment = await shapes.call("POST", issue_path + "/comments", issue, 201, body=hello, auth=bot)
    await shapes.call("GET", issue_path + "/comments", issue)
    one_comment = {**repo, "comment_id": comment["id"]}
    comment_path = "/repos/{owner}/{repo}/issues/comments/{comment_id}"
    await shapes.call("PATCH", comment_path, one_comment, body={"body": "hello"}, auth=bot)
    for status in (201, 200):
        plus_one = {"content": "+1"}
        await shapes.call("POST", comment_path + "/reactions", one_comment, status, body=plus_one)

    pull_body = {"title": "Feat", "head": "feat/one", "base": "main", "body": "Closes #1"}
    await shapes.call("POST", "/repos/{owner}/{repo}/pulls", repo, 201, body=pull_body, auth=bot)
    pulls = {"state": "all", "head": "maintainer:feat/one"}
    await shapes.call("GET", "/repos/{owner}/{repo}/pulls", repo, query=pulls)
    pull = {**repo, "pull_number": 2}
    pull_path = "/repos/{owner}/{repo}/pulls/{pull_number}"
    await shapes.call("GET", pull_path, pull)
    await shapes.call("PATCH", pull_path, pull, body={"body": "Closes #1, really"})
    await shapes.call("GET", pull_path + "/files", pull)
    line_comment = {"path": "docs/a.md", "line": 1, "body": "nice"}
    review = {"event": "COMMENT", "body": "look", "comments": [line_comment]}
    await sandbox.ok("POST", f"{REPO}/pulls/2/reviews", review)
    await shapes.call("GET", pull_path + "/reviews", pull)
    await shapes.call("GET", pull_path + "/comments", pull)

    queued = {"name": "baton", "head_sha": head, "status": "queued"}
    runs = "/repos/{owner}/{repo}/check-runs"
    run = await shapes.call("POST", runs, repo, 201, body=queued, auth=bot)
    one_run = {**repo, "check_run_id": run["id"]}
    await shapes.call("GET", runs + "/{check_run_id}", one_run, auth=bot)
    finished = {"conclusion": "success", "output": {"title": "ok", "summary": "fine"}}
    await shapes.call("PATCH", runs + "/{check_run_id}", one_run, body=finished, auth=bot)
    await sandbox.receiver.wait_for("check_suite", "completed", where=suite_of(head), count=2)
    pending = {"state": "pending", "context": "lint"}
    await sandbox.ok("POST", f"{REPO}/statuses/{head}", pending, status=201)
    commit_path = "/repos/{owner}/{repo}/commits/{ref}"
    await shapes.call("GET", commit_path + "/check-runs", {**repo, "ref": "feat/one"})
    await shapes.call("GET", commit_path + "/check-suites", {**repo, "ref": head})
    await shapes.call("GET", commit_path + "/status", {**repo, "ref": "feat/one"})

    merge = {"merge_method": "squash", "sha": head}
    await shapes.call("PUT", pull_path + "/merge", pull, body=merge)
    ref = {**repo, "ref": "heads/feat/one"}
    await shapes.call("DELETE", "/repos/{owner}/{repo}/git/refs/{ref}", ref, 204)
    assert shapes.covered == shapes.operations, sorted(shapes.operations - shapes.covered)


def webhook_validator(event: str, action: str | None) -> Draft7Validator:
    """Return a validator for one webhook payload schema, every common schema registered."""
    root = GITHUB_FIXTURES / "webhook-schemas"
    docs = [json.loads(p.read_text()) for p in root.rglob("*.schema.json")]
    registry: Registry[Any] = Registry().with_resources(
        (doc["$id"], Resource.from_contents(doc, default_specification=DRAFT7)) for doc in docs
    )
    schema = json.loads((root / event / f"{action or 'event'}.schema.json").read_text())
    return Draft7Validator(schema, registry=registry, format_checker=Draft7Validator.FORMAT_CHECKER)


async def test_webhook_payloads_match_github_schemas(sandbox: Sandbox) -> None:
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    issue = f"{REPO}/issues/1"
    opened = {"title": "T", "labels": ["baton:queue"], "assignees": ["maintainer"]}
    await sandbox.ok("POST", f"{REPO}/issues", opened, status=201)
    await sandbox.ok("PATCH", issue, {"title": "T2", "body": "b"})
    await sandbox.ok("DELETE", f"{issue}/labels/baton:queue", auth=token)
    await sandbox.ok("PATCH", issue, {"state": "closed"})
    await sandbox.ok("PATCH", issue, {"state": "open", "assignees": []})
    comment = await sandbox.ok("POST", f"{issue}/comments", {"body": "c"}, 201, auth=token)
    comment_path = f"{REPO}/issues/comments/{comment['id']}"
    await sandbox.ok("PATCH", comment_path, {"body": "d"}, auth=token)
    await sandbox.ok("DELETE", comment_path, status=204, auth=token)

    files = {"f.txt": "1\n", ".sandbox/ci": CI_FAIL}
    clone, _ = await sandbox.push_branch("feature", files, auth=token)
    pull = {"title": "P", "head": "feature", "base": "main", "body": "Fixes #1"}
    await sandbox.ok("POST", f"{REPO}/pulls", pull, status=201, auth=token)
    await sandbox.ok("PATCH", f"{REPO}/pulls/2", {"title": "P2"}, auth=token)
    await sandbox.ok("POST", f"{REPO}/issues/2/labels", ["baton:review"], auth=token)
    head = await sandbox.commit(clone, {"f.txt": "2\n", ".sandbox/ci": CI_PASS}, "two")
    await sandbox.push(clone, "feature", auth=token)
    status = {"state": "success", "target_url": "http://ci.example/1"}
    await sandbox.ok("POST", f"{REPO}/statuses/{head}", status, status=201)
    await sandbox.ok("POST", f"{REPO}/pulls/2/reviews", {"event": "APPROVE"})
    await sandbox.receiver.wait_for("check_suite", "completed", where=suite_of(head))
    await sandbox.ok("PUT", f"{REPO}/pulls/2/merge", {})
    await sandbox.ok("DELETE", f"{REPO}/git/refs/heads/feature", status=204)
    await sandbox.hub.webhooks.idle()

    seen = set()
    for delivery in sandbox.receiver.deliveries:
        action = None if delivery.event in ("push", "status") else delivery.action
        validator = webhook_validator(delivery.event, action)
        errors = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(delivery.payload)]
        assert not errors, (delivery.event, delivery.action, errors[:5])
        assert delivery.payload["installation"]["id"] == 1
        seen.add((delivery.event, action))
    issue_actions = ("opened", "edited", "labeled", "unlabeled", "closed", "reopened")
    expected = {
        *(("issues", action) for action in (*issue_actions, "assigned", "unassigned")),
        *(("issue_comment", action) for action in ("created", "edited", "deleted")),
        *(("pull_request", a) for a in ("opened", "edited", "labeled", "synchronize", "closed")),
        ("pull_request_review", "submitted"),
        ("check_suite", "requested"),
        ("check_suite", "completed"),
        ("check_run", "created"),
        ("check_run", "completed"),
        ("status", None),
        ("push", None),
    }
    assert expected <= seen, sorted(expected - seen, key=str)
