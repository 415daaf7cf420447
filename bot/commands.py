"""Comment commands: what a maintainer asks of Baton in an issue or PR comment.

Pure: parsing and the permission rule. `bot/steering.py` carries them out.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict

CommandName = Literal["status", "retry", "stop", "budget", "pause", "resume"]

# GitHub's repository roles that may steer Baton: write access and above.
STEERING_ROLES = frozenset({"admin", "maintain", "write"})

_COMMAND = re.compile(r"^/baton[ \t]+(?P<name>[a-z]+)(?:[ \t]+(?P<arg>\S+))?[ \t]*$", re.MULTILINE)
_PLAIN: dict[str, CommandName] = {
    "status": "status",
    "retry": "retry",
    "stop": "stop",
    "pause": "pause",
    "resume": "resume",
}
_AMOUNT = re.compile(r"^\+(?P<n>[1-9][0-9]{0,2})$")


class Command(BaseModel):
    """One command, as a maintainer wrote it."""

    model_config = ConfigDict(frozen=True)

    name: CommandName
    amount: int | None = None


class Refused(BaseModel):
    """A `/baton` line that is not a command Baton knows, and why."""

    model_config = ConfigDict(frozen=True)

    text: str
    reason: str


def parse_command(body: str | None) -> Command | Refused | None:
    """Return the first `/baton ...` line of a comment as a command; None when there is none."""
    found = _COMMAND.search(body or "")
    if found is None:
        return None
    name, arg = found.group("name"), found.group("arg")
    text = found.group(0).strip()
    if name in _PLAIN:
        if arg is not None:
            return Refused(text=text, reason=f"`/baton {name}` takes no argument")
        return Command(name=_PLAIN[name])
    if name == "budget":
        amount = _AMOUNT.match(arg or "")
        if amount is None:
            return Refused(text=text, reason="say how many more continuations, e.g. `+2`")
        return Command(name="budget", amount=int(amount.group("n")))
    return Refused(text=text, reason="Baton knows `status`, `retry`, `stop` and `budget +N`")


def may_steer(role: str) -> bool:
    """Return whether a collaborator's role lets them command Baton."""
    return role in STEERING_ROLES
