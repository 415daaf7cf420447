"""The sandbox GitHub at github.com's limits: token lifetime, ETags, text sizes, write limits.

Each test names the page of GitHub's documentation whose behaviour it pins.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import aiohttp

from bot.sandbox import server
from bot.sandbox.hub import HUB
from bot.sandbox.state import parse_iso
from tests.sandbox.test_git_backend import (
    EVERY_ROUTE_MANIFEST,
    REPO,
    Receiver,
    Sandbox,
    receiver,
    running_sandbox,
    sandbox,
)

__all__ = ["receiver", "sandbox"]  # the fixtures these tests use


async def test_installation_tokens_live_as_long_as_the_sandbox_is_told(
    tmp_path: Path, receiver: Receiver
) -> None:
    """Mirrors https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/generating-an-installation-access-token-for-a-github-app:
    "The installation access token will expire after 1 hour." `baton sandbox
    --token-lifetime` shortens that, so long runs can be tried in minutes.
    """
    async with running_sandbox(tmp_path / "default", receiver, tmp_path) as default:
        await default.new_repo()
        hour = await _lifetime_of_a_new_token(default)
    assert datetime.timedelta(minutes=59) < hour <= datetime.timedelta(hours=1)

    short = server.running(
        tmp_path / "short", receiver.url, manifest=EVERY_ROUTE_MANIFEST, token_lifetime_s=330
    )
    async with short as app, aiohttp.ClientSession() as session:
        sandbox = Sandbox(app, session, receiver, tmp_path)
        receiver.secret = app[HUB].state.secrets.webhook_secret.encode()
        await sandbox.new_repo()
        lifetime = await _lifetime_of_a_new_token(sandbox)
    assert datetime.timedelta(seconds=320) < lifetime <= datetime.timedelta(seconds=330)


async def _lifetime_of_a_new_token(sandbox: Sandbox) -> datetime.timedelta:
    bearer = {"Authorization": f"Bearer {sandbox.jwt()}"}
    inst = await sandbox.ok("GET", f"{REPO}/installation", auth=None, headers=bearer)
    path = f"/app/installations/{inst['id']}/access_tokens"
    made = await sandbox.ok("POST", path, {}, status=201, auth=None, headers=bearer)
    now = datetime.datetime.now(datetime.UTC)
    return parse_iso(made["expires_at"]) - now


async def test_an_etag_answers_304_only_to_the_token_that_read_it(sandbox: Sandbox) -> None:
    """Mirrors https://docs.github.com/en/rest/using-the-rest-api/best-practices-for-using-the-rest-api
    ("Use conditional requests if appropriate"): GitHub's ETag covers the request's
    authorization, so a tag read with one token is no tag for another; a new token
    (every hour) reads in full and gets a tag of its own.
    """
    await sandbox.new_repo()
    await sandbox.ok("POST", f"{REPO}/issues", {"title": "first"}, status=201)
    path = f"{REPO}/issues/1"
    old, new = await sandbox.installation_token(), await sandbox.installation_token()
    first = await sandbox.call("GET", path, auth=old)
    held = {"If-None-Match": first.headers["ETag"]}
    same = await sandbox.call("GET", path, auth=old, headers=held)
    assert same.status == 304
    other = await sandbox.call("GET", path, auth=new, headers=held)
    assert (other.status, other.json["title"]) == (200, "first")
    assert other.headers["ETag"] != first.headers["ETag"]
    again = {"If-None-Match": other.headers["ETag"]}
    assert (await sandbox.call("GET", path, auth=new, headers=again)).status == 304


async def test_check_run_text_is_limited_in_bytes_not_characters(sandbox: Sandbox) -> None:
    """Mirrors https://docs.github.com/en/rest/checks/runs#create-a-check-run: output
    `summary` and `text` have a "Maximum length: 65535 characters"; github.com counts
    the UTF-8 bytes, so 65535 two-byte characters are refused with 422.
    """
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    head = await sandbox.tip("main")

    def run(summary: str, text: str = "") -> dict[str, object]:
        output = {"title": "t", "summary": summary, "text": text}
        return {"name": "Baton", "head_sha": head, "conclusion": "neutral", "output": output}

    for too_long in (run("é" * 32768), run("ok", "€" * 21846)):
        reply = await sandbox.call("POST", f"{REPO}/check-runs", too_long, auth=token)
        assert reply.status == 422, reply.json
    fits = run("é" * 32767 + "x", "€" * 21845)
    await sandbox.ok("POST", f"{REPO}/check-runs", fits, status=201, auth=token)
