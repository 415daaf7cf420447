"""The deployment files agree with Baton, with the platforms and with one another.

Heroku builds from the root's uv.lock, .python-version and Procfile (app.json for its
button), Fly.io from the root's fly.toml and Dockerfile. Every command they name must be
one `baton` accepts, the platforms must run the same processes with the data directory on
the volume, and the lock must install what pyproject.toml declares.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import Any, get_args

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version
from pydantic import SecretStr
from pydantic.fields import FieldInfo

from bot.domain.jobs import AGENTS
from bot.ops.cli import build_parser
from bot.ops.settings import Settings, SettingsError

ROOT = Path(__file__).parents[2]
PROCESSES = {"web", "worker", "clock"}
# What Heroku's Python buildpack recognises an app by; it refuses more than one of them.
# https://devcenter.heroku.com/articles/python-support ("Application Requirements")
HEROKU_PACKAGE_FILES = ("requirements.txt", "Pipfile", "poetry.lock", "uv.lock")


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
    with (ROOT / "fly.toml").open("rb") as file:
        return tomllib.load(file)


def dockerfile() -> list[tuple[str, str]]:
    """Return the Dockerfile's instructions as (INSTRUCTION, arguments), continuations joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in (ROOT / "Dockerfile").read_text().splitlines():
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


def toml(name: str) -> dict[str, Any]:
    """Return a TOML file at the repository's root."""
    with (ROOT / name).open("rb") as file:
        return tomllib.load(file)


def app_json() -> dict[str, Any]:
    """Return app.json, the app Heroku's button creates."""
    manifest = json.loads((ROOT / "app.json").read_text())
    assert isinstance(manifest, dict)
    return manifest


def requirement_key(requirement: Requirement) -> str:
    """Return a requirement written one way: name, extras, versions and marker normalised."""
    extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
    marker = f"; {requirement.marker}" if requirement.marker else ""
    return f"{canonicalize_name(requirement.name)}{extras}{requirement.specifier}{marker}"


def declared_requirements() -> set[str]:
    """Return pyproject.toml's dependencies, an extra's under the marker `extra == '<name>'`."""
    project = toml("pyproject.toml")["project"]
    declared = {requirement_key(Requirement(line)) for line in project["dependencies"]}
    for extra, lines in project["optional-dependencies"].items():
        for line in lines:
            requirement = Requirement(line)
            condition = f"extra == '{extra}'"
            if requirement.marker:
                condition = f"({requirement.marker}) and {condition}"
            requirement.marker = Requirement(f"x; {condition}").marker
            declared.add(requirement_key(requirement))
    return declared


def locked_project() -> dict[str, Any]:
    """Return uv.lock's entry for Baton itself, which records what it was locked from."""
    name = canonicalize_name(toml("pyproject.toml")["project"]["name"])
    found = [package for package in toml("uv.lock")["package"] if package["name"] == name]
    assert len(found) == 1, f"uv.lock has {len(found)} entries for {name}"
    project: dict[str, Any] = found[0]
    return project


def locked_requirements() -> set[str]:
    """Return the requirements uv.lock was resolved for (its `requires-dist`)."""
    keys = set()
    for entry in locked_project()["metadata"]["requires-dist"]:
        extras = ",".join(entry.get("extras", []))
        line = entry["name"] + (f"[{extras}]" if extras else "") + entry.get("specifier", "")
        if "marker" in entry:
            line += f"; {entry['marker']}"
        keys.add(requirement_key(Requirement(line)))
    return keys


def locked_versions() -> dict[str, list[Version]]:
    """Return every version uv.lock pins, by package name."""
    versions: dict[str, list[Version]] = {}
    for package in toml("uv.lock")["package"]:
        versions.setdefault(package["name"], []).append(Version(package["version"]))
    return versions


def python_version_pin() -> str:
    """Return .python-version's one line."""
    return (ROOT / ".python-version").read_text().strip()


# A value for each kind of optional setting, to learn which setting a property waits for.
SAMPLES: dict[object, object] = {SecretStr: SecretStr("0" * 64), str: "1", Path: Path(__file__)}


def sample(field: FieldInfo) -> object | None:
    """Return a value for an optional field, or None when it has no sample."""
    return next((SAMPLES[arg] for arg in get_args(field.annotation) if arg in SAMPLES), None)


def answers(prop: str, **values: Any) -> bool:
    """Say whether Settings, with only these fields set, answers prop without a SettingsError."""
    try:
        getattr(Settings.model_construct(**values), prop)
    except SettingsError:
        return False
    return True


def required_settings() -> list[set[str]]:
    """Return the settings Baton cannot run without, derived from its Settings model.

    A property that raises SettingsError with every field at its default needs a setting;
    the variables of the optional fields that, once set, let it answer are the setting's
    alternatives (GITHUB_PRIVATE_KEY or GITHUB_PRIVATE_KEY_PATH).
    """
    required = []
    for prop, attribute in vars(Settings).items():
        if isinstance(attribute, property | cached_property) and not answers(prop):
            required.append(
                {
                    str(field.validation_alias)
                    for name, field in Settings.model_fields.items()
                    if field.default is None
                    and (value := sample(field)) is not None
                    and answers(prop, **{name: value})
                }
            )
    return required


def container_engine() -> tuple[str | None, str]:
    """Return a container engine that answers, or None and why there is none."""
    problems = []
    for engine in ("docker", "podman"):
        if shutil.which(engine) is None:
            problems.append(f"{engine} is not installed")
            continue
        info = subprocess.run(
            [engine, "info"], capture_output=True, text=True, timeout=60, check=False
        )
        if info.returncode == 0:
            return engine, ""
        reason = (info.stderr.strip().splitlines() or ["no output"])[-1]
        problems.append(f"`{engine} info` fails: {reason}")
    return None, "; ".join(problems)


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


# Heroku: the Python buildpack, uv.lock and .python-version


def test_heroku_finds_one_package_manager_file_uv_lock() -> None:
    # Heroku's buildpack picks the package manager from the one file at the root that it
    # knows, and fails a build that has several.
    present = [name for name in HEROKU_PACKAGE_FILES if (ROOT / name).exists()]
    assert present == ["uv.lock"]


def test_the_python_version_is_pinned_to_one_baton_supports() -> None:
    # With uv, Heroku's buildpack requires .python-version and recommends a major version
    # without a patch, so that each build gets Python's security releases.
    pin = python_version_pin()
    assert re.fullmatch(r"3\.\d+", pin), f".python-version is {pin!r}, not 3.<minor>"
    supported = SpecifierSet(toml("pyproject.toml")["project"]["requires-python"])
    assert Version(pin) in supported, f"Python {pin} is outside requires-python {supported}"
    assert toml("uv.lock")["requires-python"] == str(supported)


def test_the_lock_was_made_from_what_pyproject_declares() -> None:
    # What uv itself compares: the lock records the requirements it resolved; a
    # dependency added, removed or changed in pyproject.toml since makes them differ, and
    # `uv sync --locked` (Heroku's build, the image's) fails.
    declared, locked = declared_requirements(), locked_requirements()
    assert declared == locked, (
        f"pyproject.toml only: {sorted(declared - locked)}; "
        f"uv.lock only: {sorted(locked - declared)}: run `uv lock`"
    )
    extras = list(toml("pyproject.toml")["project"]["optional-dependencies"])
    assert sorted(locked_project()["metadata"]["provides-extras"]) == sorted(extras)
    assert "test" in extras


def test_the_lock_pins_every_declared_dependency_within_its_range() -> None:
    versions = locked_versions()
    for line in declared_requirements():
        requirement = Requirement(line)
        name, specifier = requirement.name, requirement.specifier
        assert name in versions, f"uv.lock pins no version of {name}"
        outside = [str(version) for version in versions[name] if version not in specifier]
        assert not outside, f"uv.lock pins {name} {outside}, outside {specifier}"


def test_uv_finds_the_lock_up_to_date(tmp_path: Path) -> None:
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip(
            "uv is not installed (pip install uv); "
            "test_the_lock_was_made_from_what_pyproject_declares compares the lock without it"
        )
    # Offline, with a cache of its own: an up-to-date lock needs no index to be checked.
    env = {**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "UV_PYTHON_DOWNLOADS": "never"}
    result = subprocess.run(
        [uv, "lock", "--check", "--offline"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


# Heroku: app.json, the app the Deploy to Heroku button creates


def test_app_json_asks_for_every_setting_baton_requires() -> None:
    required = required_settings()
    assert {"GITHUB_APP_ID"} in required and {"GITHUB_WEBHOOK_SECRET"} in required, required
    env = app_json()["env"]
    for alternatives in required:
        asked = [
            name
            for name in sorted(alternatives)
            if name in env and (env[name].get("required") or "generator" in env[name])
        ]
        assert asked, f"app.json requires none of {sorted(alternatives)}"


def test_app_json_names_only_settings_baton_reads() -> None:
    aliases = {str(field.validation_alias) for field in Settings.model_fields.values()}
    assert set(app_json()["env"]) <= aliases, set(app_json()["env"]) - aliases


def test_app_json_describes_every_setting_and_ships_no_secret() -> None:
    # A value in app.json is public, in the repository: a secret is asked for or generated.
    secrets = {
        str(field.validation_alias)
        for field in Settings.model_fields.values()
        if SecretStr in get_args(field.annotation)
    }
    for name, var in app_json()["env"].items():
        assert var.get("description"), f"app.json does not describe {name}"
        if name in secrets:
            assert "value" not in var, f"app.json ships a value for the secret {name}"
            assert var.get("required") or var.get("generator") == "secret", name
    generated = [name for name, var in app_json()["env"].items() if "generator" in var]
    assert generated == ["BATON_OPERATOR_TOKEN"]
    # Heroku's generator makes a 64-character hex secret: long enough for Baton.
    assert answers("operator_secret", operator_token=SecretStr("0" * 64))


def test_app_json_provisions_a_heroku_redis_that_persists() -> None:
    plans = [addon["plan"] for addon in app_json()["addons"]]
    redis = [plan for plan in plans if plan.split(":")[0] == "heroku-redis"]
    assert len(redis) == 1, plans
    # The mini plan keeps no data across a restart (docs/deploy.md, Redis).
    assert redis[0].split(":")[1] != "mini"


def test_app_json_builds_with_the_python_buildpack() -> None:
    assert app_json()["buildpacks"] == [{"url": "heroku/python"}]


def test_app_json_formation_runs_the_procfile_with_no_agents_on_a_dyno() -> None:
    formation = app_json()["formation"]
    assert set(formation) == set(procfile())
    sandbox = app_json()["env"]["BATON_AGENT_SANDBOX"]["value"]
    for name, command in procfile().items():
        args = baton_command(shlex.split(command), f"Procfile {name}")
        takes_agents = args.command == "worker" and AGENTS in args.queues
        if takes_agents and sandbox != "off":
            # A dyno has no user namespaces: this worker would refuse to start.
            assert formation[name]["quantity"] == 0, name
        else:
            assert formation[name]["quantity"] >= 1, name


# Fly.io and the image


def test_fly_builds_the_dockerfile_at_the_root() -> None:
    # `fly deploy` with no flags reads ./fly.toml and builds ./Dockerfile.
    dockerfile_path = fly().get("build", {}).get("dockerfile", "Dockerfile")
    assert (ROOT / dockerfile_path).resolve() == ROOT / "Dockerfile"
    assert not (ROOT / "docs" / "deploy").exists(), "the old copies in docs/deploy/ are gone"


def test_the_image_installs_baton_from_the_lock() -> None:
    runs = [arguments for keyword, arguments in dockerfile() if keyword == "RUN"]
    syncs = [shlex.split(run) for run in runs if "uv sync" in run]
    assert syncs, "the Dockerfile runs no `uv sync`"
    for words in syncs:
        assert {"--locked", "--frozen"} & set(words), f"uv sync ignores the lock: {words}"
    assert not [run for run in runs if re.search(r"pip install (\S+ )*\.( |$)", run)]
    copied = [
        word
        for keyword, arguments in dockerfile()
        if keyword == "COPY"
        for word in shlex.split(arguments)[:-1]
    ]
    assert {"uv.lock", ".python-version", "pyproject.toml"} <= set(copied)


def test_the_image_runs_the_pinned_python() -> None:
    bases = [arguments.split()[0] for keyword, arguments in dockerfile() if keyword == "FROM"]
    pythons = [base for base in bases if base.startswith("python:")]
    assert pythons == [f"python:{python_version_pin()}-slim-bookworm"], bases


def test_every_file_the_image_copies_is_in_its_build_context() -> None:
    ignored = [
        line.strip().removeprefix("**/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for keyword, arguments in dockerfile():
        words = shlex.split(arguments)
        if keyword != "COPY" or any(word.startswith("--from=") for word in words):
            continue
        for source in words[:-1]:
            assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
            assert not any(fnmatch.fnmatch(source, pattern) for pattern in ignored), (
                f"COPY {source}: .dockerignore leaves it out of the build context"
            )


def test_the_image_builds_and_runs_baton(tmp_path: Path) -> None:
    engine, missing = container_engine()
    if engine is None:
        pytest.skip(f"no container engine to build the image with: {missing}")
    tag = f"baton-test-{tmp_path.name.lower()}"
    build = subprocess.run(
        [engine, "build", "--tag", tag, str(ROOT)],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]
    try:
        for argv in (["baton", "--help"], ["bwrap", "--version"], ["git", "--version"]):
            ran = subprocess.run(
                [engine, "run", "--rm", tag, *argv],
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert ran.returncode == 0, f"{argv}: {ran.stdout}{ran.stderr}"
    finally:
        subprocess.run([engine, "rmi", "--force", tag], capture_output=True, check=False)
