"""What the agent writes, made inert on GitHub: no closing keyword closes, no @mention notifies.

GitHub closes the issues a merged pull request's description names after a
closing keyword (`Fixes #1`, `closes: owner/repo#2`, `Resolves GH-3`, a keyword
before an issue's address), and notifies every user and team an @mention names.
The agent's report, and the reasons and output Baton quotes from its runs, reach
pull request bodies and comments; before they do:

- a closing keyword followed by what may start an issue reference gets a
  zero-width joiner after its first letter (`Fixes #1` becomes `F`, joiner,
  `ixes #1`). What may stand between the two is read widely (spaces of any kind,
  line breaks, punctuation, Markdown and HTML), as is what may start a reference
  (`#`, `GH-`, `owner/repo#`, an address, a tag or a character reference), since
  that is where readers of Markdown differ; a keyword that is no longer spelt out
  closes nothing, however it is read. `Fixed it.` is left as it is;
- every `@` that could start a mention gets a zero-width joiner after it
  (`@org/team` becomes `@`, joiner, `org/team`); an `@` right after a letter or
  digit starts none, so an address such as `a@b.com` is left as it is;
- a character reference that GitHub would decode into a letter, a digit or an `@`
  (`&#64;`, `&#x66;ixes`) is broken the same way after its `&`, so no keyword or
  mention is put back together from one.

The joiner is invisible where GitHub renders the text, so it reads as the agent
wrote it; `#1` on its own stays a link to issue #1. Code spans and blocks get the
same treatment: the joiner is invisible there too, and telling code from prose
exactly as GitHub does takes its whole Markdown parser, where any case read
differently would leave a live mention.
"""

from __future__ import annotations

import html
import re
import unicodedata

JOINER = "\u200d"  # ZERO WIDTH JOINER: invisible, and no letter or word boundary to GitHub
_AT_SIGNS = "@\uff20\ufe6b"  # @, and the full-width and small forms some readers take for it

# Only an ASCII letter or digit next to it keeps a keyword from being a word of its own:
# that is the narrowest reading of a word boundary, so the widest set of keywords.
# A keyword counts when what follows it, past anything but letters and digits (spaces of
# any kind, line breaks, punctuation, Markdown), may start an issue reference: #, GH-,
# owner/repo#, an address, or the < of a tag or autolink and the & of a character reference.
_KEYWORD = re.compile(
    r"(?-i:(?<![A-Za-z0-9]))"
    r"(?:close[sd]?|fix(?:e[sd])?|resolve[sd]?)"
    r"(?-i:(?![A-Za-z0-9]))"
    r"(?=[^A-Za-z0-9]*(?:[#<&]|gh-|[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+#|https?:|www\.))",
    re.IGNORECASE,
)
_MENTION = re.compile(rf"(?<![A-Za-z0-9])[{_AT_SIGNS}](?!{JOINER})")
_REFERENCE = re.compile(r"&(?:#[xX][0-9a-fA-F]+|#[0-9]+|[A-Za-z][A-Za-z0-9]*);?")
_DECODED_DANGER = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" + _AT_SIGNS
)


def inert(text: str) -> str:
    """Return text as GitHub shows it, with no closing keyword or @mention left live.

    Idempotent: inert(inert(text)) == inert(text).
    """
    text = _REFERENCE.sub(_break_reference, text)
    starts = _keyword_starts(text)
    text = "".join(char + JOINER if at in starts else char for at, char in enumerate(text))
    return _MENTION.sub(lambda found: found[0] + JOINER, text)


# GitHub runs no workflow for a push whose commit message holds one of these, nor any
# check with a `skip-checks: true` trailer; read widely (any case, any spacing), since
# a directive left spelt out would let the agent's code skip CI and be called green.
_SKIP_DIRECTIVE = re.compile(
    r"\[(?=\s*(?:skip\s*ci|ci\s*skip|no\s*ci|skip\s*actions|actions\s*skip)\s*\])", re.IGNORECASE
)
_SKIP_TRAILER = re.compile(r"^(\s*skip)(?=-checks\s*:)", re.IGNORECASE | re.MULTILINE)


def no_skip_directives(message: str) -> str:
    """Return a commit message whose skip directives ask GitHub for nothing (pure).

    `[skip ci]` becomes `[`, joiner, `skip ci]`, and a `skip-checks:` trailer
    `skip`, joiner, `-checks:`: read the same, matched by nothing.
    """
    message = _SKIP_DIRECTIVE.sub("[" + JOINER, message)
    return _SKIP_TRAILER.sub(lambda found: found[1] + JOINER, message)


def _keyword_starts(text: str) -> set[int]:
    """Return where each closing keyword starts, as written or as its letters fold.

    Folded, each character is read in Unicode's compatibility form and case-folded,
    so a full-width or ligature letter (`\uff26ixes`, `\ufb01xes`) spells a keyword too.
    """
    starts = {found.start() for found in _KEYWORD.finditer(text)}
    folded: list[str] = []
    origin: list[int] = []  # for each folded character, the character it came from
    for at, char in enumerate(text):
        piece = unicodedata.normalize("NFKC", char).casefold()
        folded.append(piece)
        origin += [at] * len(piece)
    view = "".join(folded)
    if view != text:
        starts |= {origin[found.start()] for found in _KEYWORD.finditer(view)}
    return starts


def _break_reference(found: re.Match[str]) -> str:
    """Break a character reference that decodes into a letter, digit or @; keep any other."""
    reference = found[0]
    decoded = html.unescape(reference)
    if decoded == reference or decoded[0] not in _DECODED_DANGER:
        return reference
    return "&" + JOINER + reference[1:]
