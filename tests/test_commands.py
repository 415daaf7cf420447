"""Comment commands: parsed from the comment's text, allowed by the author's role."""

from __future__ import annotations

import pytest

from bot.commands import Command, Refused, may_steer, parse_command


@pytest.mark.parametrize(
    ("body", "command"),
    [
        ("/baton status", Command(name="status")),
        ("/baton retry", Command(name="retry")),
        ("/baton stop  ", Command(name="stop")),
        ("/baton budget +2", Command(name="budget", amount=2)),
        ("Looks stuck.\n\n/baton stop\nThanks", Command(name="stop")),
        ("/baton status\n/baton stop", Command(name="status")),
    ],
)
def test_a_command_line_anywhere_in_the_comment_is_read(body: str, command: Command) -> None:
    assert parse_command(body) == command


@pytest.mark.parametrize(
    "body", [None, "", "Please /baton retry this", "`/baton stop`", "/batonstatus", "/Baton stop"]
)
def test_text_that_only_mentions_a_command_is_not_one(body: str | None) -> None:
    assert parse_command(body) is None


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ("/baton merge", "Baton knows"),
        ("/baton stop now", "takes no argument"),
        ("/baton budget", "how many more"),
        ("/baton budget 2", "how many more"),
        ("/baton budget +0", "how many more"),
        ("/baton budget +1000", "how many more"),
    ],
)
def test_a_malformed_command_is_refused_with_a_reason(body: str, words: str) -> None:
    refused = parse_command(body)
    assert isinstance(refused, Refused) and words in refused.reason
    assert refused.text == body


@pytest.mark.parametrize(
    ("role", "allowed"),
    [
        ("admin", True),
        ("maintain", True),
        ("write", True),
        ("triage", False),
        ("read", False),
        ("none", False),
    ],
)
def test_only_write_access_and_above_steer(role: str, allowed: bool) -> None:
    assert may_steer(role) is allowed
