"""Text an agent or a stranger wrote is shown on an operator's terminal, never obeyed."""

from __future__ import annotations

import pytest

from bot.ops.terminal import escape_controls


@pytest.mark.parametrize(
    ("written", "shown"),
    [
        ("\x1b]52;c;b3duZWQ=\x07", "\\x1b]52;c;b3duZWQ=\\x07"),  # OSC 52 sets the clipboard
        ("\x1b[2J\x1b[H", "\\x1b[2J\\x1b[H"),  # clears the screen
        ("ok\rforged", "ok\\x0dforged"),  # a carriage return prints over the line
        ("\x9b31m", "\\x9b31m"),  # a C1 control sequence introducer
        ("lines\nand\ttabs, é and ✓", "lines\nand\ttabs, é and ✓"),
    ],
)
def test_control_characters_are_shown_as_escapes(written: str, shown: str) -> None:
    assert escape_controls(written) == shown
