"""Chains: dependent issues run as stacked pull requests, each link on its predecessor's branch.

A chain comes from an issue's dependencies (`Depends on #3`) or from a tracking
issue's task list (`- [ ] #12`). Pure: parsing, ordering, where a chain stands,
and the text Baton writes about it.
"""

from __future__ import annotations

import enum
import heapq
import re
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, model_validator

from bot.domain.inert import inert
from bot.domain.model import Recovery, Run, RunState
from bot.domain.render import STATUS_MARKER

STACK_MARKER = "<!-- baton:stack -->"


class ChainRefused(Exception):
    """The chain cannot run; str(exc) is one clear sentence for the maintainers."""


class IssueFacts(BaseModel):
    """What a chain needs to know of one issue."""

    model_config = ConfigDict(frozen=True)

    number: int
    title: str
    body: str | None
    open: bool
    author: str | None = None  # who opened it: only they and collaborators can edit it


# --- Parsing -------------------------------------------------------------------------------------


def _reference(named: bool) -> str:
    """Return a pattern for `#N`, `owner/name#N` or an issue URL, its parts named if asked."""

    def group(name: str, pattern: str) -> str:
        return f"(?P<{name}>{pattern})" if named else f"(?:{pattern})"

    repo, number = r"[\w.-]+/[\w.-]+", r"\d+"
    url = r"https?://[^\s/]+/" + group("url_repo", repo) + "/issues/" + group("url_number", number)
    short = group("repo", repo) + "?#" + group("number", number)
    return f"(?:{url}|{short})" + r"(?!\w)"


_REFERENCE = re.compile(_reference(named=True))
_EMPHASIS = r"(?:\*\*|__|\*|_)?"
_SEPARATOR = r"(?:[ \t]*,[ \t]*(?:and[ \t]+)?|[ \t]+and[ \t]+|[ \t]*&[ \t]*|[ \t]+)"
_DEPENDENCY = re.compile(
    r"[ \t]*(?:>[ \t]*)*(?:(?:[-*+]|\d+[.)])[ \t]+)?(?:\#{1,6}[ \t]+)?"
    + _EMPHASIS
    + r"(?:depends[ \t]+on|blocked[ \t]+by|after)"
    + _EMPHASIS
    + ":?"
    + _EMPHASIS
    + r"[ \t]*(?P<references>"
    + _reference(named=False)
    + rf"(?:{_SEPARATOR}{_reference(named=False)})*)",
    re.IGNORECASE,
)
_TASK = re.compile(
    r"[ \t]*(?:>[ \t]*)*(?:[-*+]|\d+[.)])[ \t]+\[[ xX]\][ \t]+" + _reference(named=True),
    re.IGNORECASE,
)
_FENCE = re.compile(r" {0,3}(`{3,}(?=[^`]*$)|~{3,})")


def _prose_lines(body: str | None) -> list[str]:
    """Return the body's lines outside fenced code blocks."""
    lines: list[str] = []
    fence: str | None = None
    for line in (body or "").splitlines():
        opening = _FENCE.match(line)
        if fence is None:
            if opening:
                fence = opening.group(1)
            else:
                lines.append(line)
            continue
        closing = line.strip()
        if closing and set(closing) == {fence[0]} and len(closing) >= len(fence):
            fence = None
    return lines


def _number(match: re.Match[str], repo: str) -> int:
    """Return the issue number a reference names, refusing one in another repository."""
    if match.group("url_number") is not None:
        other, number = match.group("url_repo"), match.group("url_number")
    else:
        other, number = match.group("repo"), match.group("number")
    if other is not None and other.lower() != repo.lower():
        raise ChainRefused(
            f"`{other}#{int(number)}` is in another repository: a chain stays within one repository"
        )
    return int(number)


def _unique(numbers: list[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(numbers))


def dependencies(body: str | None, repo: str) -> tuple[int, ...]:
    """Return the issues a body says it depends on (`Depends on`, `Blocked by`, `After`)."""
    numbers: list[int] = []
    for line in _prose_lines(body):
        found = _DEPENDENCY.match(line)
        if found:
            numbers += [_number(m, repo) for m in _REFERENCE.finditer(found.group("references"))]
    return _unique(numbers)


def task_list(body: str | None, repo: str) -> tuple[int, ...]:
    """Return the issues a tracking issue's task list names, in the listed order."""
    numbers: list[int] = []
    for line in _prose_lines(body):
        found = _TASK.match(line)
        if found:
            numbers.append(_number(found, repo))
    return _unique(numbers)


def is_tracking_issue(body: str | None, repo: str) -> bool:
    """Return whether the body lists a chain (a task list of issue references)."""
    try:
        return bool(task_list(body, repo))
    except ChainRefused:
        return True  # the caller gets the refusal from task_list()


def names_a_chain(body: str | None, repo: str) -> bool:
    """Return whether a queued issue starts a chain: it lists links, or depends on issues.

    A body whose references are refused still names a chain, so the chain job
    explains the refusal instead of the issue running alone.
    """
    if is_tracking_issue(body, repo):
        return True
    try:
        return bool(dependencies(body, repo))
    except ChainRefused:
        return True


# --- Ordering ------------------------------------------------------------------------------------


def _missing(number: int) -> ChainRefused:
    return ChainRefused(f"#{number} does not exist in this repository")


def _ordered(nodes: Sequence[int], depends_on: Mapping[int, Sequence[int]]) -> tuple[int, ...]:
    """Return the nodes each after what it depends on, ties kept in the order given."""
    rank = {node: i for i, node in enumerate(nodes)}
    waiting = {node: {d for d in depends_on[node] if d in rank} for node in nodes}
    dependents: dict[int, list[int]] = {node: [] for node in nodes}
    for node in nodes:
        for dependency in waiting[node]:
            dependents[dependency].append(node)
    ready = [rank[node] for node in nodes if not waiting[node]]
    heapq.heapify(ready)
    done: list[int] = []
    while ready:
        node = nodes[heapq.heappop(ready)]
        done.append(node)
        for dependent in dependents[node]:
            waiting[dependent].discard(node)
            if not waiting[dependent]:
                heapq.heappush(ready, rank[dependent])
    if len(done) < len(nodes):
        raise _cycle([node for node in nodes if waiting[node]], depends_on)
    return tuple(done)


def _cycle(left: Sequence[int], depends_on: Mapping[int, Sequence[int]]) -> ChainRefused:
    # Every node left over waits on another left over, so following the first such
    # dependency from any of them must come back around.
    remaining = set(left)
    path = [left[0]]
    while True:
        following = next(d for d in depends_on[path[-1]] if d in remaining)
        if following in path:
            loop = [*path[path.index(following) :], following]
            names = " → ".join(f"#{n}" for n in loop)
            return ChainRefused(f"{names} form a cycle: a chain needs an order")
        path.append(following)


def dependency_closure(head: int, issues: Mapping[int, IssueFacts], repo: str) -> tuple[int, ...]:
    """Return the issues reachable from head through dependencies that are not in `issues` yet.

    The caller fetches these and asks again until nothing is missing.
    """
    missing: list[int] = []
    seen = {head}
    queue = [head]
    while queue:
        number = queue.pop(0)
        if number not in issues:
            missing.append(number)
            continue
        for dependency in dependencies(issues[number].body, repo):
            if dependency not in seen:
                seen.add(dependency)
                queue.append(dependency)
    return tuple(missing)


def chain_from_dependencies(
    head: int, issues: Mapping[int, IssueFacts], repo: str
) -> tuple[int, ...]:
    """Return the chain ending at head: its transitive dependencies in a stable order, head last."""
    depends_on: dict[int, tuple[int, ...]] = {}
    stack = [head]
    while stack:
        number = stack.pop()
        if number in depends_on:
            continue
        if number not in issues:
            raise _missing(number)
        depends_on[number] = dependencies(issues[number].body, repo)
        stack += reversed(depends_on[number])
    return _ordered(sorted(depends_on), depends_on)


class Preflight(BaseModel):
    """A tracking issue's chain as it will run, and what the maintainers should know first."""

    model_config = ConfigDict(frozen=True)

    order: tuple[int, ...]
    warnings: tuple[str, ...]


def preflight(
    listed: Sequence[int], issues: Mapping[int, IssueFacts], repo: str, strict: bool
) -> Preflight:
    """Return the order a tracking issue's list runs in, with warnings (refusals when strict)."""
    listed = _unique(list(listed))
    for number in listed:
        if number not in issues:
            raise _missing(number)
    warnings = [
        f"#{number} is already closed; it is left out of the chain"
        for number in listed
        if not issues[number].open
    ]
    links = [number for number in listed if issues[number].open]
    depends_on = {number: dependencies(issues[number].body, repo) for number in links}
    order = _ordered(links, depends_on)
    position = {number: i for i, number in enumerate(links)}
    for number in links:
        for dependency in depends_on[number]:
            if dependency in position:
                if position[dependency] > position[number]:
                    warnings.append(
                        f"#{number} depends on #{dependency}, which is listed after it; "
                        f"#{dependency} runs first"
                    )
            elif dependency not in listed and _maybe_open(dependency, issues):
                warnings.append(f"#{number} depends on #{dependency}, which is not in this chain")
    warnings += _overlaps(order, issues, repo)
    if strict and warnings:
        raise ChainRefused("strict pre-flight refused the chain: " + "; ".join(warnings))
    return Preflight(order=order, warnings=tuple(warnings))


def _maybe_open(number: int, issues: Mapping[int, IssueFacts]) -> bool:
    # A dependency known to be closed is done, so depending on it needs no warning.
    return number not in issues or issues[number].open


_URL = re.compile(r"\b(?:https?://|www\.)\S*", re.IGNORECASE)
_TOKEN_BREAK = re.compile(r"""[\s`'"()\[\]<>{},;:|]+""")
_PATH_CHARS = re.compile(r"[\w./-]+")
_EXTENSIONS = frozenset(
    {"py", "md", "ts", "tsx", "js", "jsx", "mjs", "toml", "json", "yml", "yaml", "go", "rs", "txt"}
    | {"cfg", "ini", "sh", "rb", "java", "kt", "c", "h", "cc", "cpp", "hpp", "css", "scss", "html"}
    | {"sql", "lock", "rst", "proto"}
)
# Words that look like paths but are not, common enough in issue text to warn wrongly.
_NOT_PATHS = frozenset({"and/or", "either/or", "i/o", "n/a", "w/o", "ci/cd", "node.js", "next.js"})


def _mentioned_paths(text: str, repo: str) -> frozenset[str]:
    """Return the file paths a text mentions: tokens with a `/` or a known file extension."""
    paths: set[str] = set()
    for line in _prose_lines(text):
        for token in _TOKEN_BREAK.split(_URL.sub(" ", line)):
            path = token.strip("*").rstrip(".!?*")
            path = path.removeprefix("./")
            if _is_path(path, repo):
                paths.add(path)
    return frozenset(paths)


def _is_path(token: str, repo: str) -> bool:
    if not _PATH_CHARS.fullmatch(token) or not any(c.isalpha() for c in token):
        return False
    if token.lower() in _NOT_PATHS or token.lower() == repo.lower():
        return False
    stem, dot, extension = token.rpartition("/")[2].rpartition(".")
    return "/" in token or bool(stem and dot and extension.lower() in _EXTENSIONS)


def _overlaps(order: Sequence[int], issues: Mapping[int, IssueFacts], repo: str) -> list[str]:
    paths = {
        number: _mentioned_paths(issues[number].title, repo)
        | _mentioned_paths(issues[number].body or "", repo)
        for number in order
    }
    return [
        f"#{first} and #{second} both mention `{path}`; they may conflict"
        for i, first in enumerate(order)
        for second in order[i + 1 :]
        for path in sorted(paths[first] & paths[second])
    ]


# --- Where a chain stands ------------------------------------------------------------------------


class LinkStatus(enum.StrEnum):
    """Where one link of a chain stands."""

    NOT_STARTED = "not started"
    IN_PROGRESS = "in progress"  # live, pushed and pending, halted, or failed and recovering
    GREEN = "green"  # its PR's checks passed, not merged yet
    MERGED = "merged"
    STOPPED = "stopped"  # escalated, PR closed unmerged, or stopped: it holds the chain
    CLOSED = "closed"  # the issue was closed without a merge by Baton: left out


def link_status(run: Run | None, issue_open: bool) -> LinkStatus:
    """Return a link's status from its issue's latest run (None: never run)."""
    if run is not None and run.state is RunState.MERGED:
        return LinkStatus.MERGED
    if not issue_open:
        return LinkStatus.CLOSED
    if run is None:
        return LinkStatus.NOT_STARTED
    if run.escalated:
        return LinkStatus.STOPPED
    if run.state is RunState.PUSHED_GREEN:
        return LinkStatus.GREEN
    if run.state is RunState.CLOSED:
        return LinkStatus.STOPPED
    if run.state is RunState.KILLED and (
        run.classification is None or run.classification.recovery is Recovery.NONE
    ):
        return LinkStatus.STOPPED
    return LinkStatus.IN_PROGRESS


class ChainStep(BaseModel):
    """What the chain does next."""

    model_config = ConfigDict(frozen=True)

    action: Literal["start", "wait", "held", "complete"]
    link: int | None = None  # start: the link to start; wait: the link waited on
    predecessor: int | None = None  # start: the link it builds on (None: the base branch)
    held_by: int | None = None  # held: the stopped link that holds its successors

    @model_validator(mode="after")
    def _names_its_link(self) -> ChainStep:
        if self.action in ("start", "wait") and self.link is None:
            raise ValueError(f"a {self.action} step names its link")
        if self.action == "held" and self.held_by is None:
            raise ValueError("a held step names the link that holds it")
        return self


_DONE = frozenset({LinkStatus.MERGED, LinkStatus.CLOSED, LinkStatus.GREEN})


def next_step(order: Sequence[int], statuses: Mapping[int, LinkStatus]) -> ChainStep:
    """Return what the chain does next: start a link, wait for one, be held, or be complete."""
    for link in order:
        status = statuses.get(link, LinkStatus.NOT_STARTED)
        if status in _DONE:
            continue
        if status is LinkStatus.IN_PROGRESS:
            return ChainStep(action="wait", link=link)
        if status is LinkStatus.STOPPED:
            return ChainStep(action="held", held_by=link)
        return ChainStep(
            action="start", link=link, predecessor=predecessor_of(order, statuses, link)
        )
    return ChainStep(action="complete")


def predecessor_of(
    order: Sequence[int], statuses: Mapping[int, LinkStatus], link: int
) -> int | None:
    """Return the link whose branch `link` builds on now (None: the base branch).

    That is the nearest earlier link that is not closed, unless it is merged.
    Raises ValueError when `link` is not in the chain.
    """
    for earlier in reversed(order[: list(order).index(link)]):
        status = statuses.get(earlier, LinkStatus.NOT_STARTED)
        if status is LinkStatus.CLOSED:
            continue
        return None if status is LinkStatus.MERGED else earlier
    return None


def successors(order: Sequence[int], link: int) -> tuple[int, ...]:
    """Return the links after `link` in the chain (ValueError when it is not in the chain)."""
    return tuple(order[list(order).index(link) + 1 :])


# --- What Baton writes ---------------------------------------------------------------------------


class ManifestLink(BaseModel):
    """One link, as the stack manifest and the chain's status comment list it."""

    model_config = ConfigDict(frozen=True)

    number: int
    title: str
    status: LinkStatus
    pr_number: int | None = None
    pr_url: str | None = None


def _title(title: str) -> str:
    """Return an untrusted title that cannot break out of its list line, nor close or ping."""
    return inert(" ".join(title.split()).replace("<", "&lt;").replace(">", "&gt;"))


def _link_line(position: int, link: ManifestLink) -> str:
    title = _title(link.title)
    name = f"#{link.number} {title}" if title else f"#{link.number}"
    pull = f"#{link.pr_number}" if link.pr_number is not None else link.pr_url
    where = f"{pull} ({link.status.value})" if pull else link.status.value
    return f"{position}. {name} — {where}"


def stack_manifest(links: Sequence[ManifestLink], current: int) -> str:
    """Return the stack section of every PR body in a chain, the current link marked.

    Raises ValueError when `current` is not one of the links.
    """
    index = [link.number for link in links].index(current)
    lines = [STACK_MARKER, f"**Stack** — link {index + 1} of {len(links)}", ""]
    for i, link in enumerate(links):
        mark = " ← this pull request" if i == index else ""
        lines.append(_link_line(i + 1, link) + mark)
    return "\n".join(lines)


def _next(step: ChainStep) -> str:
    if step.action == "start":
        base = "the base branch" if step.predecessor is None else f"#{step.predecessor}'s branch"
        return f"starting #{step.link} on {base}"
    if step.action == "wait":
        return f"waiting for #{step.link}"
    if step.action == "held":
        return f"held: #{step.held_by} stopped; its successors wait until it recovers"
    return "nothing: every link is done"


def chain_status_comment(
    tracking: int | None, links: Sequence[ManifestLink], step: ChainStep, warnings: Sequence[str]
) -> str:
    """Return the chain's status comment: on the tracking issue, or on the head issue if None."""
    count = f"{len(links)} link" + ("" if len(links) == 1 else "s")
    source = (
        "The issues of this task list"
        if tracking is not None
        else "This issue and the issues it depends on"
    )
    lines = [
        STATUS_MARKER,
        f"**Baton** · chain of {count}",
        "",
        f"{source}, each a pull request stacked on the one before.",
        "",
        *(_link_line(i + 1, link) for i, link in enumerate(links)),
        "",
        f"Next: {_next(step)}",
    ]
    if warnings:
        lines += ["", "Pre-flight:", "", *(f"- {warning}" for warning in warnings)]
    return "\n".join(lines)


def held_comment(link: int, held_by: int) -> str:
    """Return the status comment of a link held by a stopped link before it."""
    return "\n".join(
        [
            STATUS_MARKER,
            f"**Baton** · held by #{held_by}",
            "",
            f"#{link} waits until #{held_by} recovers (a continuation of it goes green) or a "
            "maintainer re-queues the chain.",
        ]
    )
