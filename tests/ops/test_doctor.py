"""`baton doctor`: its judgements, and the real command against the sandbox and a real Redis."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

import bot.ops.doctor
from bot.agents import TESTED_VERSIONS
from bot.devkit.devstack import free_port, start_redis_server
from bot.devkit.maintainer import Maintainer
from bot.ops.doctor import (
    MIN_FREE_BYTES,
    Finding,
    check_agent,
    check_other_agents,
    exit_code,
    fail,
    judge_agent_version,
    judge_disk,
    judge_git,
    judge_operator_token,
    judge_persistence,
    judge_redis_exposure,
    judge_sandbox,
    judge_sandbox_probe,
    judge_webhook_secret,
    missing_permissions,
    ok,
    probe_marks,
    probe_spec,
    redacted_url,
    render,
    warn,
)
from bot.ops.settings import Settings
from tests.cli_harness import installed

# ---------------------------------------------------------------- judgements


def test_git_must_be_on_path_and_new_enough_for_worktrees() -> None:
    assert judge_git("git version 2.39.5\n").status == "ok"
    assert judge_git("git version 2.17.0").status == "ok"
    old = judge_git("git version 2.16.6")
    assert old.status == "FAIL" and "2.17 or later" in old.detail
    assert judge_git(None).status == "FAIL"
    assert judge_git("not git").status == "FAIL"


def test_redis_persistence_is_judged_from_its_config() -> None:
    assert judge_persistence("yes", "").status == "ok"
    snapshots = judge_persistence("no", "3600 1 300 100")
    assert snapshots.status == "warn" and "appendonly yes" in snapshots.detail
    assert judge_persistence("no", "").status == "warn"
    refused = judge_persistence(None, None)
    assert refused.status == "warn" and "cannot tell" in refused.detail


def test_the_webhook_secret_is_judged_without_being_shown() -> None:
    secret = "x" * 40
    found = judge_webhook_secret(secret)
    assert found.status == "ok" and secret not in found.detail
    assert judge_webhook_secret("short").status == "warn"
    unset = judge_webhook_secret(None)
    assert unset.status == "FAIL" and "GITHUB_WEBHOOK_SECRET" in unset.detail


def test_an_operator_token_baton_web_would_refuse_fails_without_being_shown() -> None:
    short = "t" * 31
    refused = judge_operator_token(short)
    assert refused.status == "FAIL" and short not in refused.detail
    assert "31 characters: use 32 or more" in refused.detail
    token = "t" * 32
    accepted = judge_operator_token(token)
    assert accepted.status == "ok" and token not in accepted.detail
    assert judge_operator_token(None).status == "ok"  # the operator pages are simply off


def test_the_data_directory_must_be_writable_with_room() -> None:
    path = Path("/srv/baton")
    assert judge_disk(path, True, MIN_FREE_BYTES * 2).status == "ok"
    assert judge_disk(path, True, MIN_FREE_BYTES - 1).status == "warn"
    assert judge_disk(path, False, MIN_FREE_BYTES * 2).status == "FAIL"


def test_missing_permissions_compare_levels() -> None:
    wanted = {"issues": "write", "metadata": "read", "checks": "read"}
    granted = {"issues": "read", "metadata": "read"}
    assert missing_permissions(granted, wanted) == ["checks: read", "issues: write"]
    assert (
        missing_permissions({"issues": "write", "metadata": "read", "checks": "write"}, wanted)
        == []
    )


def test_redis_passwords_are_never_shown() -> None:
    assert redacted_url("redis://:hunter2@cache:6380/1") == "redis://:***@cache:6380/1"
    assert redacted_url("redis://127.0.0.1:6379/0") == "redis://127.0.0.1:6379/0"


@pytest.mark.parametrize(
    ("url", "status"),
    [
        ("rediss://:hunter2@cache.example:6380/0", "ok"),
        ("redis://:hunter2@10.0.0.5:6379/0", "ok"),
        ("redis://baton:hunter2@10.0.0.5:6379/0", "ok"),
        ("redis://10.0.0.5:6379/0?password=hunter2", "ok"),
        ("redis://10.0.0.5:6379/0", "FAIL"),
        ("rediss://cache.example:6380/0", "FAIL"),  # TLS alone lets anyone who connects write
        ("redis://baton@10.0.0.5:6379/0", "FAIL"),  # a user name is no password
        ("redis://localhost:6379/0", "ok"),
        ("redis://127.0.0.1:6379/0", "ok"),
        ("redis://127.3.2.1/0", "ok"),
        ("redis://[::1]:6379/0", "ok"),
        ("unix:///run/redis/redis.sock?db=0", "ok"),
    ],
)
def test_redis_without_a_password_must_be_on_loopback(url: str, status: str) -> None:
    found = judge_redis_exposure(url)
    assert (found.check, found.status) == ("redis exposure", status), found
    assert "hunter2" not in found.detail
    if status == "FAIL":
        assert "no password" in found.detail and "RQ's job payloads" in found.detail
        assert "run code on the workers" in found.detail


def test_the_sandbox_is_judged_off_broken_or_working() -> None:
    off = judge_sandbox("off", None)
    assert off.status == "warn" and "uncontained" in off.detail
    for reach in ("files", "environment", "network", "loopback services such as Redis"):
        assert reach in off.detail
    broken = judge_sandbox("bwrap", "bwrap is not installed: install bubblewrap")
    assert broken == fail("sandbox", "bwrap is not installed: install bubblewrap")
    working = judge_sandbox("bwrap", None, "none")
    assert working.status == "ok" and "BATON_AGENT_NETWORK=none" in working.detail


def probe_output(**reached: list[str]) -> str:
    return json.dumps({"files": [], "redis": [], "environ": [], **reached}) + "\n"


def test_the_probe_holds_only_when_nothing_was_reached() -> None:
    held = judge_sandbox_probe(probe_output(), 0, "")
    assert held == ok(
        "sandbox probe",
        "the agent's sandbox holds: key file, Redis and the worker's environment are out of reach",
    )
    key = judge_sandbox_probe(probe_output(files=["/srv/baton/key.pem"]), 0, "")
    assert key.status == "FAIL" and "the file /srv/baton/key.pem" in key.detail
    redis_ = judge_sandbox_probe(
        probe_output(redis=["127.0.0.1:6379 through the agent's proxy"]), 0, ""
    )
    assert redis_.status == "FAIL"
    assert "Redis at 127.0.0.1:6379 through the agent's proxy" in redis_.detail
    assert "BATON_AGENT_ALLOWED_HOSTS" in redis_.detail
    everything = judge_sandbox_probe(
        probe_output(
            files=["/srv/.env"], redis=["10.0.0.5:6379 directly"], environ=["/proc/1/environ"]
        ),
        0,
        "",
    )
    assert everything.status == "FAIL"
    for named in ("the file /srv/.env", "Redis at 10.0.0.5:6379", "in /proc/1/environ"):
        assert named in everything.detail


def test_a_probe_that_said_nothing_or_hung_fails() -> None:
    refused = judge_sandbox_probe("", 1, "bwrap: Creating new namespace failed: nope\n")
    assert refused.status == "FAIL" and "Creating new namespace failed: nope" in refused.detail
    assert judge_sandbox_probe("not json\n", 0, "").status == "FAIL"
    assert judge_sandbox_probe('{"files": []}\n', 0, "").status == "FAIL"  # half a report
    hung = judge_sandbox_probe("", None, "")
    assert hung.status == "FAIL" and "did not finish" in hung.detail


def test_the_probe_tries_the_key_file_or_the_env_file(tmp_path: Path) -> None:
    secret = "x" * 40
    by_path = Settings(
        GITHUB_PRIVATE_KEY_PATH=tmp_path / "key.pem",
        GITHUB_WEBHOOK_SECRET=secret,
        REDIS_URL="redis://:pw@10.0.0.5:6380/1",
    )
    spec = probe_spec(by_path, 4242, tmp_path / ".env")
    assert spec == {
        "files": [str(tmp_path / "key.pem"), str(tmp_path / ".env")],
        "redis": {"host": "10.0.0.5", "port": 6380},
        "pids": [4242, 1],
    }
    assert secret not in json.dumps(spec) and "pw" not in json.dumps(spec)  # argv is public
    assert secret in probe_marks(by_path) and "REDIS_URL=" in probe_marks(by_path)
    inline = Settings(GITHUB_PRIVATE_KEY="pem", REDIS_URL="unix:///run/redis.sock")
    spec = probe_spec(inline, 4242, tmp_path / ".env")
    assert spec["files"] == [str(tmp_path / ".env")]
    assert spec["redis"] == {"unix": "/run/redis.sock"}


def test_one_line_per_check_and_any_failure_fails() -> None:
    findings: list[Finding] = [
        ok("git", "git version 2.39.5"),
        warn("disk", "low"),
        fail("redis", "down"),
    ]
    assert render(findings).splitlines() == [
        "ok   git: git version 2.39.5",
        "warn disk: low",
        "FAIL redis: down",
    ]
    assert exit_code(findings) == 1
    assert exit_code(findings[:2]) == 0


# ---------------------------------------------------------------- the command


@pytest.fixture(scope="module")
def persistent_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private Redis that keeps an append-only file, as a deployment's should."""
    url, process = start_redis_server(tmp_path_factory.mktemp("aof-redis"), appendonly=True)
    yield url
    process.stop()


@pytest.fixture
async def deployment(
    sandbox: dict[str, str], maintainer: Maintainer, persistent_redis: str, tmp_path: Path
) -> dict[str, str]:
    """A healthy deployment's environment: the sandbox's App, installed on one repository."""
    await maintainer.gh.post("/user/repos", data={"name": "demo"})
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        # A checkout run from its own tree runs its own Baton, as the devstack's does.
        **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
        **{k: v for k, v in sandbox.items() if k != "SANDBOX_ADMIN_TOKEN"},
        "REDIS_URL": persistent_redis,
        "BATON_DATA_DIR": str(tmp_path / "data"),
        "BATON_AGENT": "command",
        "BATON_AGENT_COMMAND": "true",
    }


async def doctor(env: dict[str, str], cwd: Path) -> tuple[int, list[str]]:
    """Run `baton doctor`; return its exit code and its lines."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "doctor",
        env=env,
        cwd=cwd,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, output.decode().splitlines()


def line_of(lines: list[str], check: str) -> str:
    """Return the line of one check."""
    found = [line for line in lines if line.split(" ", 1)[-1].lstrip().startswith(f"{check}:")]
    assert len(found) == 1, (check, lines)
    return found[0]


async def test_a_good_setup_is_all_ok(deployment: dict[str, str], tmp_path: Path) -> None:
    code, lines = await doctor(deployment, tmp_path)
    assert code == 0, lines
    assert [line.split()[0] for line in lines] == ["ok"] * len(lines), lines
    checks = [line.split(":")[0].split(None, 1)[1] for line in lines]
    assert checks == [
        "settings",
        "redis",
        "redis persistence",
        "redis exposure",
        "git",
        "app",
        "installation",
        "workflows",
        "webhook secret",
        "operator token",
        "agent",
        "sandbox",
        "sandbox probe",
        "disk",
    ]
    assert "installation 1 on maintainer" in line_of(lines, "installation")
    assert line_of(lines, "sandbox") == (
        "ok   sandbox: bubblewrap contains the agent (BATON_AGENT_NETWORK=allowlist)"
    )
    assert line_of(lines, "sandbox probe") == (
        "ok   sandbox probe: the agent's sandbox holds: key file, Redis and the worker's "
        "environment are out of reach"
    )
    assert deployment["GITHUB_WEBHOOK_SECRET"] not in "\n".join(lines)


async def test_a_workflow_that_would_run_the_agents_code_with_secrets_is_named(
    deployment: dict[str, str], maintainer: Maintainer, tmp_path: Path
) -> None:
    workflow = "on: push\njobs:\n  d:\n    steps:\n      - run: echo ${{ secrets.NPM_TOKEN }}\n"
    files = {"README.md": "# ci\n", ".github/workflows/release.yml": workflow}
    await maintainer.create_repo("ci", files, tmp_path)
    code, lines = await doctor(deployment, tmp_path)
    assert code == 0, lines  # a warning: the maintainers may mean it
    assert line_of(lines, "workflows") == (
        "warn workflows: maintainer/ci: .github/workflows/release.yml runs on push of Baton's "
        "branches with secrets NPM_TOKEN: the agent's code would run with them before anyone "
        "reviews it; give its push trigger `branches-ignore: ['baton/**']`, or push to a fork "
        "(`BATON_PUSH_TO=fork:OWNER`, docs/security.md)"
    )


async def test_fork_mode_names_a_missing_fork_and_only_the_workflows_a_fork_reaches(
    deployment: dict[str, str], maintainer: Maintainer, tmp_path: Path
) -> None:
    """From a fork, `push` and `pull_request` workflows run without secrets; only
    `pull_request_target` has them, on the repository's own code."""
    pushed = "on: push\njobs:\n  d:\n    steps:\n      - run: echo ${{ secrets.NPM_TOKEN }}\n"
    target = (
        "on: pull_request_target\njobs:\n  l:\n    steps:\n      - run: echo ${{ secrets.BOT }}\n"
    )
    for name, workflows in [
        ("forked", {"release.yml": pushed}),
        ("labeller", {"label.yml": target}),
    ]:
        files = {"README.md": "# ci\n"}
        files.update({f".github/workflows/{path}": text for path, text in workflows.items()})
        await maintainer.create_repo(name, files, tmp_path)
    await maintainer.install("baton-forks")
    for forked in ("demo", "forked", "labeller"):
        await maintainer.fork(f"maintainer/{forked}", "baton-forks")
    await maintainer.create_repo("unforked", {"README.md": "# no fork\n"}, tmp_path)
    code, lines = await doctor({**deployment, "BATON_PUSH_TO": "fork:baton-forks"}, tmp_path)
    assert code == 0, lines
    assert line_of(lines, "workflows") == (
        "warn workflows: maintainer/labeller: .github/workflows/label.yml runs on "
        "pull_request_target of Baton's pull requests from the fork with secrets BOT: it runs "
        "the repository's code, safe only while it never checks out or runs the pull "
        "request's head (docs/security.md)"
    )
    assert line_of(lines, "forks") == (
        "warn forks: maintainer/unforked: no fork baton-forks/unforked the App reaches, so no "
        "issue of it can be worked on; `gh repo fork maintainer/unforked --org baton-forks "
        "--clone=false`, with the App installed on baton-forks"
    )


async def test_an_operator_token_too_short_for_baton_web_fails(
    deployment: dict[str, str], tmp_path: Path
) -> None:
    short = "guessable-operator-token"
    code, lines = await doctor({**deployment, "BATON_OPERATOR_TOKEN": short}, tmp_path)
    assert code == 1
    assert line_of(lines, "operator token") == (
        "FAIL operator token: baton web refuses it: BATON_OPERATOR_TOKEN is 24 characters: "
        "use 32 or more random ones (e.g. `openssl rand -hex 32`)"
    )
    assert short not in "\n".join(lines)


async def test_a_wrong_private_key_fails_and_names_the_fix(
    deployment: dict[str, str], tmp_path: Path
) -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    key_path = tmp_path / "other.pem"
    key_path.write_bytes(
        other.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
    code, lines = await doctor({**deployment, "GITHUB_PRIVATE_KEY_PATH": str(key_path)}, tmp_path)
    assert code == 1
    app = line_of(lines, "app")
    assert app.startswith("FAIL") and "generate a new key in the App's settings" in app
    not_a_key = {k: v for k, v in deployment.items() if k != "GITHUB_PRIVATE_KEY_PATH"}
    code, lines = await doctor({**not_a_key, "GITHUB_PRIVATE_KEY": "not a key"}, tmp_path)
    assert code == 1
    assert line_of(lines, "app").startswith("FAIL app: the private key is not a PEM RSA key")


async def test_unreachable_redis_fails_and_names_the_fix(
    deployment: dict[str, str], tmp_path: Path
) -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    code, lines = await doctor({**deployment, "REDIS_URL": nowhere}, tmp_path)
    assert code == 1
    redis_line = line_of(lines, "redis")
    assert redis_line.startswith("FAIL") and nowhere in redis_line
    assert "start Redis or fix REDIS_URL" in redis_line


async def test_a_missing_agent_cli_fails_and_names_the_fix(
    deployment: dict[str, str], tmp_path: Path
) -> None:
    agent = {"BATON_AGENT": "claude", "BATON_AGENT_BINARY": "no-such-claude-cli"}
    code, lines = await doctor({**deployment, **agent}, tmp_path)
    assert code == 1
    agent_line = line_of(lines, "agent")
    assert agent_line.startswith("FAIL") and "no-such-claude-cli is not on PATH" in agent_line
    assert "set BATON_AGENT_BINARY" in agent_line


async def test_missing_settings_are_each_named(tmp_path: Path) -> None:
    code, lines = await doctor({"PATH": os.environ["PATH"], "BATON_MAX_ATTEMPTS": "0"}, tmp_path)
    assert code == 1
    settings = line_of(lines, "settings")
    assert settings.startswith("FAIL") and "BATON_MAX_ATTEMPTS" in settings
    code, lines = await doctor({"PATH": os.environ["PATH"]}, tmp_path)
    settings = line_of(lines, "settings")
    assert "GITHUB_APP_ID must be set" in settings
    assert "GITHUB_PRIVATE_KEY or GITHUB_PRIVATE_KEY_PATH must be set" in settings


async def test_a_redis_the_agent_may_reach_fails_the_probe(
    deployment: dict[str, str], tmp_path: Path
) -> None:
    redis_at = urlsplit(deployment["REDIS_URL"]).netloc
    code, lines = await doctor({**deployment, "BATON_AGENT_ALLOWED_HOSTS": redis_at}, tmp_path)
    assert code == 1
    assert line_of(lines, "sandbox").startswith("ok")
    probe = line_of(lines, "sandbox probe")
    assert probe.startswith("FAIL sandbox probe: inside the sandbox the agent reached ")
    assert f"Redis at {redis_at} through the agent's proxy" in probe
    assert "the file" not in probe and "environment in" not in probe  # those stayed hidden


async def test_a_worker_without_bwrap_fails_the_sandbox(
    deployment: dict[str, str], tmp_path: Path
) -> None:
    tools = tmp_path / "bin"  # a PATH with what the doctor runs, and no bwrap
    tools.mkdir()
    for tool in ("git", "true"):
        found = shutil.which(tool)
        assert found is not None
        (tools / tool).symlink_to(found)
    code, lines = await doctor({**deployment, "PATH": str(tools)}, tmp_path)
    assert code == 1
    assert line_of(lines, "git").startswith("ok")
    sandbox = line_of(lines, "sandbox")
    assert sandbox.startswith("FAIL sandbox: bwrap is not installed: install bubblewrap")
    assert "BATON_AGENT_SANDBOX=off" in sandbox
    assert not [line for line in lines if "sandbox probe" in line]  # nothing to probe


async def test_another_cli_outside_its_tested_range_is_a_warning(
    deployment: dict[str, str], tmp_path: Path
) -> None:
    tools = tmp_path / "bin"
    tools.mkdir()
    codex = fake_cli(tools, "echo 'codex-cli 0.200.1'", "codex")
    code, lines = await doctor({**deployment, "PATH": f"{tools}:{deployment['PATH']}"}, tmp_path)
    assert code == 0, lines
    assert line_of(lines, "agent") == f"ok   agent: command: {shutil.which('true')}"
    other = line_of(lines, "other agent")
    assert other.startswith(f"warn other agent: codex 0.200.1 at {codex} is outside the range")


async def test_a_sandbox_turned_off_is_a_warning(
    deployment: dict[str, str], tmp_path: Path
) -> None:
    code, lines = await doctor({**deployment, "BATON_AGENT_SANDBOX": "off"}, tmp_path)
    assert code == 0, lines
    sandbox = line_of(lines, "sandbox")
    assert sandbox.startswith("warn sandbox: BATON_AGENT_SANDBOX=off: agents run uncontained")
    assert "loopback services such as Redis" in sandbox
    assert not [line for line in lines if "sandbox probe" in line]


# ---------------------------------------------------------------- the agent CLI's version

ROOT = Path(__file__).parents[2]
# Where .ci/install-agent-clis puts each pinned CLI, and what its tests call it.
INSTALLED_CLIS = {
    "claude": (ROOT / ".agents" / "npm" / "node_modules" / ".bin" / "claude", "Claude Code"),
    "codex": (ROOT / ".agents" / "npm" / "node_modules" / ".bin" / "codex", "Codex"),
    "aider": (ROOT / ".agents" / "aider" / "bin" / "aider", "aider"),
}


def test_an_agent_cli_outside_its_tested_range_is_a_warning() -> None:
    tested = ("2.1.197", "2.1.x")
    exact = judge_agent_version("claude", "/opt/claude", "2.1.197 (Claude Code)\n", tested)
    assert exact == ok("agent", "claude 2.1.197: /opt/claude (tested with 2.1.197, accepted 2.1.x)")
    assert judge_agent_version("claude", "/opt/claude", "2.1.240 (Claude Code)", tested).status == (
        "ok"
    )
    newer = judge_agent_version("claude", "/opt/claude", "2.2.0 (Claude Code)", tested)
    assert newer.status == "warn"
    assert "claude 2.2.0 at /opt/claude is outside the range Baton is tested with" in newer.detail
    assert newer.detail.endswith("install 2.1.197")
    assert judge_agent_version("claude", "/c", "1.0.128 (Claude Code)", tested).status == "warn"
    assert judge_agent_version("claude", "/c", "2.10.1", tested).status == "warn"
    aider = judge_agent_version("aider", "/a/aider", "aider 0.86.2", ("0.86.2", "0.86.x"))
    assert aider.status == "ok" and aider.detail.startswith("aider 0.86.2: /a/aider")
    codex = judge_agent_version("codex", "/c/codex", "codex-cli 0.171.0", None)
    assert codex == ok("agent", "codex 0.171.0: /c/codex (no tested range is recorded for it)")
    silent = judge_agent_version("claude", "/opt/claude", None, tested)
    assert silent.status == "warn" and "`claude --version` failed or did not answer" in (
        silent.detail
    )
    garbled = judge_agent_version("claude", "/opt/claude", "Claude Code", tested)
    assert garbled.status == "warn" and "said 'Claude Code'" in garbled.detail


def fake_cli(tmp_path: Path, script: str, name: str = "claude") -> Path:
    cli = tmp_path / name
    cli.write_text(f"#!/bin/sh\n{script}\n")
    cli.chmod(0o755)
    return cli


def agent_settings(tmp_path: Path, binary: Path, agent: str = "claude") -> Settings:
    return Settings(
        BATON_DATA_DIR=tmp_path / "data", BATON_AGENT=agent, BATON_AGENT_BINARY=str(binary)
    )


@pytest.mark.real_cli
@pytest.mark.parametrize("agent", sorted(INSTALLED_CLIS))
def test_the_installed_cli_is_the_tested_version(agent: str, tmp_path: Path) -> None:
    cli = installed(*INSTALLED_CLIS[agent])
    version, accepted = TESTED_VERSIONS[agent]
    found = check_agent(agent_settings(tmp_path, cli, agent))
    assert found == ok(
        "agent", f"{agent} {version}: {cli} (tested with {version}, accepted {accepted})"
    )


TESTED_IN_DOCS = re.compile(r"Tested with \*\*(\S+)\*\*; `baton doctor` accepts \*\*(\S+)\*\*")


def test_the_pins_the_docs_and_the_doctor_name_the_same_versions() -> None:
    script = (ROOT / ".ci" / "install-agent-clis").read_text()
    pins = dict(re.findall(r"^([A-Z_]+)_VERSION=(\S+)$", script, re.MULTILINE))
    assert {
        "claude": pins.pop("CLAUDE_CODE"),
        "codex": pins.pop("CODEX"),
        "aider": pins.pop("AIDER"),
    } == {agent: version for agent, (version, _) in TESTED_VERSIONS.items()}
    assert pins == {}  # no CLI is pinned that the doctor does not know
    documented = {}
    sections = re.split(r"^## ", (ROOT / "docs" / "agents.md").read_text(), flags=re.MULTILINE)
    for section in sections[1:]:
        heading = section.splitlines()[0]
        said = TESTED_IN_DOCS.search(section)
        if said is not None:
            documented[heading] = (said.group(1), said.group(2))
    assert documented == {
        "Claude Code": TESTED_VERSIONS["claude"],
        "Codex": TESTED_VERSIONS["codex"],
        "aider": TESTED_VERSIONS["aider"],
    }


def test_in_ci_a_real_cli_test_that_would_skip_fails(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    missing = tmp_path / "no-such-cli"
    (tmp_path / "test_cli_fake.py").write_text(  # as the real ones do, in a fixture
        "from pathlib import Path\n\nimport pytest\n\nfrom tests.cli_harness import installed\n\n\n"
        "@pytest.fixture\ndef cli() -> Path:\n"
        f"    return installed(Path({str(missing)!r}), 'Fake')\n\n\n"
        "def test_the_fake_cli(cli: Path) -> None:\n    pass\n"
    )
    (tmp_path / "test_other.py").write_text(
        "import pytest\n\n\n"
        "@pytest.mark.real_cli\ndef test_marked() -> None:\n    pytest.skip('not here')\n\n\n"
        "def test_unmarked() -> None:\n    pytest.skip('may skip')\n"
    )

    plugins = ["-p", "tests.conftest", "-p", "no:cacheprovider"]
    argv = [sys.executable, "-m", "pytest", *plugins, "-c", str(tmp_path / "pytest.ini")]

    def pytest_in(env: dict[str, str]) -> str:
        done = subprocess.run(
            [*argv, "-rA", str(tmp_path)],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
            capture_output=True,
            text=True,
            check=False,
        )
        return done.stdout

    outside = pytest_in({"CI": ""})
    assert "3 skipped" in outside, outside
    assert "Fake is not installed: run `bash .ci/install-agent-clis`" in outside
    in_ci = pytest_in({"CI": "1"})
    assert "1 failed, 1 skipped, 1 error" in in_ci, in_ci
    assert (
        "test_cli_fake.py::test_the_fake_cli may not skip in CI (CI=1): "
        "Fake is not installed: run `bash .ci/install-agent-clis`"
    ) in in_ci
    assert "test_other.py::test_marked may not skip in CI (CI=1): not here" in in_ci


def test_a_cli_version_outside_the_range_or_no_answer_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    newer = check_agent(agent_settings(tmp_path, fake_cli(tmp_path, "echo '9.0.0 (Claude Code)'")))
    assert newer.status == "warn" and "claude 9.0.0 at" in newer.detail
    monkeypatch.setattr(bot.ops.doctor, "AGENT_VERSION_TIMEOUT_S", 0.5)
    hung = check_agent(agent_settings(tmp_path, fake_cli(tmp_path, "exec sleep 30")))
    assert hung.status == "warn" and "failed or did not answer" in hung.detail
    failing = check_agent(agent_settings(tmp_path, fake_cli(tmp_path, "exit 3")))
    assert failing.status == "warn"


def test_the_other_clis_a_repository_may_pick_are_checked_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    on_path = tmp_path / "bin"
    on_path.mkdir()
    codex = fake_cli(on_path, "echo 'codex-cli 9.9.9'", "codex")
    aider = fake_cli(on_path, "echo 'aider 0.86.5'", "aider")
    monkeypatch.setenv("PATH", f"{on_path}:/usr/bin:/bin")
    command = Settings(BATON_DATA_DIR=tmp_path / "data", BATON_AGENT_COMMAND="true")
    outside, within = check_other_agents(command)  # no claude: no line for it
    assert outside.check == within.check == "other agent"
    assert outside.status == "warn"
    assert f"codex 9.9.9 at {codex} is outside the range Baton is tested with" in outside.detail
    assert within == ok(
        "other agent", f"aider 0.86.5: {aider} (tested with 0.86.2, accepted 0.86.x)"
    )
    assert check_other_agents(agent_settings(tmp_path, codex, "codex")) == [within]
    installs = tmp_path / "node_modules" / ".bin"  # claude and codex side by side, off PATH
    installs.mkdir(parents=True)
    claude = fake_cli(installs, "echo '2.1.197 (Claude Code)'")
    beside = fake_cli(installs, "echo 'codex-cli 0.171.3'", "codex")
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    assert check_other_agents(agent_settings(tmp_path, claude)) == [
        ok("other agent", f"codex 0.171.3: {beside} (tested with 0.171.0, accepted 0.171.x)")
    ]
