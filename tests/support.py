"""Helpers the tests share: GitHub's own payload examples."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"
GITHUB_FIXTURES = FIXTURES / "github"


def payload(name: str) -> dict[str, Any]:
    """Return one of GitHub's webhook payload examples, e.g. 'issues/labeled.json'."""
    data: dict[str, Any] = json.loads((GITHUB_FIXTURES / "payloads" / name).read_text())
    return data
