"""The agent's egress proxy: entries, provider hosts, verdicts, and real connections.

The connection tests run on loopback only: a local HTTP server stands for an allowed
host, the proxy serves a Unix socket, and the bridge runs as a real process on the host
(no sandbox needed) in front of a child that uses the proxy variables like any client.
"""

from __future__ import annotations

import asyncio
import importlib
import ipaddress
import json
import logging
import os
import signal
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from bot.agents.egress import (
    BRIDGE_SOURCE,
    EgressPolicy,
    HeldCredential,
    HostPort,
    IPAddress,
    ProxyRequest,
    bridge_argv,
    held_keys,
    judge,
    lend_credentials,
    lend_in_tunnel,
    parse_host_port,
    parse_request_head,
    provider_hosts,
    serve_egress,
)

# `bot.agents` has a function named `egress`, which hides the module as an attribute.
egress_module = importlib.import_module("bot.agents.egress")

RUN = "octo/widgets#3"
ANTHROPIC = HostPort("api.anthropic.com", 443)
OPENAI = HostPort("api.openai.com", 443)
WAIT_S = 30.0


# -- host:port entries -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entry", "host", "port"),
    [
        ("api.anthropic.com", "api.anthropic.com", 443),
        ("API.Anthropic.COM:8443", "api.anthropic.com", 8443),
        ("models_1.internal-net:1", "models_1.internal-net", 1),
        ("localhost:65535", "localhost", 65535),
        ("127.0.0.1:11434", "127.0.0.1", 11434),
        ("[::1]:8080", "::1", 8080),
        ("[::1]", "::1", 443),
        ("[0:0::1]:80", "::1", 80),
        ("[FD00::AB]:80", "fd00::ab", 80),
    ],
)
def test_parse_host_port_reads_an_entry(entry: str, host: str, port: int) -> None:
    assert parse_host_port(entry) == HostPort(host, port)


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("", "empty"),
        (" ", "whitespace"),
        ("api.anthropic.com :443", "whitespace"),
        ("api.anthropic.com\t", "whitespace"),
        ("https://api.anthropic.com", "no scheme"),
        ("api.anthropic.com/v1", "no scheme or path"),
        ("token@api.anthropic.com", "no user"),
        ("api.anthropic.com:", "not a port"),
        ("api.anthropic.com:0", "not a port"),
        ("api.anthropic.com:65536", "not a port"),
        ("api.anthropic.com:443443", "not a port"),
        ("api.anthropic.com:https", "not a port"),
        ("api.anthropic.com:+443", "not a port"),
        ("api.anthropic.com:-1", "not a port"),
        ("::1", "in brackets"),
        ("x:80:90", "in brackets"),
        ("[::1", "in brackets"),
        ("[::1]8080", "in brackets"),
        ("[127.0.0.1]:80", "not an IPv6 address"),
        ("[]:80", "not an IPv6 address"),
        (":443", "not a host name"),
        ("-api.example.com", "not a host name"),
        ("api-.example.com", "not a host name"),
        ("api..example.com", "not a host name"),
        ("api.example.com.", "not a host name"),
        ("*.example.com", "not a host name"),
        ("a" * 64 + ".example.com", "not a host name"),
        (".".join(["a" * 63] * 4) + ".com", "not a host name"),
    ],
)
def test_parse_host_port_refuses_junk_naming_the_entry(entry: str, why: str) -> None:
    with pytest.raises(ValueError, match="is not host") as raised:
        parse_host_port(entry)
    assert repr(entry) in str(raised.value)
    assert why in str(raised.value)


def test_host_port_compares_hosts_as_the_network_does() -> None:
    assert HostPort("API.Anthropic.com", 443) == ANTHROPIC
    assert HostPort("0:0::1", 80) == HostPort("::1", 80)
    assert HostPort("api.anthropic.com", 443) != HostPort("api.anthropic.com", 8443)
    assert str(HostPort("::1", 8080)) == "[::1]:8080"
    assert str(ANTHROPIC) == "api.anthropic.com:443"
    with pytest.raises(ValueError, match="not a port"):
        HostPort("api.anthropic.com", 0)


# -- provider hosts ----------------------------------------------------------------------

GEMINI = HostPort("generativelanguage.googleapis.com", 443)
DEEPSEEK = HostPort("api.deepseek.com", 443)


@pytest.mark.parametrize(
    ("adapter", "model", "hosts"),
    [
        ("claude", None, (ANTHROPIC,)),
        ("claude", "claude-opus-4", (ANTHROPIC,)),
        ("codex", None, (OPENAI, HostPort("chatgpt.com", 443))),
        ("command", None, ()),
        ("command", "gpt-4o", ()),
        ("aider", "anthropic/claude-3-5-sonnet-20241022", (ANTHROPIC,)),
        ("aider", "claude-3-5-sonnet-20241022", (ANTHROPIC,)),
        ("aider", "Claude-3-Opus", (ANTHROPIC,)),
        ("aider", "sonnet", (ANTHROPIC,)),
        ("aider", "opus", (ANTHROPIC,)),
        ("aider", "haiku", (ANTHROPIC,)),
        ("aider", "openai/gpt-4o", (OPENAI,)),
        ("aider", "gpt-4o-mini", (OPENAI,)),
        ("aider", "o1", (OPENAI,)),
        ("aider", "o1-preview", (OPENAI,)),
        ("aider", "o3-mini", (OPENAI,)),
        ("aider", "o4-mini", (OPENAI,)),
        ("aider", "gemini/gemini-1.5-pro", (GEMINI,)),
        ("aider", "gemini-2.0-flash", (GEMINI,)),
        ("aider", "deepseek/deepseek-chat", (DEEPSEEK,)),
        ("aider", "deepseek-coder", (DEEPSEEK,)),
        ("aider", "openrouter/anthropic/claude-3.5-sonnet", (HostPort("openrouter.ai", 443),)),
        ("aider", "mistral/mistral-large-latest", (HostPort("api.mistral.ai", 443),)),
        ("aider", "mistral-large-latest", (HostPort("api.mistral.ai", 443),)),
        ("aider", "groq/llama3-70b-8192", (HostPort("api.groq.com", 443),)),
        ("aider", None, (ANTHROPIC, OPENAI)),
        ("aider", "", (ANTHROPIC, OPENAI)),
        ("aider", "llama3", (ANTHROPIC, OPENAI)),
        ("aider", "o10-turbo", (ANTHROPIC, OPENAI)),
        ("aider", "opusx", (ANTHROPIC, OPENAI)),
        # Another endpoint altogether, whatever family the model is from.
        ("aider", "azure/gpt-4o", (ANTHROPIC, OPENAI)),
        ("aider", "bedrock/anthropic.claude-3-sonnet", (ANTHROPIC, OPENAI)),
    ],
)
def test_provider_hosts(adapter: str, model: str | None, hosts: tuple[HostPort, ...]) -> None:
    assert provider_hosts(adapter, model) == hosts


def test_provider_hosts_refuses_an_unknown_adapter() -> None:
    with pytest.raises(ValueError, match="'goose'"):
        provider_hosts("goose", None)


# -- verdicts ----------------------------------------------------------------------------


def addresses(*texts: str) -> list[IPAddress]:
    return [ipaddress.ip_address(text) for text in texts]


PUBLIC = addresses("93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c")
LISTED = EgressPolicy(
    "allowlist",
    frozenset({ANTHROPIC, HostPort("10.0.0.5", 8000), HostPort("::1", 8080)}),
)


@pytest.mark.parametrize(
    ("host", "port", "resolved"),
    [
        ("api.anthropic.com", 443, PUBLIC),
        ("API.ANTHROPIC.COM", 443, PUBLIC),
        ("10.0.0.5", 8000, addresses("10.0.0.5")),
        ("0:0::1", 8080, addresses("::1")),
        # The operator listed it: where it resolves is theirs to know.
        ("api.anthropic.com", 443, addresses("127.0.0.1")),
        ("api.anthropic.com", 443, []),
    ],
)
def test_allowlist_admits_exactly_the_listed_entries(
    host: str, port: int, resolved: list[IPAddress]
) -> None:
    assert judge(LISTED, host, port, resolved) == egress_module.Verdict(
        True, "on the agent's allow-list"
    )


@pytest.mark.parametrize(
    ("host", "port"),
    [
        ("api.anthropic.com", 8443),
        ("api.anthropic.com.evil.example", 443),
        ("anthropic.com", 443),
        ("api.openai.com", 443),
        ("10.0.0.5", 443),
        ("10.0.0.6", 8000),
    ],
)
def test_allowlist_refuses_everything_else(host: str, port: int) -> None:
    verdict = judge(LISTED, host, port, PUBLIC)
    assert not verdict.allowed
    assert verdict.reason == "not on the agent's allow-list"


def test_open_admits_a_public_host() -> None:
    verdict = judge(EgressPolicy("open"), "example.com", 443, PUBLIC)
    assert verdict.allowed
    assert verdict.reason == "a public host"


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.53.0.1", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),  # noqa: S104 (an address judged, not bound)
        ("::", "unspecified"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("fd00::1", "private"),
        ("100.100.100.200", "non-public"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
    ],
)
def test_open_refuses_an_address_that_is_not_public(address: str, kind: str) -> None:
    verdict = judge(EgressPolicy("open"), "sneaky.example", 80, addresses(address))
    assert not verdict.allowed
    assert verdict.reason == f"resolves to a {kind} address"


def test_open_refuses_when_any_address_is_not_public() -> None:
    verdict = judge(EgressPolicy("open"), "sneaky.example", 80, [*PUBLIC, *addresses("10.0.0.1")])
    assert verdict.reason == "resolves to a private address"
    assert not verdict.allowed


def test_open_refuses_a_host_with_no_address() -> None:
    verdict = judge(EgressPolicy("open"), "nowhere.example", 443, [])
    assert verdict == egress_module.Verdict(False, "resolves to no address")


def test_open_admits_a_listed_loopback_address_only_on_its_port() -> None:
    policy = EgressPolicy("open", frozenset({HostPort("127.0.0.1", 11434)}))
    loopback = addresses("127.0.0.1")
    assert judge(policy, "127.0.0.1", 11434, loopback).allowed
    assert not judge(policy, "127.0.0.1", 22, loopback).allowed
    assert not judge(policy, "localhost", 11434, loopback).allowed


# -- request heads -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("head", "target"),
    [
        (
            b"CONNECT api.anthropic.com:443 HTTP/1.1\r\nHost: api.anthropic.com:443\r\n\r\n",
            ANTHROPIC,
        ),
        (b"CONNECT API.anthropic.com:443 HTTP/1.0\r\n\r\n", ANTHROPIC),
        (b"CONNECT [::1]:8080 HTTP/1.1\r\n\r\n", HostPort("::1", 8080)),
    ],
)
def test_parse_request_head_reads_a_tunnel(head: bytes, target: HostPort) -> None:
    assert parse_request_head(head) == ProxyRequest(target, tunnel=True)


def test_parse_request_head_rewrites_plain_http_to_origin_form() -> None:
    head = (
        b"POST http://Models.Example:8080/v1/chat?stream=0#part HTTP/1.1\r\n"
        b"Host: elsewhere.example\r\n"
        b"User-Agent: agent/1.0\r\n"
        b"Proxy-Authorization: Basic c2VjcmV0\r\n"
        b"Proxy-Connection: keep-alive\r\n"
        b"Connection: keep-alive\r\n"
        b"Keep-Alive: timeout=5\r\n"
        b"X-Note:   caf\xe9  \r\n"
        b"Content-Length: 2\r\n\r\n"
    )
    request = parse_request_head(head)
    assert request.target == HostPort("models.example", 8080)
    assert not request.tunnel
    assert request.upstream_head == (
        b"POST /v1/chat?stream=0 HTTP/1.1\r\n"
        b"Host: models.example:8080\r\n"
        b"User-Agent: agent/1.0\r\n"
        b"X-Note: caf\xe9\r\n"
        b"Content-Length: 2\r\n"
        b"Connection: close\r\n\r\n"
    )


@pytest.mark.parametrize(
    ("url", "target", "request_line", "host_header"),
    [
        ("http://example.com", HostPort("example.com", 80), b"GET / HTTP/1.0", b"example.com"),
        (
            "HTTP://example.com?q=1",
            HostPort("example.com", 80),
            b"GET /?q=1 HTTP/1.0",
            b"example.com",
        ),
        ("http://[::1]:8080/x", HostPort("::1", 8080), b"GET /x HTTP/1.0", b"[::1]:8080"),
        ("http://[::1]/x", HostPort("::1", 80), b"GET /x HTTP/1.0", b"[::1]"),
    ],
)
def test_parse_request_head_reads_the_url(
    url: str, target: HostPort, request_line: bytes, host_header: bytes
) -> None:
    request = parse_request_head(f"GET {url} HTTP/1.0\r\n\r\n".encode())
    assert request.target == target
    assert request.upstream_head == (
        request_line + b"\r\nHost: " + host_header + b"\r\nConnection: close\r\n\r\n"
    )


@pytest.mark.parametrize(
    "head",
    [
        b"",
        b"\r\n\r\n",
        b"hello\r\n\r\n",
        b"GET /relative HTTP/1.1\r\nHost: example.com\r\n\r\n",
        b"GET https://example.com/ HTTP/1.1\r\n\r\n",
        b"GET ftp://example.com/ HTTP/1.1\r\n\r\n",
        b"GET http://example.com/ HTTP/2\r\n\r\n",
        b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n",
        b"GET http://example.com/  HTTP/1.1\r\n\r\n",
        b"GET http://user@example.com/ HTTP/1.1\r\n\r\n",
        b"GET http:///path HTTP/1.1\r\n\r\n",
        b"GET http://example.com:99999/ HTTP/1.1\r\n\r\n",
        b"GET http://example.com/ HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n",
        b"GET http://example.com/ HTTP/1.1\r\nno colon here\r\n\r\n",
        b"GET http://example.com/ HTTP/1.1\r\nX-A: 1\nX-B: 2\r\n\r\n",
        b"GET http://example.com/ HTTP/1.1\r\nX A: 1\r\n\r\n",
        b"CONNECT api.anthropic.com HTTP/1.1\r\n\r\n",
        b"CONNECT https://api.anthropic.com:443 HTTP/1.1\r\n\r\n",
        b"connect api.anthropic.com:443 HTTP/1.1\r\n\r\n",
    ],
)
def test_parse_request_head_refuses_junk(head: bytes) -> None:
    with pytest.raises(ValueError):
        parse_request_head(head)


# -- the bridge's command line -----------------------------------------------------------


def test_bridge_argv_runs_the_bridge_source_in_front_of_the_command() -> None:
    argv = bridge_argv("/usr/bin/python3", Path("/run/baton/egress.sock"), 3128, ["claude", "-p"])
    assert argv == [
        "/usr/bin/python3",
        "-I",
        "-S",
        "-c",
        BRIDGE_SOURCE,
        "/run/baton/egress.sock",
        "3128",
        "--",
        "claude",
        "-p",
    ]
    bridge_file = Path(__file__).parents[2] / "bot" / "agents" / "egress_bridge.py"
    assert bridge_file.read_text(encoding="utf-8") == BRIDGE_SOURCE
    with pytest.raises(ValueError, match="not a port"):
        bridge_argv("/usr/bin/python3", Path("/run/baton/egress.sock"), 0, ["claude"])


# -- real connections --------------------------------------------------------------------


@pytest.fixture
def socket_dir() -> Iterator[Path]:
    """A short directory: a Unix socket's path must fit in 108 bytes."""
    with tempfile.TemporaryDirectory(prefix="egress-") as directory:
        yield Path(directory)


@dataclass
class Upstream:
    """A local HTTP server standing for a host the agent may reach."""

    port: int
    seen: list[dict[str, str]]

    @property
    def host_port(self) -> HostPort:
        return HostPort("127.0.0.1", self.port)


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    seen: list[dict[str, str]] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(
            {
                "request": f"{request.method} {request.path_qs}",
                "host": request.headers.get("Host", ""),
                "connection": request.headers.get("Connection", ""),
                "proxy_authorization": request.headers.get("Proxy-Authorization", ""),
                "note": request.headers.get("X-Note", ""),
            }
        )
        return web.Response(text=f"hello from upstream at {request.path_qs}")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield Upstream(port, seen)
    await runner.cleanup()


@pytest.fixture
async def echo_port() -> AsyncIterator[int]:
    """A server that reads until its client half-closes, then answers `echo:` + what it read."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()
        writer.write(b"echo:" + data)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    yield server.sockets[0].getsockname()[1]
    server.close()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def closed_port() -> int:
    """Return a loopback port nothing listens on."""
    return free_port()


@dataclass
class Finished:
    returncode: int
    stdout: bytes
    stderr: bytes


async def run_bridge(
    socket_path: Path, port: int, code: str, *args: str, stdin: bytes = b""
) -> Finished:
    """Run the bridge in front of `python -c code args` with the agent's proxy variables."""
    proxy = f"http://127.0.0.1:{port}"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"}
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"):
        env[name] = proxy
    env["NO_PROXY"] = env["no_proxy"] = ""
    argv = bridge_argv(sys.executable, socket_path, port, [sys.executable, "-c", code, *args])
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(stdin), WAIT_S)
    assert process.returncode is not None
    return Finished(process.returncode, stdout, stderr)


AGENT = r"""
import http.client, json, os, sys, urllib.error, urllib.request
from urllib.parse import urlsplit

upstream_port = int(sys.argv[1])
proxy = urlsplit(os.environ["HTTPS_PROXY"])

def get(url, headers=None):
    try:
        request = urllib.request.Request(url, headers=headers or {})
        with urllib.request.urlopen(request, timeout=20) as response:
            return [response.status, response.read().decode()]
    except urllib.error.HTTPError as exc:
        return [exc.code, exc.read().decode()]

def tunnel(host, port):
    conn = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=20)
    conn.set_tunnel(host, port)
    try:
        conn.request("GET", "/through-the-tunnel", headers={"X-Note": "tunnelled"})
    except OSError as exc:
        return [0, str(exc)]
    response = conn.getresponse()
    return [response.status, response.read().decode()]

results = {
    "plain": get(
        f"http://127.0.0.1:{upstream_port}/hello?who=agent",
        {"Proxy-Authorization": "Basic c2VjcmV0", "X-Note": "plain"},
    ),
    "tunnel": tunnel("127.0.0.1", upstream_port),
    "refused": [get("http://refused.invalid/secret") for _ in range(2)],
    "refused_tunnel": tunnel("refused.invalid", 443),
}
print(json.dumps(results))
sys.exit(7)
"""


async def test_an_agent_behind_the_bridge_reaches_what_is_allowed_and_nothing_else(
    socket_dir: Path, upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="bot.agents.egress")
    policy = EgressPolicy("allowlist", frozenset({upstream.host_port}))
    socket_path = socket_dir / "egress.sock"
    async with serve_egress(policy, socket_path, RUN) as proxy:
        finished = await run_bridge(socket_path, free_port(), AGENT, str(upstream.port))
        refused = proxy.refused

    assert finished.stderr == b""
    assert finished.returncode == 7
    results = json.loads(finished.stdout)  # the child's output alone: one JSON document
    assert results["plain"] == [200, "hello from upstream at /hello?who=agent"]
    assert results["tunnel"] == [200, "hello from upstream at /through-the-tunnel"]
    refusal = "Baton's sandbox refused refused.invalid:80: not on the agent's allow-list\n"
    assert results["refused"] == [[403, refusal], [403, refusal]]
    assert results["refused_tunnel"] == [0, "Tunnel connection failed: 403 Forbidden"]

    plain, tunnelled = upstream.seen
    assert plain == {
        "request": "GET /hello?who=agent",
        "host": f"127.0.0.1:{upstream.port}",
        "connection": "close",
        "proxy_authorization": "",
        "note": "plain",
    }
    assert tunnelled["request"] == "GET /through-the-tunnel"
    assert tunnelled["note"] == "tunnelled"

    assert refused == ("refused.invalid:443", "refused.invalid:80")
    warnings = [record.getMessage() for record in caplog.records]
    assert warnings == [
        f"{RUN}: the agent's sandbox refused refused.invalid:80: not on the agent's allow-list",
        f"{RUN}: the agent's sandbox refused refused.invalid:443: not on the agent's allow-list",
    ]
    assert not socket_path.exists()


HALF_CLOSE = r"""
import os, socket, sys
from urllib.parse import urlsplit

proxy = urlsplit(os.environ["HTTPS_PROXY"])
conn = socket.create_connection((proxy.hostname, proxy.port), timeout=20)
conn.sendall(f"CONNECT 127.0.0.1:{sys.argv[1]} HTTP/1.1\r\n\r\n".encode())
answer = b""
while not answer.endswith(b"\r\n\r\n"):
    answer += conn.recv(1)
conn.sendall(b"ping")
conn.shutdown(socket.SHUT_WR)
reply = b""
while chunk := conn.recv(65536):
    reply += chunk
sys.stdout.write(answer.decode() + reply.decode())
"""


async def test_a_tunnel_carries_a_half_close_both_through_the_bridge_and_the_proxy(
    socket_dir: Path, echo_port: int
) -> None:
    policy = EgressPolicy("allowlist", frozenset({HostPort("127.0.0.1", echo_port)}))
    socket_path = socket_dir / "egress.sock"
    async with serve_egress(policy, socket_path, RUN):
        finished = await run_bridge(socket_path, free_port(), HALF_CLOSE, str(echo_port))
    assert (finished.returncode, finished.stderr) == (0, b"")
    assert finished.stdout == b"HTTP/1.1 200 Connection established\r\n\r\necho:ping"


@pytest.mark.parametrize(
    ("code", "returncode"),
    [
        ("import sys; sys.exit(0)", 0),
        ("import sys; sys.exit(3)", 3),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + signal.SIGKILL),
        ("import os, signal; os.kill(os.getpid(), signal.SIGTERM)", 128 + signal.SIGTERM),
    ],
)
async def test_the_bridge_exits_as_its_child_did(
    socket_dir: Path, code: str, returncode: int
) -> None:
    finished = await run_bridge(socket_dir / "egress.sock", free_port(), code)
    assert finished.returncode == returncode
    assert (finished.stdout, finished.stderr) == (b"", b"")


async def test_the_child_has_the_bridges_stdin_stdout_and_stderr(socket_dir: Path) -> None:
    code = "import sys; data = sys.stdin.read(); print(data.upper()); print('err', file=sys.stderr)"
    finished = await run_bridge(socket_dir / "egress.sock", free_port(), code, stdin=b"brief")
    assert finished == Finished(0, b"BRIEF\n", b"err\n")


SIGNALLED = r"""
import signal, sys, time

def caught(signum, frame):
    print(signal.Signals(signum).name, flush=True)
    sys.exit(5)

for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(signum, caught)
print("ready", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
async def test_the_bridge_hands_its_signals_to_the_child(
    socket_dir: Path, signum: signal.Signals
) -> None:
    argv = bridge_argv(
        sys.executable, socket_dir / "egress.sock", free_port(), [sys.executable, "-c", SIGNALLED]
    )
    process = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE)
    assert process.stdout is not None
    assert await asyncio.wait_for(process.stdout.readline(), WAIT_S) == b"ready\n"
    process.send_signal(signum)
    stdout, _ = await asyncio.wait_for(process.communicate(), WAIT_S)
    # Killed itself by the signal, the bridge would report -signum.
    assert (process.returncode, stdout) == (5, f"{signum.name}\n".encode())


async def test_the_bridge_exits_127_when_the_child_cannot_start(socket_dir: Path) -> None:
    argv = bridge_argv(sys.executable, socket_dir / "egress.sock", free_port(), ["/no/such/agent"])
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), WAIT_S)
    assert process.returncode == 127
    assert stdout == b""
    assert stderr.startswith(b"baton-bridge: cannot start /no/such/agent: ")
    assert stderr.count(b"\n") == 1


async def test_the_bridge_exits_127_when_its_port_is_taken(socket_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        finished = await run_bridge(socket_dir / "egress.sock", port, "print('ran')")
    assert finished.returncode == 127
    assert finished.stdout == b""
    assert finished.stderr.startswith(f"baton-bridge: cannot listen on 127.0.0.1:{port}".encode())


# -- the proxy on its own socket ---------------------------------------------------------


@asynccontextmanager
async def connection(
    socket_path: Path,
) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    reader, writer = await asyncio.open_unix_connection(str(socket_path))
    try:
        yield reader, writer
    finally:
        writer.close()


# An answer that ends at once: the client need not wait out the proxy's linger to see it.
PROMPTLY_S = egress_module.LINGER_S / 2


async def ask(socket_path: Path, head: bytes, within: float = PROMPTLY_S) -> bytes:
    """Send head to the proxy and return all it answers until it ends its answer."""
    async with connection(socket_path) as (reader, writer):
        writer.write(head)
        return await asyncio.wait_for(reader.read(), within)


async def tunnel_to(socket_path: Path, target: str) -> bytes:
    """Open a tunnel, send `ping` and half-close; return all the proxy answers."""
    async with connection(socket_path) as (reader, writer):
        writer.write(f"CONNECT {target} HTTP/1.1\r\n\r\n".encode())
        writer.write(b"ping")
        writer.write_eof()
        return await asyncio.wait_for(reader.read(), WAIT_S)


def forbidden(target: str, reason: str) -> bytes:
    body = f"Baton's sandbox refused {target}: {reason}\n".encode()
    return (
        b"HTTP/1.1 403 Forbidden\r\nContent-Type: text/plain; charset=utf-8\r\n"
        + f"Content-Length: {len(body)}\r\n".encode()
        + b"Connection: close\r\n\r\n"
        + body
    )


async def test_open_mode_refuses_the_hosts_loopback_unless_listed(
    socket_dir: Path, echo_port: int
) -> None:
    socket_path = socket_dir / "egress.sock"
    async with serve_egress(EgressPolicy("open"), socket_path, RUN) as proxy:
        for target in (f"127.0.0.1:{echo_port}", f"localhost:{echo_port}"):
            answer = await tunnel_to(socket_path, target)
            assert answer == forbidden(target, "resolves to a loopback address")
        assert proxy.refused == (f"127.0.0.1:{echo_port}", f"localhost:{echo_port}")

    listed = EgressPolicy("open", frozenset({HostPort("127.0.0.1", echo_port)}))
    async with serve_egress(listed, socket_path, RUN) as proxy:
        answer = await tunnel_to(socket_path, f"127.0.0.1:{echo_port}")
        assert answer == b"HTTP/1.1 200 Connection established\r\n\r\necho:ping"
        assert proxy.refused == ()


@pytest.mark.parametrize(
    "head",
    [
        b"GET /relative HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"GET https://127.0.0.1/ HTTP/1.1\r\n\r\n",
        b"SSH-2.0-OpenSSH_9.6\r\n\r\n",
        b"GET http://127.0.0.1/ HTTP/1.1\r\nX-A: " + b"a" * (65 * 1024) + b"\r\n\r\n",
    ],
)
async def test_the_proxy_answers_junk_400(socket_dir: Path, head: bytes) -> None:
    socket_path = socket_dir / "egress.sock"
    async with serve_egress(EgressPolicy("open"), socket_path, RUN) as proxy:
        answer = await ask(socket_path, head)
        assert proxy.refused == ()
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
    assert answer.endswith(
        b"\r\n\r\nBaton's sandbox proxy takes CONNECT host:port or an http:// URL\n"
    )


async def test_the_proxy_answers_400_when_the_head_never_ends(
    socket_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(egress_module, "HEAD_TIMEOUT_S", 0.2)
    socket_path = socket_dir / "egress.sock"
    async with (
        serve_egress(EgressPolicy("open"), socket_path, RUN),
        connection(socket_path) as (
            reader,
            writer,
        ),
    ):
        writer.write(b"CONNECT 127.0.0.1:443 HTTP/1.1\r\n")
        answer = await asyncio.wait_for(reader.read(), 5)
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")


async def test_the_proxy_answers_502_when_the_upstream_does_not_answer(socket_dir: Path) -> None:
    port = closed_port()
    policy = EgressPolicy("allowlist", frozenset({HostPort("127.0.0.1", port)}))
    socket_path = socket_dir / "egress.sock"
    async with serve_egress(policy, socket_path, RUN) as proxy:
        answer = await tunnel_to(socket_path, f"127.0.0.1:{port}")
        assert proxy.refused == ()
    assert answer.startswith(b"HTTP/1.1 502 Bad Gateway\r\n")
    assert f"cannot reach 127.0.0.1:{port}: ".encode() in answer


async def test_the_proxy_answers_503_past_its_connection_cap(
    socket_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(egress_module, "MAX_CLIENTS", 4)
    socket_path = socket_dir / "egress.sock"
    async with serve_egress(EgressPolicy("open"), socket_path, RUN):
        held = [await asyncio.open_unix_connection(str(socket_path)) for _ in range(4)]
        await asyncio.sleep(0.2)  # let the proxy take them all in
        answer = await ask(socket_path, b"CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        for _, writer in held[:1]:
            writer.close()
        await asyncio.sleep(0.2)
        answer = await ask(socket_path, b"hello\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")  # served again
        for _, writer in held[1:]:
            writer.close()


async def test_the_socket_is_private_and_every_connection_ends_with_the_proxy(
    socket_dir: Path, echo_port: int
) -> None:
    socket_path = socket_dir / "egress.sock"
    leftover = socket.socket(socket.AF_UNIX)
    leftover.bind(str(socket_path))  # a crashed run's socket, still on disk
    leftover.close()
    policy = EgressPolicy("allowlist", frozenset({HostPort("127.0.0.1", echo_port)}))
    async with serve_egress(policy, socket_path, RUN):
        assert stat.S_IMODE(socket_path.stat().st_mode) == 0o600
        reader, writer = await asyncio.open_unix_connection(str(socket_path))
        writer.write(f"CONNECT 127.0.0.1:{echo_port} HTTP/1.1\r\n\r\n".encode())
        established = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT_S)
        assert established == b"HTTP/1.1 200 Connection established\r\n\r\n"
        writer.write(b"still talking")  # the echo server waits for more: the tunnel stays up
    assert await asyncio.wait_for(reader.read(), 5) == b""
    writer.close()
    assert not socket_path.exists()


# -- keys the proxy holds ------------------------------------------------------------------

HELD = "baton-proxy-holds-ANTHROPIC_API_KEY"
KEY = "sk-ant-api03-the-real-one"


def test_claude_codes_key_is_held_and_its_endpoint_spoken_to_in_plain_http() -> None:
    held = held_keys("claude", {"ANTHROPIC_API_KEY": KEY, "OTHER": "x"})
    assert held.env == {"ANTHROPIC_BASE_URL": "http://api.anthropic.com", "ANTHROPIC_API_KEY": HELD}
    assert held.credentials == (HeldCredential(HELD, KEY, ANTHROPIC, tls=True),)
    assert KEY not in repr(held.credentials)  # never in a log line

    gateway = {"ANTHROPIC_AUTH_TOKEN": KEY, "ANTHROPIC_BASE_URL": "http://10.0.0.5:4000/llm/"}
    held = held_keys("claude", gateway)
    assert held.env["ANTHROPIC_BASE_URL"] == "http://10.0.0.5:4000/llm"
    [credential] = held.credentials
    assert (credential.host, credential.tls) == (HostPort("10.0.0.5", 4000), False)
    assert credential.path == "/llm"


def test_nothing_is_held_without_a_key_or_for_a_cli_that_cannot() -> None:
    assert held_keys("claude", {}).credentials == ()
    assert held_keys("aider", {"OPENAI_API_KEY": KEY}).env == {}
    with pytest.raises(ValueError, match="ANTHROPIC_BASE_URL='ftp://x' is not an http"):
        held_keys("claude", {"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": "ftp://x"})


def test_codexs_key_is_held_and_its_configured_endpoint_spoken_to_in_plain_http() -> None:
    held = held_keys("codex", {"CODEX_API_KEY": KEY})
    assert held.env == {
        "OPENAI_BASE_URL": "http://api.openai.com/v1",
        "CODEX_API_KEY": "baton-proxy-holds-CODEX_API_KEY",
    }
    [credential] = held.credentials
    assert (credential.host, credential.tls, credential.path) == (OPENAI, True, "/v1")
    gateway = held_keys("codex", {"OPENAI_API_KEY": KEY}, "https://gw.example:8443/openai/")
    assert gateway.env["OPENAI_BASE_URL"] == "http://gw.example/openai"
    assert gateway.credentials[0].host == HostPort("gw.example", 8443)


def test_a_tunnels_first_request_gets_the_key_and_only_a_websocket_keeps_the_connection() -> None:
    """Codex speaks its WebSocket through CONNECT to the plain address: the proxy reads
    the upgrade, lends the key, and continues over TLS."""
    credential = HeldCredential(HELD, KEY, OPENAI, tls=True, path="/v1")
    tunnel = parse_request_head(b"CONNECT api.openai.com:80 HTTP/1.1\r\n\r\n")
    lent = lend_credentials(tunnel, (credential,))
    assert (lent.target, lent.tls, lent.lends) == (OPENAI, True, (credential,))
    upgrade = (
        f"GET /v1/responses HTTP/1.1\r\nHost: api.openai.com\r\nConnection: Upgrade\r\n"
        f"Upgrade: websocket\r\nAuthorization: Bearer {HELD}\r\n\r\n"
    ).encode()
    first = lend_in_tunnel(upgrade, (credential,))
    assert f"Authorization: Bearer {KEY}".encode() in first and b"Connection: Upgrade" in first
    post = upgrade.replace(b"GET", b"POST").replace(b"Upgrade: websocket\r\n", b"")
    closed = lend_in_tunnel(post, (credential,))
    assert KEY.encode() in closed and closed.endswith(b"\r\nConnection: close\r\n\r\n")
    assert b"Connection: Upgrade" not in closed
    for elsewhere in (b"/v2/responses", b"/v1/../x", b"http://evil/v1/x"):
        head = upgrade.replace(b"/v1/responses", elsewhere)
        assert lend_in_tunnel(head, (credential,)) == head
    trace = upgrade.replace(b"GET", b"TRACE")
    assert lend_in_tunnel(trace, (credential,)) == trace
    # The tunnel's Host is the endpoint's, whatever the agent wrote.
    fronted = lend_in_tunnel(
        upgrade.replace(b"Host: api.openai.com", b"Host: evil.example"), (credential,)
    )
    assert b"Host: api.openai.com\r\n" in fronted and b"evil.example" not in fronted


@pytest.mark.parametrize(
    "smuggled",
    [
        # A bare line feed ends the head early for a lenient server: a second request,
        # off the endpoint's path, or a body, would carry the key.
        b"X-Note: a\n\nTRACE /elsewhere HTTP/1.1\r\nAuthorization: Bearer {held}\r\n",
        # A folded line makes the key part of the header before it.
        b"X-Note: a\r\n Authorization: Bearer {held}\r\n",
    ],
)
def test_a_tunnels_first_request_that_is_not_one_to_the_letter_gets_no_key(
    smuggled: bytes,
) -> None:
    credential = HeldCredential(HELD, KEY, OPENAI, tls=True, path="/v1")
    head = (
        b"POST /v1/responses HTTP/1.1\r\nHost: api.openai.com\r\n"
        + smuggled.replace(b"{held}", HELD.encode())
        + b"\r\n"
    )
    assert lend_in_tunnel(head, (credential,)) == head
    encoded = head.replace(b"/v1/responses", b"/v1/x%2f..%2f..%2fother").replace(
        smuggled.replace(b"{held}", HELD.encode()), f"Authorization: Bearer {HELD}\r\n".encode()
    )
    assert KEY.encode() not in lend_in_tunnel(encoded, (credential,))
    tls_tunnel = parse_request_head(b"CONNECT api.openai.com:443 HTTP/1.1\r\n\r\n")
    assert lend_credentials(tls_tunnel, (credential,)) == tls_tunnel


def plain(target: str, *headers: str) -> ProxyRequest:
    lines = "".join(f"{header}\r\n" for header in headers)
    return parse_request_head(f"POST http://{target}/v1/messages HTTP/1.1\r\n{lines}\r\n".encode())


def test_the_key_goes_in_its_credential_header_to_its_own_host_only() -> None:
    credential = HeldCredential(HELD, KEY, ANTHROPIC, tls=True)
    lent = lend_credentials(
        plain("api.anthropic.com", f"x-api-key: {HELD}", f"X-Note: {HELD}"), (credential,)
    )
    assert (lent.target, lent.tls) == (ANTHROPIC, True)
    assert f"x-api-key: {KEY}".encode() in lent.upstream_head
    assert f"X-Note: {HELD}".encode() in lent.upstream_head  # no echo of the key elsewhere
    elsewhere = plain("example.com", f"x-api-key: {HELD}")
    assert lend_credentials(elsewhere, (credential,)) == elsewhere
    tunnel = parse_request_head(b"CONNECT api.anthropic.com:443 HTTP/1.1\r\n\r\n")
    assert lend_credentials(tunnel, (credential,)) == tunnel


@pytest.mark.parametrize(
    "line",
    [
        "POST http://gw.example/v1/other-tenant/messages HTTP/1.1",
        "POST http://gw.example/llm/../other-tenant/messages HTTP/1.1",
        "POST http://gw.example/llm/%2E%2E/other-tenant HTTP/1.1",
        "POST http://gw.example/llmx/messages HTTP/1.1",
        "TRACE http://gw.example/llm/messages HTTP/1.1",
    ],
)
def test_a_gateways_key_goes_only_to_its_own_path_and_never_to_an_echo(line: str) -> None:
    """A shared gateway serves other accounts under other paths; TRACE echoes the request."""
    credential = HeldCredential(HELD, KEY, HostPort("gw.example", 443), tls=True, path="/llm")
    request = parse_request_head(f"{line}\r\nx-api-key: {HELD}\r\n\r\n".encode())
    assert KEY.encode() not in lend_credentials(request, (credential,)).upstream_head
    own = parse_request_head(
        f"POST http://gw.example/llm/v1/messages HTTP/1.1\r\nx-api-key: {HELD}\r\n\r\n".encode()
    )
    assert f"x-api-key: {KEY}".encode() in lend_credentials(own, (credential,)).upstream_head


@pytest.fixture
def tls_provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A certificate for localhost that this process trusts (SSL_CERT_FILE): the provider's."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    return tmp_path


async def test_the_proxy_adds_the_key_and_goes_on_over_tls(
    socket_dir: Path, tls_provider: Path
) -> None:
    """The agent speaks plain HTTP with a placeholder; the provider, over TLS, gets the key."""

    async def answer(request: web.Request) -> web.Response:
        return web.Response(text=f"key={request.headers.get('x-api-key')}")

    app = web.Application()
    app.router.add_post("/v1/messages", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tls_provider / "cert.pem", tls_provider / "key.pem")
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    provider = HostPort("localhost", port)
    policy = EgressPolicy(
        "allowlist", frozenset({provider}), (HeldCredential(HELD, KEY, provider, tls=True),)
    )
    try:
        socket_path = socket_dir / "egress.sock"
        async with serve_egress(policy, socket_path, RUN):
            head = (
                "POST http://localhost/v1/messages HTTP/1.1\r\n"
                f"x-api-key: {HELD}\r\nContent-Length: 0\r\n\r\n"
            )
            said = await ask(socket_path, head.encode(), within=WAIT_S)
    finally:
        await runner.cleanup()
    assert said.startswith(b"HTTP/1.1 200 OK") and said.endswith(f"key={KEY}".encode()), said
