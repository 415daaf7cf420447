"""The agent's jail: what bubblewrap is told (pure), and what a process inside really sees."""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest

from bot.agents import egress_for_run, programs_of
from bot.agents.base import AgentRequest
from bot.agents.command import CommandAdapter
from bot.agents.egress import EgressPolicy
from bot.agents.jail import (
    AGENT_UID,
    EGRESS_DIR_INSIDE,
    Jail,
    Jails,
    Mount,
    bwrap_argv,
    install_roots,
    masked_in,
    passwd_lines,
    repo_cache,
    sandbox_problem,
    without_secrets,
)
from bot.agents.process import run_process
from bot.agents.sealed import HANDOVER_SOURCE, execute_only_copy, is_native
from bot.domain.model import utcnow
from bot.edges.git import bundle_pack_offset
from bot.ops.settings import Settings

HOME = Path("/home/worker")


def jail(tmp: Path, **fields: object) -> Jail:
    values: dict[str, object] = {
        "worktree": tmp / "wt",
        "home": tmp / "home",
        "tmp": tmp / "tmp",
        "passwd_dir": tmp / "etc",
        "system": (Mount("ro", "/usr", "/usr"), Mount("link", "usr/bin", "/bin")),
        "python": "/usr/bin/python3",
        **fields,
    }
    return Jail(**values)  # type: ignore[arg-type]


def pairs(argv: list[str], flag: str) -> list[tuple[str, str]]:
    return [(argv[i + 1], argv[i + 2]) for i, arg in enumerate(argv) if arg == flag]


def test_every_namespace_is_its_own_and_the_jail_dies_with_its_worker() -> None:
    argv = bwrap_argv(jail(Path("/r")), ["agent", "--flag"])
    for flag in ("--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts"):
        assert flag in argv
    assert "--unshare-net" in argv  # every mode: the host's loopback is never shared
    assert "--die-with-parent" in argv
    assert argv[argv.index("--uid") + 1] == str(AGENT_UID)
    assert argv[argv.index("--cap-drop") + 1] == "ALL"
    assert argv[-3:] == ["--", "agent", "--flag"]
    assert argv[argv.index("--chdir") + 1] == "/r/wt"


def test_the_view_is_the_system_read_only_and_the_run_s_own_directories_writable() -> None:
    view = jail(
        Path("/r"),
        readable=(Path("/opt/node"),),
        masked=(Path("/opt/node/.npmrc"),),
        writable=(Path("/cache/pip"),),
    )
    argv = bwrap_argv(view, ["true"])
    assert ("/usr", "/usr") in pairs(argv, "--ro-bind")
    assert ("usr/bin", "/bin") in pairs(argv, "--symlink")
    assert ("/opt/node", "/opt/node") in pairs(argv, "--ro-bind")
    assert ("/dev/null", "/opt/node/.npmrc") in pairs(argv, "--ro-bind")
    writable = pairs(argv, "--bind")
    assert ("/r/tmp", "/tmp") in writable and ("/r/home", "/r/home") in writable
    assert ("/cache/pip", "/cache/pip") in writable and ("/r/wt", "/r/wt") in writable
    assert ("/r/etc/passwd", "/etc/passwd") in pairs(argv, "--ro-bind")
    # The private tmp goes first: a later mount under the host's /tmp must not be hidden.
    assert argv.index("/tmp") < argv.index("/opt/node")
    assert "/root" not in argv and "/etc/shadow" not in argv


def test_with_network_the_bridge_runs_first_and_the_proxy_socket_is_shown() -> None:
    view = jail(Path("/r"), network="allowlist", egress_dir=Path("/tmp/baton-egress-x"))
    argv = bwrap_argv(view, ["agent"])
    assert ("/tmp/baton-egress-x", str(EGRESS_DIR_INSIDE)) in pairs(argv, "--ro-bind")
    after = argv[argv.index("--") + 1 :]
    assert after[:3] == ["/usr/bin/python3", "-I", "-S"] and after[-2:] == ["--", "agent"]
    env = view.environment({"PATH": "/usr/bin"})
    assert env["HTTPS_PROXY"] == env["http_proxy"] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == ""
    assert "HTTPS_PROXY" not in jail(Path("/r"), network="none").environment({})


def test_a_sealed_jail_hands_the_report_over_first_and_shows_the_copy_over_the_cli() -> None:
    copy, cli = Path("/data/sealed/ab/claude"), Path("/opt/claude/bin/claude")
    view = jail(
        Path("/r"),
        network="allowlist",
        egress_dir=Path("/tmp/baton-egress-x"),
        sealed=((copy, cli),),
    )
    argv = bwrap_argv(view, ["claude"])
    assert (str(copy), str(cli)) in pairs(argv, "--ro-bind")
    after = argv[argv.index("--") + 1 :]
    assert after[:5] == ["/usr/bin/python3", "-I", "-S", "-c", HANDOVER_SOURCE]
    assert after[5:8] == ["/usr/bin/python3", "-I", "-S"] and after[-2:] == ["--", "claude"]
    unsealed = bwrap_argv(jail(Path("/r")), ["claude"])
    assert unsealed[unsealed.index("--") + 1 :] == ["claude"]


def test_an_execute_only_copy_is_made_once_per_version_and_only_of_a_native_program(
    tmp_path: Path,
) -> None:
    program = tmp_path / "cli"
    program.write_bytes(Path(sys.executable).read_bytes()[:4096])
    copy = execute_only_copy(program, tmp_path / "sealed")
    assert copy.stat().st_mode & 0o777 == 0o111 and copy.read_bytes() == program.read_bytes()
    assert execute_only_copy(program, tmp_path / "sealed") == copy
    program.write_bytes(program.read_bytes() + b"v2")
    assert execute_only_copy(program, tmp_path / "sealed") != copy
    script = tmp_path / "cli.js"
    script.write_text("#!/usr/bin/env node\n")
    assert is_native(program) and not is_native(script)
    assert not list((tmp_path / "sealed").glob(".making-*"))


def test_a_copy_unused_for_a_week_goes_when_another_is_made(tmp_path: Path) -> None:
    sealed = tmp_path / "sealed"
    program = tmp_path / "cli"
    program.write_bytes(Path(sys.executable).read_bytes()[:4096])
    old = execute_only_copy(program, sealed)
    left = sealed / ".making-died"  # a worker died copying
    left.mkdir()
    week_ago = time.time() - 7 * 24 * 3600 - 60
    for entry in (old.parent, left):
        os.utime(entry, (week_ago, week_ago))
    assert execute_only_copy(program, sealed) == old  # used again: kept
    program.write_bytes(program.read_bytes() + b"v2")
    new = execute_only_copy(program, sealed)
    assert set(sealed.iterdir()) == {old.parent, new.parent} and not left.exists()
    os.utime(old.parent, (week_ago, week_ago))
    program.write_bytes(program.read_bytes() + b"v3")
    newest = execute_only_copy(program, sealed)
    assert not old.parent.exists() and newest.parent.exists() and new.parent.exists()


async def test_a_process_of_the_same_user_cannot_write_the_report_of_a_sealed_program(
    tmp_path: Path,
) -> None:
    """A shell run from an execute-only copy is not dumpable: a child of the same user
    that writes to /proc/PID/fd/1 of each process in the jail reaches its report only
    when it runs from the readable original."""
    seen = {}
    for sealed in (False, True):
        worktree = tmp_path / f"wt-{sealed}"
        worktree.mkdir()
        jails = Jails(enabled=True, path=os.environ["PATH"], sealed_dir=tmp_path / "sealed")
        made = jails.make(
            worktree=worktree,
            home=tmp_path / f"home-{sealed}",
            scratch=tmp_path / f"scratch-{sealed}",
            reporters=("bash",) if sealed else (),
        )
        assert made is not None and made.reports_sealed is sealed
        forge = "for fd in /proc/[0-9]*/fd/1; do (echo FORGED > $fd) 2>/dev/null; done"
        argv = made.command(["bash", "-c", f"bash -c {shlex.quote(forge)} >/dev/null; echo REAL"])
        seen[sealed] = await report_of(argv, worktree, made.environment({}), sealed)
    assert seen[False].endswith("FORGED\nREAL\n") and seen[True] == "REAL\n"


async def test_behind_the_bridge_no_tool_reaches_the_bridge_or_the_cli_and_setup_keeps_stdout(
    tmp_path: Path,
) -> None:
    """The bridge is not dumpable either: a tool that could trace it would take its
    listener (pidfd_getfd) and answer the sealed CLI as its provider. A command run in
    the same jail without a report (a repository's setup command) keeps its stdout."""
    worktree = tmp_path / "wt"
    worktree.mkdir()
    jails = Jails(enabled=True, path=os.environ["PATH"], sealed_dir=tmp_path / "sealed")
    async with egress_for_run(EgressPolicy("allowlist", frozenset()), "octo/r#1") as (egress, _):
        made = jails.make(
            worktree=worktree,
            home=tmp_path / "home",
            scratch=tmp_path / "scratch",
            network="allowlist",
            egress_dir=egress,
            reporters=("bash",),
        )
        assert made is not None and made.reports_sealed
        probe = (
            "for p in /proc/[0-9]*; do name=$(cat $p/comm);"
            " if readlink $p/fd/0 >/dev/null; then echo reached $name; else echo refused $name; fi;"
            " done"
        )
        script = f"bash -c {shlex.quote(probe)} > probe.txt; echo REAL"
        report = await report_of(made.command(["bash", "-c", script]), worktree, {}, True)
        setup = await report_of(made.command(["echo", "set up"]), worktree, {}, False)
    seen = (worktree / "probe.txt").read_text().splitlines()
    bridge = Path(made.python).name[:15]  # the kernel's comm: 15 characters at most
    assert report == "REAL\n" and f"refused {bridge}" in seen and "refused bash" in seen, seen
    assert setup == "set up\n"


async def report_of(argv: list[str], cwd: Path, env: dict[str, str], sealed: bool) -> str:
    transcript, stdin = cwd / "transcript.log", cwd / "stdin"
    stdin.write_text("")
    outcome = await run_process(
        argv,
        cwd=cwd,
        env=env,
        stdin=stdin,
        transcript=transcript,
        stderr=cwd / "stderr.log",
        deadline=utcnow() + timedelta(seconds=30),
        sealed_report=sealed,
    )
    assert outcome.exit_code == 0, (cwd / "stderr.log").read_text()
    return transcript.read_text()


@pytest.mark.parametrize(
    ("target", "roots"),
    [
        (
            "/opt/node/lib/node_modules/@anthropic-ai/claude-code/cli.js",
            ["/opt/node/lib/node_modules/@anthropic-ai/claude-code"],
        ),
        ("/opt/tools/lib/node_modules/aider/bin/x.js", ["/opt/tools/lib/node_modules/aider"]),
        ("/opt/python3.12/bin/python3.12", ["/opt/python3.12"]),
        ("/home/worker/bin/tool", ["/home/worker/bin"]),  # never the whole home
        ("/bin/tool", ["/bin"]),
        ("/srv/agent/run.py", ["/srv/agent"]),
    ],
)
def test_a_program_is_shown_with_what_it_was_installed_with(target: str, roots: list[str]) -> None:
    assert install_roots(Path(target), HOME) == tuple(Path(root) for root in roots)


def test_a_prefix_in_the_home_shows_its_bin_and_lib_never_what_lies_beside_them(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    local = home / ".local"
    for part in ("bin", "lib/python3.11/site-packages", "share/keyrings", "state"):
        (local / part).mkdir(parents=True)
    assert install_roots(local / "bin" / "aider", home) == (local / "bin", local / "lib")
    venv = home / "venvs" / "aider"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    assert install_roots(venv / "bin" / "aider", home) == (venv,)  # a virtualenv is whole


def test_credential_files_are_found_a_few_levels_down(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "npmrc").write_text("//registry/:_authToken=x")
    (tmp_path / "credentials.toml").write_text("token")
    (tmp_path / "lib" / "a" / "b" / "c").mkdir(parents=True)
    (tmp_path / "lib" / "a" / "b" / "c" / ".netrc").write_text("too deep to look for")
    assert sorted(masked_in([tmp_path])) == [
        tmp_path / "credentials.toml",
        tmp_path / "etc" / "npmrc",
    ]


def test_nothing_shown_holds_a_secret_or_lies_inside_one(tmp_path: Path) -> None:
    data = tmp_path / "srv" / "baton"
    shown = [tmp_path / "srv", data / "homes" / "o" / "r" / "issue-2", tmp_path / "venv"]
    assert without_secrets(shown, [data]) == (shown[1], shown[2])
    assert without_secrets(shown, [data], [data]) == (shown[2],)


def test_the_jail_has_one_user_whose_home_is_its_own() -> None:
    passwd, group = passwd_lines(Path("/data/homes/o/r/issue-1"))
    assert passwd == "agent:x:1000:1000:Baton agent:/data/homes/o/r/issue-1:/bin/sh\n"
    assert group == "agent:x:1000:\n"


# -- whether the sandbox starts -------------------------------------------------------------


def fake_bwrap(directory: Path, script: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Put a `bwrap` running script first on PATH."""
    directory.mkdir()
    bwrap = directory / "bwrap"
    bwrap.write_text(f"#!/bin/sh\n{script}\n")
    bwrap.chmod(0o755)
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")


def test_a_platform_refusing_any_flag_of_the_jail_fails_the_start_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_bwrap(
        tmp_path / "bin",
        'for arg in "$@"; do\n  [ "$arg" = --unshare-uts ] || continue\n'
        '  echo "bwrap: Unknown option --unshare-uts" >&2; exit 1\ndone\nexit 0',
        monkeypatch,
    )
    assert (
        sandbox_problem() == "bwrap cannot build the sandbox: bwrap: Unknown option --unshare-uts"
    )


def test_a_platform_without_user_namespaces_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_bwrap(
        tmp_path / "bin",
        "echo 'bwrap: setting up uid map: Permission denied' >&2\nexit 1",
        monkeypatch,
    )
    problem = sandbox_problem()
    assert problem is not None
    assert problem.startswith(
        "user namespaces are not available to this worker "
        "(bwrap: setting up uid map: Permission denied): allow unprivileged user namespaces"
    )


# -- a real jail ---------------------------------------------------------------------------

LOOK = r"""
import json, os, socket, sys
from pathlib import Path
seen = {}
def attempt(name, fn):
    try:
        seen[name] = ["yes", str(fn())[:200]]
    except Exception as exc:
        seen[name] = ["no", f"{type(exc).__name__}: {exc}"[:200]]
secret, data, extra, worker = sys.argv[1:5]
attempt("read secret", lambda: Path(secret).read_text())
attempt("list data", lambda: os.listdir(data))
attempt("write extra", lambda: (Path(extra) / "cache").write_text("kept"))
attempt("write worktree", lambda: Path("made-here").write_text("ok"))
attempt("write usr", lambda: Path("/usr/baton-was-here").write_text("x"))
attempt("worker environ", lambda: Path(f"/proc/{worker}/environ").read_bytes())
attempt("read shadow", lambda: Path("/etc/shadow").read_text())
seen["pids"] = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
seen["uid"] = os.getuid()
seen["hostname"] = socket.gethostname()
seen["cwd"] = os.getcwd()
print(json.dumps(seen))
"""


def test_inside_the_jail_only_the_worktree_home_tmp_and_extra_paths_can_be_touched(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    secret = data / "app.pem"
    data.mkdir()
    secret.write_text("-----BEGIN PRIVATE KEY-----")
    extra = tmp_path / "pip-cache"
    worktree = data / "worktrees" / "o" / "r" / "issue-1"
    worktree.mkdir(parents=True)
    jails = Jails(enabled=True, path=os.environ["PATH"], extra_paths=[extra], secrets=[data])
    made = jails.make(
        worktree=worktree,
        home=data / "homes" / "issue-1",
        scratch=data / "runs" / "1" / "jail",
        programs=(sys.executable,),
        caches_of="o/r",
    )
    assert made is not None
    argv = made.command(
        [sys.executable, "-I", "-c", LOOK, str(secret), str(data), str(extra), str(os.getpid())]
    )
    done = subprocess.run(
        argv,
        cwd=worktree,
        env=made.environment({"PATH": "/usr/bin:/bin"}),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["read secret"][0] == "no"
    assert seen["list data"][0] == "no" or "app.pem" not in seen["list data"][1]
    # The cache is written where the agent sees it, in its repository's own part of it.
    assert (
        seen["write extra"][0] == "yes"
        and (repo_cache(extra, "o/r") / "cache").read_text() == "kept"
    )
    assert not (extra / "cache").exists() and not (repo_cache(extra, "o/other") / "cache").exists()
    assert seen["write worktree"][0] == "yes" and (worktree / "made-here").exists()
    assert seen["write usr"][0] == "no"
    assert seen["worker environ"][0] == "no"
    assert seen["read shadow"][0] == "no"
    assert max(seen["pids"]) < 10, "only the jail's own few processes are visible"
    assert (seen["uid"], seen["hostname"], seen["cwd"]) == (AGENT_UID, "baton-agent", str(worktree))


def wall_clock_request(tmp_path: Path, jailed: bool, seconds: float) -> AgentRequest:
    """Return a request whose agent has seconds to run, in a jail or (jailed false) not."""
    worktree, run_dir = tmp_path / "worktree", tmp_path / "run"
    worktree.mkdir()
    run_dir.mkdir()
    brief = tmp_path / "brief.md"
    brief.write_text("Stay as long as you like.\n")
    jails = Jails(enabled=jailed, path=os.environ["PATH"])
    made = jails.make(worktree=worktree, home=tmp_path / "home", scratch=tmp_path / "scratch")
    return AgentRequest(
        run_id="octo/widgets#3/1",
        issue_number=3,
        attempt=1,
        worktree=worktree,
        brief_path=brief,
        run_dir=run_dir,
        deadline=utcnow() + timedelta(seconds=seconds),
        home=tmp_path / "home",
        jail=made,
    )


async def test_a_jailed_agent_that_leaves_its_session_and_ignores_sigterm_dies_at_the_cap(
    tmp_path: Path,
) -> None:
    request = wall_clock_request(tmp_path, jailed=True, seconds=0.5)
    marker = request.worktree / "outlived-the-cap"
    # Its own session is out of reach of the process group Baton signals, and it ignores
    # SIGTERM: only the end of the jail's PID namespace takes it.
    command = (
        f"setsid sh -c 'trap \"\" TERM; sleep 3; touch {shlex.quote(str(marker))}' & "
        "sleep 30; echo finished"
    )
    result = await CommandAdapter(command).run(request)
    assert (result.status, result.stop_reason, result.failure_class) == (
        "failed",
        "wall_clock",
        "wall-clock-cap",
    )
    assert "finished" not in request.transcript_path.read_text()
    await asyncio.sleep(3.5)
    assert not marker.exists()


def test_a_repository_command_never_chooses_which_host_paths_are_shown() -> None:
    settings = Settings(BATON_AGENT_COMMAND="/usr/bin/python3 /etc/hostname")
    operator = programs_of(settings, (), "/usr/bin/python3 /etc/hostname")
    assert operator == ("/usr/bin/python3", "/etc/hostname")
    from_repository = Settings(BATON_AGENT_COMMAND="cat /etc/hostname")
    assert programs_of(from_repository, ("true /etc/hostname", "/bin/sh -c x"), "other") == (
        "cat",
        "true",
    )


def test_a_bundle_is_read_up_to_its_pack() -> None:
    sha = "a" * 40
    head = f"# v2 git bundle\n-{'b' * 40} base\n{sha} HEAD\n\nPACK....".encode()
    refs, offset = bundle_pack_offset(head)
    assert refs == {"HEAD": sha} and head[offset:].startswith(b"PACK")
    v3 = f"# v3 git bundle\n@object-format=sha1\n{sha} HEAD\n\nPACK".encode()
    assert bundle_pack_offset(v3)[0] == {"HEAD": sha}
    for junk in (b"PACK", b"# v2 git bundle\nnot a ref\n\n", b"# v2 git bundle\n" + b"x" * 9):
        with pytest.raises(ValueError):
            bundle_pack_offset(junk)
