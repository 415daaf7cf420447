"""Git smart HTTP through `git http-backend`: token auth, the contents permission, push effects."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from aiohttp import web

from bot.sandbox import refs
from bot.sandbox.auth import Actor
from bot.sandbox.git_backend import ZERO_SHA, git_env
from bot.sandbox.hub import Hub, hub_of
from bot.sandbox.middleware import GIT_ROUTE
from bot.sandbox.permissions import Requirement, read, requires, write
from bot.sandbox.rest import ApiError
from bot.sandbox.state import Repo

log = logging.getLogger(__name__)

PATH = "/{owner}/{name:[^/]+?}.git{tail:(?:/.*)?}"
RECEIVE_PACK = "git-receive-pack"
CHUNK = 65536


FETCH = Requirement((read("contents"),))
PUSH = Requirement((write("contents"),))


def add_routes(app: web.Application) -> None:
    """Serve every repository at <public_url>/<owner>/<repo>.git."""
    app.router.add_route("*", PATH, serve_git, name=GIT_ROUTE)


def _refuse(status: int, text: str) -> web.Response:
    headers = {"WWW-Authenticate": 'Basic realm="sandbox"'} if status == 401 else {}
    return web.Response(status=status, text=text + "\n", headers=headers)


@requires(*FETCH.any_of)
async def serve_git(request: web.Request) -> web.StreamResponse:
    """Answer a git client: anonymous reads, authenticated pushes; an App needs `contents`."""
    hub = hub_of(request)
    owner, name = request.match_info["owner"], request.match_info["name"]
    # A renamed repository's former URL keeps working, as GitHub's does for git clients.
    repo = hub.repo(owner, name) or hub.renamed_repo(owner, name)
    if repo is None:
        return _refuse(404, "Repository not found.")
    tail = request.match_info["tail"]
    service = request.query.get("service") if tail == "/info/refs" else tail.lstrip("/")
    push = service == RECEIVE_PACK
    try:
        actor = hub.auth.from_header(request.headers.get("Authorization"))
    except ApiError:
        return _refuse(401, "Invalid username or token.")
    if (push or repo.private) and actor is None:
        return _refuse(401, "Authentication required.")
    if actor is not None and not _may_access(hub, actor, repo, push):
        return _refuse(403 if not repo.private else 404, "Permission denied.")
    if not (push and request.method == "POST"):
        return await _backend(request, hub, repo, tail, actor)
    async with hub.lock(repo):
        git = hub.git(repo)
        before = await git.branches()
        response = await _backend(request, hub, repo, tail, actor)
        after = await git.branches()
        updates = [
            refs.RefUpdate(branch, before.get(branch, ZERO_SHA), after.get(branch, ZERO_SHA))
            for branch in sorted(before.keys() | after.keys())
            if before.get(branch) != after.get(branch)
        ]
        if not before and after and repo.default_branch not in after:
            # GitHub makes the first branch pushed to an empty repository its default branch.
            repo.default_branch = next(u.branch for u in updates if u.after != ZERO_SHA)
            await git.set_head(repo.default_branch)
        assert actor is not None and actor.login is not None
        await refs.apply(hub, repo, updates, actor.login)
    await response.write_eof()
    return response


def _may_access(hub: Hub, actor: Actor, repo: Repo, push: bool) -> bool:
    if actor.kind == "admin":
        return True
    if actor.kind != "installation":
        return False
    if not (PUSH if push else FETCH).met_by(actor.permissions):
        return False
    try:
        hub.repo_for(actor, repo.owner, repo.name, push)
    except ApiError:
        return False
    return True


async def _backend(
    request: web.Request, hub: Hub, repo: Repo, tail: str, actor: Actor | None
) -> web.StreamResponse:
    """Run `git http-backend` as a CGI and stream its answer back."""
    # aiohttp has already inflated a gzip request body, so the backend gets it plain.
    body = await request.read()
    env = git_env()
    env.update(
        {
            "GIT_PROJECT_ROOT": str(hub.git_root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "PATH_INFO": f"/{repo.owner}/{repo.name}.git{tail}",
            "REQUEST_METHOD": request.method,
            "QUERY_STRING": request.query_string,
            "CONTENT_TYPE": request.headers.get("Content-Type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": request.remote or "",
            "HTTP_GIT_PROTOCOL": request.headers.get("Git-Protocol", ""),
        }
    )
    if actor is not None and actor.login is not None:
        env["REMOTE_USER"] = actor.login
    proc = await asyncio.create_subprocess_exec(
        "git",
        "-C",
        str(hub.git_root),
        "http-backend",
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    feeder = asyncio.create_task(_feed(proc.stdin, body))
    errors = asyncio.create_task(proc.stderr.read())
    try:
        status, headers = await _read_cgi_headers(proc.stdout)
        response = web.StreamResponse(status=status, headers=headers)
        await response.prepare(request)
        while chunk := await proc.stdout.read(CHUNK):
            await response.write(chunk)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        raise
    finally:
        await feeder
        await proc.wait()
        if stderr := (await errors).decode(errors="replace").strip():
            log.info("git http-backend %s: %s", request.path, stderr)
    return response


async def _feed(stdin: asyncio.StreamWriter, body: bytes) -> None:
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.write(body)
        await stdin.drain()
        stdin.close()


async def _read_cgi_headers(stdout: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    status = 200
    headers: dict[str, str] = {}
    while (line := (await stdout.readline()).decode("latin-1").strip()) != "":
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.split()[0])
        else:
            headers[name.strip()] = value.strip()
    return status, headers
