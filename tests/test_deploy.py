"""The deployment files agree with Baton and with one another.

Procfile (Heroku), docs/deploy/fly.toml (Fly.io) and docs/deploy/Dockerfile each start
Baton's processes; every command they name must be one `baton` accepts, and the platforms
must run the same processes with the data directory on the volume.
"""

from __future__ import annotations

import argparse
import json
import shlex
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from bot.cli import build_parser

ROOT = Path(__file__).parents[1]
DEPLOY = ROOT / "docs" / "deploy"  # the repository's top level holds only what Baton is
PROCESSES = {"web", "worker", "clock"}


def procfile() -> dict[str, str]:
    """Return the Procfile's process types and their commands."""
    processes: dict[str, str] = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, command = line.partition(":")
            processes[name.strip()] = command.strip()
    return processes


def fly() -> dict[str, Any]:
    """Return fly.toml as TOML."""
    with (DEPLOY / "fly.toml").open("rb") as file:
        return tomllib.load(file)


def dockerfile() -> list[tuple[str, str]]:
    """Return the Dockerfile's instructions as (INSTRUCTION, arguments), continuations joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in (DEPLOY / "Dockerfile").read_text().splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, arguments = (pending + line).strip().partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    return instructions


def docker_cmd() -> list[str]:
    """Return the argv of the Dockerfile's CMD, the command its entrypoint runs."""
    found = [arguments for keyword, arguments in dockerfile() if keyword == "CMD"]
    assert found, "the Dockerfile has no CMD"
    argv = json.loads(found[-1])
    assert isinstance(argv, list), f"CMD is not in exec form: {found[-1]}"
    return [str(arg) for arg in argv]


def docker_env() -> dict[str, str]:
    """Return the variables the Dockerfile's ENV instructions set (NAME=value form)."""
    env: dict[str, str] = {}
    for keyword, arguments in dockerfile():
        if keyword == "ENV":
            for pair in shlex.split(arguments):
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def baton_command(argv: list[str], where: str) -> argparse.Namespace:
    """Parse argv with Baton's own parser; fail, naming where it came from, if baton refuses it."""
    assert argv and argv[0] == "baton", f"{where} does not run baton: {argv}"
    try:
        return build_parser().parse_args(argv[1:])
    except SystemExit:
        pytest.fail(f"{where}: baton refuses {shlex.join(argv)}")


def test_procfile_runs_web_worker_and_clock() -> None:
    assert set(procfile()) == PROCESSES


@pytest.mark.parametrize("name", sorted(PROCESSES))
def test_every_procfile_command_is_a_baton_subcommand(name: str) -> None:
    command = procfile()[name]
    args = baton_command(shlex.split(command), f"Procfile {name}")
    assert args.command == name


def test_fly_runs_the_procfile_processes() -> None:
    processes = fly()["processes"]
    assert processes == procfile()
    for name, command in processes.items():
        baton_command(shlex.split(command), f"fly.toml process {name}")


def test_fly_serves_and_checks_only_the_web_group() -> None:
    config = fly()
    service = config["http_service"]
    assert service["processes"] == ["web"]
    assert str(service["internal_port"]) == config["env"]["PORT"]
    assert [check["path"] for check in service["checks"]] == ["/healthz"]


def test_fly_mounts_a_volume_under_the_workers_data_dir() -> None:
    config = fly()
    mounts = config["mounts"]
    mounts = mounts if isinstance(mounts, list) else [mounts]
    worker_mounts = [mount for mount in mounts if "worker" in mount["processes"]]
    assert len(worker_mounts) == 1, "exactly one volume per worker Machine"
    data_dir = PurePosixPath(config["env"]["BATON_DATA_DIR"])
    destination = PurePosixPath(worker_mounts[0]["destination"])
    assert data_dir == destination or destination in data_dir.parents


def test_docker_image_runs_a_baton_subcommand() -> None:
    args = baton_command(docker_cmd(), "the Dockerfile's CMD")
    assert args.command == "web"


def test_docker_data_dir_is_on_its_volume_and_matches_fly() -> None:
    data_dir = docker_env()["BATON_DATA_DIR"]
    volumes = [arguments for keyword, arguments in dockerfile() if keyword == "VOLUME"]
    assert any(
        PurePosixPath(data_dir) == PurePosixPath(volume)
        or PurePosixPath(volume) in PurePosixPath(data_dir).parents
        for volume in volumes
    ), f"BATON_DATA_DIR={data_dir} is on none of the image's volumes {volumes}"
    assert data_dir == fly()["env"]["BATON_DATA_DIR"]


def test_the_image_and_ci_install_bubblewrap_for_the_agents_sandbox() -> None:
    installs = [
        shlex.split(arguments)
        for keyword, arguments in dockerfile()
        if keyword == "RUN" and "apt-get install" in arguments
    ]
    assert any({"git", "bubblewrap"} <= set(words) for words in installs), installs
    ci = (ROOT / ".ci" / "run").read_text()
    assert "command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)" in ci
    assert 'apt-get install -y -qq "${missing[@]}"' in ci
