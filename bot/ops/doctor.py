"""`baton doctor`: check a deployment before it takes work, one line per check.

Each check is a small function returning `Finding`s; the judging of what a check
found is pure (`judge_*`), and so is the rendering. `FAIL` means Baton cannot work
this way; `warn` means it can, at a risk the line names.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit, urlunsplit

import aiohttp
import jwt
import redis
from gidgethub import GitHubException
from pydantic import BaseModel, ConfigDict, ValidationError

from bot.agents import (
    TESTED_VERSIONS,
    AgentConfigError,
    adapter_for,
    egress_for_run,
    egress_policy_for,
)
from bot.agents.jail import Network, bridge_python, jails_for, sandbox_problem
from bot.domain.ingress import MIN_OPERATOR_TOKEN_CHARS
from bot.domain.manifest import ManifestError, load_manifest
from bot.domain.workflows import exposure
from bot.edges.api import (
    create_installation_token,
    first_installation,
    list_installation_repositories,
    list_installations,
    read_app,
    read_fork_of,
    read_workflows,
)
from bot.edges.github import GitHubApp
from bot.edges.store import Store
from bot.ops.metrics import Tally
from bot.ops.settings import Settings, SettingsError, operator_token_too_short

Status = Literal["ok", "warn", "FAIL"]

MIN_GIT = (2, 17)  # `git worktree remove`, which Baton's workspaces use
MIN_FREE_BYTES = 5 * 1024**3
MIN_WEBHOOK_SECRET_CHARS = 20
REDIS_TIMEOUT_S = 5.0
REDIS_DEFAULT_PORT = 6379
PROBE_TIMEOUT_S = 30.0
EGRESS_LOGGER = "bot.agents.egress"
PROBE_OUTPUT_CAP = 64 * 1024  # bytes of the probe's stdout, and of its stderr, that are read
# The probe is a program of its own (bot/agents/jail_probe.py), run with `python -c` in the sandbox.
PROBE_SOURCE: str = (
    resources.files("bot.agents").joinpath("jail_probe.py").read_text(encoding="utf-8")
)
_GIT_VERSION = re.compile(r"git version (\d+)\.(\d+)")
AGENT_VERSION_TIMEOUT_S = 15.0
OTHER_AGENT = "other agent"  # the check of a CLI that is not one of the deployment's
_AGENT_VERSION = re.compile(r"(?<![\w.])(\d+(?:\.\d+)+)(?![\w.])")
_LEVELS = {"read": 1, "write": 2}


class Finding(BaseModel):
    """What one check found."""

    model_config = ConfigDict(frozen=True)

    check: str
    status: Status
    detail: str


def ok(check: str, detail: str) -> Finding:
    """Return a passed check."""
    return Finding(check=check, status="ok", detail=detail)


def warn(check: str, detail: str) -> Finding:
    """Return a check that passed at a risk."""
    return Finding(check=check, status="warn", detail=detail)


def fail(check: str, detail: str) -> Finding:
    """Return a failed check; its detail says what to fix."""
    return Finding(check=check, status="FAIL", detail=detail)


def render(findings: Sequence[Finding]) -> str:
    """Render one line per check: its status, its name, what it found or the fix."""
    return "\n".join(f"{f.status:<4} {f.check}: {f.detail}" for f in findings)


def exit_code(findings: Sequence[Finding]) -> int:
    """Return 1 when any check failed, else 0."""
    return 1 if any(f.status == "FAIL" for f in findings) else 0


# ---------------------------------------------------------------- pure judgements


def judge_settings(problems: Sequence[str], settings: Settings | None) -> Finding:
    """Judge the settings: every problem named, or which App on which GitHub they set."""
    if problems or settings is None:
        return fail("settings", "; ".join(problems))
    return ok("settings", f"App {settings.github_app_id} on {settings.github_api_url}")


def judge_git(version_output: str | None) -> Finding:
    """Judge `git --version`'s output (None: git is not on PATH)."""
    if version_output is None:
        return fail("git", "git is not on PATH: install git 2.17 or later")
    match = _GIT_VERSION.search(version_output)
    if match is None:
        return fail("git", f"cannot read git's version from {version_output.strip()!r}")
    found = (int(match.group(1)), int(match.group(2)))
    if found < MIN_GIT:
        return fail(
            "git",
            f"git {found[0]}.{found[1]} is too old: Baton's worktrees need 2.17 or later",
        )
    return ok("git", version_output.strip())


def judge_agent_version(
    agent: str,
    path: str,
    version_output: str | None,
    tested: tuple[str, str] | None,
    check: str = "agent",
) -> Finding:
    """Judge `<cli> --version`'s output (None: it did not answer) against the tested range.

    tested is (the version Baton's tests drive, the range accepted), `x` in the range
    standing for any number; None when no range is recorded for the agent. check names
    the line: the deployment's own agent, or another CLI a repository may pick.
    """
    match = _AGENT_VERSION.search(version_output or "")
    if match is None:
        said = (
            f"failed or did not answer within {AGENT_VERSION_TIMEOUT_S:.0f} s"
            if version_output is None
            else f"said {version_output.strip()!r}"
        )
        return warn(
            check,
            f"{agent}: {path}, but `{Path(path).name} --version` {said}: cannot tell whether "
            "Baton reads this version's output right",
        )
    found = match.group(1)
    if tested is None:
        return ok(check, f"{agent} {found}: {path} (no tested range is recorded for it)")
    version, accepted = tested
    if not _within(found, accepted):
        return warn(
            check,
            f"{agent} {found} at {path} is outside the range Baton is tested with "
            f"({accepted}; its tests run {version}): its output may be misread, so a run's "
            f"success or failure may be misjudged; install {version}",
        )
    return ok(check, f"{agent} {found}: {path} (tested with {version}, accepted {accepted})")


def _within(version: str, accepted: str) -> bool:
    """Return whether a dotted version fits a range such as `2.1.x` (`x`: any number)."""
    got, want = version.split("."), accepted.split(".")
    return len(got) >= len(want) and all(w in ("x", g) for g, w in zip(got, want, strict=False))


def judge_persistence(appendonly: str | None, save: str | None) -> Finding:
    """Judge Redis's persistence from CONFIG GET (None: CONFIG is refused, as managed Redis may)."""
    if appendonly is None or save is None:
        return warn(
            "redis persistence",
            "cannot tell: this Redis refuses CONFIG GET; make sure it persists "
            "(appendonly yes), or a restart forgets every run",
        )
    if appendonly == "yes":
        return ok("redis persistence", "append-only file on")
    if save.strip():
        return warn(
            "redis persistence",
            f"snapshots only (save {save}): a crash loses what changed since the last one; "
            "set appendonly yes",
        )
    return warn(
        "redis persistence",
        "off: a restart forgets every run and claim; set appendonly yes (or save)",
    )


def judge_webhook_secret(secret: str | None) -> Finding:
    """Judge the webhook secret's presence and length (never showing it)."""
    if secret is None:
        return fail(
            "webhook secret",
            "GITHUB_WEBHOOK_SECRET is unset: baton web refuses to start without the App's "
            "webhook secret",
        )
    if len(secret) < MIN_WEBHOOK_SECRET_CHARS:
        return warn(
            "webhook secret",
            f"only {len(secret)} characters: use {MIN_WEBHOOK_SECRET_CHARS} or more random ones "
            "(e.g. `openssl rand -hex 20`) in the App's settings and GITHUB_WEBHOOK_SECRET",
        )
    return ok("webhook secret", f"set ({len(secret)} characters)")


def judge_operator_token(token: str | None) -> Finding:
    """Judge the operator token's length (never showing it): baton web refuses a short one."""
    if token is None:
        return ok("operator token", "unset: /status and /metrics answer 404")
    if len(token) < MIN_OPERATOR_TOKEN_CHARS:
        return fail(
            "operator token", f"baton web refuses it: {operator_token_too_short(len(token))}"
        )
    return ok("operator token", f"set ({len(token)} characters)")


def judge_disk(path: Path, writable: bool, free_bytes: int) -> Finding:
    """Judge the data directory: writable, with room for mirrors and worktrees."""
    if not writable:
        return fail(
            "disk",
            f"BATON_DATA_DIR={path} is not writable by this user: "
            "fix its owner or set BATON_DATA_DIR to a writable directory",
        )
    free = f"{free_bytes / 1024**3:.1f} GiB free in {path}"
    if free_bytes < MIN_FREE_BYTES:
        return warn("disk", f"only {free}: mirrors and worktrees need room")
    return ok("disk", free)


def missing_permissions(granted: Mapping[str, str], wanted: Mapping[str, str]) -> list[str]:
    """Return the permissions `wanted` asks for that `granted` lacks, as `name: level`."""
    return [
        f"{name}: {level}"
        for name, level in sorted(wanted.items())
        if _LEVELS.get(granted.get(name, ""), 0) < _LEVELS.get(level, 0)
    ]


def redacted_url(url: str) -> str:
    """Return a URL without its password, to show it."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def judge_redis_exposure(url: str) -> Finding:
    """Judge who can write to the Redis at url: a password, or only this machine.

    RQ's job payloads are pickles the workers load, so whoever can write to Redis can
    run code on every worker.
    """
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return ok("redis exposure", "a Unix socket: only this machine reaches it")
    password = parts.password or next(iter(parse_qs(parts.query).get("password", [])), "")
    host = parts.hostname or "localhost"
    if password:
        how = "TLS and a password" if parts.scheme == "rediss" else "a password"
        return ok("redis exposure", f"{host} is reached with {how}")
    if _is_loopback(host):
        return ok(
            "redis exposure", f"no password, but {host} is loopback: only this machine reaches it"
        )
    return fail(
        "redis exposure",
        f"REDIS_URL has no password and {host} is not a loopback address: anyone who can "
        "write to it can run code on the workers through RQ's job payloads (pickles the "
        "workers load); set a password (requirepass or an ACL user) and put it in REDIS_URL, "
        f"redis://:PASSWORD@{host}:PORT/0 (rediss:// with TLS)",
    )


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_loopback


def judge_sandbox(
    mode: Literal["bwrap", "off"], problem: str | None, network: Network = "allowlist"
) -> Finding:
    """Judge the agent's sandbox: off, unable to start (problem), or working."""
    if mode == "off":
        return warn(
            "sandbox",
            "BATON_AGENT_SANDBOX=off: agents run uncontained, with the worker's reach: its "
            "files (the App's key, .env, every checkout), its environment, its network and "
            "loopback services such as Redis; set BATON_AGENT_SANDBOX=bwrap where "
            "bubblewrap works (docs/deploy.md)",
        )
    if problem is not None:
        return fail("sandbox", problem)
    return ok("sandbox", f"bubblewrap contains the agent (BATON_AGENT_NETWORK={network})")


class ProbeReport(BaseModel):
    """What the probe inside the sandbox reached: each is empty when the sandbox holds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    files: list[str]
    redis: list[str]
    environ: list[str]


def judge_sandbox_probe(stdout: str, exit_code: int | None, stderr: str) -> Finding:
    """Judge the probe's output: ok only when the key file, Redis and the worker's
    environment were all out of reach. exit_code is None when it did not finish in time."""
    if exit_code is None:
        return fail(
            "sandbox probe",
            f"the probe inside the sandbox did not finish within {PROBE_TIMEOUT_S:.0f}s",
        )
    lines = stdout.strip().splitlines()
    try:
        report = ProbeReport.model_validate_json(lines[-1] if lines else "")
    except ValidationError:
        said = stderr.strip().splitlines()
        why = said[-1] if said else f"exited {exit_code} without a report"
        return fail("sandbox probe", f"the probe could not run inside the sandbox: {why}")
    reached = [f"the file {path}" for path in report.files]
    reached += [f"Redis at {way}" for way in report.redis]
    reached += [f"the worker's environment in {path}" for path in report.environ]
    fixes = []
    if report.files:
        fixes.append("keep the App's key and .env out of BATON_AGENT_EXTRA_PATHS and PATH")
    if report.redis:
        fixes.append("keep Redis off BATON_AGENT_ALLOWED_HOSTS")
    if report.environ:
        fixes.append("the sandbox needs a PID namespace of its own")
    if reached:
        return fail(
            "sandbox probe",
            f"inside the sandbox the agent reached {'; '.join(reached)}: {'; '.join(fixes)}",
        )
    return ok(
        "sandbox probe",
        "the agent's sandbox holds: key file, Redis and the worker's environment are out of reach",
    )


def probe_spec(settings: Settings, worker_pid: int, env_file: Path) -> dict[str, Any]:
    """Return what the probe tries: the key file (or .env), Redis, the worker's environment."""
    files = []
    if settings.github_private_key_path is not None:
        files.append(str(settings.github_private_key_path.resolve()))
    files.append(str(env_file.resolve()))
    parts = urlsplit(settings.redis_url)
    redis_target: dict[str, str | int]
    if parts.scheme == "unix":
        redis_target = {"unix": parts.path}
    else:
        redis_target = {
            "host": parts.hostname or "localhost",
            "port": parts.port or REDIS_DEFAULT_PORT,
        }
    return {"files": files, "redis": redis_target, "pids": [worker_pid, 1]}


def probe_marks(settings: Settings) -> list[str]:
    """Return the texts that show the probe read the worker's environment (given on stdin)."""
    marks = ["GITHUB_WEBHOOK_SECRET=", "GITHUB_PRIVATE_KEY", "REDIS_URL=", settings.redis_url]
    if settings.github_webhook_secret is not None:
        marks.append(settings.github_webhook_secret.get_secret_value())
    return [mark for mark in marks if mark]


# ---------------------------------------------------------------- checks


def check_settings() -> tuple[Finding, Settings | None]:
    """Load the settings, naming every variable that is missing or invalid."""
    try:
        settings = Settings()
    except ValidationError as exc:
        problems = [
            f"{'.'.join(str(part) for part in err['loc']) or 'settings'}: {err['msg']}"
            for err in exc.errors()
        ]
        return judge_settings(problems, None), None
    problems = []
    for required in ("app_id", "private_key"):
        try:
            getattr(settings, required)
        except SettingsError as exc:
            problems.append(str(exc))
    return judge_settings(problems, settings), settings


def check_redis(settings: Settings) -> list[Finding]:
    """Check Redis answers, and whether it keeps Baton's state across a restart."""
    client = redis.Redis.from_url(
        settings.redis_url,
        decode_responses=True,
        socket_connect_timeout=REDIS_TIMEOUT_S,
        socket_timeout=REDIS_TIMEOUT_S,
    )
    shown = redacted_url(settings.redis_url)
    try:
        client.ping()
    except redis.RedisError as exc:
        return [fail("redis", f"cannot reach {shown} ({exc}): start Redis or fix REDIS_URL")]
    try:
        appendonly = str(client.config_get("appendonly").get("appendonly", ""))
        save = str(client.config_get("save").get("save", ""))
    except redis.ResponseError:
        return [ok("redis", f"{shown} answers"), judge_persistence(None, None)]
    return [ok("redis", f"{shown} answers"), judge_persistence(appendonly, save)]


def check_git() -> Finding:
    """Check git is on PATH and new enough for Baton's worktrees."""
    if shutil.which("git") is None:
        return judge_git(None)
    done = subprocess.run(["git", "--version"], capture_output=True, text=True, check=False)
    return judge_git(done.stdout)


async def check_app(settings: Settings) -> list[Finding]:
    """Check the App's JWT is accepted, and mint one installation token with it."""
    try:
        settings.app_id, settings.private_key  # noqa: B018 - each raises naming its variable
    except SettingsError as exc:
        return [fail("app", f"not checked: {exc}")]
    timeout = aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        # A tally of its own, never written: the doctor's calls are not Baton's work.
        github = GitHubApp(settings, Store.from_url(settings.redis_url), session, Tally())
        client = github.app_client()
        try:
            app = await read_app(client)
        except GitHubException as exc:
            return [
                fail(
                    "app",
                    f"{settings.github_api_url} refused the App's JWT ({exc}): GITHUB_APP_ID "
                    "or the private key is wrong; generate a new key in the App's settings",
                )
            ]
        except aiohttp.ClientError as exc:
            return [fail("app", f"cannot reach {settings.github_api_url} ({exc}): check it")]
        except (ValueError, jwt.PyJWTError) as exc:  # a malformed key, refused by PyJWT
            return [fail("app", f"the private key is not a PEM RSA key ({exc}): replace it")]
        found = ok("app", f"JWT accepted for {app.slug} (App {app.id})")
        try:
            first = await first_installation(client)
            if first is None:
                install = f"{app.html_url.rstrip('/')}/installations/new"
                return [
                    found,
                    warn("installation", f"no installations yet: install the App at {install}"),
                ]
            token = await create_installation_token(client, first.id)
        except (GitHubException, aiohttp.ClientError) as exc:
            return [found, fail("installation", f"cannot mint an installation token: {exc}")]
    account = first.account.login if first.account else "an account GitHub does not name"
    return [found, judge_installation(first.id, account, token.permissions)]


def judge_installation(installation_id: int, account: str, granted: Mapping[str, str]) -> Finding:
    """Judge a minted token: does the installation grant what app.yml asks for?"""
    minted = f"minted a token for installation {installation_id} on {account}"
    try:
        wanted = load_manifest().default_permissions
    except ManifestError:
        return ok("installation", minted)
    lacking = missing_permissions(granted, wanted)
    if lacking:
        return warn(
            "installation",
            f"{minted}, but it lacks {', '.join(lacking)} that app.yml asks for: "
            "accept the new permissions in the installation's settings",
        )
    return ok("installation", minted)


async def check_workflows(settings: Settings) -> list[Finding]:
    """Read every repository's workflows; warn, one line a repository, where they would run
    the agent's code with secrets, and in fork mode where a repository has no fork."""
    findings: list[Finding] = []
    forks_owner = settings.fork_owner
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        github = GitHubApp(settings, Store.from_url(settings.redis_url), session, Tally())
        try:
            async for installation in list_installations(github.app_client()):
                gh = await github.for_installation(installation.id)
                for repo in await list_installation_repositories(gh):
                    owner, name = repo.full_name.split("/", 1)
                    if forks_owner is not None and owner.casefold() == forks_owner.casefold():
                        continue  # a fork Baton pushes to: Actions is off in a fork
                    read = await read_workflows(gh, repo.full_name, repo.default_branch)
                    found = judge_workflows(repo.full_name, read, forks_owner is not None)
                    findings += [found] if found is not None else []
                    if forks_owner is not None:
                        found = await _fork_of(github, repo.full_name, f"{forks_owner}/{name}")
                        findings += [found] if found is not None else []
        except (GitHubException, aiohttp.ClientError, redis.RedisError) as exc:
            return [warn("workflows", f"not read: {exc}")]
    return findings or [ok("workflows", "no repository's workflows run on Baton's branches")]


async def _fork_of(github: GitHubApp, repo: str, fork: str) -> Finding | None:
    """Warn when fork mode has no fork of repo to push to (as the run would end)."""
    if await read_fork_of(github, fork, repo) is not None:
        return None
    owner = fork.split("/", 1)[0]
    return warn(
        "forks",
        f"{repo}: no fork {fork} the App reaches, so no issue of it can be worked on; "
        f"`gh repo fork {repo} --org {owner} --clone=false`, with the App installed on {owner}",
    )


def judge_workflows(
    repo: str, workflows: Mapping[str, str], from_fork: bool = False
) -> Finding | None:
    """Judge one repository's workflow files (by path); None when none runs on Baton's pushes.

    from_fork: Baton pushes to a fork (fork mode).
    """
    exposed = [
        (path, why)
        for path, text in sorted(workflows.items())
        if (why := exposure(text, from_fork))
    ]
    if not exposed:
        return None
    path, why = exposed[0]
    more = f" (and {len(exposed) - 1} more)" if len(exposed) > 1 else ""
    if from_fork:
        fix = (
            "it runs the repository's code, safe only while it never checks out or runs the "
            "pull request's head (docs/security.md)"
        )
    else:
        fix = (
            "the agent's code would run with them before anyone reviews it; give its push "
            "trigger `branches-ignore: ['baton/**']`, or push to a fork "
            "(`BATON_PUSH_TO=fork:OWNER`, docs/security.md)"
        )
    return warn("workflows", f"{repo}: {path}{more} {why}: {fix}")


def check_webhook_secret(settings: Settings) -> Finding:
    """Check the webhook secret is set and not trivially short."""
    secret = settings.github_webhook_secret
    return judge_webhook_secret(secret.get_secret_value() if secret is not None else None)


def check_operator_token(settings: Settings) -> Finding:
    """Check the operator token, when set, is long enough for baton web to accept it."""
    token = settings.operator_token
    return judge_operator_token(token.get_secret_value() if token is not None else None)


def check_agents(settings: Settings) -> list[Finding]:
    """Check each agent the deployment runs (`BATON_AGENTS`), its default first."""
    return [check_agent(settings.running(agent, settings)) for agent in settings.agents]


def check_agent(settings: Settings) -> Finding:
    """Check the agent the settings run is configured and its CLI is on PATH."""
    try:
        adapter_for(settings)
    except AgentConfigError as exc:
        return fail("agent", str(exc))
    if settings.agent == "command":
        assert settings.agent_command is not None  # the adapter refused it otherwise
        program = shlex.split(settings.agent_command)[0]
        missing = f"BATON_AGENT_COMMAND runs {program}, which is not on PATH: install it or fix it"
    else:
        program = settings.agent_program
        where = (
            "BATON_AGENT_BINARY"
            if settings.agent == settings.agents[0]
            else f"BATON_AGENT_BINARIES={settings.agent}=PATH"
        )
        missing = (
            f"the {settings.agent} CLI {program} is not on PATH: "
            f"install it, or set {where} to its path"
        )
    found = shutil.which(program)
    if found is None:
        return fail("agent", missing)
    if settings.agent == "command":
        return ok("agent", f"{settings.agent}: {found}")
    tested = TESTED_VERSIONS.get(settings.agent)
    return judge_agent_version(settings.agent, found, agent_version(found), tested)


def check_other_agents(settings: Settings) -> list[Finding]:
    """Check the version of each known CLI found that the deployment does not run, which a
    repository's `agent.adapter` may pick: one line for each, none for a CLI not there."""
    return [
        judge_agent_version(agent, path, agent_version(path), TESTED_VERSIONS[agent], OTHER_AGENT)
        for agent, path in other_agents(settings)
    ]


def other_agents(settings: Settings) -> list[tuple[str, str]]:
    """Return each known CLI the deployment does not run that is found, and where: on PATH,
    or beside the binaries the deployment names, where an install of several CLIs puts
    them together."""
    beside = os.pathsep.join(
        dict.fromkeys(
            str(Path(binary).parent)
            for binary in settings.agent_binaries.values()
            if os.sep in binary
        )
    )
    found = []
    for agent in TESTED_VERSIONS:
        if agent in settings.agents:
            continue
        path = shutil.which(agent) or (beside and shutil.which(agent, path=beside))
        if path:
            found.append((agent, path))
    return found


def agent_version(path: str) -> str | None:
    """Return what `<path> --version` prints, or None when it fails or does not answer in time.

    It runs in an empty home of its own, with no update check: asking a version changes nothing.
    """
    with tempfile.TemporaryDirectory(prefix="baton-doctor-home-") as home:
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "LANG": "C.UTF-8",
            "NO_COLOR": "1",
            "DISABLE_AUTOUPDATER": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        }
        try:
            done = subprocess.run(
                [path, "--version"],
                capture_output=True,
                text=True,
                env=env,
                stdin=subprocess.DEVNULL,
                timeout=AGENT_VERSION_TIMEOUT_S,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or done.stderr.strip()


def check_disk(settings: Settings) -> Finding:
    """Check the data directory (or where it will be made) is writable and has room."""
    path = settings.data_dir.resolve()
    existing = next(p for p in (path, *path.parents) if p.exists())
    writable = existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)
    return judge_disk(path, writable, shutil.disk_usage(existing).free)


async def check_sandbox(settings: Settings) -> list[Finding]:
    """Check the agent's sandbox starts; when it does, probe it from inside."""
    if settings.agent_sandbox == "off":
        return [judge_sandbox("off", None)]
    problem = await asyncio.to_thread(sandbox_problem)
    found = judge_sandbox("bwrap", problem, settings.agent_network)
    if problem is not None:
        return [found]
    return [found, await probe_sandbox(settings)]


async def probe_sandbox(settings: Settings) -> Finding:
    """Run the probe in a jail built as an agent's is, behind the agent's own proxy."""
    python = bridge_python()
    with tempfile.TemporaryDirectory(prefix="baton-doctor-") as temp:
        root = Path(temp)
        worktree, home = root / "worktree", root / "home"
        worktree.mkdir()
        try:
            async with (
                _quiet(EGRESS_LOGGER),  # the proxy refusing the probe is the probe's finding
                egress_for_run(egress_policy_for(settings), "baton doctor") as (egress_dir, _),
            ):
                jail = jails_for(settings).make(
                    worktree=worktree,
                    home=home,
                    scratch=root / "scratch",
                    network=settings.agent_network,
                    egress_dir=egress_dir,
                    programs=(python,),
                )
                assert jail is not None  # BATON_AGENT_SANDBOX=bwrap
                spec = probe_spec(settings, os.getpid(), Path(".env"))
                argv = jail.command([python, "-I", "-S", "-c", PROBE_SOURCE, json.dumps(spec)])
                env = {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}
                marks = json.dumps(probe_marks(settings)).encode()
                stdout, stderr, code = await _run_capped(argv, jail.environment(env), marks)
        except OSError as exc:
            return fail("sandbox probe", f"cannot start the probe in the agent's sandbox: {exc}")
    return judge_sandbox_probe(stdout, code, stderr)


@contextlib.asynccontextmanager
async def _quiet(name: str) -> AsyncIterator[None]:
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


async def _run_capped(
    argv: Sequence[str], env: Mapping[str, str], stdin: bytes
) -> tuple[str, str, int | None]:
    """Run argv with stdin; return at most PROBE_OUTPUT_CAP bytes of each of its outputs and
    its exit code, None when it did not finish within PROBE_TIMEOUT_S."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        env=dict(env),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    out, err, code = b"", b"", None
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            with contextlib.suppress(ConnectionError):  # it may end before reading stdin
                process.stdin.write(stdin)
                await process.stdin.drain()
            process.stdin.close()
            out, err = await asyncio.gather(
                _read_capped(process.stdout), _read_capped(process.stderr)
            )
            if process.returncode is None and PROBE_OUTPUT_CAP in (len(out), len(err)):
                process.kill()  # it says more than a probe does: what it said is judged
            code = await process.wait()
    except TimeoutError:
        code = None
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return out.decode(errors="replace"), err.decode(errors="replace"), code


async def _read_capped(stream: asyncio.StreamReader) -> bytes:
    data = b""
    while len(data) < PROBE_OUTPUT_CAP:
        chunk = await stream.read(PROBE_OUTPUT_CAP - len(data))
        if not chunk:
            break
        data += chunk
    return data


async def diagnose() -> list[Finding]:
    """Run every check; those that need settings run only when the settings load."""
    settings_finding, settings = check_settings()
    findings = [settings_finding]
    if settings is not None:
        findings += await asyncio.to_thread(check_redis, settings)
        findings.append(judge_redis_exposure(settings.redis_url))
    findings.append(check_git())
    if settings is not None:
        app = await check_app(settings)
        findings += app
        if all(finding.status == "ok" for finding in app):  # the App reads them, or nothing
            findings += await check_workflows(settings)
        findings += [
            check_webhook_secret(settings),
            check_operator_token(settings),
            *check_agents(settings),
        ]
        findings += await asyncio.to_thread(check_other_agents, settings)
        findings += await check_sandbox(settings)
        findings.append(check_disk(settings))
    return findings


def run_doctor() -> int:
    """Print one line per check; return 1 when any failed."""
    findings = asyncio.run(diagnose())
    print(render(findings), flush=True)
    return exit_code(findings)
