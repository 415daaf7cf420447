"""Who steers Baton, and comment commands: the rule by role, and commands read from a comment."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from bot.domain.commands import (
    ROLES,
    Command,
    Refused,
    Role,
    budget_reply,
    command_lines,
    is_bot,
    judge,
    may_steer,
    parse_command,
    queue_refusal_comment,
    role_rank,
    trusted,
)
from bot.domain.model import IssueRef, Run, RunState
from bot.domain.plans.settlement import request_changes

# ---------------------------------------------------------------- the rule


def test_roles_rank_from_read_to_admin_and_anything_else_ranks_below_read() -> None:
    assert [role_rank(role) for role in ROLES] == [1, 2, 3, 4, 5]
    for stranger in ("none", "", "Admin", "WRITE", "security-manager", "bot"):
        assert role_rank(stranger) == 0


@pytest.mark.parametrize(("role", "minimum"), list(itertools.product(ROLES, ROLES)))
def test_a_role_steers_exactly_where_it_is_at_least_the_minimum(role: str, minimum: Role) -> None:
    assert may_steer(role, minimum) is (ROLES.index(role) >= ROLES.index(minimum))


@pytest.mark.parametrize("minimum", ROLES)
@pytest.mark.parametrize("role", ["none", "", "pull", "security-manager"])
def test_no_role_or_an_unknown_one_never_steers(role: str, minimum: Role) -> None:
    assert not may_steer(role, minimum)


def test_the_default_minimum_of_write_lets_write_maintain_and_admin_steer() -> None:
    assert [role for role in ROLES if may_steer(role, "write")] == ["write", "maintain", "admin"]


@pytest.mark.parametrize(
    ("login", "kind", "bot"),
    [
        ("dependabot[bot]", "Bot", True),
        ("renovate[bot]", None, True),
        ("some-app", "Bot", True),
        ("octocat", "User", False),
        ("octocat", None, False),
        ("bot", "User", False),
        ("robot-lover", None, False),
    ],
)
def test_a_bot_is_typed_bot_or_named_as_an_apps_bot(
    login: str, kind: str | None, bot: bool
) -> None:
    assert is_bot(login, kind) is bot


def test_a_bot_is_trusted_only_by_its_login_in_any_case() -> None:
    bots = ["renovate[bot]", "Triage-Helper[bot]"]
    assert trusted("renovate[bot]", bots) and trusted("RENOVATE[BOT]", bots)
    assert trusted("triage-helper[bot]", bots)
    assert not trusted("renovate", bots) and not trusted("dependabot[bot]", bots)
    assert not trusted("renovate[bot]", [])


@pytest.mark.parametrize("minimum", ROLES)
@pytest.mark.parametrize("role", [*ROLES, "none", None])
def test_a_person_is_judged_by_role_whatever_the_trusted_bots(
    role: str | None, minimum: Role
) -> None:
    standing = judge("octocat", False, role, minimum, ["octocat"])
    assert standing.allowed is may_steer(role or "none", minimum)
    assert standing.role == (role or "none") and standing.minimum == minimum


@pytest.mark.parametrize("role", [*ROLES, None])
def test_a_bot_is_judged_by_trust_never_by_a_role(role: str | None) -> None:
    assert judge("helper[bot]", True, role, "read", ["helper[bot]"]).allowed
    assert not judge("helper[bot]", True, role, "read", ["other[bot]"]).allowed
    assert not judge("helper[bot]", True, role, "read", []).allowed


def test_a_standing_says_who_has_what_and_what_is_needed() -> None:
    assert str(judge("tri", False, "triage", "write", [])) == (
        "@tri has triage access (steering Baton needs write or above)"
    )
    assert str(judge("out", False, None, "maintain", [])) == (
        "@out has no role (steering Baton needs maintain or above)"
    )
    assert str(judge("x[bot]", True, None, "write", [])) == "@x[bot] is a bot Baton ignores"
    assert str(judge("x[bot]", True, None, "write", ["x[bot]"])) == "@x[bot] is a bot Baton trusts"


def test_the_queue_refusal_names_who_added_the_label_and_who_may() -> None:
    text = queue_refusal_comment(judge("tri", False, "triage", "write", []), "baton:queue")
    assert "@tri has triage access" in text and "`baton:queue` label" in text
    assert "taken off" in text and "write access or above can queue" in text


def test_the_budget_reply_says_how_many_are_left() -> None:
    assert budget_reply(2, True, 5, 10) == (
        "Granted 2 more continuations: 5 of the 10 a maintainer may grant this issue are "
        "given, 5 left."
    )
    assert "Granted 1 more continuation:" in budget_reply(1, True, 1, 10)
    refused = budget_reply(4, False, 8, 10)
    assert refused.startswith("Not granted: 4 more would pass the 10")
    assert "8 given so far, 2 left" in refused and "BATON_MAX_BUDGET_GRANT" in refused


# ---------------------------------------------------------------- the parser


@pytest.mark.parametrize(
    ("body", "command"),
    [
        ("/baton status", Command(name="status")),
        ("/baton retry", Command(name="retry")),
        ("/baton stop  ", Command(name="stop")),
        ("/baton\tstop", Command(name="stop")),
        ("/baton pause", Command(name="pause")),
        ("/baton resume", Command(name="resume")),
        ("/baton budget +2", Command(name="budget", amount=2)),
        ("/baton budget  +999", Command(name="budget", amount=999)),
        ("Looks stuck.\n\n/baton stop\nThanks", Command(name="stop")),
        ("Looks stuck.\n/baton stop", Command(name="stop")),
        ("/baton status\n/baton stop", Command(name="status")),
    ],
)
def test_a_command_line_anywhere_in_the_comment_is_read(body: str, command: Command) -> None:
    assert parse_command(body) == command


@pytest.mark.parametrize(
    "body",
    [
        "/baton stop\r\n",
        "/baton stop\r\nThanks\r\n",
        "Looks stuck.\r\n\r\n/baton stop\r\nThanks",
        "Please.\r\n/baton stop",
        "Mixed endings\n/baton stop\r\nand more\n",
    ],
)
def test_a_command_ends_at_a_crlf_as_at_a_newline_wherever_it_is(body: str) -> None:
    assert parse_command(body) == Command(name="stop")


@pytest.mark.parametrize(
    "body",
    [
        None,
        "",
        "Please /baton retry this",
        "`/baton stop`",
        "/batonstatus",
        "/Baton stop",
        " /baton stop",
        "    /baton stop",
        "\t/baton stop",
        "- /baton stop",
        "> /baton stop",
        ">/baton stop",
        "   > /baton stop",
        "> > /baton stop",
        "> Earlier you said:\n/baton stop",
        "> Earlier you said:\r\n/baton stop\r\n",
        "```\n/baton stop\n```",
        "```\r\n/baton stop\r\n```\r\n",
        "~~~\n/baton stop\n~~~",
        "```sh\n/baton stop\n```",
        "~~~ text\n/baton stop\n~~~",
        "   ```\n/baton stop\n   ```",
        "````\n```\n/baton stop\n````",
        "~~~\n```\n/baton stop\n~~~",
        "```\n~~~\n/baton stop\n```",
        "```\nnever closed\n/baton stop",
        "```\n``` not a close\n/baton stop\n```",
        "Run this:\n\n    /baton stop\n",
        "Quoted code:\n> ```\n> /baton stop\n> ```",
    ],
)
def test_text_that_only_quotes_or_mentions_a_command_is_not_one(body: str | None) -> None:
    assert parse_command(body) is None


@pytest.mark.parametrize(
    "body",
    [
        "```\nexample\n```\n/baton stop",
        "~~~\nexample\n~~~\n/baton stop",
        "````\nexample\n`````\n/baton stop",
        "```\nexample\n   ```  \n/baton stop",
        "> quoted\n\n/baton stop",
        "> quoted\n>\n\n/baton stop",
        "    indented code\n/baton stop",
        "Use ```inline``` code\n/baton stop",
        "> ```\n> still quoted code\n/baton stop",
        "```py\ncode\n```\r\n/baton stop\r\n",
    ],
)
def test_a_command_after_a_closed_block_or_quote_is_read(body: str) -> None:
    assert parse_command(body) == Command(name="stop")


def test_the_first_command_outside_code_wins() -> None:
    body = "```\n/baton stop\n```\n> /baton retry\n\n/baton status\n/baton stop"
    assert parse_command(body) == Command(name="status")


def test_the_lines_github_shows_as_text_are_the_ones_commands_come_from() -> None:
    body = "Intro\r\n```\ncode\n```\n> quote\nlazy\n\n    indented\nEnd\r\n"
    assert command_lines(body) == ["Intro", "    indented", "End"]


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("/baton", "say what to do"),
        ("/baton   ", "say what to do"),
        ("/baton merge", "Baton knows"),
        ("/baton STOP", "Baton knows"),
        ("/baton stop now", "takes no argument"),
        ("/baton stop now please", "takes no argument"),
        ("/baton budget", "how many more"),
        ("/baton budget 2", "how many more"),
        ("/baton budget +0", "how many more"),
        ("/baton budget -1", "how many more"),
        ("/baton budget +1000", "how many more"),
        ("/baton budget +2 +3", "how many more"),
    ],
)
def test_a_malformed_command_is_refused_with_a_reason(body: str, words: str) -> None:
    refused = parse_command(body)
    assert isinstance(refused, Refused) and words in refused.reason
    assert refused.text == body.strip()


def test_a_refused_line_is_quoted_without_its_line_ending() -> None:
    refused = parse_command("/baton merge\r\n")
    assert isinstance(refused, Refused) and refused.text == "/baton merge"


# ---------------------------------------------------------------- reviews and their attempt

STARTED = datetime(2026, 5, 1, 12, 0, 5, 700_000, tzinfo=UTC)


def pushed() -> Run:
    issue = IssueRef(installation_id=1, repo="octo/hello", number=1)
    claimed = Run.claimed(issue, 2, "baton/issue-1-x", STARTED)
    return claimed.moved(RunState.PUSHED_GREEN, STARTED + timedelta(minutes=3))


@pytest.mark.parametrize(
    ("submitted", "acts"),
    [
        (None, True),  # GitHub did not say: the run's state decides
        (STARTED + timedelta(minutes=4), True),
        (STARTED.replace(microsecond=0), True),  # the same second, as GitHub writes it
        (STARTED - timedelta(seconds=1), False),
        (STARTED - timedelta(days=3), False),
    ],
)
def test_a_review_submitted_before_its_attempt_started_changes_nothing(
    submitted: datetime | None, acts: bool
) -> None:
    now = STARTED + timedelta(minutes=5)
    changed = request_changes(pushed(), 77, "lead", submitted, now)
    assert (changed is not None) is acts
    if changed is not None:
        assert (changed.state, changed.review_id) == (RunState.FAILED, 77)


def test_a_command_inside_an_html_comment_is_not_one() -> None:
    # GitHub shows nothing of an HTML comment: a command nobody can see is not acted on.
    assert parse_command("<!--\n/baton stop\n-->") is None
    assert parse_command("<!-- /baton stop -->\n/baton status") == Command(name="status")
    assert parse_command("<!-- never closed\n/baton stop") is None
