"""RQ jobs: thin synchronous entries that load their services and run the async core."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import ParamSpec

from bot.dispatch import Dispatcher
from bot.logs import log_context
from bot.metrics import JOBS, Tally
from bot.recovery import Services
from bot.settings import load_settings
from bot.store import Store

P = ParamSpec("P")


@functools.cache
def services() -> Services:
    """Return this worker process's settings, store and dispatcher, built once."""
    settings = load_settings()
    return Services(
        settings=settings,
        store=Store.from_url(settings.redis_url, settings.lock_ttl_ms),
        dispatch=Dispatcher.from_url(settings.redis_url, settings),
    )


def job(func: Callable[P, str]) -> Callable[P, str]:
    """Make func one of Baton's jobs: its lines logged in its context, its outcome counted.

    Every line it logs carries the job's name, and the repository and issue when
    its arguments name them (`repo`, `number`). Its outcome is counted in
    baton_jobs_total: what it returns, or `failed` when it raises. A job returns
    a short word or two, never anything that names an issue: it is a metric label.
    """
    signature = inspect.signature(func)

    @functools.wraps(func)
    def counted(*args: P.args, **kwargs: P.kwargs) -> str:
        named = signature.bind(*args, **kwargs).arguments
        outcome = "failed"
        with log_context(job=func.__name__, repo=named.get("repo"), issue=named.get("number")):
            try:
                outcome = func(*args, **kwargs)
                return outcome
            finally:
                services().store.add_metrics(Tally().count(JOBS, func.__name__, outcome))

    return counted
