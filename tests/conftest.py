"""Shared fixtures: a private redis-server per test session, settings, payloads."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import aiohttp
import pytest
import redis
from pydantic import SecretStr

from bot.devkit.devstack import LocalBaton, start_redis_server
from bot.devkit.maintainer import Maintainer
from bot.edges.github import GitHubApp, GitHubClient, github_app
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from bot.ops.settings import Settings
from bot.sandbox.hub import HUB
from bot.sandbox.server import running
from tests.support import COMPRESSED_PACE, StackSpec

# The CLI tests' shared harness and providers assert as the tests do: let pytest explain.
pytest.register_assert_rewrite("tests.cli_harness", "tests.providers")

REAL_CLI = "real_cli"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", f"{REAL_CLI}: drives an installed agent CLI; in CI it fails where it would skip"
    )


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test of tests/agents/test_cli_*.py as one that drives a real agent CLI."""
    for item in items:
        if item.path.name.startswith("test_cli_"):
            item.add_marker(REAL_CLI)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item,
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """In CI (CI set) nothing skips: a real-CLI test that would skip fails, saying why."""
    report = yield
    skipped = report.skipped and not hasattr(report, "wasxfail")
    if skipped and os.environ.get("CI") and item.get_closest_marker(REAL_CLI):
        longrepr = report.longrepr
        said = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reason = said.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"{item.nodeid} may not skip in CI (CI={os.environ['CI']}): {reason}"
    return report


@pytest.fixture(scope="session", autouse=True)
def away_from_any_env_file(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Run every test in an empty directory: Settings read `./.env`, and a developer's own
    (written by `baton setup` in a checkout) must not change what the tests see."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path_factory.mktemp("cwd"))
        yield


class RedisServer:
    """The test session's own redis-server, which tests may flush, stop and restart."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.url, self.process = start_redis_server(workdir)

    def stop(self) -> None:
        self.process.stop()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def stack(
    request: pytest.FixtureRequest,
    redis_server: RedisServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[LocalBaton]:
    """Start the test module's own Baton stack, as its `STACK` declares it (or, where the
    module parametrises `stack` indirectly, the StackSpec it is given), in its own
    emptied Redis database; stop it after the module's last test."""
    spec: StackSpec = request.param if hasattr(request, "param") else request.module.STACK
    url = spec.redis_url(redis_server.url)
    redis.Redis.from_url(url).flushdb()
    baton = spec.start(url, tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]))
    yield baton
    baton.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """Return the private Redis's URL, emptied for this test."""
    redis.Redis.from_url(redis_server.url).flushall()
    return redis_server.url


@pytest.fixture
def store(redis_url: str) -> Store:
    return Store.from_url(redis_url)


@pytest.fixture
def settings(redis_url: str, tmp_path: Path) -> Settings:
    """Return settings as a deployment would have them (the App's key is unused here)."""
    return Settings(
        GITHUB_APP_ID="1",
        GITHUB_PRIVATE_KEY="unused",
        GITHUB_WEBHOOK_SECRET="It's a Secret to Everybody",
        REDIS_URL=redis_url,
        BATON_DATA_DIR=tmp_path / "data",
        BATON_AGENT_COMMAND="true",
    )


@pytest.fixture
def dispatch(settings: Settings, redis_url: str) -> Dispatcher:
    return Dispatcher.from_url(redis_url, settings)


OPERATOR_TOKEN = "operator-token-for-tests-long-enough-to-be-accepted"


@pytest.fixture
def operator_settings(settings: Settings) -> Settings:
    """Return the settings of a deployment whose operator pages are open to OPERATOR_TOKEN."""
    return settings.model_copy(update={"operator_token": SecretStr(OPERATOR_TOKEN)})


@pytest.fixture
async def sandbox(tmp_path: Path) -> AsyncIterator[dict[str, str]]:
    """Serve a sandbox GitHub in this process; yield what its app.env would say."""
    async with running(tmp_path / "sandbox", None) as app:
        yield app[HUB].settings()


@pytest.fixture
async def maintainer(sandbox: dict[str, str]) -> AsyncIterator[Maintainer]:
    """Act as the sandbox's maintainer (admin on every repository)."""
    async with aiohttp.ClientSession() as session:
        yield Maintainer(session, sandbox["GITHUB_API_URL"], sandbox["SANDBOX_ADMIN_TOKEN"])


@pytest.fixture
async def app(
    sandbox: dict[str, str], store: Store, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[GitHubApp]:
    """Return Baton's GitHub App on the sandbox, retrying and pacing fast so tests stay quick."""
    monkeypatch.setattr(GitHubClient, "retry_base_s", 0.01)
    env = {k: v for k, v in sandbox.items() if k != "SANDBOX_ADMIN_TOKEN"} | COMPRESSED_PACE
    async with github_app(Settings(**env, REDIS_URL=redis_url), store) as github:
        yield github
