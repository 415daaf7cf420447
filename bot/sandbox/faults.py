"""Injected API faults: server errors, secondary rate limits, slow responses, fresh tokens.

A fresh-token fault mirrors GitHub's replication lag: for its first `fresh_token_seconds`
a newly minted installation token is refused with 401 Bad credentials (octokit retries such
a 401 for a few seconds); the minting call itself, made with the App's JWT, is unaffected.
"""

from __future__ import annotations

import asyncio
import http
import random
import re

from pydantic import BaseModel, Field, field_validator

from bot.sandbox.rest import ApiError

SECONDARY_RATE_LIMIT = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
)


class ApiFault(BaseModel):
    """One fault rule: which requests it hits, how often, and what they get."""

    method: str | None = None
    path: str = ".*"
    status: int | None = Field(default=None, ge=400, le=599)
    rate: float = Field(default=1.0, ge=0.0, le=1.0)
    count: int | None = Field(default=None, ge=0)
    retry_after: int | None = None
    delay_ms: int = Field(default=0, ge=0)
    fired: int = 0

    @field_validator("path")
    @classmethod
    def _compiles(cls, value: str) -> str:
        re.compile(value)
        return value

    def error(self) -> ApiError:
        """Return the error this fault answers with."""
        assert self.status is not None
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
        if self.status in (403, 429):
            message = SECONDARY_RATE_LIMIT
        else:
            message = http.HTTPStatus(self.status).phrase
        return ApiError(self.status, message, headers=headers)


class Faults:
    """The active fault rules, drawn against a seeded random generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.rules: list[ApiFault] = []
        self.fresh_token_seconds = 0.0

    def pick(self, method: str, path: str) -> ApiFault | None:
        """Return the first rule that fires for this request, counting its firing."""
        for rule in self.rules:
            if rule.method and rule.method.upper() != method:
                continue
            if not re.search(rule.path, path) or (
                rule.count is not None and rule.fired >= rule.count
            ):
                continue
            if self.rng.random() < rule.rate:
                rule.fired += 1
                return rule
        return None

    async def apply(self, method: str, path: str) -> None:
        """Delay and/or fail a request as the rules say (raising the fault's ApiError)."""
        rule = self.pick(method, path)
        if rule is None:
            return
        if rule.delay_ms:
            await asyncio.sleep(rule.delay_ms / 1000)
        if rule.status is not None:
            raise rule.error()
