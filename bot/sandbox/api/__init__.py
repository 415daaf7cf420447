"""The REST API, one module per family of GitHub operations."""

from aiohttp import web

from bot.sandbox.api import (
    admin,
    apps,
    checks,
    deliveries,
    graphql,
    issues,
    manifests,
    pulls,
    repos,
)


def add_routes(app: web.Application) -> None:
    """Register every REST, GraphQL, App-registration and admin route."""
    for module in (apps, deliveries, manifests, repos, issues, pulls, checks, graphql, admin):
        app.router.add_routes(module.routes)
