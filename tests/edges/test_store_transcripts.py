"""Kept transcripts in a real Redis and in a directory, and finding an attempt's."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import pytest

from bot.domain.model import AgentResult, IssueRef, Run, RunState, utcnow
from bot.domain.transcript import NoTranscript
from bot.edges.store import Store, keys
from bot.edges.store.transcripts import (
    DAY_S,
    TranscriptDirectory,
    TranscriptKeeper,
    find_transcript,
    transcripts_for,
)
from bot.ops.settings import Settings

ISSUE = IssueRef(installation_id=1, repo="octo/widgets", number=12)


@pytest.fixture(params=["redis", "directory"])
def keeper(request: pytest.FixtureRequest, store: Store, tmp_path: Path) -> TranscriptKeeper:
    return store if request.param == "redis" else TranscriptDirectory(tmp_path / "transcripts")


def test_a_kept_transcript_reads_back_and_a_later_one_replaces_it(keeper: TranscriptKeeper) -> None:
    assert keeper.transcript(ISSUE, 1) is None
    keeper.keep_transcript(ISSUE, 1, "first ünïcode line\n", days=14)
    keeper.keep_transcript(ISSUE, 2, "attempt two\n", days=14)
    assert keeper.transcript(ISSUE, 1) == "first ünïcode line\n"
    keeper.keep_transcript(ISSUE, 1, "kept again\n", days=14)
    assert (keeper.transcript(ISSUE, 1), keeper.transcript(ISSUE, 2)) == (
        "kept again\n",
        "attempt two\n",
    )
    other = IssueRef(installation_id=9, repo="octo/widgets", number=13)
    assert keeper.transcript(other, 1) is None


def test_redis_expires_a_transcript_after_its_days(store: Store) -> None:
    store.keep_transcript(ISSUE, 1, "said\n", days=14)
    ttl = store.redis.ttl(keys.transcript(ISSUE, 1))
    assert 14 * DAY_S - 5 <= ttl <= 14 * DAY_S  # type: ignore[operator]
    store.redis.expire(keys.transcript(ISSUE, 1), 1)
    time.sleep(1.1)
    assert store.transcript(ISSUE, 1) is None


def test_a_directory_keeps_one_file_per_attempt_written_whole(tmp_path: Path) -> None:
    directory = TranscriptDirectory(tmp_path)
    directory.keep_transcript(ISSUE, 3, "said\n", days=14)
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()] == [
        "octo/widgets/12/3.log"
    ]


def test_writing_to_a_directory_deletes_the_transcripts_past_their_days(tmp_path: Path) -> None:
    directory = TranscriptDirectory(tmp_path)
    old = IssueRef(installation_id=1, repo="octo/gadgets", number=4)
    directory.keep_transcript(old, 1, "old\n", days=14)
    directory.keep_transcript(ISSUE, 1, "recent\n", days=14)
    fifteen_days_ago = time.time() - 15 * DAY_S
    os.utime(tmp_path / "octo/gadgets/4/1.log", (fifteen_days_ago, fifteen_days_ago))
    operators = tmp_path / "README.txt"  # the directory's owner's: never Baton's to delete
    operators.write_text("mounted from the bucket\n")
    os.utime(operators, (fifteen_days_ago, fifteen_days_ago))
    assert directory.transcript(old, 1) == "old\n"  # reading prunes nothing

    directory.keep_transcript(ISSUE, 2, "new\n", days=14)
    assert directory.transcript(old, 1) is None
    assert directory.transcript(ISSUE, 1) == "recent\n"
    assert operators.exists()


def test_the_setting_names_where_transcripts_are_kept(settings: Settings, store: Store) -> None:
    assert transcripts_for(settings, store) is store
    elsewhere = Settings(
        **{**settings.model_dump(by_alias=False), "transcript_store": "dir:/mnt/t"}
    )
    assert transcripts_for(elsewhere, store) == TranscriptDirectory(Path("/mnt/t"))


@pytest.mark.parametrize("value", ["s3://bucket", "dir:relative/path", "dir:", "Redis"])
def test_a_store_that_is_neither_redis_nor_an_absolute_directory_is_refused(
    settings: Settings, value: str
) -> None:
    with pytest.raises(ValueError, match="use `redis` or `dir:<absolute path>`"):
        Settings(**{**settings.model_dump(by_alias=False), "transcript_store": value})


def recorded(store: Store, ended_days_ago: float | None) -> Run:
    """Record ISSUE's next attempt, its agent ended so many days ago (None: it has not run)."""
    claim = store.claim(ISSUE) or pytest.fail(f"{ISSUE} could not be claimed")
    attempt = store.next_attempt(claim)
    started = utcnow() - timedelta(days=ended_days_ago or 0, minutes=10)
    run = Run.claimed(ISSUE, attempt, "baton/issue-12", started)
    if ended_days_ago is not None:
        ended = utcnow() - timedelta(days=ended_days_ago)
        result = AgentResult(
            agent="claude",
            status="success",
            stop_reason="completed",
            started_at=started,
            ended_at=ended,
            transcript_path=Path("/data/runs/octo/widgets/12/1/transcript.log"),
            stderr_path=Path("/data/runs/octo/widgets/12/1/stderr.log"),
        )
        run = run.moved(RunState.NO_CHANGE, ended).model_copy(update={"agent_result": result})
    store.save_run(run, claim)
    store.release(claim)
    return run


def test_the_latest_attempts_transcript_is_found_unless_one_is_named(store: Store) -> None:
    recorded(store, ended_days_ago=2)
    recorded(store, ended_days_ago=1)
    store.keep_transcript(ISSUE, 1, "one\n", days=14)
    store.keep_transcript(ISSUE, 2, "two\n", days=14)
    latest = find_transcript(store, store, ISSUE, None, 14, utcnow())
    assert (latest.run.attempt, latest.transcript) == (2, "two\n")
    assert find_transcript(store, store, ISSUE, 1, 14, utcnow()).transcript == "one\n"


def test_no_transcript_is_explained(store: Store) -> None:
    with pytest.raises(NoTranscript, match="no record of a run of octo/widgets#12"):
        find_transcript(store, store, ISSUE, None, 14, utcnow())
    recorded(store, ended_days_ago=20)
    with pytest.raises(NoTranscript, match="attempt 1's transcript has expired"):
        find_transcript(store, store, ISSUE, 1, 14, utcnow())
    with pytest.raises(NoTranscript, match="has no attempt 3 on record"):
        find_transcript(store, store, ISSUE, 3, 14, utcnow())
