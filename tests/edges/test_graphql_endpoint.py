"""Where Baton sends GraphQL: beside the REST API it is configured with."""

from __future__ import annotations

import pytest

from bot.edges.api import graphql_endpoint


@pytest.mark.parametrize(
    ("api", "endpoint"),
    [
        ("https://api.github.com", "https://api.github.com/graphql"),
        ("https://ghe.example.com/api/v3/", "https://ghe.example.com/api/graphql"),
        ("http://127.0.0.1:8765", "http://127.0.0.1:8765/graphql"),
    ],
)
def test_graphql_is_beside_the_rest_api(api: str, endpoint: str) -> None:
    assert graphql_endpoint(api) == endpoint
