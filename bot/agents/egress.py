"""The agent's egress proxy: the one way out of the sandbox's network namespace.

The sandbox has no route anywhere. Inside it, the bridge (`egress_bridge.py`) listens on
127.0.0.1:PORT and relays each connection to a Unix socket; outside it, `serve_egress`
serves that socket, judges each `CONNECT host:port` or absolute-form `http://` request
against the run's EgressPolicy, and relays what it allows. Parsing and judging are pure;
only `serve_egress` and what it calls touch the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import os
import re
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from http import HTTPStatus
from importlib import resources
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

MAX_HEAD = 64 * 1024
HEAD_TIMEOUT_S = 10.0
CONNECT_TIMEOUT_S = 15.0
LINGER_S = 2.0
MAX_CLIENTS = 256
CHUNK = 65536

# The bridge is a program in a file of its own, so that it is linted and type-checked like
# any module; the sandbox runs its text with `python -c`, since no Baton package is there.
BRIDGE_SOURCE: str = (
    resources.files("bot.agents").joinpath("egress_bridge.py").read_text(encoding="utf-8")
)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_HOSTNAME = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)(?:\.(?!-)[a-z0-9_-]{1,63}(?<!-))*")
_PORT = re.compile(r"[0-9]{1,5}")
_HTTP_NAME = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_REQUEST_LINE = re.compile(
    rf"(?P<method>{_HTTP_NAME}) (?P<target>[^\s]+) (?P<version>HTTP/1\.[01])"
)
_HEADER = re.compile(rf"(?P<name>{_HTTP_NAME}):[ \t]*(?P<value>[^\x00\r\n]*?)[ \t]*")
# Headers the proxy sets itself: Host from the URL, and always `Connection: close`.
_DROPPED_HEADERS = frozenset({"connection", "keep-alive", "host"})


def _canonical_host(host: str) -> str:
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host.lower()


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host else host


@dataclass(frozen=True, order=True)
class HostPort:
    """A host and TCP port: a name lowercased, or an IP address in its canonical form."""

    host: str
    port: int

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"{self.port} is not a port (1-65535)")
        object.__setattr__(self, "host", _canonical_host(self.host))

    def __str__(self) -> str:
        return f"{_bracketed(self.host)}:{self.port}"


@dataclass(frozen=True)
class HeldCredential:
    """A provider credential the proxy holds: the agent sees only its placeholder.

    The agent speaks plain HTTP to the proxy for `host`; the proxy puts the value in
    place of the placeholder in the request's credential headers, and goes on to the
    host over TLS when `tls` (it can rewrite only what it can read).
    """

    placeholder: str
    value: str = field(repr=False)
    host: HostPort  # where the value goes, and nowhere else
    tls: bool
    path: str = ""  # the endpoint's path: a gateway's other tenants are under other paths


@dataclass(frozen=True)
class EgressPolicy:
    """Where one agent run may connect: `allowlist` only `allowed`, `open` any public host."""

    mode: Literal["allowlist", "open"]
    allowed: frozenset[HostPort] = frozenset()
    credentials: tuple[HeldCredential, ...] = ()
    agent_env: Mapping[str, str] = field(default_factory=dict)  # in place of those keys


@dataclass(frozen=True)
class Verdict:
    """Whether a connection may go ahead, and why in a few words."""

    allowed: bool
    reason: str


@dataclass(frozen=True)
class ProxyRequest:
    """What the agent asked of the proxy: where to, and the bytes to send there first."""

    target: HostPort
    tunnel: bool  # CONNECT: relay raw bytes once the tunnel is up
    upstream_head: bytes = b""  # plain HTTP: the request rewritten to origin-form
    tls: bool = False  # plain HTTP from the agent, on to the host over TLS
    # A tunnel to a held credential's plain address: its first request (a WebSocket's
    # upgrade) gets these credentials, as lend_in_tunnel says.
    lends: tuple[HeldCredential, ...] = ()


def parse_host_port(entry: str) -> HostPort:
    """Read a `host[:port]` entry, an IPv6 address in brackets; the port is 443 when left out."""
    try:
        return _parse_authority(entry, default_port=443)
    except ValueError as exc:
        raise ValueError(f"{entry!r} is not host[:port]: {exc}") from None


ANTHROPIC = HostPort("api.anthropic.com", 443)
OPENAI = HostPort("api.openai.com", 443)
CHATGPT = HostPort("chatgpt.com", 443)  # codex signed in with a ChatGPT account talks here
GEMINI = HostPort("generativelanguage.googleapis.com", 443)
DEEPSEEK = HostPort("api.deepseek.com", 443)
OPENROUTER = HostPort("openrouter.ai", 443)
MISTRAL = HostPort("api.mistral.ai", 443)
GROQ = HostPort("api.groq.com", 443)

_ADAPTER_HOSTS: dict[str, tuple[HostPort, ...]] = {
    "claude": (ANTHROPIC,),
    "codex": (OPENAI, CHATGPT),
    "command": (),
}
# aider's `provider/model` names, e.g. `openrouter/anthropic/claude-3.5-sonnet`.
_AIDER_PROVIDERS: dict[str, HostPort] = {
    "anthropic": ANTHROPIC,
    "openai": OPENAI,
    "gemini": GEMINI,
    "deepseek": DEEPSEEK,
    "openrouter": OPENROUTER,
    "mistral": MISTRAL,
    "groq": GROQ,
}
# Bare model names by family; sonnet, opus and haiku are aider's own aliases for Claude.
_AIDER_FAMILIES: tuple[tuple[str, HostPort], ...] = (
    ("claude", ANTHROPIC),
    ("sonnet", ANTHROPIC),
    ("opus", ANTHROPIC),
    ("haiku", ANTHROPIC),
    ("gpt", OPENAI),
    ("o1", OPENAI),
    ("o3", OPENAI),
    ("o4", OPENAI),
    ("gemini", GEMINI),
    ("deepseek", DEEPSEEK),
    ("mistral", MISTRAL),
)
_AIDER_UNKNOWN = (ANTHROPIC, OPENAI)


def provider_hosts(adapter: str, model: str | None) -> tuple[HostPort, ...]:
    """Return the hosts the adapter's model provider answers on; `command` needs none."""
    if adapter == "aider":
        return _aider_hosts(model)
    if adapter not in _ADAPTER_HOSTS:
        raise ValueError(f"unknown agent adapter {adapter!r}")
    return _ADAPTER_HOSTS[adapter]


def _aider_hosts(model: str | None) -> tuple[HostPort, ...]:
    name = (model or "").strip().lower()
    if "/" in name:
        # An unknown prefix (azure/, bedrock/, ollama/...) is another endpoint, whatever
        # family the rest of the name is from.
        provider = _AIDER_PROVIDERS.get(name.split("/", 1)[0])
        return (provider,) if provider else _AIDER_UNKNOWN
    for family, host in _AIDER_FAMILIES:
        if re.match(rf"{family}(?![a-z0-9])", name):
            return (host,)
    return _AIDER_UNKNOWN


_NON_PUBLIC: tuple[tuple[str, Callable[[IPAddress], bool]], ...] = (
    ("loopback", lambda address: address.is_loopback),
    ("link-local", lambda address: address.is_link_local),  # 169.254.169.254: cloud metadata
    ("unspecified", lambda address: address.is_unspecified),
    ("multicast", lambda address: address.is_multicast),
    ("reserved", lambda address: address.is_reserved),
    ("private", lambda address: address.is_private),
    # The rest that is not global, e.g. 100.64.0.0/10, where one cloud keeps its metadata.
    ("non-public", lambda address: not address.is_global),
)


def judge(policy: EgressPolicy, host: str, port: int, addresses: Sequence[IPAddress]) -> Verdict:
    """Decide whether the agent may connect to host:port, which resolved to addresses.

    `allowlist` admits exactly the listed host:port entries. `open` admits any host:port
    unless one of its addresses is not public; a listed entry is admitted all the same,
    since an operator may name e.g. a local model server on purpose.
    """
    if HostPort(host, port) in policy.allowed:
        return Verdict(True, "on the agent's allow-list")
    if policy.mode == "allowlist":
        return Verdict(False, "not on the agent's allow-list")
    if not addresses:
        return Verdict(False, "resolves to no address")
    for address in addresses:
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            address = address.ipv4_mapped  # ::ffff:127.0.0.1 reaches 127.0.0.1: judge that
        if isinstance(address, ipaddress.IPv6Address) and (address.sixtofour or address.teredo):
            # 2002:7f00:1:: and Teredo carry an IPv4 address a tunnel may deliver to.
            return Verdict(False, "resolves to a tunnelled IPv4 address")
        for kind, test in _NON_PUBLIC:
            if test(address):
                return Verdict(False, f"resolves to a {kind} address")
    return Verdict(True, "a public host")


def parse_request_head(head: bytes) -> ProxyRequest:
    """Read a request head through its blank line: `CONNECT host:port` or absolute-form http.

    Raise ValueError for anything else. A plain HTTP request is rewritten to origin-form
    with its own headers, less `Proxy-*` and hop-by-hop ones, `Host` taken from the URL
    (as RFC 9112 asks of a proxy) and `Connection: close`.
    """
    text = head.decode("latin-1")  # one byte, one character: the headers go on unchanged
    if not text.endswith("\r\n\r\n"):
        raise ValueError("the head does not end in a blank line")
    request_line, *header_lines = text[:-4].split("\r\n")
    request = _REQUEST_LINE.fullmatch(request_line)
    if request is None:
        raise ValueError("not an HTTP/1 request line")
    headers = [_header(line) for line in header_lines]
    method, target, version = request["method"], request["target"], request["version"]
    if method == "CONNECT":
        return ProxyRequest(_parse_authority(target, default_port=None), tunnel=True)
    if target[:7].lower() != "http://":
        raise ValueError("neither CONNECT nor an absolute-form http:// request")
    authority, path = _split_url(target[7:])
    destination = _parse_authority(authority, default_port=80)
    host_header = _bracketed(destination.host) if destination.port == 80 else str(destination)
    lines = [f"{method} {path} {version}", f"Host: {host_header}"]
    lines += [
        f"{name}: {value}"
        for name, value in headers
        if not name.lower().startswith("proxy-") and name.lower() not in _DROPPED_HEADERS
    ]
    lines.append("Connection: close")
    upstream_head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return ProxyRequest(destination, tunnel=False, upstream_head=upstream_head)


# The headers a provider's credential travels in: Anthropic's `x-api-key`, and the
# `Authorization: Bearer` of OpenAI's and of Anthropic's OAuth tokens.
CREDENTIAL_HEADERS = frozenset({"x-api-key", "authorization"})
LENT_TO = frozenset({b"GET", b"POST"})  # the methods a provider's API is called with


def lend_credentials(request: ProxyRequest, credentials: Sequence[HeldCredential]) -> ProxyRequest:
    """Return the plain HTTP request with the held credentials of its host in place (pure).

    A request to a held credential's host (on port 80 where the credential goes over
    TLS) has each placeholder in its credential headers replaced by the value, and goes
    on over TLS where the credential says; any other request is returned as it is.
    """
    if request.tunnel:
        tunnelled = tuple(c for c in credentials if request.target == _plain(c))
        if not tunnelled:
            return request
        return replace(request, target=tunnelled[0].host, tls=tunnelled[0].tls, lends=tunnelled)
    method, _, rest = request.upstream_head.partition(b" ")
    path = rest.partition(b" ")[0].decode("latin-1")
    if method not in LENT_TO:
        return request  # TRACE and the like echo the request, the key with it
    held = [c for c in credentials if request.target == _plain(c) and _under(path, c.path)]
    if not held:
        return request
    lines = [_lent(line, held) for line in request.upstream_head.split(b"\r\n")]
    return replace(request, target=held[0].host, tls=held[0].tls, upstream_head=b"\r\n".join(lines))


def lend_in_tunnel(head: bytes, credentials: Sequence[HeldCredential]) -> bytes:
    """Return the first request head of a tunnel to a held host with the credentials in
    place (pure); a head they are not for goes on as it came, placeholders and all.

    The head is read as strictly as a plain request's (no bare line feeds, no folded
    lines) and rebuilt, with `Host` the credential's own. Only the first request of a
    tunnel is read, so one that is not a WebSocket's upgrade is told to close the
    connection after its answer: a second request on it would go unread.
    """
    parsed = _origin_form(head)
    if parsed is None:
        return head
    request_line, path, headers = parsed
    held = [c for c in credentials if _under(path, c.path)]
    if request_line.split(" ", 1)[0].encode() not in LENT_TO or not held:
        return head
    plain = _plain(held[0])
    host = _bracketed(plain.host) if plain.port == 80 else str(plain)
    upgrade = any(name.lower() == "upgrade" for name, _ in headers)
    dropped = {"host"} if upgrade else {"host", *_DROPPED_HEADERS}
    lines = [request_line, f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers if name.lower() not in dropped]
    if not upgrade:
        lines.append("Connection: close")
    lent = [_lent(line.encode("latin-1"), held) for line in lines]
    return b"\r\n".join(lent) + b"\r\n\r\n"


def _origin_form(head: bytes) -> tuple[str, str, list[tuple[str, str]]] | None:
    """Read an origin-form request head: its request line, its path and its headers; None
    for anything that is not one, to the letter."""
    text = head.decode("latin-1")
    if not text.endswith("\r\n\r\n"):
        return None
    request_line, *header_lines = text[:-4].split("\r\n")
    request = _REQUEST_LINE.fullmatch(request_line)
    if request is None or not request["target"].startswith("/"):
        return None
    try:
        headers = [_header(line) for line in header_lines]
    except ValueError:
        return None
    return request_line, request["target"], headers


def _under(path: str, base: str) -> bool:
    """Tell whether a request's path is the endpoint's, or below it, with no way out of it."""
    lowered = path.lower()
    if "/." in path or "\\" in path or any(code in lowered for code in ("%2e", "%2f", "%5c")):
        return False  # `..`, and the spellings a server decodes before it resolves them
    return (path.split("?", 1)[0] + "/").startswith(base + "/")


def _plain(held: HeldCredential) -> HostPort:
    """Return where the agent sends plain HTTP for the credential's host."""
    return HostPort(held.host.host, 80) if held.tls else held.host


def _lent(line: bytes, held: Sequence[HeldCredential]) -> bytes:
    name, colon, value = line.partition(b":")
    if not colon or name.strip().lower().decode("latin-1") not in CREDENTIAL_HEADERS:
        return line
    for credential in held:
        value = value.replace(credential.placeholder.encode(), credential.value.encode("latin-1"))
    return name + colon + value


@dataclass(frozen=True)
class HeldKeys:
    """An adapter's provider keys as the proxy holds them: the jail's environment in their
    place, and the credentials the proxy adds."""

    env: dict[str, str]
    credentials: tuple[HeldCredential, ...]


# Per adapter: the variable naming its provider's endpoint, the endpoint it means when
# unset, and the variables holding keys the CLI sends in a credential header. Claude
# Code reads ANTHROPIC_BASE_URL, and sends ANTHROPIC_API_KEY as `x-api-key` and
# ANTHROPIC_AUTH_TOKEN as a Bearer token. Codex sends CODEX_API_KEY (or OPENAI_API_KEY)
# as a Bearer token to its `openai_base_url`, which Baton writes into its config from
# the endpoint named here. (A Claude subscription's login, a Codex ChatGPT login and
# aider keep their keys: see docs/security.md.)
CODEX_ENDPOINT_ENV = "OPENAI_BASE_URL"
_HELD_KEYS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "claude": (
        "ANTHROPIC_BASE_URL",
        "https://api.anthropic.com",
        ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
    ),
    "codex": (
        CODEX_ENDPOINT_ENV,
        "https://api.openai.com/v1",
        ("CODEX_API_KEY", "OPENAI_API_KEY"),
    ),
}
PLACEHOLDER = "baton-proxy-holds-{name}"


def held_keys(adapter: str, env: Mapping[str, str], endpoint: str | None = None) -> HeldKeys:
    """Return how the proxy holds the adapter's keys among env, the agent's environment (pure).

    The jail gets a placeholder for each key, and its endpoint (endpoint when given,
    else the adapter's variable in env, else its provider's) as plain `http://`, so
    the proxy reads each request and adds the key; an `https://` endpoint is reached
    over TLS from the proxy on. Raise ValueError for an endpoint that is not http(s).
    """
    if adapter not in _HELD_KEYS:
        return HeldKeys(env={}, credentials=())
    endpoint_name, default, names = _HELD_KEYS[adapter]
    present = [name for name in names if env.get(name)]
    if not present:
        return HeldKeys(env={}, credentials=())
    endpoint = endpoint or env.get(endpoint_name) or default
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{endpoint_name}={endpoint!r} is not an http(s) URL")
    tls = parts.scheme == "https"
    host = HostPort(parts.hostname, parts.port or (443 if tls else 80))
    plain = f"http://{_bracketed(host.host)}" + ("" if tls or host.port == 80 else f":{host.port}")
    base_path = parts.path.rstrip("/")
    jail_env = {endpoint_name: plain + base_path}
    credentials = []
    for name in present:
        placeholder = PLACEHOLDER.format(name=name)
        jail_env[name] = placeholder
        credentials.append(HeldCredential(placeholder, env[name], host, tls, base_path))
    return HeldKeys(env=jail_env, credentials=tuple(credentials))


def bridge_argv(python: str, socket_path: Path, port: int, argv: Sequence[str]) -> list[str]:
    """Return the command line that runs argv behind the bridge on 127.0.0.1:port."""
    if not 0 < port < 65536:
        raise ValueError(f"{port} is not a port (1-65535)")
    return [python, "-I", "-S", "-c", BRIDGE_SOURCE, str(socket_path), str(port), "--", *argv]


def _parse_authority(text: str, default_port: int | None) -> HostPort:
    """Read `host[:port]` or `[v6]:port`; raise ValueError saying what is wrong."""
    _check_authority_text(text)
    host, port_text = _split_v6(text) if text.startswith("[") else _split_named(text)
    if port_text is None:
        if default_port is None:
            raise ValueError("it needs a port")
        return HostPort(host, default_port)
    if not _PORT.fullmatch(port_text) or not 0 < int(port_text) < 65536:
        raise ValueError(f"{port_text!r} is not a port (1-65535)")
    return HostPort(host, int(port_text))


def _check_authority_text(text: str) -> None:
    """Refuse what is no authority at all: nothing, whitespace, a scheme or path, a user."""
    if not text:
        raise ValueError("it is empty")
    if any(char.isspace() for char in text):
        raise ValueError("it holds whitespace")
    if "/" in text:
        raise ValueError("give the host alone, with no scheme or path")
    if "@" in text:
        raise ValueError("give the host alone, with no user")


def _split_v6(text: str) -> tuple[str, str | None]:
    """Split `[v6]` or `[v6]:port` into the address and the port's text, if any."""
    inside, closed, rest = text[1:].partition("]")
    if not closed or (rest and not rest.startswith(":")):
        raise ValueError("an IPv6 address goes in brackets, e.g. [::1]:443")
    try:
        host = str(ipaddress.IPv6Address(inside))
    except ValueError:
        raise ValueError(f"{inside!r} is not an IPv6 address") from None
    return host, rest[1:] if rest else None


def _split_named(text: str) -> tuple[str, str | None]:
    """Split `host` or `host:port` (a name or an IPv4 address) into the host and the port's text."""
    if text.count(":") > 1:
        raise ValueError("an IPv6 address goes in brackets, e.g. [::1]:443")
    host, colon, after = text.partition(":")
    if not _HOSTNAME.fullmatch(host.lower()) or len(host) > 253:
        raise ValueError(f"{host!r} is not a host name or IP address")
    return host, after if colon else None


def _header(line: str) -> tuple[str, str]:
    match = _HEADER.fullmatch(line)
    if match is None:  # also a folded line, which would smuggle text into the one before
        raise ValueError(f"not a header line: {line[:80]!r}")
    return match["name"], match["value"]


def _split_url(rest: str) -> tuple[str, str]:
    """Split what follows `http://` into its authority and origin-form path and query."""
    end = next((n for n, char in enumerate(rest) if char in "/?#"), len(rest))
    authority, path = rest[:end], rest[end:].split("#", 1)[0]
    if not path.startswith("/"):
        path = "/" + path
    return authority, path


class Egress:
    """One agent run's proxy, while `serve_egress` runs it: what it has refused so far."""

    def __init__(self, policy: EgressPolicy, run_label: str) -> None:
        self._policy = policy
        self._run_label = run_label
        self._refused: set[str] = set()
        self._clients: set[asyncio.Task[None]] = set()
        self._closing = False

    @property
    def refused(self) -> tuple[str, ...]:
        """Return each host:port refused during this run, once, sorted."""
        return tuple(sorted(self._refused))

    async def _serve_client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self._closing:  # accepted just before the server closed: it must not outlive it
            await _close(writer)
            return
        if len(self._clients) >= MAX_CLIENTS:
            message = "Baton's sandbox proxy has too many connections open"
            await _fail(reader, writer, 503, message)
            await _close(writer)
            return
        self._clients.add(task)
        try:
            await self._serve(reader, writer)
        except OSError:
            pass  # the agent or the upstream hung up mid-way: nothing left to tell anyone
        except asyncio.CancelledError:
            if not self._closing:
                raise
            # The proxy closed it: ending quietly spares the log one asyncio error per
            # connection (Python 3.11 logs a handler task that ends cancelled).
        finally:
            self._clients.discard(task)
            await _close(writer)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(HEAD_TIMEOUT_S):
                head = await reader.readuntil(b"\r\n\r\n")
            request = lend_credentials(parse_request_head(head), self._policy.credentials)
        except asyncio.IncompleteReadError:
            return  # gone before it finished asking
        except (TimeoutError, asyncio.LimitOverrunError, ValueError):
            message = "Baton's sandbox proxy takes CONNECT host:port or an http:// URL"
            await _fail(reader, writer, 400, message)
            return
        target = request.target
        if self._policy.mode == "allowlist":
            # The name alone decides: a refused name is never looked up, so no DNS query
            # carries anything out of the sandbox.
            verdict = judge(self._policy, target.host, target.port, ())
            if not verdict.allowed:
                await self._refuse(reader, writer, target, verdict.reason)
                return
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                addresses = await _resolve(target)
        except (OSError, TimeoutError) as exc:
            reason = str(exc) or "timed out"
            await _fail(
                reader, writer, 502, f"Baton's sandbox proxy cannot resolve {target}: {reason}"
            )
            return
        verdict = judge(self._policy, target.host, target.port, addresses)
        if not verdict.allowed:
            await self._refuse(reader, writer, target, verdict.reason)
            return
        try:
            # The addresses judged are the ones connected to: no second lookup to rebind.
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                upstream_reader, upstream_writer = await _connect(
                    addresses, target, tls=request.tls
                )
        except (OSError, TimeoutError) as exc:
            reason = str(exc) or "timed out"
            await _fail(
                reader, writer, 502, f"Baton's sandbox proxy cannot reach {target}: {reason}"
            )
            return
        try:
            await _carry(request, reader, writer, upstream_reader, upstream_writer)
        finally:
            await _close(upstream_writer)

    async def _refuse(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        target: HostPort,
        reason: str,
    ) -> None:
        if str(target) not in self._refused:
            self._refused.add(str(target))
            log.warning("%s: the agent's sandbox refused %s: %s", self._run_label, target, reason)
        await _fail(reader, writer, 403, f"Baton's sandbox refused {target}: {reason}")

    async def _close_clients(self) -> None:
        self._closing = True
        clients = list(self._clients)
        for task in clients:
            task.cancel()
        await asyncio.gather(*clients, return_exceptions=True)


@contextlib.asynccontextmanager
async def serve_egress(
    policy: EgressPolicy, socket_path: Path, run_label: str
) -> AsyncIterator[Egress]:
    """Serve the agent's proxy on socket_path for the block; close every connection after.

    The socket is the run user's alone (mode 0600): the sandboxed agent runs as the same
    host uid, and nobody else needs it.
    """
    proxy = Egress(policy, run_label)
    listener = _private_unix_socket(socket_path)
    server = await asyncio.start_unix_server(proxy._serve_client, sock=listener, limit=MAX_HEAD)
    try:
        yield proxy
    finally:
        server.close()
        await proxy._close_clients()
        await server.wait_closed()
        _remove_socket(socket_path)


def _private_unix_socket(path: Path) -> socket.socket:
    """Return a Unix socket bound at path, mode 0600, not yet listening."""
    _remove_socket(path)  # a previous run's, left behind by a crash
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(path))
        # Before listen: until then nobody can connect, so nobody connects while it is open.
        os.chmod(path, 0o600)
    except OSError:
        sock.close()
        raise
    return sock


def _remove_socket(path: Path) -> None:
    if path.is_socket():
        path.unlink()


async def _resolve(target: HostPort) -> list[IPAddress]:
    infos = await asyncio.get_running_loop().getaddrinfo(
        target.host, target.port, type=socket.SOCK_STREAM
    )
    return list(dict.fromkeys(ipaddress.ip_address(str(info[4][0])) for info in infos))


async def _connect(
    addresses: Sequence[IPAddress], target: HostPort, tls: bool = False
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to the first of addresses that answers; over TLS, verified as target's host."""
    error: OSError = OSError("no address to connect to")
    context = ssl.create_default_context() if tls else None
    hostname = target.host if tls else None
    for address in addresses:
        try:
            return await asyncio.open_connection(
                str(address), target.port, limit=CHUNK, ssl=context, server_hostname=hostname
            )
        except OSError as exc:
            error = exc
    raise error


async def _carry(
    request: ProxyRequest,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream_writer: asyncio.StreamWriter,
) -> None:
    """Open the tunnel or send the plain request on, then relay both ways until done."""
    try:
        if request.tunnel:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            if request.lends:
                await _lend_first_request(reader, upstream_writer, request.lends)
        else:
            upstream_writer.write(request.upstream_head)
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError):
        return  # a tunnel whose first request never came whole: nothing goes on
    await _relay(reader, writer, upstream_reader, upstream_writer)


async def _lend_first_request(
    reader: asyncio.StreamReader,
    upstream: asyncio.StreamWriter,
    credentials: Sequence[HeldCredential],
) -> None:
    """Send a tunnel's first request head on with the held credentials in place."""
    async with asyncio.timeout(HEAD_TIMEOUT_S):
        head = await reader.readuntil(b"\r\n\r\n")
    upstream.write(lend_in_tunnel(head, credentials))


async def _relay(
    client_reader: asyncio.StreamReader,
    client_writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream_writer: asyncio.StreamWriter,
) -> None:
    """Copy bytes both ways until both directions have ended, or one of them failed."""
    try:
        async with asyncio.TaskGroup() as directions:
            directions.create_task(_pump(client_reader, upstream_writer))
            directions.create_task(_pump(upstream_reader, client_writer))
    except* OSError:
        pass  # one side is gone; the group has stopped the other direction


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy reader to writer; pass its end on as a half-close, so the other way keeps going."""
    while data := await reader.read(CHUNK):
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()


def _answer_bytes(status: int, message: str) -> bytes:
    body = (message + "\n").encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        "Content-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


async def _answer(writer: asyncio.StreamWriter, status: int, message: str) -> None:
    writer.write(_answer_bytes(status, message))
    with contextlib.suppress(OSError):
        await writer.drain()


async def _fail(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int, message: str
) -> None:
    """Answer with an error, end the answer, then read what the client still sends a moment.

    Closing a socket with unread input resets the connection, and a reset can cost the
    client the answer it has not read yet.
    """
    await _answer(writer, status, message)
    if writer.can_write_eof():
        writer.write_eof()
    with contextlib.suppress(OSError, TimeoutError):
        async with asyncio.timeout(LINGER_S):
            while await reader.read(CHUNK):
                pass


async def _close(writer: asyncio.StreamWriter) -> None:
    writer.close()
    try:
        async with asyncio.timeout(LINGER_S):
            await writer.wait_closed()
    except (OSError, TimeoutError):
        writer.transport.abort()  # a peer that reads nothing must not hold the proxy open
