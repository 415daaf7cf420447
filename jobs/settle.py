"""The settle job: a pushed head's check results decide its run."""

from __future__ import annotations

import asyncio

from bot import runner
from jobs import services


def settle_head(installation_id: int, repo: str, head_sha: str) -> str:
    """Settle the run that pushed head_sha, if its checks are final; return what happened."""
    run = asyncio.run(runner.settle_head(services(), installation_id, repo, head_sha))
    return run.state.value if run is not None else "unchanged"
