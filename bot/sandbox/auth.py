"""The App's key, its JWTs, installation tokens and the admin token: who is calling."""

from __future__ import annotations

import base64
import binascii
import datetime
import pathlib
import secrets
import time
from dataclasses import dataclass
from typing import Literal

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.sandbox.rest import bad_credentials
from bot.sandbox.state import State, Token, iso, parse_iso

APP_ID = 1
APP_SLUG = "baton"
APP_NAME = "Baton"
BOT_LOGIN = "baton[bot]"
CI_APP_ID = 2
CI_APP_SLUG = "sandbox-ci"
CI_APP_NAME = "Sandbox CI"
CI_BOT_LOGIN = "sandbox-ci[bot]"
ADMIN_LOGIN = "maintainer"
TOKEN_LIFETIME = datetime.timedelta(hours=1)
MAX_JWT_LIFETIME = 600
ACT_AS_HEADER = "X-Sandbox-As"

ActorKind = Literal["app", "installation", "admin"]


@dataclass(frozen=True)
class Actor:
    """An authenticated caller."""

    kind: ActorKind
    login: str | None
    installation_id: int | None = None
    repository_ids: frozenset[int] | None = None


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

    def __init__(self, state: State, key: rsa.RSAPrivateKey) -> None:
        self.state = state
        self.public_key = key.public_key()

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
        """Authenticate the admin token or an unexpired installation token."""
        if secrets.compare_digest(token, self.state.secrets.admin_token):
            return Actor("admin", act_as or ADMIN_LOGIN)
        found = self.state.tokens.get(token)
        if found is None or parse_iso(found.expires_at) <= _now():
            raise bad_credentials()
        ids = frozenset(found.repository_ids) if found.repository_ids is not None else None
        return Actor("installation", BOT_LOGIN, found.installation_id, ids)

    def _from_jwt(self, token: str) -> Actor:
        try:
            claims = jwt.decode(
                token,
                self.public_key,
                algorithms=["RS256"],
                options={"require": ["exp", "iat", "iss"]},
            )
        except jwt.PyJWTError as exc:
            raise bad_credentials() from exc
        # GitHub refuses JWTs that live longer than ten minutes; one second covers rounding.
        if str(claims["iss"]) != str(APP_ID) or claims["exp"] > time.time() + MAX_JWT_LIFETIME + 1:
            raise bad_credentials()
        return Actor("app", None)

    def mint(self, installation_id: int, repository_ids: list[int] | None) -> Token:
        """Create an installation token valid for one hour, dropping expired ones."""
        now = _now()
        self.state.tokens = {
            key: tok for key, tok in self.state.tokens.items() if parse_iso(tok.expires_at) > now
        }
        token = Token(
            token="ghs_" + secrets.token_hex(18),
            installation_id=installation_id,
            expires_at=iso(now + TOKEN_LIFETIME),
            repository_ids=repository_ids,
        )
        self.state.tokens[token.token] = token
        return token


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
