"""RQ jobs: thin synchronous entries that load their services and run the async core."""

from __future__ import annotations

from functools import cache

from bot.dispatch import Dispatcher
from bot.recovery import Services
from bot.settings import load_settings
from bot.store import Store


@cache
def services() -> Services:
    """Return this worker process's settings, store and dispatcher, built once."""
    settings = load_settings()
    return Services(
        settings=settings,
        store=Store.from_url(settings.redis_url, settings.lock_ttl_ms),
        dispatch=Dispatcher.from_url(settings.redis_url, settings),
    )
