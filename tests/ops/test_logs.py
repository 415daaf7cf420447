"""Log lines: one JSON object each, with their context, and no secret in any of them."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bot.edges.git import auth_header
from bot.ops.logs import (
    LINE_CHARS,
    MASK,
    JsonFormatter,
    TextFormatter,
    log_context,
    log_format_named,
    mask_secrets,
    redact,
)
from bot.ops.settings import load_settings

ROOT = Path(__file__).parents[2]


def record(message: str, *args: object, exc_info: Any = None) -> logging.LogRecord:
    return logging.LogRecord(
        "bot.workflows.attempt", logging.WARNING, __file__, 1, message, args, exc_info
    )


def as_json(line: str) -> dict[str, Any]:
    assert "\n" not in line
    entry: dict[str, Any] = json.loads(line)
    return entry


@functools.cache
def pem_key() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    ).decode()


# The JSON line ------------------------------------------------------------------


def test_a_line_is_one_json_object_with_time_level_logger_and_message() -> None:
    entry = as_json(JsonFormatter().format(record("attempt %d of %s", 2, "octo/repo#7")))
    assert entry.keys() == {"time", "level", "logger", "message"}  # no context: no fields
    assert entry["level"] == "WARNING" and entry["logger"] == "bot.workflows.attempt"
    assert entry["message"] == "attempt 2 of octo/repo#7"
    assert entry["time"].endswith("Z") and entry["time"][:2] == "20"


def test_context_fields_are_carried_nested_and_restored() -> None:
    formatter = JsonFormatter()
    with log_context(repo="octo/repo", issue=7, job="run_issue", delivery=None):
        with log_context(run_id="octo/repo#7/2", attempt=2):
            inner = as_json(formatter.format(record("inside")))
        outer = as_json(formatter.format(record("after the attempt")))
    outside = as_json(formatter.format(record("outside")))
    assert {k: inner[k] for k in ("repo", "issue", "job", "run_id", "attempt")} == {
        "repo": "octo/repo",
        "issue": 7,
        "job": "run_issue",
        "run_id": "octo/repo#7/2",
        "attempt": 2,
    }
    assert "delivery" not in inner  # not known there: left out, never null
    assert "attempt" not in outer and outer["issue"] == 7
    assert "repo" not in outside


async def test_context_follows_the_work_into_tasks_and_threads() -> None:
    formatter = JsonFormatter()

    async def in_a_task() -> str:
        await asyncio.sleep(0)
        return formatter.format(record("from a task"))

    with log_context(delivery="d-1"):
        task = asyncio.create_task(in_a_task())
        threaded = await asyncio.to_thread(formatter.format, record("from a thread"))
    assert as_json(await task)["delivery"] == "d-1"
    assert as_json(threaded)["delivery"] == "d-1"


def test_an_exception_is_one_field_and_masked() -> None:
    token = "ghs_" + secrets.token_hex(18)
    try:
        raise RuntimeError(f"push with {token} failed")
    except RuntimeError:
        line = JsonFormatter().format(record("push failed", exc_info=sys.exc_info()))
    entry = as_json(line)
    assert "Traceback" in entry["exception"] and "RuntimeError: push with *** failed" in line
    assert token not in line


def test_text_lines_keep_the_context_at_the_end_and_mask_too() -> None:
    token = "ghp_" + secrets.token_hex(18)
    with log_context(repo="octo/repo", issue=7):
        line = TextFormatter().format(record("using %s", token))
    assert line.endswith("bot.workflows.attempt: using *** [repo=octo/repo issue=7]")


# Redaction ------------------------------------------------------------------


@pytest.mark.parametrize(
    "secret",
    [
        "ghs_" + "a1B2" * 9,
        "ghp_" + "Z9y8" * 9,
        "gho_" + "x" * 36,
        "ghu_" + "Q" * 36,
        "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUV",
    ],
)
def test_github_tokens_are_masked(secret: str) -> None:
    assert redact(f"Authorization: token {secret}; next") == f"Authorization: token {MASK}; next"


def test_credentials_in_urls_and_git_s_basic_header_are_masked() -> None:
    token = secrets.token_hex(20)  # whatever its shape
    url = f"https://x-access-token:{token}@github.com/octo/repo.git"
    assert (
        redact(f"fetch {url} failed")
        == f"fetch https://x-access-token:{MASK}@github.com/octo/repo.git failed"
    )
    header = auth_header(token)
    assert token not in redact(header) and header.split()[-1] not in redact(header)


def test_jwts_and_private_keys_are_masked_whole_or_cut_short() -> None:
    key = pem_key()
    app_jwt = jwt.encode({"iss": "1", "iat": 1, "exp": 2}, key, algorithm="RS256")
    assert redact(f"Bearer {app_jwt} refused") == f"Bearer {MASK} refused"
    masked = redact(f"key:\n{key.strip()}\nloaded")
    assert masked == f"key:\n{MASK}\nloaded"
    cut = redact(f"key: {key[:200]}")
    assert cut == f"key: {MASK}"


# A megabyte no token could be: the masking looked at each start of it to its end, so
# this took minutes and stopped the worker's event loop (and heartbeat) all that while.
NEAR_MISSES = {
    "JWT starts": "eyJ" * 350_000,
    "URL credential starts": "x-access-token:" * 70_000,
    "JWT parts": ("eyJaaaa." * 2 + "eyJ" * 10) * 25_000,
}


@pytest.mark.parametrize("text", NEAR_MISSES.values(), ids=NEAR_MISSES.keys())
def test_a_megabyte_of_near_misses_is_masked_at_once_and_kept(text: str) -> None:
    # Run apart, so a masking that backtracks fails here (in 60 s) rather than hanging.
    code = (
        "import sys; from bot.ops.logs import redact; "
        "text = sys.stdin.read(); sys.stdout.write(str(len(redact(text))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], input=text, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0


def test_a_jwt_after_text_of_its_alphabet_is_no_jwt_and_one_after_a_space_is() -> None:
    app_jwt = jwt.encode({"iss": "1", "iat": 1, "exp": 2}, pem_key(), algorithm="RS256")
    assert redact(f"token={app_jwt}") == f"token={MASK}"
    assert redact(f"x-access-token:{'a' * 40}x-access-token:{'b' * 40}@host") == (
        f"x-access-token:{'a' * 40}x-access-token:{MASK}@host"
    )


def test_a_line_from_a_stranger_is_cut_before_it_is_masked_and_written() -> None:
    comment = "/baton start " + "x" * 1_000_000 + " ghs_" + "A" * 36
    entry = as_json(JsonFormatter().format(record("refused a command: %s", comment)))
    assert len(entry["message"]) < LINE_CHARS + 100
    assert entry["message"].endswith(f"({len(comment) + 19 - LINE_CHARS} more characters)")
    assert entry["message"].startswith("refused a command: /baton start xxx")
    text = TextFormatter().format(record("refused a command: %s", comment))
    assert len(text) < 2 * LINE_CHARS + 200


def test_the_deployment_s_own_secrets_are_masked_longest_first() -> None:
    short = "swordfish-" + secrets.token_hex(4)
    longer = short + "-and-more"
    mask_secrets([short, longer, ""])
    assert redact(f"a {longer} b {short} c") == f"a {MASK} b {MASK} c"
    assert redact("nothing secret: sha 0123abcd, eyJ alone, ghs_short") == (
        "nothing secret: sha 0123abcd, eyJ alone, ghs_short"
    )


def test_settings_register_the_deployment_s_secrets(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    webhook_secret, operator_token = secrets.token_hex(12), secrets.token_hex(12)
    key_path = tmp_path / "app.pem"
    key_path.write_text(pem_key().replace("RSA PRIVATE KEY", "SECRET STUFF"))  # no PEM pattern
    monkeypatch.setenv("GITHUB_WEBHOOK_SECRET", webhook_secret)
    monkeypatch.setenv("BATON_OPERATOR_TOKEN", operator_token)
    monkeypatch.setenv("GITHUB_PRIVATE_KEY_PATH", str(key_path))
    load_settings()
    text = f"{webhook_secret} {operator_token} {key_path.read_text()}"
    assert redact(text) == f"{MASK} {MASK} {MASK}"


def test_log_formats_are_named_exactly() -> None:
    assert log_format_named("json") == "json" and log_format_named("text") == "text"
    with pytest.raises(ValueError, match="'xml' is not a log format: use json or text"):
        log_format_named("xml")


# A process's logging, RQ's lines included --------------------------------------

PROCESS = """
import logging
from rq.logutils import setup_loghandlers
from bot.ops.logs import configure_logging, log_context
configure_logging()
setup_loghandlers("INFO", name="rq.worker")  # what an RQ worker does as it starts
logging.getLogger("rq.worker").info("baton-agents: jobs.run.run_issue(1)")
with log_context(job="run_issue", repo="octo/repo", issue=3):
    logging.getLogger("bot.workflows.attempt").warning("pushing with %s", "ghs_" + "0" * 36)
"""


def run_process(log_format: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "BATON_LOG_FORMAT"}
    if log_format is not None:
        env["BATON_LOG_FORMAT"] = log_format
    return subprocess.run(
        [sys.executable, "-c", PROCESS], cwd=ROOT, env=env, capture_output=True, text=True
    )


def test_a_process_logs_json_by_default_rq_s_lines_too() -> None:
    result = run_process(None)
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    entries = [as_json(line) for line in result.stderr.splitlines()]
    assert [(e["logger"], e["message"]) for e in entries] == [
        ("rq.worker", "baton-agents: jobs.run.run_issue(1)"),
        ("bot.workflows.attempt", "pushing with ***"),
    ]
    assert entries[1] | {"time": "t"} == {
        "time": "t",
        "level": "WARNING",
        "logger": "bot.workflows.attempt",
        "message": "pushing with ***",
        "job": "run_issue",
        "repo": "octo/repo",
        "issue": 3,
    }


def test_a_process_logs_text_when_asked_and_refuses_an_unknown_format() -> None:
    text = run_process("text")
    assert text.returncode == 0, text.stderr
    assert text.stderr.splitlines()[-1].endswith(
        "WARNING bot.workflows.attempt: pushing with *** [repo=octo/repo issue=3 job=run_issue]"
    )
    unknown = run_process("xml")
    assert unknown.returncode == 2
    assert (
        unknown.stderr == "baton: BATON_LOG_FORMAT: 'xml' is not a log format: use json or text\n"
    )
