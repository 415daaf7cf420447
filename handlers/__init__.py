"""Webhook handlers, one module per event family, composed on one router."""

from __future__ import annotations

from gidgethub.routing import Router

from handlers import checks, comments, issues, pulls, pushes

__all__ = ["router"]

router = Router(issues.router, checks.router, pulls.router, comments.router, pushes.router)
