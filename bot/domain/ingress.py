"""What the web process holds against requests it cannot trust yet.

Pure: the clock is a parameter, nothing here does I/O.

- `signature_matches`: a webhook body against its X-Hub-Signature-256.
- `UnverifiedReads`: how many webhook bodies are read before their signature is
  checked, and how many bytes they may hold together.
- Operator sessions: the status page's cookie is an expiry signed with a key derived
  from the operator token, never the token itself.
- `FailedTokens`: wrong operator tokens per client address, so guessing is slow.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import math
from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import IPv4Network, IPv6Network

# --- Signatures ----------------------------------------------------------------------------------

SIGNATURE_PREFIX = "sha256="


def signature_matches(body: bytes, signature: str, secret: str) -> bool:
    """Return whether X-Hub-Signature-256 signs body with secret: HMAC-SHA256, constant time.

    Any header value is only compared, never parsed, so no value can raise.
    """
    expected = SIGNATURE_PREFIX + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(signature.encode("utf-8", "replace"), expected.encode())


# --- Unverified reads ---------------------------------------------------------------------------


@dataclass
class UnverifiedReads:
    """At most `reads` bodies at once, declaring at most `budget_bytes` between them.

    A body without a Content-Length weighs the largest one allowed. Beyond either
    bound a delivery is refused at once with a 503, never queued.
    """

    reads: int
    budget_bytes: int
    reading: int = 0
    held_bytes: int = 0

    def take(self, size: int) -> bool:
        """Start a read of a body of `size` bytes, if it fits; return whether it does."""
        if self.reading >= self.reads or self.held_bytes + size > self.budget_bytes:
            return False
        self.reading += 1
        self.held_bytes += size
        return True

    def give_back(self, size: int) -> None:
        """End a read started with `take(size)`."""
        self.reading -= 1
        self.held_bytes -= size


# --- Operator sessions --------------------------------------------------------------------------

MIN_OPERATOR_TOKEN_CHARS = 32
SESSION_TTL_S = 12 * 3600
_SESSION_CONTEXT = b"baton operator session v1"
_MAX_EXPIRY_DIGITS = 12


def session_key(operator_token: str) -> bytes:
    """Return the key that signs operator sessions: changing the token ends every session."""
    return hmac.new(operator_token.encode(), _SESSION_CONTEXT, hashlib.sha256).digest()


def _session_mac(key: bytes, expiry: int) -> str:
    return hmac.new(key, str(expiry).encode(), hashlib.sha256).hexdigest()


def new_session(key: bytes, now: float, ttl_s: int = SESSION_TTL_S) -> str:
    """Return a session value that opens the operator pages until now + ttl_s."""
    expiry = int(now) + ttl_s
    return f"{expiry}.{_session_mac(key, expiry)}"


def session_valid(key: bytes, value: str, now: float) -> bool:
    """Return whether a session value was signed with key and has not expired (constant time)."""
    expiry_text, _, mac = value.partition(".")
    if (
        not (expiry_text.isascii() and expiry_text.isdigit())
        or len(expiry_text) > _MAX_EXPIRY_DIGITS
    ):
        return False
    expiry = int(expiry_text)
    signed = hmac.compare_digest(mac.encode(), _session_mac(key, expiry).encode())
    return signed and now < expiry


def is_loopback_host(host: str) -> bool:
    """Return whether a Host header names this machine's loopback (localhost, 127/8, ::1)."""
    name = host.strip().lower()
    if name.startswith("["):
        name = name[1 : name.find("]")] if "]" in name else name[1:]
    elif name.count(":") == 1:
        name = name.partition(":")[0]
    name = name.rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


# --- Failed operator tokens ---------------------------------------------------------------------

_MAX_ADDRESS_CHARS = 64
# Where a platform's router or a reverse proxy on the machine talks to the web process:
# the peers trusted as proxies when none are named.
PRIVATE_NETWORKS = (
    "127.0.0.0/8",
    "::1/128",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "fc00::/7",
)
DEFAULT_TRUSTED = tuple(ipaddress.ip_network(net) for net in PRIVATE_NETWORKS)


def client_address(
    remote: str | None,
    named: str | None,
    trusted: Iterable[IPv4Network | IPv6Network] = (),
) -> str:
    """Return the address a request's wrong tokens count against.

    The peer's own, unless the peer is a trusted proxy (by default one on a loopback or
    private address: a reverse proxy on the machine, a platform's router): then the
    client that proxy named in its header (the last address of a list such as
    X-Forwarded-For, the one it added itself). An untrusted peer's header counts for
    nothing, so nobody outside can pick the address their guesses count against.
    """
    peer = remote or ""
    if not named:
        return peer
    try:
        address = ipaddress.ip_address(peer)
    except ValueError:
        return peer
    networks = tuple(trusted) or DEFAULT_TRUSTED
    last = named.rpartition(",")[2].strip()[:_MAX_ADDRESS_CHARS]
    proxied = any(address in network for network in networks)
    return last if proxied and last else peer


class FailedTokens:
    """Count wrong operator tokens per address in fixed windows; refuse an address over the limit.

    Memory is bounded: beyond `addresses` entries the oldest window is forgotten first
    (expired ones before any other).
    """

    def __init__(self, allowed: int = 5, window_s: float = 60.0, addresses: int = 10_000) -> None:
        self.allowed = allowed
        self.window_s = window_s
        self.addresses = addresses
        self._windows: dict[str, tuple[float, int]] = {}  # oldest window first

    def retry_after(self, address: str, now: float) -> int:
        """Return the seconds before the address may try a token again; 0 when it may now."""
        entry = self._windows.get(address)
        if entry is None:
            return 0
        started, failures = entry
        if now - started >= self.window_s:
            del self._windows[address]
            return 0
        if failures < self.allowed:
            return 0
        return max(1, math.ceil(started + self.window_s - now))

    def failed(self, address: str, now: float) -> None:
        """Count one wrong token from the address."""
        entry = self._windows.get(address)
        if entry is not None and now - entry[0] < self.window_s:
            self._windows[address] = (entry[0], entry[1] + 1)
            return
        self._windows.pop(address, None)
        self._make_room(now)
        self._windows[address] = (now, 1)

    def __len__(self) -> int:
        return len(self._windows)

    def _make_room(self, now: float) -> None:
        while self._windows:
            address, (started, _) = next(iter(self._windows.items()))
            if now - started < self.window_s and len(self._windows) < self.addresses:
                return
            del self._windows[address]
