"""The config job: read a repository's Baton file as soon as a push changes it."""

from __future__ import annotations

import asyncio
import logging

from bot.domain.repo_config import CONFIG_PATH, InvalidRepoConfig
from bot.edges.api import load_repo_config
from bot.edges.github import github_app
from jobs import job, services

log = logging.getLogger(__name__)


@job
def read_repo_config(installation_id: int, repo: str, sha: str) -> str:
    """Read and remember the repository's `.github/baton.yml` at sha: `read` or `invalid`."""
    return asyncio.run(_read(installation_id, repo, sha))


async def _read(installation_id: int, repo: str, sha: str) -> str:
    ctx = services()
    async with github_app(ctx.settings, ctx.store) as app:
        gh = await app.for_installation(installation_id)
        ctx.store.forget_repo_file(repo)  # what runs read at the branch is this version now
        try:
            file = await load_repo_config(gh, ctx.store, repo, sha)
        except InvalidRepoConfig as exc:
            # Explained on the issue when one is queued: nobody to tell here.
            log.warning("%s: %s at %s is invalid: %s", repo, CONFIG_PATH, sha[:12], exc)
            return "invalid"
    log.info("%s: queue label %s", repo, file.config.labels.queue or ctx.settings.queue_label)
    return "read"
