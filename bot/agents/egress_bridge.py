"""The agent's network bridge: 127.0.0.1:PORT inside the sandbox, relayed to Baton's proxy.

This file is a program, not a module Baton imports: `bot.agents.egress` reads its text
as `BRIDGE_SOURCE` and runs it inside the sandbox as

    python -I -S -c BRIDGE_SOURCE SOCKET_PATH PORT -- COMMAND...

It listens on the sandbox's own loopback, relays every TCP connection to the proxy's
Unix socket, runs COMMAND with this process's stdin, stdout and stderr, hands it the
signals meant for the sandbox, and exits as COMMAND did. It prints nothing to stdout,
which belongs to COMMAND, and lets go of it once COMMAND runs; its own complaints go to
stderr, each prefixed `baton-bridge:`.

It uses the standard library only (`-I -S` keeps site-packages and the environment out),
and of it only what starts fast (`os`, `_thread`, `socket`, and `ctypes` for one
`prctl`; not `subprocess` or `threading`): it runs before every agent, and its start is
the sandbox's largest cost.
It lives in a file of its own so that it is linted and type-checked like any module.
"""

from __future__ import annotations

import _thread
import ctypes
import os
import signal
import socket
import sys
import time

CHUNK = 65536
BACKLOG = 128
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
USAGE = "usage: bridge SOCKET_PATH PORT -- COMMAND..."
CANNOT_START = 127
PR_SET_DUMPABLE = 4  # <linux/prctl.h>


def main(argv: list[str]) -> int:
    """Bridge the port to the socket for as long as the command runs; return its exit code."""
    if len(argv) < 5 or argv[3] != "--" or not argv[2].isdigit():
        complain(USAGE)
        return 2
    socket_path, port, command = argv[1], int(argv[2]), argv[4:]
    if not make_undumpable():
        return CANNOT_START
    try:
        listener = listen(port)
    except OSError as exc:
        complain(f"cannot listen on 127.0.0.1:{port}: {exc}")
        return CANNOT_START
    forwarder = Forwarder()
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, forwarder.handle)
    # Started before any thread: the child is a clean fork that becomes the command.
    # Connections it makes before the accept loop runs wait in the listener's backlog.
    child = os.fork()
    if child == 0:
        run_command(command)
    give_up_stdout()
    _thread.start_new_thread(accept_forever, (listener, socket_path))
    forwarder.start(child)
    _, status = os.waitpid(child, 0)
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code  # death by signal N is reported as -N


def run_command(command: list[str]) -> None:
    """Become the command, in the forked child; never return."""
    for signum in FORWARDED_SIGNALS:
        signal.signal(signum, signal.SIG_DFL)
    try:
        os.execvp(command[0], command)  # inherits stdin, stdout and stderr
    except OSError as exc:
        complain(f"cannot start {command[0]}: {exc}")
    os._exit(CANNOT_START)


def make_undumpable() -> bool:
    """Keep the agent's tools, which run as this process's user, from tracing it: one that
    could would take its listener (pidfd_getfd) and answer the CLI in the provider's
    place. The kernel refuses to trace a process that is not dumpable."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        complain(f"cannot stop being traced: {os.strerror(ctypes.get_errno())}")
        return False
    return True


def give_up_stdout() -> None:
    """Stop holding the command's stdout: it may be the CLI's report, which a tool could
    otherwise write through this process's /proc entry (bot.agents.sealed)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


class Forwarder:
    """Hand the signals the bridge receives to its child, keeping any that came too early."""

    def __init__(self) -> None:
        self.child: int | None = None
        self.early: list[int] = []

    def handle(self, signum: int, _frame: object) -> None:
        """Forward signum, or keep it until there is a child to forward it to."""
        if self.child is None:
            self.early.append(signum)
        else:
            send(self.child, signum)

    def start(self, child: int) -> None:
        """Forward from now on to child, beginning with what came before it started."""
        self.child = child
        for signum in self.early:
            send(child, signum)


def send(pid: int, signum: int) -> None:
    """Signal pid, unless it is already gone."""
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


def listen(port: int) -> socket.socket:
    """Return a socket listening on the sandbox's loopback at port."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(BACKLOG)
    return listener


def accept_forever(listener: socket.socket, socket_path: str) -> None:
    """Relay each accepted connection in a thread of its own."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError as exc:
            complain(f"cannot accept a connection: {exc}")
            time.sleep(0.5)  # e.g. out of file descriptors: wait instead of spinning
            continue
        _thread.start_new_thread(relay, (client, socket_path))


def relay(client: socket.socket, socket_path: str) -> None:
    """Copy bytes both ways between client and the proxy until both directions ended."""
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(socket_path)
    except OSError as exc:
        complain(f"cannot reach the proxy at {socket_path}: {exc}")
        close(client, upstream)
        return
    backward_done = _thread.allocate_lock()
    backward_done.acquire()
    _thread.start_new_thread(pump, (upstream, client, backward_done))
    pump(client, upstream)
    backward_done.acquire()  # released when the other direction has ended
    close(client, upstream)


def pump(source: socket.socket, sink: socket.socket, done: _thread.LockType | None = None) -> None:
    """Copy source to sink; pass its end on as a half-close, so the other way keeps going."""
    try:
        while True:
            data = source.recv(CHUNK)
            if not data:
                break
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        # One side is gone: shutting both down wakes the other pump's blocking recv.
        for sock in (source, sink):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
    finally:
        if done is not None:
            done.release()


def close(*socks: socket.socket) -> None:
    """Close every socket given."""
    for sock in socks:
        sock.close()


def complain(message: str) -> None:
    """Say one line on stderr, marked as the bridge's own."""
    print(f"baton-bridge: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
