"""Whether a repository's GitHub Actions workflows would run the agent's code with secrets.

By default Baton pushes the agent's branches (`baton/...`) to the repository itself, so a
workflow that runs `on: push` for them, or on the pull requests Baton opens from them,
runs the agent's code with the repository's secrets and its writable GITHUB_TOKEN before
any human reads it (docs/security.md). In fork mode neither does: a pull request from a
fork gets no secrets, and only `pull_request_target` runs with them, on the base's code,
which is safe until the workflow checks the pull request's head out. Pure: a workflow
file's text in, the reason out.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

AGENT_BRANCH = "baton/issue-1-fix"  # the shape of every branch Baton pushes
_SECRET = re.compile(r"\$\{\{\s*secrets\.([A-Za-z_][A-Za-z0-9_]*)")
# A pull request from a branch of the repository itself gets its secrets.
_ON_PULLS = ("pull_request", "pull_request_target")


def exposure(text: str, from_fork: bool = False) -> str | None:
    """Return how a workflow would run the agent's code with secrets, or None if it would not.

    from_fork: Baton's branches are a fork's (fork mode). A file that does not parse is
    judged by its text: a trigger named in it counts.
    """
    try:
        parsed = yaml.safe_load(text)
    except yaml.YAMLError:
        parsed = None
    triggers = _triggers(parsed) if isinstance(parsed, dict) else _named_triggers(text)
    runs_on = [
        event
        for event in ("push", *_ON_PULLS)
        if event in triggers and (event != "push" or _push_reaches(triggers["push"]))
    ]
    if from_fork:
        runs_on = [event for event in runs_on if event == "pull_request_target"]
    if not runs_on:
        return None
    named = sorted(set(_SECRET.findall(text)) - {"GITHUB_TOKEN"})
    holding = f"secrets {', '.join(named)}" if named else "the repository's GITHUB_TOKEN"
    whose = "Baton's pull requests from the fork" if from_fork else "Baton's branches"
    return f"runs on {' and '.join(runs_on)} of {whose} with {holding}"


def _triggers(workflow: dict[Any, Any]) -> dict[str, Any]:
    # YAML 1.1 reads a bare `on` as true: PyYAML does, and GitHub's files say `on:`.
    raw = workflow.get("on", workflow.get(True))
    if isinstance(raw, str):
        return {raw: None}
    if isinstance(raw, list):
        return {str(event): None for event in raw}
    if isinstance(raw, dict):
        return {str(event): config for event, config in raw.items()}
    return {}


def _named_triggers(text: str) -> dict[str, Any]:
    return {event: None for event in ("push", *_ON_PULLS) if re.search(rf"\b{event}\b", text)}


def _push_reaches(config: Any) -> bool:
    """Tell whether a push trigger's filters let a push of an agent's branch through."""
    if not isinstance(config, dict):
        return True
    if "branches" in config:
        return any(_matches(pattern, AGENT_BRANCH) for pattern in _patterns(config["branches"]))
    if "branches-ignore" in config:
        return not any(
            _matches(pattern, AGENT_BRANCH) for pattern in _patterns(config["branches-ignore"])
        )
    return "tags" not in config and "tags-ignore" not in config


def _patterns(value: Any) -> list[str]:
    return [str(item) for item in value] if isinstance(value, list) else [str(value)]


def _matches(pattern: str, branch: str) -> bool:
    """Match a branch against a filter pattern as GitHub's cheat sheet has it: `*` within a
    segment, `**` across them, `?` and `+` on the character before, `[...]` a class.

    A `!` pattern negates; Baton's branches are judged by the plain patterns alone.
    """
    if pattern.startswith("!"):
        return False
    regex = ""
    for part in re.split(r"(\*\*|\*|\?|\+|\[[^\]]*\])", pattern):
        if part in ("?", "+") or part.startswith("["):
            regex += part
        else:
            regex += {"**": ".*", "*": "[^/]*"}.get(part, re.escape(part))
    try:
        return re.fullmatch(regex, branch) is not None
    except re.error:
        return True  # a pattern this reading gets wrong is taken to match: warn, not miss
