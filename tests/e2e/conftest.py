"""Fixtures every end-to-end module shares: each acts on that module's own stack."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer
from bot.edges.store import Store


@pytest.fixture
async def maintainer(stack: LocalBaton) -> AsyncIterator[Maintainer]:
    """A maintainer on the sandbox GitHub, acting through its admin API and REST."""
    async with aiohttp.ClientSession() as session:
        yield Maintainer(session, stack.sandbox_url, stack.admin_token)


@pytest.fixture
def store(stack: LocalBaton) -> Store:
    """Baton's store on the stack's Redis database, to read what Baton recorded."""
    return Store.from_url(stack.redis_url)
