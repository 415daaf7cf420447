"""Shared fixtures: a private redis-server per test session, settings, payloads."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bot.devstack import start_redis_server
from bot.settings import Settings
from bot.store import Store


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
