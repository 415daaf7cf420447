"""What GitHub reads in a description or a comment: closing references and @mentions.

Modelled on GitHub's rules ("Linking a pull request to an issue using a keyword",
and @mentions of users and teams), read generously so that a test relying on it
fails whenever GitHub might see a reference: the text is read as written and with
its character references decoded, each in Unicode's compatibility form (NFKC)
too, and what any of those readings finds counts. Code spans are not told apart
from prose, so this finds at least what GitHub does.
"""

from __future__ import annotations

import html
import re
import unicodedata

_KEYWORD = r"(?<![A-Za-z0-9])(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?):?\s+"
_CLOSING = re.compile(
    _KEYWORD
    + r"(?:"
    + r"(?:https?://[^/\s]+/(?P<url_repo>[\w.-]+/[\w.-]+)/issues/(?P<url_number>\d+))"
    + r"|(?:(?P<repo>[\w.-]+/[\w.-]+)#(?P<repo_number>\d+))"
    + r"|(?:(?:#|GH-)(?P<number>\d+))"
    + r")\b",
    re.IGNORECASE,
)
# A login: letters, digits and single hyphens; a team follows its organisation after "/".
_MENTION = re.compile(
    r"(?<![A-Za-z0-9_])@(?P<login>[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38})"
    r"(?:/(?P<team>[A-Za-z0-9][A-Za-z0-9_-]*))?"
)


def readings(text: str) -> set[str]:
    """Return the ways GitHub might read text: as written, decoded, and each in NFKC."""
    found = {text, html.unescape(text)}
    return found | {unicodedata.normalize("NFKC", reading) for reading in found}


def closing_references(text: str, repo: str) -> set[tuple[str, int]]:
    """Return the issues (repository, number) that text closes when its pull request merges.

    repo is the pull request's repository, which a bare `#N` or `GH-N` refers to.
    Repository names are given in lower case.
    """
    closed = set()
    for reading in readings(text):
        for found in _CLOSING.finditer(reading):
            named = found["url_repo"] or found["repo"] or repo
            number = found["url_number"] or found["repo_number"] or found["number"]
            closed.add((named.lower(), int(number)))
    return closed


def mentions(text: str) -> set[str]:
    """Return the users (`login`) and teams (`org/team`) that text notifies, in lower case."""
    named = set()
    for reading in readings(text):
        for found in _MENTION.finditer(reading):
            login = found["login"].lower()
            named.add(f"{login}/{found['team'].lower()}" if found["team"] else login)
    return named
