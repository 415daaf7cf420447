"""Baton's log lines: one JSON object each, with the context they were logged in, secrets masked.

Context (the delivery, repository, issue, run, attempt and job a line is
about) is set where it becomes known with `log_context` and carried by
contextvars, so every line logged inside the block, in any task it starts,
carries it. Every line is redacted before it is written: GitHub tokens, App
JWTs, private keys, credentials in URLs, and the exact values of the
deployment's own secrets (`mask_secrets`).
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Literal

import orjson

LogFormat = Literal["json", "text"]
LOG_FORMATS: tuple[LogFormat, ...] = ("json", "text")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
MASK = "***"
LOG_FORMAT_VARIABLE = "BATON_LOG_FORMAT"  # read before settings: the first lines need it

_NO_CONTEXT: Mapping[str, str | int] = MappingProxyType({})
_context: ContextVar[Mapping[str, str | int]] = ContextVar("baton_log_context")
_secrets: set[str] = set()

_PATTERNS = (
    # A PEM private key, whole or cut short.
    re.compile(
        r"-----BEGIN [A-Z ]*PRIVATE KEY-----(?:.*?-----END [A-Z ]*PRIVATE KEY-----|.*)", re.S
    ),
    # GitHub tokens: installation (ghs_), personal (ghp_, github_pat_), OAuth (gho_, ghu_, ghr_).
    re.compile(r"(?:gh[opsur]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
    # A JWT (the App's, signed with its key): three base64url parts, a JSON header first.
    # Only where a base64url run starts, and never giving back what a part took: each
    # character is looked at a bounded number of times (`eyJeyJ...` masked in linear time).
    re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{4,}+\.[A-Za-z0-9_-]{4,}+\.[A-Za-z0-9_-]*+"),
    # git's Basic credential: base64 of "x-access-token:<token>".
    re.compile(r"eC1hY2Nlc3MtdG9rZW46[A-Za-z0-9+/=]*"),
)
# A token holds no colon: each try stops at the next `x-access-token:` (linear time).
_URL_CREDENTIAL = re.compile(r"x-access-token:[^@\s:]++@")
# What one log line keeps of its message, or of its exception: text from strangers (a
# comment, an agent's output) may be megabytes, and every line is masked before it is
# written. The rest is cut and counted.
LINE_CHARS = 16_000


@contextmanager
def log_context(
    *,
    delivery: str | None = None,
    repo: str | None = None,
    issue: int | None = None,
    run_id: str | None = None,
    attempt: int | None = None,
    job: str | None = None,
) -> Iterator[None]:
    """Add the given fields to every line logged inside the block (None: not known here)."""
    given = {
        "delivery": delivery,
        "repo": repo,
        "issue": issue,
        "run_id": run_id,
        "attempt": attempt,
        "job": job,
    }
    fields = {name: value for name, value in given.items() if value is not None}
    token = _context.set({**_context.get(_NO_CONTEXT), **fields})
    try:
        yield
    finally:
        _context.reset(token)


def current_context() -> Mapping[str, str | int]:
    """Return the context fields in force here."""
    return _context.get(_NO_CONTEXT)


def mask_secrets(values: Iterable[str]) -> None:
    """Mask these exact values (the deployment's secrets) in every line from now on."""
    _secrets.update(value for value in values if value)


def cut(text: str, limit: int = LINE_CHARS) -> str:
    """Return text cut to limit characters, saying how many more there were."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Return text with every secret Baton knows of, and the given ones, masked."""
    # Longest first, so a secret that contains another is masked whole.
    for secret in sorted({*_secrets, *(s for s in secrets if s)}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    text = _URL_CREDENTIAL.sub(f"x-access-token:{MASK}@", text)
    for pattern in _PATTERNS:
        text = pattern.sub(MASK, text)
    return text


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, context fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as one line of JSON, secrets masked."""
        entry: dict[str, str | int] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(cut(record.getMessage())),
            **current_context(),
        }
        if record.exc_info:
            entry["exception"] = redact(cut(self.formatException(record.exc_info)))
        if record.stack_info:
            entry["stack"] = redact(cut(self.formatStack(record.stack_info)))
        return orjson.dumps(entry).decode()


class TextFormatter(logging.Formatter):
    """Lines for a person at a terminal: the context fields at the end, secrets masked."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        """Return the record as text, secrets masked."""
        text = cut(super().format(record), 2 * LINE_CHARS)
        context = current_context()
        if context:
            first, newline, rest = text.partition("\n")
            fields = " ".join(f"{name}={value}" for name, value in context.items())
            text = f"{first} [{fields}]{newline}{rest}"
        return redact(text)


def log_format_named(name: str) -> LogFormat:
    """Return the log format a setting names: json or text."""
    for known in LOG_FORMATS:
        if name == known:
            return known
    raise ValueError(f"{name!r} is not a log format: use {' or '.join(LOG_FORMATS)}")


def install(log_format: LogFormat, level: int) -> None:
    """Send every log line (warnings too) to stderr in log_format, unless logging is set up.

    A handler on the root logger is also what keeps RQ from adding its own
    (rq.logutils.setup_loghandlers adds one only when no logger above has any),
    so RQ's lines come out in the same format.
    """
    root = logging.getLogger()
    if root.handlers:
        return  # set up already: a test runner capturing lines
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)


def configure_logging(verbose: bool = False) -> None:
    """Log one line per event to stderr: a JSON object, or text with BATON_LOG_FORMAT=text."""
    try:
        log_format = log_format_named(os.environ.get(LOG_FORMAT_VARIABLE, "json"))
    except ValueError as exc:
        print(f"baton: {LOG_FORMAT_VARIABLE}: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    install(log_format, logging.DEBUG if verbose else logging.INFO)
