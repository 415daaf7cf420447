"""Attempts' transcripts, kept where any machine can read them: in Redis, or in a directory.

The worker that ran an attempt keeps what bot/domain/transcript.py makes of its
transcript when the attempt ends; every web process and `baton transcript` reads it
back from the same place, on whichever machine. `BATON_TRANSCRIPT_STORE` names the
place: Redis (`TranscriptStore`, composed into `Store`) or a directory every machine
mounts (`TranscriptDirectory`). Another store is one more class with these two
methods, chosen in `transcripts_for`.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Protocol

from bot.domain.model import IssueRef, Run
from bot.domain.transcript import NoTranscript, chosen_run, missing_reason
from bot.edges.store import keys
from bot.edges.store.base import StoreBase, text
from bot.edges.store.runs import RunStore
from bot.ops.settings import Settings

DAY_S = 24 * 3600
SUFFIX = ".log"


class TranscriptKeeper(Protocol):
    """Where attempts' transcripts are kept."""

    def keep_transcript(self, issue: IssueRef, attempt: int, transcript: str, days: int) -> None:
        """Keep an attempt's transcript for so many days, in place of any kept before."""
        ...

    def transcript(self, issue: IssueRef, attempt: int) -> str | None:
        """Return an attempt's kept transcript; None when none is (or it has expired)."""
        ...


class TranscriptStore(StoreBase):
    """Transcripts in Redis, one string per attempt, expiring on their own."""

    def keep_transcript(self, issue: IssueRef, attempt: int, transcript: str, days: int) -> None:
        """Keep an attempt's transcript for so many days, in place of any kept before."""
        self.redis.set(keys.transcript(issue, attempt), transcript, ex=days * DAY_S)

    def transcript(self, issue: IssueRef, attempt: int) -> str | None:
        """Return an attempt's kept transcript; None when none is (or it has expired)."""
        raw = self.redis.get(keys.transcript(issue, attempt))
        return None if raw is None else text(raw)


@dataclass(frozen=True)
class TranscriptDirectory:
    """Transcripts as files, `<root>/<owner>/<repo>/<issue>/<attempt>.log`.

    Each file is written whole under a temporary name and renamed into place, so a
    reader on another machine never sees half of one. Writing one deletes the files
    older than their days; nothing else does.
    """

    root: Path

    def keep_transcript(self, issue: IssueRef, attempt: int, transcript: str, days: int) -> None:
        """Write an attempt's transcript, in place of any kept before; prune the expired."""
        path = self._path(issue, attempt)
        path.parent.mkdir(parents=True, exist_ok=True)
        written = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        written.write_text(transcript, encoding="utf-8")
        os.replace(written, path)
        self.prune(time.time() - days * DAY_S)

    def transcript(self, issue: IssueRef, attempt: int) -> str | None:
        """Return an attempt's kept transcript; None when none is (or it was pruned)."""
        try:
            return self._path(issue, attempt).read_text(encoding="utf-8", errors="replace")
        except (FileNotFoundError, NotADirectoryError):
            return None

    def prune(self, before: float) -> None:
        """Delete every kept file last written before that instant (seconds since the epoch)."""
        for directory, _, files in os.walk(self.root):
            for name in files:
                if not name.endswith((SUFFIX, ".tmp")):
                    continue  # not Baton's: the operator's own files are left alone
                path = Path(directory, name)
                try:
                    if path.lstat().st_mtime < before:
                        path.unlink()
                except OSError:
                    continue  # pruned by another machine meanwhile, or not Baton's to delete

    def _path(self, issue: IssueRef, attempt: int) -> Path:
        if {issue.owner, issue.name} & {".", ".."}:
            raise ValueError(f"{issue.repo} names no repository")
        return self.root / issue.owner / issue.name / str(issue.number) / f"{attempt}{SUFFIX}"


def transcripts_for(settings: Settings, store: TranscriptStore) -> TranscriptKeeper:
    """Return where this deployment keeps transcripts: the directory it names, or Redis."""
    directory = settings.transcript_dir
    return store if directory is None else TranscriptDirectory(directory)


@dataclass(frozen=True)
class KeptTranscript:
    """An attempt's run record and its kept transcript."""

    run: Run
    transcript: str


def find_transcript(
    runs: RunStore,
    kept: TranscriptKeeper,
    issue: IssueRef,
    attempt: int | None,
    days: int,
    now: datetime,
) -> KeptTranscript:
    """Return the transcript of the issue's attempt (its latest, if None), with its run.

    Raises NoTranscript saying why there is none: no such issue or attempt, a run
    that never reached its agent or has not finished, an expired transcript.
    """
    run = chosen_run(issue, runs.runs(issue), attempt)
    transcript = kept.transcript(issue, run.attempt)
    if transcript is None:
        raise NoTranscript(missing_reason(run, days, now))
    return KeptTranscript(run, transcript)
