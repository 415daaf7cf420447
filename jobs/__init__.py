"""RQ jobs: thin synchronous entries that load their services and run the async core."""

from __future__ import annotations

import functools
import inspect
import logging
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import ParamSpec

from gidgethub import BadRequest

from bot.domain.model import IssueRef
from bot.domain.pacing import HOLD_WORKER_S
from bot.edges.github import InstallationGone, WritesPaused
from bot.edges.queue import Dispatcher
from bot.edges.store import MutexBusy, Store
from bot.ops.logs import log_context
from bot.ops.metrics import JOBS, Tally
from bot.ops.settings import load_settings
from bot.workflows.services import Services
from bot.workflows.settle import end_gone_issue

log = logging.getLogger(__name__)

P = ParamSpec("P")
GONE = HTTPStatus.GONE  # GitHub's answer for a deleted issue


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
            except InstallationGone as exc:
                # Uninstalled, or named by a delivery for an installation GitHub never had:
                # nothing can be done for it, now or on a retry.
                log.warning("nothing done: %s", exc)
                outcome = "installation-gone"
                return outcome
            except WritesPaused as exc:
                # GitHub asked for a long wait: the worker goes on with other work, and
                # this job runs again, whole, when the wait ends (jobs are safe to run twice).
                log.warning("put back: %s", exc)
                services().dispatch.enqueue_current_again(exc.until)
                outcome = "paused"
                return outcome
            except MutexBusy as exc:
                # Another job is writing the issue's comments, slowed by the write pace:
                # this one runs again, whole, once that job has had its time.
                log.warning("put back: %s", exc)
                services().dispatch.enqueue_current_again(time.time() + HOLD_WORKER_S)
                outcome = "paused"
                return outcome
            except BadRequest as exc:
                issue = _issue_named(named)
                if exc.status_code != GONE or issue is None:
                    raise
                # Deleted while the job worked on it: nothing to retry, nothing left to do.
                end_gone_issue(services(), issue, "was deleted")
                outcome = "gone"
                return outcome
            finally:
                services().store.add_metrics(Tally().count(JOBS, func.__name__, outcome))

    return counted


def _issue_named(arguments: Mapping[str, object]) -> IssueRef | None:
    """Return the issue a job's arguments name, if they name one."""
    installation_id, repo, number = (
        arguments.get(name) for name in ("installation_id", "repo", "number")
    )
    if isinstance(installation_id, int) and isinstance(repo, str) and isinstance(number, int):
        return IssueRef(installation_id=installation_id, repo=repo, number=number)
    return None
