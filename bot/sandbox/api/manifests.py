"""Registering an App from a manifest: the page that takes it and the code's conversion.

On GitHub a person confirms the manifest on `settings/apps/new` before GitHub sends the
browser back to the manifest's `redirect_url`; the sandbox confirms at once, as the
maintainer (or as the organization named in the path).
"""

from __future__ import annotations

import asyncio
import datetime
import re
import secrets

from aiohttp import web
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from pydantic import ValidationError
from yarl import URL

from bot.domain.manifest import AppManifest
from bot.sandbox.auth import ADMIN_LOGIN, APP_SLUG, CI_APP_SLUG, LINT_APP_ID, LINT_APP_SLUG
from bot.sandbox.hub import Hub, hub_of
from bot.sandbox.permissions import requires_no_permission
from bot.sandbox.rest import json_response, not_found
from bot.sandbox.state import ManifestCode, RegisteredApp, iso, parse_iso, utc_now

routes = web.RouteTableDef()

CODE_LIFETIME = datetime.timedelta(hours=1)
NEW_APP = "/settings/apps/new"
_NOT_SLUG = re.compile(r"[^a-z0-9]+")


@routes.get(NEW_APP)
@routes.post(NEW_APP)
@routes.get("/organizations/{org}" + NEW_APP)
@routes.post("/organizations/{org}" + NEW_APP)
@requires_no_permission("a person's web page, not the API")
async def register_from_manifest(request: web.Request) -> web.Response:
    """Take the manifest form, confirm it, and send the browser back with a one-hour code."""
    hub = hub_of(request)
    form = await request.post() if request.method == "POST" else request.query
    raw = form.get("manifest")
    if not isinstance(raw, str) or not raw.strip():
        return _page(400, "Send a GitHub App manifest as the `manifest` form field.")
    try:
        manifest = AppManifest.model_validate_json(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in err['loc']) or 'manifest'}: {err['msg']}"
            for err in exc.errors()
        )
        return _page(422, f"The manifest is not valid: {problems}")
    if not manifest.redirect_url:
        return _page(422, "The manifest has no redirect_url to send the code to.")
    owner = request.match_info.get("org", ADMIN_LOGIN)
    hub.user(owner)
    code = secrets.token_hex(10)
    expires = datetime.datetime.now(datetime.UTC) + CODE_LIFETIME
    hub.state.manifest_codes[code] = ManifestCode(
        code=code,
        owner=owner,
        manifest=manifest.model_dump(exclude_none=True),
        expires_at=iso(expires),
    )
    back = {"code": code}
    state = request.query.get("state") or form.get("state")
    if isinstance(state, str) and state:
        back["state"] = state
    target = URL(manifest.redirect_url).update_query(back)
    return web.Response(status=302, headers={"Location": str(target)})


@routes.post("/app-manifests/{code}/conversions")
@requires_no_permission("no credentials: the one-time code is the credential")
async def convert_manifest_code(request: web.Request) -> web.Response:
    """Create the App a confirmed manifest describes; answer with its key and secrets, once."""
    hub = hub_of(request)
    pending = hub.state.manifest_codes.pop(request.match_info["code"], None)
    if pending is None or parse_iso(pending.expires_at) <= datetime.datetime.now(datetime.UTC):
        raise not_found()
    manifest = AppManifest.model_validate(pending.manifest)
    key = await asyncio.to_thread(rsa.generate_private_key, public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )
    app = RegisteredApp(
        id=max([LINT_APP_ID, *(a.id for a in hub.state.apps)]) + 1,
        slug=_free_slug(hub, manifest.name),
        name=manifest.name,
        owner=pending.owner,
        description=manifest.description,
        url=manifest.url,
        hook_url=manifest.hook_attributes.url if manifest.hook_attributes else None,
        permissions=dict(manifest.default_permissions),
        events=list(manifest.default_events),
        public_key=public.decode(),
        webhook_secret=secrets.token_hex(20),
        client_id="Iv1." + secrets.token_hex(8),
        client_secret=secrets.token_hex(20),
        created_at=utc_now(),
    )
    hub.state.apps.append(app)
    hub.user(f"{app.slug}[bot]")
    data = hub.render.app(app.id)
    data.update(
        client_id=app.client_id,
        client_secret=app.client_secret,
        webhook_secret=app.webhook_secret,
        pem=pem.decode(),
    )
    return json_response(data, status=201)


def _free_slug(hub: Hub, name: str) -> str:
    """Derive an App's slug from its name, numbered past the slugs already taken."""
    base = _NOT_SLUG.sub("-", name.lower()).strip("-") or "app"
    taken = {APP_SLUG, CI_APP_SLUG, LINT_APP_SLUG, *(a.slug for a in hub.state.apps)}
    slug, number = base, 1
    while slug in taken:
        number += 1
        slug = f"{base}-{number}"
    return slug


def _page(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message + "\n", content_type="text/plain")
