"""The App's key, its JWTs, installation tokens and the admin token: who is calling."""

from __future__ import annotations

import base64
import binascii
import datetime
import pathlib
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.sandbox.faults import Faults
from bot.sandbox.rest import bad_credentials, suspended
from bot.sandbox.state import State, Token, iso, parse_iso

APP_ID = 1
# An App's client ID, which GitHub recommends as its JWTs' issuer over the numeric id.
APP_CLIENT_ID = "Iv23liSandboxBaton01"
APP_SLUG = "baton"
APP_NAME = "Baton"
BOT_LOGIN = "baton[bot]"
CI_APP_ID = 2
CI_APP_SLUG = "sandbox-ci"
CI_APP_NAME = "Sandbox CI"
CI_BOT_LOGIN = "sandbox-ci[bot]"
CI_CLIENT_ID = "Iv23liSandboxCi00001"
# A second App with `checks: write`, such as a linter, installed on an account through the
# admin API: it gets a check suite on every push and never starts a run in it.
LINT_APP_ID = 3
LINT_APP_SLUG = "sandbox-lint"
LINT_APP_NAME = "Sandbox Lint"
LINT_CLIENT_ID = "Iv23liSandboxLint001"
ADMIN_LOGIN = "maintainer"
DEFAULT_TOKEN_LIFETIME_S = (
    3600  # "Installation access tokens expire one hour from the time you create them"
)
MAX_JWT_LIFETIME = 600
ACT_AS_HEADER = "X-Sandbox-As"

ActorKind = Literal["app", "installation", "admin"]


@dataclass(frozen=True)
class Actor:
    """An authenticated caller; an installation carries its token's permissions."""

    kind: ActorKind
    login: str | None
    installation_id: int | None = None
    repository_ids: frozenset[int] | None = None
    app_id: int | None = None
    permissions: Mapping[str, str] = field(default_factory=dict)


def load_or_create_key(path: pathlib.Path) -> rsa.RSAPrivateKey:
    """Load the App's private key, generating it on first start."""
    if not path.exists():
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
        path.touch(mode=0o600)
        path.write_bytes(pem)
    loaded = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(loaded, rsa.RSAPrivateKey):
        raise TypeError(f"{path} does not hold an RSA private key")
    return loaded


class Authenticator:
    """Turn Authorization headers into actors, and mint installation tokens."""

    def __init__(
        self,
        state: State,
        key: rsa.RSAPrivateKey,
        permissions: Mapping[str, str],
        faults: Faults,
        token_lifetime_s: float = DEFAULT_TOKEN_LIFETIME_S,
    ) -> None:
        self.state = state
        self.token_lifetime = datetime.timedelta(seconds=token_lifetime_s)
        self.public_key = key.public_key()
        self.permissions = dict(permissions)
        self.faults = faults

    def from_header(self, header: str | None, act_as: str | None = None) -> Actor | None:
        """Authenticate an API request; None when it carries no credentials."""
        if not header:
            return None
        scheme, _, credential = header.strip().partition(" ")
        credential = credential.strip()
        scheme = scheme.lower()
        if scheme == "bearer" and credential.count(".") == 2:
            return self._from_jwt(credential)
        if scheme in ("bearer", "token"):
            return self.from_token(credential, act_as)
        if scheme == "basic":
            return self.from_basic(credential)
        raise bad_credentials()

    def from_basic(self, credential: str) -> Actor:
        """Authenticate HTTP Basic credentials whose password is a token."""
        try:
            user, _, password = base64.b64decode(credential, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError) as exc:
            raise bad_credentials() from exc
        # Like GitHub, take the token as the password, or as the user name with no password.
        return self.from_token(password or user)

    def from_token(self, token: str, act_as: str | None = None) -> Actor:
        """Authenticate the admin token or an unexpired token of a current installation.

        A suspended installation's tokens are refused with 403, an uninstalled one's with 401.
        """
        if secrets.compare_digest(token, self.state.secrets.admin_token):
            return Actor("admin", act_as or ADMIN_LOGIN)
        found = self.state.tokens.get(token)
        if found is None or parse_iso(found.expires_at) <= _now():
            raise bad_credentials()
        if time.time() - found.minted_at < self.faults.fresh_token_seconds:
            raise bad_credentials()
        inst = next((i for i in self.state.installations if i.id == found.installation_id), None)
        if inst is None:
            raise bad_credentials()
        if inst.suspended_at is not None:
            raise suspended()
        ids = frozenset(found.repository_ids) if found.repository_ids is not None else None
        granted = found.permissions if found.permissions is not None else self.permissions
        return Actor("installation", BOT_LOGIN, found.installation_id, ids, APP_ID, granted)

    def _from_jwt(self, token: str) -> Actor:
        """Authenticate an App's JWT, its issuer the App's client ID or its numeric id.

        GitHub ("Generating a JSON Web Token (JWT) for a GitHub App"): `iss` is "The client
        ID or application ID of your GitHub App. Use of the client ID is recommended."
        """
        try:
            issuer = str(jwt.decode(token, options={"verify_signature": False})["iss"])
            app_id, key = self._app_of(issuer)
            claims = jwt.decode(
                token, key, algorithms=["RS256"], options={"require": ["exp", "iat", "iss"]}
            )
        except (jwt.PyJWTError, KeyError, ValueError) as exc:
            raise bad_credentials() from exc
        # GitHub refuses JWTs that live longer than ten minutes; one second covers rounding.
        if claims["exp"] > time.time() + MAX_JWT_LIFETIME + 1:
            raise bad_credentials()
        return Actor("app", None, app_id=app_id)

    def _app_of(self, issuer: str) -> tuple[int, rsa.RSAPublicKey]:
        """Return the App a JWT's issuer names and the key that verifies its JWTs."""
        if issuer in (str(APP_ID), APP_CLIENT_ID):
            return APP_ID, self.public_key
        registered = next((a for a in self.state.apps if issuer in (str(a.id), a.client_id)), None)
        if registered is None:
            raise ValueError(f"no App {issuer}")
        key = serialization.load_pem_public_key(registered.public_key.encode())
        if not isinstance(key, rsa.RSAPublicKey):
            raise ValueError(f"App {issuer} has no RSA key")
        return registered.id, key

    def mint(
        self,
        installation_id: int,
        repository_ids: list[int] | None,
        permissions: Mapping[str, str],
    ) -> Token:
        """Create an installation token valid for the token lifetime, dropping expired ones."""
        now = _now()
        self.state.tokens = {
            key: tok for key, tok in self.state.tokens.items() if parse_iso(tok.expires_at) > now
        }
        token = Token(
            token="ghs_" + secrets.token_hex(18),
            installation_id=installation_id,
            expires_at=iso(now + self.token_lifetime),
            repository_ids=repository_ids,
            permissions=dict(permissions),
            minted_at=time.time(),
        )
        self.state.tokens[token.token] = token
        return token


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
