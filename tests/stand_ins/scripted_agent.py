"""A scripted coding agent for the end-to-end tests, run by the `command` adapter.

It follows instructions written in the issue body, one per line, so each test
says in its issue what the agent does:

    agent: write PATH TEXT     write TEXT (\\n for newlines, {attempt} for the attempt) to PATH
    agent: lines PATH COUNT    write COUNT numbered lines to PATH (a diff too large to show)
    agent: delete PATH         delete the file at PATH
    agent: commit MESSAGE      commit what is there so far
    agent: commit-at DATE MSG  commit it as of DATE (ISO 8601): the same work, the same sha
    agent: sleep SECONDS
    agent: exit CODE           stop with that exit code
    agent: window SECONDS      report a provider usage window that resets in SECONDS, and stop
    agent: fail-costing USD    report a failed run that cost USD, and stop
    agent: costs USD TURNS     report a completed run that cost USD over TURNS turns, and go on
    agent: merge REF           merge REF into the branch, leaving any conflict to resolve
    agent: say TEXT            print TEXT (\\n for newlines): its last lines are the report

`agent@N: ...` does the same on attempt N only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

PREFIX = "agent: "
GIT = ["git", "-c", "user.name=Agent", "-c", "user.email=agent@example.invalid"]


def write(rest: str, attempt: str) -> int | None:
    path, _, text = rest.partition(" ")
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text.replace("\\n", "\n").replace("{attempt}", attempt))
    print(f"wrote {path}")
    return None


def lines(rest: str, _attempt: str) -> int | None:
    path, _, count = rest.partition(" ")
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("".join(f"line {n}\n" for n in range(int(count))))
    print(f"wrote {count} lines to {path}")
    return None


def delete(rest: str, _attempt: str) -> int | None:
    Path(rest).unlink()
    print(f"deleted {rest}")
    return None


def commit(rest: str, _attempt: str) -> int | None:
    subprocess.run([*GIT, "add", "-A"], check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", rest], check=True)
    print(f"committed {rest}")
    return None


def commit_at(rest: str, _attempt: str) -> int | None:
    date, _, message = rest.partition(" ")
    dated = {**os.environ, "GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    subprocess.run([*GIT, "add", "-A"], check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", message], check=True, env=dated)
    print(f"committed {message} as of {date}")
    return None


def merge(rest: str, _attempt: str) -> int | None:
    subprocess.run([*GIT, "merge", "--no-edit", rest], check=False)
    return None


def say(rest: str, _attempt: str) -> int | None:
    print(rest.replace("\\n", "\n"))
    return None


def sleep(rest: str, _attempt: str) -> int | None:
    time.sleep(float(rest))
    return None


def exit_with(rest: str, _attempt: str) -> int | None:
    print(f"exiting {rest}", file=sys.stderr)
    return int(rest)


def report(fields: dict[str, object]) -> None:
    Path(os.environ["BATON_RESULT"]).write_text(json.dumps(fields))


def window(rest: str, _attempt: str) -> int | None:
    resets_at = datetime.now(UTC) + timedelta(seconds=float(rest))
    report(
        {
            "status": "failed",
            "stop_reason": "provider_window",
            "failure_class": "provider-window",
            "resets_at": resets_at.isoformat(),
        }
    )
    print("You've hit your usage limit", file=sys.stderr)
    return 1


def costs(rest: str, _attempt: str) -> int | None:
    cost, _, turns = rest.partition(" ")
    report(
        {
            "status": "success",
            "stop_reason": "completed",
            "cost_usd": float(cost),
            "turns": int(turns),
        }
    )
    print(f"spent ${cost} over {turns} turns")
    return None


def fail_costing(rest: str, _attempt: str) -> int | None:
    report({"status": "failed", "stop_reason": "cli_error", "cost_usd": float(rest)})
    print(f"failed after spending ${rest}", file=sys.stderr)
    return 1


VERBS: dict[str, Callable[[str, str], int | None]] = {
    "write": write,
    "lines": lines,
    "delete": delete,
    "commit": commit,
    "commit-at": commit_at,
    "merge": merge,
    "say": say,
    "sleep": sleep,
    "exit": exit_with,
    "window": window,
    "costs": costs,
    "fail-costing": fail_costing,
}


def main() -> int:
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[attr-defined]  # a live transcript
    brief = Path(os.environ["BATON_BRIEF"]).read_text()
    issue, attempt = os.environ["BATON_ISSUE"], os.environ["BATON_ATTEMPT"]
    print(f"scripted agent on issue {issue}, attempt {attempt}")
    for line in brief.splitlines():
        if line.startswith(f"agent@{attempt}: "):
            line = PREFIX + line.removeprefix(f"agent@{attempt}: ")
        if not line.startswith(PREFIX):
            continue
        verb, _, rest = line.removeprefix(PREFIX).partition(" ")
        action = VERBS.get(verb)
        code = action(rest, attempt) if action is not None else None
        if code is not None:
            return code
    print("Done: followed the issue's instructions.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
