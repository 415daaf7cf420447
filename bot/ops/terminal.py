"""What reaches an operator's terminal: text the agent or a stranger wrote, shown, never obeyed.

A terminal obeys the control characters it is sent: an escape sequence can set the
clipboard (OSC 52), retitle the window, rewrite what was printed above or hide what
follows. Every C0 control but the line feed and the tab, DEL and every C1 control is
shown as its escape (`\\x1b`), so an operator reads what was written and nothing runs.
"""

from __future__ import annotations

import re

_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape_controls(text: str) -> str:
    """Return text with every control character but line feed and tab written as its escape."""
    return _CONTROLS.sub(lambda found: f"\\x{ord(found[0]):02x}", text)
