"""The sandbox probe: what an agent inside its sandbox can reach of the worker's secrets.

This file is a program, not a module Baton imports: `baton doctor` reads its text as
`bot.ops.doctor.PROBE_SOURCE` and runs it inside the agent's sandbox as

    python -I -S -c PROBE_SOURCE SPEC

SPEC is a JSON object naming what to try: `files` (the App's key file, `.env`),
`redis` (`{"host": ..., "port": ...}` or `{"unix": path}`) and `pids` (the worker's own,
and 1) whose `/proc/<pid>/environ` to read. stdin holds a JSON list of the texts that
mark the worker's environment (its secrets and their names): they never appear in argv,
where any process of the host could see them.

It prints one JSON line, `{"files": [...], "redis": [...], "environ": [...]}`: the
files it could read, the ways Redis answered it, and the environments in which it found
a mark. Nothing of what it read is printed. Standard library only, as the bridge is.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from urllib.parse import urlsplit

TIMEOUT_S = 3.0
MAX_READ = 1024 * 1024
MAX_HEAD = 64 * 1024


def main(argv: list[str]) -> int:
    """Try each way out the spec names; print what succeeded as one JSON line."""
    spec = json.loads(argv[1])
    marks = [str(mark).encode() for mark in json.loads(sys.stdin.read() or "[]") if mark]
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    report = {
        "files": [path for path in spec.get("files", []) if readable(path)],
        "redis": reach_redis(spec.get("redis"), proxy),
        "environ": leaking_environments(spec.get("pids", []), marks),
    }
    sys.stdout.write(json.dumps(report) + "\n")
    return 0


def readable(path: str) -> bool:
    """Return whether a byte of path can be read."""
    try:
        with open(path, "rb") as file:
            file.read(1)
    except OSError:
        return False
    return True


def reach_redis(target: dict[str, object] | None, proxy: str | None) -> list[str]:
    """Return each way Redis answered a PING: its socket, directly, or through the proxy."""
    if not target:
        return []
    if "unix" in target:
        path = str(target["unix"])
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(TIMEOUT_S)
        return [f"the Unix socket {path}"] if answers(sock, path) else []
    host, port = str(target["host"]), int(str(target["port"]))
    shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    found = []
    if answers_at(host, port):
        found.append(f"{shown} directly")
    if proxy and answers_through(proxy, shown):
        found.append(f"{shown} through the agent's proxy")
    return found


def answers_at(host: str, port: int) -> bool:
    """Return whether something at host:port answers PING as Redis does."""
    try:
        sock = socket.create_connection((host, port), timeout=TIMEOUT_S)
    except OSError:
        return False
    return answers(sock, None)


def answers_through(proxy: str, authority: str) -> bool:
    """Return whether the proxy opens a tunnel to authority and Redis answers through it."""
    parts = urlsplit(proxy)
    try:
        sock = socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or 80), timeout=TIMEOUT_S
        )
        sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head and len(head) < MAX_HEAD:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    except OSError:
        return False
    status = head.split(b"\r\n", 1)[0].split()
    if len(status) < 2 or status[1] != b"200":
        sock.close()
        return False
    return answers(sock, None)


def answers(sock: socket.socket, path: str | None) -> bool:
    """Send PING on sock (connecting it to path first); a RESP reply means Redis answered."""
    try:
        if path is not None:
            sock.connect(path)
        sock.sendall(b"PING\r\n")
        reply = sock.recv(64)
    except OSError:
        return False
    finally:
        sock.close()
    # +PONG, or an error such as -NOAUTH: either way the agent is talking to Redis.
    return reply[:1] in (b"+", b"-")


def leaking_environments(pids: list[object], marks: list[bytes]) -> list[str]:
    """Return the /proc/<pid>/environ files that could be read and held a mark."""
    found = []
    for pid in pids:
        path = f"/proc/{pid}/environ"
        try:
            with open(path, "rb") as file:
                text = file.read(MAX_READ)
        except OSError:
            continue
        if any(mark in text for mark in marks):
            found.append(path)
    return found


if __name__ == "__main__":
    sys.exit(main(sys.argv))
