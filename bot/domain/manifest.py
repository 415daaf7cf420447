"""Baton's GitHub App manifest (app.yml) and the pure parts of registering an App from it.

GitHub's manifest flow: a form POSTs the manifest to `<github>/settings/apps/new?state=S`,
the person confirms, GitHub redirects to the manifest's `redirect_url` with `?code=C&state=S`,
and `POST /app-manifests/C/conversions` turns the code into the new App's credentials.
`bot/ops/setup.py` serves that flow; this module builds the manifest, checks the state,
and renders the credentials into a `.env` file without losing what the file held.
"""

from __future__ import annotations

import io
import re
import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlencode

import yaml
from dotenv import dotenv_values
from pydantic import BaseModel, ConfigDict, Field, ValidationError

DEFAULT_MANIFEST_PATH = Path(__file__).resolve().parents[2] / "app.yml"
GITHUB_URL = "https://github.com"
GITHUB_API_URL = "https://api.github.com"

Level = Literal["read", "write"]


class ManifestError(Exception):
    """The manifest, the flow's state or the env file is not what the flow needs."""


class HookAttributes(BaseModel):
    """Where GitHub delivers the App's webhooks."""

    model_config = ConfigDict(extra="forbid")

    url: str
    active: bool = True


class AppManifest(BaseModel):
    """A GitHub App manifest, as GitHub's `settings/apps/new` accepts it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=34)
    url: str = Field(min_length=1)
    description: str | None = None
    public: bool = False
    hook_attributes: HookAttributes | None = None
    redirect_url: str | None = None
    callback_urls: list[str] | None = None
    setup_url: str | None = None
    setup_on_update: bool | None = None
    request_oauth_on_install: bool | None = None
    default_permissions: dict[str, Level] = Field(default_factory=dict)
    default_events: list[str] = Field(default_factory=list)


def load_manifest(path: Path = DEFAULT_MANIFEST_PATH) -> AppManifest:
    """Read and validate an App manifest written as YAML (or JSON)."""
    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ManifestError(f"cannot read the App manifest {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ManifestError(f"{path} is not valid YAML: {exc}") from exc
    try:
        return AppManifest.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in err['loc']) or 'manifest'}: {err['msg']}"
            for err in exc.errors()
        )
        raise ManifestError(f"{path} is not a GitHub App manifest: {problems}") from exc


def registration_manifest(
    manifest: AppManifest, redirect_url: str, webhook_url: str | None = None
) -> dict[str, Any]:
    """Return the manifest to POST: back to `redirect_url`, webhooks to `webhook_url` if given."""
    chosen = manifest.model_copy(update={"redirect_url": redirect_url})
    if webhook_url is not None:
        chosen.hook_attributes = HookAttributes(url=webhook_url, active=True)
    return chosen.model_dump(exclude_none=True)


def new_state() -> str:
    """Return a fresh, unguessable state for one registration."""
    return secrets.token_urlsafe(24)


def check_state(expected: str, received: str | None) -> None:
    """Refuse a callback whose state is not the one this registration sent."""
    if not received or not secrets.compare_digest(expected.encode(), received.encode()):
        raise ManifestError(
            "the state GitHub sent back does not match this registration: "
            "start again from the setup page"
        )


def registration_url(github_url: str, state: str, org: str | None = None) -> str:
    """Return where the manifest form is posted: the account's or an organization's new App."""
    base = github_url.rstrip("/")
    owner = f"/organizations/{org}" if org else ""
    return f"{base}{owner}/settings/apps/new?{urlencode({'state': state})}"


def api_url_for(github_url: str) -> str:
    """Return the REST API root of a GitHub: api.github.com, or a server's /api/v3."""
    base = github_url.rstrip("/")
    return GITHUB_API_URL if base == GITHUB_URL else f"{base}/api/v3"


class AppCredentials(BaseModel):
    """What `POST /app-manifests/{code}/conversions` returns that Baton keeps."""

    id: int
    slug: str
    name: str
    html_url: str
    pem: str
    webhook_secret: str | None = None
    client_id: str | None = None
    client_secret: str | None = None


def env_values(credentials: AppCredentials, api_url: str) -> dict[str, str]:
    """Return the variables Baton reads for a new App (the API URL only when not GitHub.com)."""
    values = {
        "GITHUB_APP_ID": str(credentials.id),
        "GITHUB_PRIVATE_KEY": credentials.pem,
        "BATON_BOT_LOGIN": f"{credentials.slug}[bot]",
    }
    optional = {
        "GITHUB_WEBHOOK_SECRET": credentials.webhook_secret,
        "GITHUB_CLIENT_ID": credentials.client_id,
        "GITHUB_CLIENT_SECRET": credentials.client_secret,
        "GITHUB_API_URL": api_url.rstrip("/") if api_url.rstrip("/") != GITHUB_API_URL else None,
    }
    values.update({key: value for key, value in optional.items() if value})
    return values


APP_KEYS = (
    "GITHUB_APP_ID",
    "GITHUB_PRIVATE_KEY",
    "GITHUB_PRIVATE_KEY_PATH",
    "GITHUB_WEBHOOK_SECRET",
    "GITHUB_CLIENT_ID",
    "GITHUB_CLIENT_SECRET",
    "BATON_BOT_LOGIN",
)
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=")
_PLAIN_VALUE = re.compile(r"^[A-Za-z0-9_./:@+\-\[\]]*$")


def env_keys(text: str) -> list[str]:
    """Return the variable names an env file sets, in order."""
    return [match.group(1) for line in text.splitlines() if (match := _ENV_LINE.match(line))]


def app_keys_in(text: str) -> list[str]:
    """Return which App credential variables an env file already sets."""
    return [key for key in env_keys(text) if key in APP_KEYS]


def replaced_keys(existing: str, values: Mapping[str, str]) -> list[str]:
    """Return the variables of `values` that the env file already sets to something else."""
    current = dotenv_values(stream=io.StringIO(existing), interpolate=False)
    return [key for key in values if key in current and current[key] != values[key]]


def encode_env_value(value: str) -> str:
    """Write a value so a .env reader gets it back: plain, or double-quoted with escapes."""
    if _PLAIN_VALUE.match(value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


def updated_env(existing: str, values: Mapping[str, str]) -> str:
    """Return the env file with `values` set: lines setting them are replaced, others kept."""
    kept = [
        line
        for line in existing.splitlines()
        if not ((match := _ENV_LINE.match(line)) and match.group(1) in values)
    ]
    while kept and not kept[-1].strip():
        kept.pop()
    block = ["# The GitHub App, registered by `baton setup`"]
    block += [f"{key}={encode_env_value(value)}" for key, value in values.items()]
    return "\n".join([*kept, "", *block] if kept else block) + "\n"
