"""Webhook handlers, one module per event family, composed on one router."""

from __future__ import annotations

from gidgethub.routing import Router

from handlers import checks, comments, issues, pulls, pushes
from handlers.context import HandlerContext

__all__ = ["HandlerContext", "router"]

router = Router(issues.router, checks.router, pulls.router, comments.router, pushes.router)
