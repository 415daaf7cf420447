"""REST plumbing shared by every route: errors, request bodies, JSON responses, pagination."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, TypeVar
from urllib.parse import urlencode

from aiohttp import web
from pydantic import BaseModel, ValidationError

Json = dict[str, Any]
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

DOCS = "https://docs.github.com/rest"
DEFAULT_PER_PAGE = 30
MAX_PER_PAGE = 100


class ApiError(Exception):
    """An error answered the way GitHub answers it."""

    def __init__(
        self,
        status: int,
        message: str,
        errors: list[Any] | None = None,
        headers: dict[str, str] | None = None,
        documentation_url: str = DOCS,
        extra: Json | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors
        self.headers = headers or {}
        self.documentation_url = documentation_url
        self.extra = extra or {}

    def response(self) -> web.Response:
        """Render the error as GitHub's JSON error body."""
        body: Json = {"message": self.message, **self.extra}
        body["documentation_url"] = self.documentation_url
        if self.errors is not None:
            body["errors"] = self.errors
        return json_response(body, status=self.status, headers=self.headers)


def not_found() -> ApiError:
    """Return GitHub's 404."""
    return ApiError(404, "Not Found")


def moved(method: str, location: str) -> ApiError:
    """Return GitHub's redirect to where a resource went: 301 for reads, 307 for the rest.

    GitHub redirects requests to a renamed repository (307 keeps a write's method and body)
    and to a transferred issue.
    """
    if method in ("GET", "HEAD"):
        status, message = 301, "Moved Permanently"
    else:
        status, message = 307, "Temporary Redirect"
    return ApiError(status, message, headers={"Location": location}, extra={"url": location})


def or_not_found(value: T | None) -> T:
    """Return what a lookup found, or answer 404 when it found nothing."""
    if value is None:
        raise not_found()
    return value


def bad_credentials() -> ApiError:
    """Return GitHub's 401."""
    return ApiError(401, "Bad credentials")


def suspended() -> ApiError:
    """Return GitHub's 403 for a suspended installation."""
    return ApiError(403, "This installation has been suspended")


def forbidden_integration() -> ApiError:
    """Return GitHub's 403 for an app acting outside what it may do."""
    return ApiError(403, "Resource not accessible by integration")


def invalid(resource: str, field: str, code: str = "invalid", **extra: Any) -> ApiError:
    """Return a 422 naming one invalid field."""
    return ApiError(
        422, "Validation Failed", [{"resource": resource, "field": field, "code": code, **extra}]
    )


def custom_invalid(resource: str, message: str) -> ApiError:
    """Return a 422 with a free-text error, as GitHub does for business rules."""
    return ApiError(
        422, "Validation Failed", [{"resource": resource, "code": "custom", "message": message}]
    )


def name_taken() -> ApiError:
    """Return GitHub's 422 for a repository name the account already uses."""
    return ApiError(
        422,
        "Repository creation failed.",
        [
            {
                "resource": "Repository",
                "code": "custom",
                "field": "name",
                "message": "name already exists on this account",
            }
        ],
    )


def json_response(
    data: Any, status: int = 200, headers: dict[str, str] | None = None
) -> web.Response:
    """Serialize `data` as a JSON response."""
    return web.Response(
        body=json.dumps(data).encode(),
        status=status,
        headers=headers,
        content_type="application/json",
        charset="utf-8",
    )


async def read_json(request: web.Request) -> Any:
    """Parse the request body as JSON (an empty body is an empty object)."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise ApiError(400, "Problems parsing JSON") from exc


async def read_body(request: web.Request, model: type[M], resource: str) -> M:
    """Parse and validate a JSON body; answer 422 like GitHub when it does not fit."""
    data = await read_json(request)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [
            {
                "resource": resource,
                "field": ".".join(str(part) for part in err["loc"]),
                "code": "missing_field" if err["type"] == "missing" else "invalid",
            }
            for err in exc.errors()
        ]
        raise ApiError(422, "Validation Failed", errors) from exc


def wants_diff(request: web.Request) -> bool:
    """Tell whether the client asked for the diff media type instead of JSON."""
    return "diff" in request.headers.get("Accept", "")


def diff_response(diff: str) -> web.Response:
    """Answer with a diff in GitHub's diff media type."""
    return web.Response(text=diff, content_type="application/vnd.github.diff", charset="utf-8")


def int_param(request: web.Request, name: str) -> int:
    """Read an integer path parameter, or answer 404."""
    try:
        return int(request.match_info[name])
    except ValueError as exc:
        raise not_found() from exc


def paginate(
    request: web.Request, public_url: str, items: Sequence[T]
) -> tuple[Sequence[T], dict[str, str]]:
    """Cut one page out of `items` and build GitHub's Link header for the others."""
    per_page = page_size(request)
    page = max(_query_int(request, "page", 1), 1)
    last = max(math.ceil(len(items) / per_page), 1)
    links = []

    def link(number: int, rel: str) -> str:
        query = dict(request.query)
        query["page"] = str(number)
        return f'<{public_url}{request.rel_url.raw_path}?{urlencode(query)}>; rel="{rel}"'

    if page > 1:
        links.append(link(min(page - 1, last), "prev"))
    if page < last:
        links += [link(page + 1, "next"), link(last, "last")]
    if page > 1:
        links.append(link(1, "first"))
    headers = {"Link": ", ".join(links)} if links else {}
    return items[(page - 1) * per_page : page * per_page], headers


def page_size(request: web.Request) -> int:
    """Return the `per_page` asked for, within GitHub's bounds (30 unless asked, at most 100)."""
    return min(max(_query_int(request, "per_page", DEFAULT_PER_PAGE), 1), MAX_PER_PAGE)


def _query_int(request: web.Request, name: str, default: int) -> int:
    try:
        return int(request.query.get(name, default))
    except ValueError:
        return default
