"""Bodies Baton sends GitHub fit its limit, whatever the agent wrote: pure, no I/O."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.domain import render
from bot.domain.budget import Spend
from bot.domain.model import AgentResult, IssueRef, Limits, PendingPull, Run, RunState, utcnow

ISSUE = IssueRef(installation_id=1, repo="octo/widgets", number=7)
TRANSCRIPT = Path("/var/lib/baton/runs/octo/widgets/7/1/transcript.log")
POINTER = "the run's transcript (`/x/transcript.log` on the worker, run `octo/widgets#7/1`)"


def finished(**fields: object) -> Run:
    now = utcnow()
    agent = AgentResult(
        agent="command",
        status="success",
        stop_reason="completed",
        started_at=now,
        ended_at=now,
        transcript_path=TRANSCRIPT,
        stderr_path=TRANSCRIPT.with_name("stderr.log"),
    )
    run = Run.claimed(ISSUE, 1, "baton/issue-7", now).moved(RunState.PUSHED_PENDING, now)
    return run.model_copy(update={"head_sha": "a" * 40, "agent_result": agent, **fields})


def report_lines(count: int) -> str:
    return "\n".join(f"line {n}: the agent explains what it did, at length." for n in range(count))


def test_a_text_that_fits_is_unchanged() -> None:
    assert render.fit_body("short", pointer=POINTER) == "short"
    assert render.fit_body("short", 20, pointer=POINTER, keep="\nCloses #7") == "short\nCloses #7"
    exact = "x" * 100
    assert render.fit_body(exact, 100, pointer=POINTER) == exact


def test_a_long_text_is_cut_at_a_line_end_with_a_pointer_to_the_rest() -> None:
    text = report_lines(5000)
    body = render.fit_body(text, 10_000, pointer=POINTER)
    assert len(body) <= 10_000
    assert f"The agent's full report was {len(text):,} characters" in body
    assert POINTER in body
    kept = body[: body.index("\n\n*The agent's full report")]
    assert text.startswith(kept) and text[len(kept)] == "\n"  # cut where a line ends
    assert len(kept) > 8000  # and not much before the limit


def test_batons_trailing_part_and_the_marker_survive_the_cut() -> None:
    keep = "\n\nCloses #7\n" + render.STATUS_MARKER + "\n"
    text = render.ESCALATION_MARKER + "\n" + report_lines(10_000)
    body = render.fit_body(text, 65_536, pointer=POINTER, keep=keep)
    assert len(body) <= 65_536
    assert body.startswith(render.ESCALATION_MARKER + "\n")
    assert body.endswith(keep)


def test_a_cut_never_leaves_a_code_block_or_comment_open_over_the_note() -> None:
    text = "Here is the log:\n\n````text\n" + report_lines(5000)
    body = render.fit_body(text, 5000, pointer=POINTER, keep="\nKEEP")
    closing = body[: body.index("\n\n*The agent's")]
    assert closing.endswith("\n````") and body.endswith("\nKEEP") and len(body) <= 5000

    hidden = "Note <!-- " + report_lines(5000)
    body = render.fit_body(hidden, 5000, pointer=POINTER)
    assert body[: body.index("\n\n*The agent's")].endswith("\n-->")

    # A fence too long to close in the room left: the cut goes before it.
    fenced = "before\n" + "`" * 500 + "\n" + report_lines(5000)
    body = render.fit_body(fenced, 5000, pointer=POINTER)
    assert body.startswith("before\n\n*The agent's") and len(body) <= 5000


@pytest.mark.parametrize("limit", [1, 50, 200, 1000, 65_536])
def test_the_result_never_exceeds_the_limit(limit: int) -> None:
    rng = random.Random(limit)
    for _ in range(50):
        size = rng.randrange(0, 3 * limit + 10)
        text = "".join(rng.choice("ab \n`~<!->") for _ in range(size))
        keep = "\n<!-- baton:status -->" if limit > 100 else ""
        body = render.fit_body(text, limit, pointer=POINTER, keep=keep)
        assert len(body) <= limit
        if len(text) + len(keep) > limit and limit >= 1000:
            assert body.endswith(keep) and POINTER in body


def test_a_pull_request_opens_with_a_200000_character_report() -> None:
    report = report_lines(3000)
    report += "\n" + "y" * (200_000 - len(report) - 1)
    assert len(report) == 200_000
    run = finished()
    body = render.pr_body(run, report, ["calc.py", "test_calc.py"])
    assert len(body) <= render.BODY_LIMIT
    assert body.startswith("Closes #7\n")
    assert "## The agent's report" in body
    assert body.endswith("## Files changed\n\n- `calc.py`\n- `test_calc.py`\n")
    assert f"The agent's full report was {len(report):,} characters" in body
    assert "`baton transcript octo/widgets#7 --attempt 1`" in body, "where the rest is read"
    assert len(body) > render.BODY_LIMIT - 2000  # as much of the report as fits


def test_a_short_report_makes_the_same_body_as_before() -> None:
    body = render.pr_body(finished(), "Fixed it.", ["calc.py"])
    assert body == (
        "Closes #7\n\nOpened by Baton (attempt 1) from an AI coding agent's work on #7. "
        "Please review it as you would any contribution.\n\n## The agent's report\n\n"
        "Fixed it.\n\n## Files changed\n\n- `calc.py`\n"
    )


def test_a_report_that_leaves_a_comment_or_code_block_open_cannot_hide_the_file_list() -> None:
    body = render.pr_body(finished(), "Done. <!-- secret", ["calc.py"])
    assert "Done. <!-- secret\n-->\n\n## Files changed" in body
    body = render.pr_body(finished(), "Log:\n```\nerror", ["calc.py"])
    assert "Log:\n```\nerror\n```\n\n## Files changed" in body


def test_the_list_of_changed_files_is_bounded_and_quotes_any_name() -> None:
    names = [f"src/{'deep/' * 40}file-{n}.py" for n in range(5000)]
    body = render.pr_body(finished(), "Fixed it.", names)
    assert len(body) <= render.BODY_LIMIT
    assert "Fixed it." in body and body.startswith("Closes #7\n")
    assert body.rstrip().endswith("more (see the pull request's files)")

    tricky = render.pr_body(finished(), "ok", ["a`b` @octo-lead\n# Heading", "`"])
    assert "- ``a`b` @\u200docto-lead # Heading``" in tricky  # quoted, and pings nobody
    assert "- `` ` ``" in tricky
    assert "\n# Heading" not in tricky


def test_a_status_comment_quotes_only_so_much_of_the_agents_words() -> None:
    run = finished(reason="the agent said: " + report_lines(50_000), state=RunState.FAILED)
    text = render.status_comment(run, utcnow(), "deciding what comes next")
    assert text.startswith(render.STATUS_MARKER + "\n")
    assert len(text) <= render.REASON_LIMIT + 1000
    assert "The full reason was" in text and "baton transcript octo/widgets#7" in text
    assert "Next: deciding what comes next" in text and "Branch `baton/issue-7`" in text


def test_an_escalation_keeps_its_mentions_whatever_its_reason() -> None:
    spent = Spend(continuations=1, failed_attempts=3, reentries=0, backoffs_in_a_row=0, by_class={})
    reason = "agent-error: " + report_lines(50_000)
    text = render.escalation_comment(reason, spent, Limits(), finished(), ["octo-lead"])
    assert text.startswith(render.ESCALATION_MARKER)
    assert len(text) <= render.BODY_LIMIT
    assert text.endswith("@octo-lead")
    assert "What you can do:" in text


def test_a_pull_status_comment_fits_however_many_checks() -> None:
    checks = [
        render.CheckSummary(name=f"check-{n}", conclusion="failure", title="t" * 200)
        for n in range(2000)
    ]
    run = finished()
    text = render.pull_status_comment([run], checks, "waiting", utcnow())
    assert text.startswith(render.STATUS_MARKER) and len(text) <= render.BODY_LIMIT
    assert "This comment was" in text


def test_a_pull_request_github_refused_as_a_draft_says_so_in_one_line() -> None:
    run = finished(pr_url="https://github.com/octo/widgets/pull/9")
    refused = run.model_copy(update={"drafts_refused": True})
    text = render.status_comment(refused, utcnow())
    assert render.DRAFTS_REFUSED_LINE in text.splitlines()
    assert render.DRAFTS_REFUSED_LINE not in render.status_comment(run, utcnow())
    assert render.status_key(refused, None, None) != render.status_key(run, None, None)


@pytest.mark.parametrize("char", ["é", "€", "𝄞", "x"])
def test_a_check_run_text_is_cut_to_github_s_limit_in_bytes_on_a_character_boundary(
    char: str,
) -> None:
    """GitHub measures a check run's summary and text in UTF-8 bytes (65535 at most)."""
    text = "\n".join(char * 70 for _ in range(2000))
    fitted = render.fit_utf8(text, 65535, pointer=POINTER, what="This summary")
    assert len(fitted.encode()) <= 65535
    assert fitted.startswith(char * 70)
    assert "the rest is in" in fitted
    short = "é" * 100
    assert render.fit_utf8(short, 65535, pointer=POINTER, what="This summary") == short


def test_a_put_off_pull_request_says_when_it_opens_and_why() -> None:
    at = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    issue = IssueRef(installation_id=1, repo="octo/repo", number=7)
    run = Run.claimed(issue, 1, "baton/7-fix", at).moved(RunState.PUSHED_PENDING, at)
    pending = PendingPull(at=at, draft=False, why="GitHub asked Baton to wait")
    put_off = run.model_copy(update={"pull_pending": pending})
    text = render.status_comment(put_off, at)
    assert "it opens at 09:30 UTC (GitHub asked Baton to wait)" in text
    assert "Pull request opened" not in text
    assert render.status_key(put_off, None, None) != render.status_key(run, None, None)
