"""`baton setup`: the manifest flow against the sandbox GitHub, and its pure parts."""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from pathlib import Path

import aiohttp
import pytest
from dotenv import dotenv_values
from gidgethub.aiohttp import GitHubAPI
from gidgethub.apps import get_jwt

from bot.devkit.devstack import free_port
from bot.devkit.maintainer import eventually
from bot.domain.manifest import (
    AppCredentials,
    ManifestError,
    api_url_for,
    app_keys_in,
    check_state,
    encode_env_value,
    env_values,
    load_manifest,
    registration_manifest,
    registration_url,
    replaced_keys,
    updated_env,
)
from bot.ops.settings import Settings
from bot.sandbox.hub import HUB, Hub
from bot.sandbox.server import running

PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow\nAAEC+/=\n-----END RSA PRIVATE KEY-----\n"
CREDENTIALS = AppCredentials(
    id=42,
    slug="baton-acme",
    name="Baton Acme",
    html_url="https://github.com/apps/baton-acme",
    pem=PEM,
    webhook_secret="e" * 40,
    client_id="Iv1.abc",
    client_secret="s" * 40,
)


# ---------------------------------------------------------------- pure parts


def test_the_manifest_is_app_yml_sent_back_to_the_local_callback() -> None:
    manifest = load_manifest()
    sent = registration_manifest(manifest, "http://localhost:3000/callback")
    assert sent["redirect_url"] == "http://localhost:3000/callback"
    assert sent["default_permissions"] == manifest.default_permissions
    assert sent["default_events"] == manifest.default_events
    assert sent["hook_attributes"] == manifest.model_dump()["hook_attributes"]
    hooked = registration_manifest(manifest, "http://x/cb", "https://baton.example.com/webhook")
    assert hooked["hook_attributes"] == {"url": "https://baton.example.com/webhook", "active": True}


def test_the_state_must_come_back_unchanged() -> None:
    check_state("s3cret", "s3cret")
    for received in ("other", "", None):
        with pytest.raises(ManifestError, match="does not match"):
            check_state("s3cret", received)


def test_registration_goes_to_the_account_or_the_organization() -> None:
    assert registration_url("https://github.com", "a b") == (
        "https://github.com/settings/apps/new?state=a+b"
    )
    assert registration_url("https://ghe.example.com/", "s", org="acme") == (
        "https://ghe.example.com/organizations/acme/settings/apps/new?state=s"
    )
    assert api_url_for("https://github.com") == "https://api.github.com"
    assert api_url_for("https://ghe.example.com/") == "https://ghe.example.com/api/v3"


def test_credentials_become_baton_s_variables() -> None:
    values = env_values(CREDENTIALS, "https://api.github.com")
    assert values == {
        "GITHUB_APP_ID": "42",
        "GITHUB_PRIVATE_KEY": PEM,
        "BATON_BOT_LOGIN": "baton-acme[bot]",
        "GITHUB_WEBHOOK_SECRET": "e" * 40,
        "GITHUB_CLIENT_ID": "Iv1.abc",
        "GITHUB_CLIENT_SECRET": "s" * 40,
    }
    on_server = env_values(CREDENTIALS, "https://ghe.example.com/api/v3/")
    assert on_server["GITHUB_API_URL"] == "https://ghe.example.com/api/v3"


def test_env_values_read_back_exactly_as_written() -> None:
    for value in (PEM, "plain-value_1.2", 'quote " and back\\slash', "a b", ""):
        line = f"KEY={encode_env_value(value)}\n"
        assert dotenv_values(stream=io.StringIO(line))["KEY"] == value, line


def test_the_env_update_keeps_other_lines_and_names_what_it_replaces() -> None:
    existing = "# deployment\nREDIS_URL=redis://cache:6379/0\nGITHUB_APP_ID=7\n"
    values = env_values(CREDENTIALS, "https://api.github.com")
    assert app_keys_in(existing) == ["GITHUB_APP_ID"]
    assert replaced_keys(existing, values) == ["GITHUB_APP_ID"]
    assert replaced_keys(existing.replace("=7", "=42"), values) == []
    text = updated_env(existing, values)
    read = dotenv_values(stream=io.StringIO(text))
    assert read["REDIS_URL"] == "redis://cache:6379/0"
    assert {key: read[key] for key in values} == values
    assert text.startswith("# deployment\n")
    assert text.count("GITHUB_APP_ID=") == 1
    assert updated_env("", {"A": "1"}).startswith("# The GitHub App")


def test_settings_read_dot_env_and_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    values = env_values(CREDENTIALS, "https://api.github.com")
    (tmp_path / ".env").write_text(updated_env("PORT=9000\nBATON_QUEUE_LABEL=from-file\n", values))
    monkeypatch.setenv("BATON_QUEUE_LABEL", "from-environment")
    monkeypatch.delenv("GITHUB_APP_ID", raising=False)
    monkeypatch.delenv("GITHUB_PRIVATE_KEY", raising=False)
    settings = Settings()
    assert (settings.app_id, settings.private_key, settings.port) == ("42", PEM, 9000)
    assert settings.queue_label == "from-environment"
    assert settings.bot_login == "baton-acme[bot]"


# ---------------------------------------------------------------- the flow, end to end


class FormReader(HTMLParser):
    """Read the setup page's form: where it posts and its hidden fields."""

    def __init__(self) -> None:
        super().__init__()
        self.action = ""
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {name: value or "" for name, value in attrs}
        if tag == "form":
            self.action = found["action"]
        elif tag == "input" and found.get("type") == "hidden":
            self.fields[found["name"]] = found["value"]


@contextlib.asynccontextmanager
async def baton_setup(
    cwd: Path, sandbox_url: str, env_file: Path, *extra: str
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """Run `baton setup` against the sandbox; yield the process and its page's address."""
    port = free_port()
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "setup",
        "--port",
        str(port),
        "--github-url",
        sandbox_url,
        "--api-url",
        sandbox_url,
        "--env-file",
        str(env_file),
        *extra,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        yield process, f"http://localhost:{port}"
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def page_text(session: aiohttp.ClientSession, url: str) -> str | None:
    """Return the page at url, or None while nothing answers there."""
    try:
        async with session.get(url) as reply:
            return await reply.text() if reply.status == 200 else None
    except aiohttp.ClientConnectionError:
        return None


async def test_setup_registers_the_app_and_writes_the_env_file(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("# this deployment\nREDIS_URL=redis://cache.internal:6379/0\n")
    webhook = "https://baton.example.com/webhook"
    async with running(tmp_path / "sandbox", None) as app:
        hub: Hub = app[HUB]
        setup = baton_setup(tmp_path, hub.public_url, env_file, "--webhook-url", webhook)
        async with setup as (process, local), aiohttp.ClientSession() as session:

            async def start_page() -> str | None:
                return await page_text(session, f"{local}/")

            page = await eventually(start_page, "baton setup serving its page", within=30)
            form = FormReader()
            form.feed(page)
            assert form.action.startswith(f"{hub.public_url}/settings/apps/new?state=")
            async with session.get(f"{local}/callback?code=forged&state=forged") as forged:
                assert forged.status == 400
                assert "does not match" in await forged.text()

            async with session.post(form.action, data=form.fields) as reply:
                done = await reply.text()
                assert reply.status == 200, done
            assert "is registered" in done
            install = f"{hub.public_url}/apps/baton-2/installations/new"
            assert install in done
            output, _ = await asyncio.wait_for(process.communicate(), timeout=30)
            assert process.returncode == 0, output.decode()
            assert install in output.decode()

    written = dotenv_values(env_file)
    assert written["REDIS_URL"] == "redis://cache.internal:6379/0"
    assert env_file.read_text().startswith("# this deployment\n")
    assert env_file.stat().st_mode & 0o077 == 0
    assert written["BATON_BOT_LOGIN"] == "baton-2[bot]"
    assert written["GITHUB_API_URL"] == hub.public_url
    assert written["GITHUB_CLIENT_ID"] and written["GITHUB_CLIENT_SECRET"]
    registered = hub.state.apps[-1]
    assert (registered.hook_url, registered.webhook_secret) == (
        webhook,
        written["GITHUB_WEBHOOK_SECRET"],
    )

    settings = Settings(_env_file=env_file)
    async with running(tmp_path / "sandbox", None) as app, aiohttp.ClientSession() as session:
        gh = GitHubAPI(session, "baton-test", base_url=app[HUB].public_url)
        jwt = get_jwt(app_id=settings.app_id, private_key=settings.private_key)
        me = await gh.getitem("/app", jwt=jwt)
    assert (str(me["id"]), f"{me['slug']}[bot]") == (settings.app_id, settings.bot_login)
    assert me["permissions"] == load_manifest().default_permissions
    assert me["events"] == load_manifest().default_events


async def test_setup_refuses_an_env_file_that_already_holds_an_app(tmp_path: Path) -> None:
    env_file = tmp_path / ".env"
    env_file.write_text("GITHUB_APP_ID=7\nGITHUB_PRIVATE_KEY_PATH=/keys/app.pem\n")
    async with baton_setup(tmp_path, "http://127.0.0.1:9", env_file) as (process, _):
        output, _ = await asyncio.wait_for(process.communicate(), timeout=30)
    assert process.returncode == 2
    assert "GITHUB_APP_ID, GITHUB_PRIVATE_KEY_PATH" in output.decode()
    assert env_file.read_text() == "GITHUB_APP_ID=7\nGITHUB_PRIVATE_KEY_PATH=/keys/app.pem\n"
