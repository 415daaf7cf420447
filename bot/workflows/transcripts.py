"""Keeping an attempt's transcript where every machine can read it, once its agent has ended."""

from __future__ import annotations

import logging
import os

import redis

from bot.agents.output import Unreadable, read_capped
from bot.agents.process import STDOUT_CAP
from bot.domain.model import Run
from bot.domain.transcript import kept_transcript
from bot.edges.store.transcripts import transcripts_for
from bot.ops.logs import redact
from bot.workflows.services import Services

log = logging.getLogger(__name__)

# A value handed to the agent shorter than this is not a credential (a flag, a region):
# masking each of its occurrences would only garble the transcript.
SECRET_MIN_CHARS = 8


def keep_transcript(services: Services, run: Run) -> None:
    """Keep the transcript of the run's agent, masked and capped, where the deployment says.

    The file sits where the agent could have replaced it: it is read only as a regular
    file below the data directory's runs, through no symlink, and never past what
    Baton's capture writes. A transcript that cannot be read or kept costs the attempt
    nothing but a warning.
    """
    result = run.agent_result
    if result is None:
        return
    settings = services.settings
    try:
        found = read_capped(
            result.transcript_path, STDOUT_CAP.on_disk, within=settings.data_dir / "runs"
        )
    except Unreadable as exc:
        log.warning("%s: attempt %d's transcript was not kept: %s", run.issue, run.attempt, exc)
        return
    if found is None:
        return  # the agent never started, so it printed nothing
    if found.cut:
        log.warning(
            "%s: attempt %d's transcript is over %d bytes, more than Baton writes: "
            "only the end of its first %d is kept",
            run.issue,
            run.attempt,
            STDOUT_CAP.on_disk,
            STDOUT_CAP.on_disk,
        )
    # What the agent was handed by name is masked by value too: its provider keys.
    handed = [os.environ.get(name, "") for name in settings.agent_passthrough_env]
    secrets = [value for value in handed if len(value) >= SECRET_MIN_CHARS]
    transcript = kept_transcript(found.data, lambda text: redact(text, secrets))
    keeper = transcripts_for(settings, services.store)
    try:
        keeper.keep_transcript(run.issue, run.attempt, transcript, settings.transcript_days)
    except (redis.RedisError, OSError) as exc:
        log.warning("%s: attempt %d's transcript was not kept: %s", run.issue, run.attempt, exc)
        return
    log.info("%s: kept attempt %d's transcript", run.issue, run.attempt)
