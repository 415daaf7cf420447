"""What each route asks of an App installation, checked the way GitHub checks it.

Every REST route declares, with `@requires`, the permissions GitHub's docs list for it
("Permissions required for GitHub Apps"): any one of them lets an installation token in.
A token lacking all of them gets GitHub's 403 "Resource not accessible by integration",
and every answer to an installation carries `X-Accepted-GitHub-Permissions`, as GitHub's do.
Routes an installation may call without a permission, or that installations cannot use at
all (App JWT, user-only), say why with `@requires_no_permission`.

Issue endpoints applied to a pull request also accept the `pull_requests` permission on
GitHub; the sandbox asks for `issues` alone there, which is stricter, never looser.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeVar

from aiohttp import web

Level = Literal["read", "write"]
Handler = TypeVar("Handler", bound=Callable[[web.Request], Awaitable[web.StreamResponse]])
_RANK = {"read": 1, "write": 2}


@dataclass(frozen=True)
class Permission:
    """One App permission at one level; write includes read."""

    name: str
    level: Level

    def __str__(self) -> str:
        return f"{self.name}={self.level}"

    def granted_by(self, granted: Mapping[str, str]) -> bool:
        """Tell whether a set of granted permissions includes this one."""
        return _RANK.get(granted.get(self.name, ""), 0) >= _RANK[self.level]


@dataclass(frozen=True)
class Requirement:
    """What a route needs: any one of `any_of`; none means no permission (see `reason`)."""

    any_of: tuple[Permission, ...]
    reason: str = ""

    def met_by(self, granted: Mapping[str, str]) -> bool:
        """Tell whether an installation holding `granted` may call the route."""
        return not self.any_of or any(p.granted_by(granted) for p in self.any_of)

    def header(self) -> str:
        """Render the X-Accepted-GitHub-Permissions value: alternatives split by `; `."""
        return "; ".join(str(p) for p in self.any_of)


_DECLARED: dict[Callable[..., object], Requirement] = {}


def requires(*any_of: Permission) -> Callable[[Handler], Handler]:
    """Declare that a route needs any one of these permissions."""
    if not any_of:
        raise ValueError("name a permission, or use requires_no_permission with a reason")
    return _declare(Requirement(any_of))


def requires_no_permission(reason: str) -> Callable[[Handler], Handler]:
    """Declare that a route needs no installation permission, and why."""
    return _declare(Requirement((), reason))


def _declare(requirement: Requirement) -> Callable[[Handler], Handler]:
    def mark(handler: Handler) -> Handler:
        _DECLARED[handler] = requirement
        return handler

    return mark


def requirement_of(handler: Callable[..., object]) -> Requirement | None:
    """Return what a route handler declared, or None when it declared nothing."""
    return _DECLARED.get(handler)


def read(name: str) -> Permission:
    """Return the read level of a permission."""
    return Permission(name, "read")


def write(name: str) -> Permission:
    """Return the write level of a permission."""
    return Permission(name, "write")
