"""What an agent's push must not carry: a credential, found before it leaves the machine.

The agent reads text strangers write, so its commits are scanned before any push of
them (its work, a checkpoint, the salvage of its edits): every line they add, in every
commit GitHub does not have yet, since a secret added and then deleted is still in the
history a push publishes. Two scans: detect-secrets (Yelp's maintained scanner), with
its detectors of known credential formats (its entropy and keyword heuristics call a
lockfile's hashes secrets, so they are left out), and the literal value of every
variable passed to the agent, the provider key first. A leak names its file, line and
kind, never its value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
from detect_secrets.core.scan import scan_line
from detect_secrets.settings import transient_settings

# detect-secrets' heuristics: they flag any long random-looking string, a hash included.
_HEURISTICS = frozenset({"Base64HighEntropyString", "HexHighEntropyString", "KeywordDetector"})
LINE_CHARS = 4_000  # a line past this is scanned in its first part (minified code)
SHORTEST_LITERAL = 8  # a value shorter than this is no credential, and matches anywhere


@dataclass(frozen=True)
class AddedLine:
    """One line a commit adds to a file, where it stands in the new file."""

    path: str
    line: int
    text: str


@dataclass(frozen=True)
class Leak:
    """A credential a push would carry: where it is and what kind, never the value."""

    path: str
    line: int
    kind: str

    def __str__(self) -> str:
        return f"`{self.path}` line {self.line}: {self.kind}"


def _detectors() -> list[dict[str, str]]:
    """Return detect-secrets' detectors of known credential formats."""
    detectors: dict[str, type] = get_mapping_from_secret_type_to_class()
    names = {detector.__name__ for detector in detectors.values()}
    return [{"name": name} for name in sorted(names - _HEURISTICS)]


def find_leaks(added: Iterable[AddedLine], literals: Sequence[str]) -> list[Leak]:
    """Return every credential the added lines carry, once per line and kind (pure)."""
    values = [value for value in literals if len(value) >= SHORTEST_LITERAL]
    found: dict[tuple[str, int, str], Leak] = {}
    with transient_settings({"plugins_used": _detectors()}):
        for line in added:
            text = line.text[:LINE_CHARS]
            kinds = {secret.type for secret in scan_line(text)}
            if any(value in line.text for value in values):
                kinds.add("a value passed to the agent")
            for kind in sorted(kinds):
                found.setdefault((line.path, line.line, kind), Leak(line.path, line.line, kind))
    return list(found.values())


def passed_values(names: Iterable[str], environ: Mapping[str, str]) -> list[str]:
    """Return the values of the variables passed to the agent, as the worker holds them."""
    return [environ[name] for name in names if environ.get(name)]


def parse_added_lines(diff: str) -> list[AddedLine]:
    """Return the lines a `git log -p -U0` (or `git diff -U0`) output adds (pure).

    `+++ ` names the file only in a file's header, between `diff --git` and its first
    hunk: in a hunk it is an added line that starts with `++ `, and is scanned.
    """
    added: list[AddedLine] = []
    path, number, in_header = None, 0, False
    for raw in diff.splitlines():
        if raw.startswith("diff --git "):
            path, in_header = None, True
        elif in_header and raw.startswith("+++ "):
            target = raw[4:].strip('"')  # git quotes a path of unusual characters
            path = None if target == "/dev/null" else target.removeprefix("b/")  # null: deleted
        elif raw.startswith("@@ "):
            number, in_header = _hunk_start(raw), False
        elif not in_header and raw.startswith("+") and path is not None:
            added.append(AddedLine(path, number, raw[1:]))
            number += 1
    return added


def _hunk_start(header: str) -> int:
    """Return the first new line a hunk header (`@@ -a,b +c,d @@`) names."""
    new = header.split(" ")[2]  # "+c,d"
    return int(new[1:].split(",")[0])


MASK = "***"


def masked(text: str, literals: Sequence[str]) -> str:
    """Return text with every credential the scans find in it, and every value passed to
    the agent, written as MASK: the agent's report goes on pull requests and comments."""
    values = sorted((v for v in literals if len(v) >= SHORTEST_LITERAL), key=len, reverse=True)
    lines = []
    with transient_settings({"plugins_used": _detectors()}):
        for line in text.split("\n"):
            for secret in scan_line(line[:LINE_CHARS]):
                if secret.secret_value:
                    line = line.replace(secret.secret_value, MASK)
            for value in values:
                line = line.replace(value, MASK)
            lines.append(line)
    return "\n".join(lines)
