"""Who may steer Baton, the commands they give it in comments, and the agent they pick.

Pure: the one rule for who steers (a repository role at least the configured
minimum; bots only when trusted), parsing comment commands, the words Baton
answers with, and which agent an attempt runs. `bot/workflows/standing.py` looks
roles up; what each command does is the table of `bot/domain/plans/commands.py`,
which `bot/workflows/steer.py` carries out.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from bot.domain.model import AgentName

Role = Literal["read", "triage", "write", "maintain", "admin"]
# GitHub's repository roles, weakest first.
ROLES: tuple[Role, ...] = ("read", "triage", "write", "maintain", "admin")
BOT = "bot"  # the role a bot account stands with: it has none of its own

CommandName = Literal["status", "start", "retry", "stop", "budget", "pause", "resume"]

_PLAIN: dict[str, CommandName] = {
    "status": "status",
    "retry": "retry",
    "stop": "stop",
    "pause": "pause",
    "resume": "resume",
}
_KNOWN = (
    "Baton knows `status`, `start [--agent NAME]`, `stop`, `retry`, `budget +N`, "
    "`pause` and `resume`"
)
_AMOUNT = re.compile(r"^\+(?P<n>[1-9][0-9]{0,2})$")
_AGENT_OPTION = "--agent"
_AGENT_NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")  # what a reply may quote of it
_COMMAND = re.compile(r"^/baton(?:[ \t]+(?P<rest>.*?))?[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_QUOTE = re.compile(r"^ {0,3}>[ \t]?")


_RANK: dict[str, int] = {role: rank for rank, role in enumerate(ROLES, start=1)}


def role_rank(role: str) -> int:
    """Return how much a role may do: 0 for none (or an unknown name), then read to admin."""
    return _RANK.get(role, 0)


def may_steer(role: str, minimum: Role) -> bool:
    """Return whether a collaborator with role may steer Baton where minimum is required."""
    return role_rank(role) >= role_rank(minimum)


def is_bot(login: str, kind: str | None = None) -> bool:
    """Return whether an account is a bot: typed `Bot`, or named `<app>[bot]` as App bots are."""
    return kind == "Bot" or login.endswith("[bot]")


def trusted(login: str, trusted_bots: Collection[str]) -> bool:
    """Return whether a bot's login is one the deployment trusts (logins ignore case)."""
    return login.casefold() in {name.casefold() for name in trusted_bots}


def ignored_bot(login: str, kind: str | None, trusted_bots: Collection[str]) -> bool:
    """Return whether an account is a bot the deployment does not trust: it steers nothing."""
    return is_bot(login, kind) and not trusted(login, trusted_bots)


class Standing(BaseModel):
    """Whether one account may steer Baton on one repository, and why."""

    model_config = ConfigDict(frozen=True)

    login: str
    role: str  # a repository role, `none`, or `bot`
    minimum: Role
    allowed: bool

    def __str__(self) -> str:
        if self.role == BOT:
            return f"@{self.login} is a bot {'Baton trusts' if self.allowed else 'Baton ignores'}"
        held = "no role" if self.role not in ROLES else f"{self.role} access"
        return f"@{self.login} has {held} (steering Baton needs {self.minimum} or above)"


def judge(
    login: str, bot: bool, role: str | None, minimum: Role, trusted_bots: Collection[str]
) -> Standing:
    """Apply the one rule: a person needs at least minimum; a bot must be trusted by name.

    role is the person's role on the repository (None when it is not known, as for a bot:
    its role is never asked for).
    """
    if bot:
        return Standing(
            login=login, role=BOT, minimum=minimum, allowed=trusted(login, trusted_bots)
        )
    held = role or "none"
    return Standing(login=login, role=held, minimum=minimum, allowed=may_steer(held, minimum))


class Command(BaseModel):
    """One command, as a maintainer wrote it."""

    model_config = ConfigDict(frozen=True)

    name: CommandName
    amount: int | None = None
    agent: str | None = None  # the agent `start --agent NAME` picks, as written


class Refused(BaseModel):
    """A `/baton` line that is not a command Baton knows, and why."""

    model_config = ConfigDict(frozen=True)

    text: str
    reason: str


_HTML_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)


def command_lines(body: str) -> list[str]:
    """Return the lines of a comment that GitHub shows as text, not as code or a quote.

    Lines end at `\\n` or `\\r\\n`. Left out: lines in fenced code blocks (``` or ~~~,
    closed by a fence of the same kind at least as long, or open to the end), lines
    quoted with `>`, and the lines that continue a quoted paragraph without a blank
    line between. An indented code line starts with blanks, so it never starts with a
    command either.
    """
    body = _HTML_COMMENT.sub("", body)  # GitHub shows nothing of an HTML comment
    shown = []
    fence: str | None = None  # the open fence outside any quote
    quoted_fence: str | None = None  # a fence opened inside the quote
    lazy = False  # a plain line now would continue the quote's paragraph
    for raw in body.split("\n"):
        line = raw.removesuffix("\r")
        if fence is not None:
            if _closes(line, fence):
                fence = None
            continue
        if _QUOTE.match(line):
            inner = _unquote(line)
            if quoted_fence is not None:
                quoted_fence = None if _closes(inner, quoted_fence) else quoted_fence
                lazy = False
            else:
                quoted_fence = _opens(inner)
                lazy = quoted_fence is None and bool(inner.strip())
            continue
        quoted_fence = None  # a line outside the quote ends it, and any fence inside it
        if not line.strip():
            lazy = False
            continue
        opened = _opens(line)
        if opened is not None:
            fence, lazy = opened, False
            continue
        if lazy:
            continue  # still the quoted paragraph, as GitHub renders it
        shown.append(line)
    return shown


def _unquote(line: str) -> str:
    """Return what a quoted line holds inside every `>` it is nested in."""
    while (marker := _QUOTE.match(line)) is not None:
        line = line[marker.end() :]
    return line


def _opens(line: str) -> str | None:
    """Return the fence a line opens, if it opens one."""
    found = _FENCE.match(line)
    if found is None:
        return None
    fence = found.group("fence")
    if fence[0] == "`" and "`" in found.group("info"):
        return None  # inline code, not a fence
    return fence


def _closes(line: str, fence: str) -> bool:
    """Return whether a line closes the fence: the same character, at least as many."""
    found = _FENCE.match(line)
    if found is None or found.group("info").strip():
        return False
    closing = found.group("fence")
    return closing[0] == fence[0] and len(closing) >= len(fence)


def parse_command(body: str | None) -> Command | Refused | None:
    """Return the first line of a comment that starts with `/baton`, as a command.

    Only lines GitHub shows as text count (see command_lines). None when there is none.
    """
    for line in command_lines(body or ""):
        found = _COMMAND.match(line)
        if found is not None:
            return _command(line.strip(), (found.group("rest") or "").split())
    return None


def _command(text: str, words: list[str]) -> Command | Refused:
    if not words:
        return Refused(text=text, reason=f"say what to do: {_KNOWN}")
    name, args = words[0], words[1:]
    if name in _PLAIN:
        if args:
            return Refused(text=text, reason=f"`/baton {name}` takes no argument")
        return Command(name=_PLAIN[name])
    if name == "budget":
        amount = _AMOUNT.match(args[0]) if len(args) == 1 else None
        if amount is None:
            return Refused(text=text, reason="say how many more continuations, e.g. `+2`")
        return Command(name="budget", amount=int(amount.group("n")))
    if name == "start":
        return _start(text, args)
    return Refused(text=text, reason=_KNOWN)


def _start(text: str, args: list[str]) -> Command | Refused:
    """Read `start`, `start --agent NAME` or `start --agent=NAME`."""
    if not args:
        return Command(name="start")
    option, equals, agent = args[0].partition("=")
    words = [agent] if equals else args[1:]
    if option != _AGENT_OPTION or len(args) > (1 if equals else 2):
        return Refused(text=text, reason="`/baton start` takes only `--agent NAME`")
    if len(words) != 1 or not _AGENT_NAME.match(words[0]):
        return Refused(text=text, reason="say which agent, e.g. `--agent codex`")
    return Command(name="start", agent=words[0].casefold())


def offers(agent: str | None, offered: Collection[str], repository: str) -> bool:
    """Return whether an attempt may run agent: one of the deployment's, or the repository's."""
    return agent is not None and (agent in offered or agent == repository)


def choose_agent(
    offered: Collection[AgentName],
    repository: AgentName,
    kept: str | None = None,
    asked: str | None = None,
    labelled: str | None = None,
) -> AgentName:
    """Return the agent an attempt runs: the first of these the deployment offers.

    kept is the agent of the attempt it follows (a continuation or retry keeps it);
    asked the one a steerer's `/baton start --agent` picked; labelled the one a
    steerer's agent label picks; repository the one the repository's file names
    (`agent.adapter`), else the deployment's `BATON_AGENT`. offered is
    `BATON_AGENTS`.
    """
    runnable = (*offered, repository)
    for agent in (kept, asked, labelled):
        for name in runnable:
            if name == agent:
                return name
    return repository


def agent_labels(labels: Iterable[str], prefix: str) -> dict[str, str]:
    """Return the agent labels among labels, each with the agent it names (lower case)."""
    folded = prefix.casefold()
    return {
        label: label[len(prefix) :].strip().casefold()
        for label in labels
        if label.casefold().startswith(folded) and label[len(prefix) :].strip()
    }


def unknown_agent_reply(asked: str, offered: Collection[str]) -> str:
    """Return the answer to `/baton start --agent NAME` naming an agent the deployment lacks."""
    names = ", ".join(f"`{name}`" for name in offered)
    return (
        f"Baton did not start: `{asked}` is not an agent this deployment runs. It runs "
        f"{names}: pick one with `/baton start --agent NAME`, or leave `--agent` out."
    )


def queue_refusal_comment(standing: Standing, label: str) -> str:
    """Return the one comment an issue gets when someone without the role queues it."""
    return (
        f"Baton did not start: {standing}, so the `{label}` label they added was taken off. "
        f"A collaborator with {standing.minimum} access or above can queue this issue."
    )


def budget_reply(asked: int, granted: bool, total: int, cap: int) -> str:
    """Return the answer to `/baton budget +N`: what was granted, and how much is left."""
    left = max(cap - total, 0)
    if granted:
        return (
            f"Granted {asked} more continuation{'s' if asked != 1 else ''}: {total} of the "
            f"{cap} a maintainer may grant this issue are given, {left} left."
        )
    return (
        f"Not granted: {asked} more would pass the {cap} continuations a maintainer may "
        f"grant this issue (`BATON_MAX_BUDGET_GRANT`); {total} given so far, {left} left."
    )
