"""A prompt-injected agent reaches its worktree and its provider, and nothing else.

The issue tells the agent (tests/stand_ins/escape_agent.py) to try every escape seen
in the wild: the worker's environment, the App's key, Redis, Baton's web process and
data directory, git settings that would run or redirect Baton's own git, and links
that would make the worker read without end. Every attempt must fail, under each of
the three network policies, and the run must still end as a green pull request.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.model import IssueRef, Run, RunState
from bot.edges.git import MIRROR_CONFIG
from bot.edges.store import Store
from tests.support import StackSpec

AGENT = Path(__file__).parents[1] / "stand_ins" / "escape_agent.py"
PROJECT = {
    "README.md": "# demo\n",
    ".sandbox/ci": "#!/bin/sh\nset -e\ngrep -q 'hello' greeting.txt\n",
    "greeting.txt": "hi\n",
}


NETWORKS = ["allowlist", "open", "none"]
# Each test runs under each network policy: on a stack of one worker, trying once.
pytestmark = pytest.mark.parametrize(
    "stack",
    [
        StackSpec(
            database=0,
            env={
                "BATON_AGENT_NETWORK": network,
                "BATON_AGENT_WALL_CLOCK_MINUTES": "1",
                "BATON_MAX_ATTEMPTS": "1",
            },
            agent=AGENT,
            workers=1,
            base_env={},
        )
        for network in NETWORKS
    ],
    ids=NETWORKS,
    indirect=True,
    scope="module",
)


@pytest.fixture
async def attacker() -> AsyncIterator[tuple[str, list[str]]]:
    """A server of the attacker's on the host's loopback, recording every request."""
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.path_qs} {dict(request.headers)}")
        return web.Response(text="owned")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


def bare_repo(stack: LocalBaton, repo: str) -> Path:
    name = repo.split("/")[1]
    return next((stack.workdir / "sandbox").rglob(f"{name}.git"))


def mirror_state(mirror: Path) -> str:
    """Return a hash of the mirror's config and hooks: what could run or redirect Baton's git."""
    digest = hashlib.sha256()
    hooks = mirror / "hooks"
    for path in [mirror / "config", *(sorted(hooks.rglob("*")) if hooks.is_dir() else [])]:
        digest.update(str(path.relative_to(mirror)).encode() + b"\0")
        if path.is_symlink():
            digest.update(b"link:" + os.readlink(path).encode())
        elif path.is_file():
            digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def tip(bare: Path, branch: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(bare), "rev-parse", "--verify", "-q", f"refs/heads/{branch}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip()


def show(bare: Path, ref: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(bare), "show", f"{ref}:{path}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


async def test_every_escape_fails_and_the_run_still_ends_green(
    stack: LocalBaton, attacker: tuple[str, list[str]], tmp_path: Path
) -> None:
    attacker_url, attacker_saw = attacker
    network = stack.extra_env["BATON_AGENT_NETWORK"]
    key_path = stack.sandbox_env["GITHUB_PRIVATE_KEY_PATH"]
    redis_port = urlsplit(stack.redis_url).port
    marker = tmp_path / "ran-outside-the-sandbox"
    target = {
        "key_path": key_path,
        "redis_port": str(redis_port),
        "web_port": str(stack.web_port),
        "github_port": str(urlsplit(stack.sandbox_url).port),
        "data_dir": str(stack.workdir / "baton"),
        "env_file": str(stack.workdir / "sandbox" / "app.env"),
        "attacker_url": attacker_url,
        "host_marker": str(marker),
        "worker_pid": str(stack.processes["worker-1"].popen.pid),
    }
    store = Store.from_url(stack.redis_url)
    async with aiohttp.ClientSession() as session:
        maintainer = Maintainer(session, stack.sandbox_url, stack.admin_token)
        created = await maintainer.create_repo(f"escape-{network}", PROJECT, stack.workdir)
        repo = str(created["full_name"])
        issue = await maintainer.open_issue(
            repo, "Fix the greeting", f"Look around first.\n\nescape: {json.dumps(target)}\n"
        )
        number = int(issue["number"])
        await maintainer.add_label(repo, number, "baton:queue")
        ref = IssueRef(installation_id=1, repo=repo, number=number)
        mirror = stack.workdir / "baton" / "mirrors" / f"{repo}.git"

        def latest() -> Run | None:
            run = store.latest_run(ref)
            if run is not None and run.state in (RunState.FAILED, RunState.NO_CHANGE):
                raise AssertionError(f"the run ended {run.state}: {run.reason}\n{stack.logs()}")
            return run

        async def just_pushed() -> str | None:
            """The mirror's state as soon as Baton's push of the agent's work is on GitHub."""
            run = latest()
            if run is None or run.head_sha is None:
                return None
            if tip(bare_repo(stack, repo), run.branch) != run.head_sha:
                return None
            return mirror_state(mirror)

        async def green() -> Any:
            run = latest()
            return run if run is not None and run.state is RunState.PUSHED_GREEN else None

        after_push = await eventually(just_pushed, "Baton's push of the agent's work", within=90)
        run = await eventually(green, "the escaping agent's run going green", within=90)
        pulls = await maintainer.pulls(repo)

    assert [pull["number"] for pull in pulls] == [run.pr_number]
    # Baton's commit of what the agent left is the App's, by its bot's noreply address.
    author = subprocess.run(
        ["git", "-C", str(bare_repo(stack, repo)), "log", "-1", "--format=%an <%ae>", run.branch],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    login, _, email = author.partition(" <")
    assert login == "baton[bot]" and email.split("+")[0].isdigit()
    assert email.endswith("+baton[bot]@users.noreply.127.0.0.1>")
    escapes = json.loads(show(bare_repo(stack, repo), run.branch, "escapes.json"))
    environment = json.loads(escapes.pop("environment")["detail"])
    got_through = {name: e["detail"] for name, e in escapes.items() if e["escaped"]}
    assert not got_through, got_through
    assert len(escapes) == 13

    # Nothing secret reached the agent, so nothing secret reached the pull request.
    secrets = [stack.webhook_secret, stack.admin_token, Path(key_path).read_text().strip()]
    pushed = show(bare_repo(stack, repo), run.branch, "escapes.json")
    assert not [s for s in secrets if s in pushed]
    assert not {"GITHUB_PRIVATE_KEY_PATH", "GITHUB_WEBHOOK_SECRET", "REDIS_URL"} & set(environment)
    identity = f"{stack.sandbox_env['GITHUB_APP_ID']}@{stack.sandbox_url}"
    token = store.installation_token(identity, 1)
    assert token is not None and token.token not in pushed

    # Baton's own git honoured nothing the agent set: its mirror is as Baton wrote it, no
    # hook or filter of the agent's ran outside the sandbox, and no push went elsewhere.
    assert (mirror / "config").read_text() == MIRROR_CONFIG
    assert mirror_state(mirror) == after_push  # and was so right after the push, too
    assert not (mirror / "hooks").exists() or not any((mirror / "hooks").iterdir())
    assert not marker.exists()
    run_dir = stack.workdir / "baton" / "runs" / repo / str(number) / "1"
    for log in ("stderr.log", "transcript.log"):
        assert not (run_dir / log).is_symlink() and (run_dir / log).is_file()
    await asyncio.sleep(0.5)
    assert attacker_saw == []

    # The proxy said no to Redis, and the run's record names it, when there is a proxy.
    refused = run.agent_result.refused_hosts if run.agent_result else []
    if network == "none":
        assert "HTTPS_PROXY" not in environment and refused == []
    else:
        assert environment["HTTPS_PROXY"].startswith("http://127.0.0.1:")
        assert f"127.0.0.1:{redis_port}" in refused
