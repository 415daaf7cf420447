"""`baton doctor`: its judgements, and the real command against the sandbox and a real Redis."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.devstack import free_port, start_redis_server
from bot.doctor import (
    MIN_FREE_BYTES,
    Finding,
    exit_code,
    fail,
    judge_disk,
    judge_git,
    judge_persistence,
    judge_webhook_secret,
    missing_permissions,
    ok,
    redacted_url,
    render,
    warn,
)
from bot.sandbox.maintainer import Maintainer

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
    found = judge_webhook_secret(secret, demo_mode=False)
    assert found.status == "ok" and secret not in found.detail
    assert judge_webhook_secret("short", demo_mode=False).status == "warn"
    assert judge_webhook_secret(None, demo_mode=False).status == "FAIL"
    assert judge_webhook_secret(None, demo_mode=True).status == "warn"


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
    checks = [line.split()[1].rstrip(":") for line in lines]
    assert checks == [
        "settings",
        "redis",
        "redis",
        "git",
        "app",
        "installation",
        "webhook",
        "agent",
        "disk",
    ]
    assert "installation 1 on maintainer" in line_of(lines, "installation")
    assert deployment["GITHUB_WEBHOOK_SECRET"] not in "\n".join(lines)


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
