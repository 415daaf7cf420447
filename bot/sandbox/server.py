"""Build the sandbox GitHub's aiohttp application and run it as a server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import signal
import socket
from collections.abc import AsyncIterator

from aiohttp import web

from bot.domain.manifest import AppManifest, load_manifest
from bot.sandbox import api, checks, git_http, pages
from bot.sandbox.auth import DEFAULT_TOKEN_LIFETIME_S
from bot.sandbox.hub import DEFAULT_CI_TIMEOUT, HUB, Hub
from bot.sandbox.middleware import sandbox_middleware

MAX_REQUEST_BYTES = 1 << 30
_WILDCARD_HOSTS = {"", "0.0.0.0", "::"}  # noqa: S104 - these are only compared against


def create_app(
    data_dir: pathlib.Path,
    webhook_url: str | None,
    public_url: str,
    manifest: AppManifest | None = None,
    token_lifetime_s: float = DEFAULT_TOKEN_LIFETIME_S,
) -> web.Application:
    """Create the sandbox GitHub application, reusing any state already in `data_dir`.

    Baton's App gets the permissions and events of `manifest`, app.yml when not given.
    """
    timeout = float(os.environ.get("SANDBOX_CI_TIMEOUT", DEFAULT_CI_TIMEOUT))
    hub = Hub(
        data_dir,
        public_url,
        webhook_url,
        manifest or load_manifest(),
        ci_timeout=timeout,
        token_lifetime_s=token_lifetime_s,
    )
    app = web.Application(middlewares=[sandbox_middleware], client_max_size=MAX_REQUEST_BYTES)
    app[HUB] = hub
    api.add_routes(app)
    git_http.add_routes(app)
    app.router.add_routes(pages.routes)
    app.on_startup.append(_resume)
    app.on_cleanup.append(_close)
    return app


async def _resume(app: web.Application) -> None:
    checks.resume_ci(app[HUB])


async def _close(app: web.Application) -> None:
    await app[HUB].close()


def write_env(path: pathlib.Path, settings: dict[str, str]) -> None:
    """Write KEY=VALUE lines atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
    tmp.chmod(0o600)
    os.replace(tmp, path)


def serve(
    port: int,
    data_dir: pathlib.Path,
    webhook_url: str | None,
    host: str = "127.0.0.1",
    manifest: AppManifest | None = None,
    token_lifetime_s: float = DEFAULT_TOKEN_LIFETIME_S,
) -> None:
    """Run the sandbox until SIGINT or SIGTERM; write data_dir/app.env once listening."""
    asyncio.run(_serve(port, data_dir.resolve(), webhook_url, host, manifest, token_lifetime_s))


async def _serve(
    port: int,
    data_dir: pathlib.Path,
    webhook_url: str | None,
    host: str,
    manifest: AppManifest | None,
    token_lifetime_s: float,
) -> None:
    async with running(data_dir, webhook_url, host, port, manifest, token_lifetime_s) as app:
        hub = app[HUB]
        env_path = data_dir / "app.env"
        write_env(env_path, hub.settings())
        print(f"sandbox GitHub listening on {hub.public_url} (settings in {env_path})", flush=True)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()


@contextlib.asynccontextmanager
async def running(
    data_dir: pathlib.Path,
    webhook_url: str | None,
    host: str = "127.0.0.1",
    port: int = 0,
    manifest: AppManifest | None = None,
    token_lifetime_s: float = DEFAULT_TOKEN_LIFETIME_S,
) -> AsyncIterator[web.Application]:
    """Serve the sandbox on host:port (0: a free port) for the duration of the block."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    url_host = "127.0.0.1" if host in _WILDCARD_HOSTS else f"[{host}]" if ":" in host else host
    public_url = f"http://{url_host}:{sock.getsockname()[1]}"
    app = create_app(data_dir, webhook_url, public_url, manifest, token_lifetime_s)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    try:
        await web.SockSite(runner, sock).start()
        yield app
    finally:
        await runner.cleanup()
