"""What the agent writes is inert on GitHub: no closing keyword closes, no @mention notifies.

Each text is read back the way the sandbox GitHub reads a merged pull request's
description and a comment (bot/sandbox/references.py: as written, with character
references decoded, and in Unicode's compatibility form), so a case that is not
neutralised fails here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.domain.budget import Spend
from bot.domain.inert import JOINER, inert, no_skip_directives
from bot.domain.model import AgentResult, IssueRef, Limits, Run, RunState
from bot.domain.render import (
    REASON_LIMIT,
    CheckSummary,
    escalation_comment,
    pr_body,
    pull_status_comment,
    status_comment,
)
from bot.sandbox.ci import skips_ci
from bot.sandbox.references import closing_references, mentions

REPO = "octo/widgets"
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

# Every way of naming an issue after a closing keyword that GitHub reads (and the sandbox
# reads with it): each of these closes something before inert() sees it.
CLOSING = [
    "Fixes #1",
    "fixes #1",
    "FIXES #1",
    "Fixed #1",
    "fix #1",
    "Closes #1",
    "close #1",
    "closed #1",
    "Resolves #1",
    "resolve #1",
    "resolved #1",
    "Fixes: #1",
    "Closes:\t#1",
    "Resolves GH-1",
    "closes octo/other#12",
    "Fixes https://github.com/octo/widgets/issues/1",
    "Resolved: http://github.example.com/octo/widgets/issues/1",
    "Fixes\n#1",
    "Fixes\u00a0#1",  # a no-break space
    "Fixes #1, fixes #2 and closes #3",
    "This (fixes #1).",
    "done; fixes #1.",
    "- [x] Fixes #1",
    "> Closes #1",
    "`Fixes #1`",  # in code GitHub reads no keyword; the joiner there is invisible all the same
    "```\nFixes #1\n```",
    "&#70;ixes #1",  # a character reference GitHub decodes into the keyword's letter
    "&#x66;ixes #1",
    "Fixes &#35;1",
    "clo\u017fes #1",  # a long s, which folds to s
    "\ufb01xes #1",  # the "fi" ligature, which NFKC reads as fi
    "\uff26ixes #1",  # a full-width F, which NFKC reads as F
    "_fixes #1",
    "1.fixes #1",
    "Fixes \uff03" + "1",  # a full-width number sign
]
# Where Markdown, HTML or an invisible character stands between keyword and reference, which
# a reader of the rendered text may see as one.
CLOSING_OTHERWISE = [
    "Fixes\u200b #1",  # a zero-width space
    "**Fixes** #1",
    "*Fixes* #1",
    "Fixes **#1**",
    "Fixes [#1](https://github.com/octo/widgets/issues/1)",
    "[Fixes #1](https://example.com)",
    "Fix<!-- -->es #1",
    "<b>Fixes</b> #1",
    "Fixes <https://github.com/octo/widgets/issues/1>",
    "Fixes <b>#1</b>",
    "Fixes: ~~nothing~~ #1",
]
MENTIONS = [
    "@octocat",
    "thanks @octocat!",
    "cc @octo-cat, @hubot and @octo/team",
    "@octo/reviewers please look",
    "(@octocat)",
    "\\@octocat",  # an escaped @ is still an @ once rendered
    "**@octocat**",
    "[@octocat](https://github.com/octocat)",
    "line one\n@octocat",
    "`@octocat`",
    "```\n@pytest.fixture\n```",
    "&#64;octocat",
    "&#x40;octocat",
    "&commat;octocat",
    "\uff20octocat",  # a full-width @
    "\ufe6boctocat",  # a small @
    "email@example.com and @octocat",
    "\u00e9@octocat",  # after a letter GitHub's word boundary does not know
]
# Nothing to neutralise: these read exactly as the agent wrote them.
UNCHANGED = [
    "Fixed it.",
    "This fixes the parser (see #12); it closes the file it opens.",
    "Resolved by retrying: GH's API was down.",
    "a@b.com",
    "Write to first.last+tag@example.co.uk about it.",
    "See #1 for the background.",
    "#1 alone is a reference, not a closing one",
    "prefixes #1",
    "the fixture, the fixing, the closet, the resolver",
    "Tom &amp; Jerry &lt;3 &nbsp;",
    "git@github.com:octo/widgets.git",
    "v1.2.3 (GH-1 is a plain reference)",
    "",
]


@pytest.mark.parametrize("text", CLOSING + CLOSING_OTHERWISE)
def test_no_closing_keyword_closes_anything(text: str) -> None:
    if text in CLOSING:
        assert closing_references(text, REPO), "the case must close something as written"
    assert closing_references(inert(text), REPO) == set()


@pytest.mark.parametrize("text", MENTIONS)
def test_no_mention_notifies_anyone(text: str) -> None:
    assert mentions(text), "the case must mention someone as written"
    assert mentions(inert(text)) == set()


@pytest.mark.parametrize("text", CLOSING + CLOSING_OTHERWISE + MENTIONS + UNCHANGED)
def test_it_reads_as_written_and_twice_changes_nothing_more(text: str) -> None:
    made = inert(text)
    assert made.replace(JOINER, "") == text  # only invisible joiners were added
    assert inert(made) == made


@pytest.mark.parametrize("text", UNCHANGED)
def test_addresses_and_plain_references_are_left_as_they_are(text: str) -> None:
    assert inert(text) == text


def test_a_plain_reference_stays_a_reference_and_only_the_keyword_is_broken() -> None:
    assert inert("Fixes #1") == f"F{JOINER}ixes #1"
    assert inert("@octo/team") == f"@{JOINER}octo/team"
    assert inert("&#64;x") == f"&{JOINER}#64;x"


def _run(number: int = 7, report: str = "", reason: str | None = None) -> Run:
    issue = IssueRef(installation_id=1, repo=REPO, number=number)
    run = Run.claimed(issue, 1, "baton/issue-7-fix", NOW).moved(RunState.FAILED, NOW)
    result = AgentResult(
        agent="command",
        status="success",
        stop_reason="completed",
        started_at=NOW - timedelta(minutes=1),
        ended_at=NOW,
        result_text=report,
        transcript_path=Path("/runs/7/1/transcript.jsonl"),
        stderr_path=Path("/runs/7/1/stderr.log"),
    )
    return run.model_copy(update={"agent_result": result, "reason": reason})


HOSTILE = (
    "Done. Fixes #1, closes octo/other#2, resolves https://github.com/octo/widgets/issues/3.\n"
    "Thanks @octocat and @octo/team; write to dev@example.com.\n"
    "```\n@pytest.fixture\ndef fixes(): ...  # Fixes #4\n```"
)


def test_the_pr_body_closes_only_its_own_issue_and_notifies_nobody() -> None:
    body = pr_body(_run(), HOSTILE, ["src/fix.py"])
    assert closing_references(body, REPO) == {(REPO, 7)}
    assert body.startswith("Closes #7\n")
    assert mentions(body) == set()
    assert "Thanks @octocat and @octo/team; write to dev@example.com." in body.replace(JOINER, "")


def test_a_report_cut_to_fit_stays_inert() -> None:
    report = ("filler line\n" * 6000) + "Fixes #1 @octocat\n" + ("more\n" * 6000)
    body = pr_body(_run(), report, ["a.py"], limit=70_000)
    assert len(body) <= 70_000
    assert closing_references(body, REPO) == {(REPO, 7)} and mentions(body) == set()


def test_status_comments_quote_the_agent_inertly() -> None:
    run = _run(reason="the agent said: fixes #1, ask @octocat\n" + "x" * REASON_LIMIT)
    comment = status_comment(run, NOW, next_step="a maintainer: fixes #2 @octo/team")
    assert closing_references(comment, REPO) == set() and mentions(comment) == set()
    checks = [CheckSummary(name="ci @octocat", conclusion="failure", title="Fixes #1 @octo/t")]
    pulled = pull_status_comment([run], checks, "a continuation", NOW)
    assert closing_references(pulled, REPO) == set() and mentions(pulled) == set()
    assert "ci @octocat: failure (Fixes #1 @octo/t)" in pulled.replace(JOINER, "")


def test_an_escalation_notifies_exactly_the_configured_mentions() -> None:
    spent = Spend(failed_attempts=3, continuations=0, reentries=0, backoffs_in_a_row=0, by_class={})
    comment = escalation_comment(
        "agent-error: the agent said fixes #1 and @octocat knows",
        spent,
        Limits(),
        _run(),
        ["octo-lead", "octo/maintainers"],
    )
    assert mentions(comment) == {"octo-lead", "octo/maintainers"}
    assert closing_references(comment, REPO) == set()


@pytest.mark.parametrize(
    "message",
    [
        "Greet [skip ci]",
        "Greet [ci skip]",
        "[no ci] Greet",
        "Greet [skip actions]",
        "Greet [actions skip]",
        "Greet\n\n\nskip-checks:true",
        "Greet\n\n\nskip-checks: true",
    ],
)
def test_a_skip_directive_in_the_agents_message_asks_github_for_nothing(message: str) -> None:
    assert skips_ci(message)  # the sandbox, as GitHub, would run no CI for it
    quiet = no_skip_directives(message)
    assert not skips_ci(quiet)
    assert quiet.replace(JOINER, "") == message


def test_skip_directives_are_read_widely_and_other_brackets_left_alone() -> None:
    assert not skips_ci(no_skip_directives("Greet [Skip  CI] and [SKIP-CHECKS]"))
    assert JOINER in no_skip_directives("[ Skip CI ]")
    assert no_skip_directives("Fix [docs] and [ci] config") == "Fix [docs] and [ci] config"
