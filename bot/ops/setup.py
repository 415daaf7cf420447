"""`baton setup`: register Baton's GitHub App from app.yml through GitHub's manifest flow.

A page on http://localhost:PORT/ posts the manifest to GitHub; GitHub sends the browser
back to /callback with a code, which this process exchanges for the App's credentials and
writes to the env file. Then it says how to install the App, and exits.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web
from gidgethub import GitHubException
from gidgethub.aiohttp import GitHubAPI
from pydantic import ValidationError

from bot.domain.manifest import (
    AppCredentials,
    AppManifest,
    ManifestError,
    app_keys_in,
    check_state,
    env_values,
    load_manifest,
    new_state,
    registration_manifest,
    registration_url,
    replaced_keys,
    updated_env,
)
from bot.edges.api import convert_manifest_code

USER_AGENT = "baton-setup"


@dataclass(frozen=True)
class SetupOptions:
    """Where to register the App and where to keep its credentials."""

    port: int
    github_url: str
    api_url: str
    org: str | None
    env_file: Path
    webhook_url: str | None
    manifest_path: Path

    @property
    def local_url(self) -> str:
        """Return the setup page's address."""
        return f"http://localhost:{self.port}"


@dataclass(frozen=True)
class EnvUpdate:
    """What registering wrote: the variables, and where the file's earlier text was kept."""

    keys: tuple[str, ...]
    backup: Path | None


def refuse_registered(env_file: Path) -> None:
    """Refuse to start when the env file already holds an App's credentials."""
    if not env_file.exists():
        return
    present = app_keys_in(env_file.read_text())
    if present:
        raise ManifestError(
            f"{env_file} already sets {', '.join(present)}: an App is registered for it. "
            "Remove those lines to register a new App, or pass --env-file for another file."
        )


def write_env(env_file: Path, values: dict[str, str]) -> EnvUpdate:
    """Set `values` in the env file (owner-only), keeping its other lines.

    A value the file already sets differently can only get there if the file changed
    while the page was open; the credentials cannot be fetched twice, so they are
    written anyway and the earlier file is kept beside it as .bak.
    """
    existing = env_file.read_text() if env_file.exists() else ""
    backup = None
    if replaced_keys(existing, values):
        backup = _free_backup_path(env_file)
        _write_private(backup, existing)
    _write_private(env_file, updated_env(existing, values))
    return EnvUpdate(tuple(values), backup)


def _free_backup_path(env_file: Path) -> Path:
    candidate = env_file.with_name(env_file.name + ".bak")
    number = 1
    while candidate.exists():
        number += 1
        candidate = env_file.with_name(f"{env_file.name}.bak{number}")
    return candidate


def _write_private(path: Path, text: str) -> None:
    """Write a file readable by its owner only, atomically."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.touch(mode=0o600)
    tmp.chmod(0o600)
    tmp.write_text(text)
    os.replace(tmp, path)


async def convert_code(session: aiohttp.ClientSession, api_url: str, code: str) -> AppCredentials:
    """Exchange the manifest flow's code for the new App's credentials (no authentication)."""
    gh = GitHubAPI(session, USER_AGENT, base_url=api_url.rstrip("/"))
    try:
        return await convert_manifest_code(gh, code)
    except (GitHubException, aiohttp.ClientError) as exc:
        raise ManifestError(f"GitHub did not turn the code into an App: {exc}") from exc
    except ValidationError as exc:
        raise ManifestError(f"GitHub's answer does not describe an App: {exc}") from exc


class SetupServer:
    """The setup page and its callback, for one registration."""

    def __init__(self, options: SetupOptions, manifest: AppManifest) -> None:
        self.options = options
        self.state = new_state()
        self.manifest = registration_manifest(
            manifest, f"{options.local_url}/callback", options.webhook_url
        )
        self.registered = asyncio.Event()

    def app(self) -> web.Application:
        """Return the aiohttp application serving the page and the callback."""
        app = web.Application()
        app.router.add_get("/", self.start_page)
        app.router.add_get("/callback", self.callback)
        return app

    async def start_page(self, request: web.Request) -> web.Response:
        """Show what will be registered, and the button that posts the manifest to GitHub."""
        target = registration_url(self.options.github_url, self.state, self.options.org)
        where = f"the organization {self.options.org}" if self.options.org else "your account"
        permissions = "".join(
            f"<li><code>{html.escape(name)}: {html.escape(level)}</code></li>"
            for name, level in sorted(self.manifest.get("default_permissions", {}).items())
        )
        events = ", ".join(html.escape(e) for e in self.manifest.get("default_events", []))
        hook = self.manifest.get("hook_attributes", {}).get("url", "nowhere")
        body = f"""
<h1>Register {html.escape(self.manifest["name"])} on GitHub</h1>
<p>This registers the GitHub App described by
<code>{html.escape(str(self.options.manifest_path))}</code> for {html.escape(where)} on
<code>{html.escape(self.options.github_url)}</code>, then writes its credentials to
<code>{html.escape(str(self.options.env_file))}</code>.</p>
<p>Permissions it asks for:</p><ul>{permissions}</ul>
<p>Webhook events: {events}, delivered to <code>{html.escape(hook)}</code>
(set that with <code>--webhook-url</code>, or later in the App's settings).</p>
<form action="{html.escape(target)}" method="post">
<input type="hidden" name="manifest" value="{html.escape(json.dumps(self.manifest))}">
<button type="submit">Register the App on GitHub</button>
</form>"""
        return _html(200, "Register Baton", body)

    async def callback(self, request: web.Request) -> web.Response:
        """Take GitHub's code back, exchange it, write the env file, say what to do next."""
        code = request.query.get("code")
        try:
            check_state(self.state, request.query.get("state"))
            if not code:
                raise ManifestError("GitHub sent no code back: start again from the setup page")
            async with aiohttp.ClientSession() as session:
                credentials = await convert_code(session, self.options.api_url, code)
        except ManifestError as exc:
            return _html(400, "Registration failed", f"<p>{html.escape(str(exc))}</p>")
        update = write_env(self.options.env_file, env_values(credentials, self.options.api_url))
        install = f"{credentials.html_url.rstrip('/')}/installations/new"
        print(
            f"registered the GitHub App {credentials.name} (id {credentials.id}); "
            f"wrote {', '.join(update.keys)} to {self.options.env_file}",
            flush=True,
        )
        if update.backup is not None:
            print(f"the env file's earlier text is kept in {update.backup}", flush=True)
        print(f"next: install the App on your repositories at {install}", flush=True)
        kept = (
            f"<p>The file changed while this page was open; its earlier text is in "
            f"<code>{html.escape(str(update.backup))}</code>.</p>"
            if update.backup is not None
            else ""
        )
        body = f"""
<h1>{html.escape(credentials.name)} is registered</h1>
<p>Wrote {html.escape(", ".join(update.keys))} to
<code>{html.escape(str(self.options.env_file))}</code>.</p>{kept}
<h2>Next</h2>
<ol>
<li><a href="{html.escape(install)}">Install the App</a> on the repositories Baton should
work on.</li>
<li>Run <code>baton doctor</code> to check the setup.</li>
</ol>
<p>You can close this page; <code>baton setup</code> has finished.</p>"""
        response = _html(200, "Baton is registered", body)
        await response.prepare(request)
        await response.write_eof()
        self.registered.set()
        return response


def _html(status: int, title: str, body: str) -> web.Response:
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;max-width:42em;margin:2em auto;line-height:1.5}"
        "button{font-size:1.1em;padding:.4em 1em}</style></head>"
        f"<body>{body}</body></html>"
    )
    return web.Response(status=status, text=page, content_type="text/html")


def run_setup(options: SetupOptions) -> None:
    """Serve the setup page until the App is registered and its credentials written."""
    refuse_registered(options.env_file)
    manifest = load_manifest(options.manifest_path)
    asyncio.run(_serve(options, manifest))


async def _serve(options: SetupOptions, manifest: AppManifest) -> None:
    server = SetupServer(options, manifest)
    runner = web.AppRunner(server.app(), access_log=None)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, "localhost", options.port).start()
        except OSError as exc:
            raise ManifestError(
                f"cannot listen on localhost:{options.port} ({exc.strerror}): pass another --port"
            ) from exc
        print(f"open {options.local_url}/ in a browser to register Baton's GitHub App", flush=True)
        await server.registered.wait()
    finally:
        await runner.cleanup()
