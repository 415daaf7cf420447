"""GitHub App access on the sandbox: tokens minted once, retries on 5xx and secondary limits."""

from __future__ import annotations

from typing import Any

import pytest
from gidgethub import BadRequest, GitHubBroken

from bot.github import MAX_ATTEMPTS, GitHubApp
from bot.sandbox.maintainer import Maintainer
from bot.store import Store

REPO_PATH = "/repos/{+repo}"


async def calls(maintainer: Maintainer) -> dict[str, Any]:
    data: dict[str, Any] = await maintainer.gh.getitem("/_sandbox/calls")
    return data


async def fault(maintainer: Maintainer, **rule: object) -> None:
    await maintainer.gh.post("/_sandbox/faults", data=rule)


async def test_installation_token_is_minted_once_and_reused(
    app: GitHubApp, maintainer: Maintainer, store: Store
) -> None:
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    await maintainer.gh.delete("/_sandbox/calls")
    first = await app.installation_token(1)
    assert await app.installation_token(1) == first
    gh = await app.for_installation(1)
    repo = await gh.getitem(REPO_PATH, {"repo": "maintainer/widgets"})
    assert repo["full_name"] == "maintainer/widgets"
    counted = await calls(maintainer)
    minted = [
        n
        for kind in counted.values()
        for call, n in kind["calls"].items()
        if "access_tokens" in call
    ]
    assert minted == [1]
    cached = store.installation_token(app.identity, 1)
    assert cached is not None and cached.token == first


async def test_bot_login_is_learnt_from_the_app(app: GitHubApp, store: Store) -> None:
    assert await app.learn_bot_login() == "baton[bot]"
    assert store.bot_login() == "baton[bot]"


async def test_server_errors_are_retried_until_they_pass(
    app: GitHubApp, maintainer: Maintainer
) -> None:
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    gh = await app.for_installation(1)
    await fault(maintainer, method="GET", path="^/repos/maintainer/widgets$", status=502, count=2)
    repo = await gh.getitem(REPO_PATH, {"repo": "maintainer/widgets"})
    assert repo["name"] == "widgets"


async def test_secondary_rate_limit_waits_for_retry_after(
    app: GitHubApp, maintainer: Maintainer
) -> None:
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    gh = await app.for_installation(1)
    await fault(
        maintainer,
        method="GET",
        path="^/repos/maintainer/widgets$",
        status=403,
        retry_after=0,
        count=1,
    )
    await fault(
        maintainer,
        method="GET",
        path="^/repos/maintainer/widgets$",
        status=429,
        retry_after=0,
        count=1,
    )
    repo = await gh.getitem(REPO_PATH, {"repo": "maintainer/widgets"})
    assert repo["name"] == "widgets"


async def test_a_persistent_outage_gives_up_after_the_attempt_budget(
    app: GitHubApp, maintainer: Maintainer
) -> None:
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    gh = await app.for_installation(1)
    await fault(maintainer, method="GET", path="^/repos/maintainer/widgets$", status=503)
    await maintainer.gh.delete("/_sandbox/calls")
    with pytest.raises(GitHubBroken):
        await gh.getitem(REPO_PATH, {"repo": "maintainer/widgets"})
    counted = await calls(maintainer)
    assert (
        sum(kind["calls"].get("GET /repos/{owner}/{repo}", 0) for kind in counted.values())
        == MAX_ATTEMPTS
    )


async def test_client_errors_are_not_retried(app: GitHubApp, maintainer: Maintainer) -> None:
    await maintainer.gh.post("/user/repos", data={"name": "widgets"})
    gh = await app.for_installation(1)
    await maintainer.gh.delete("/_sandbox/calls")
    with pytest.raises(BadRequest) as failure:
        await gh.getitem(
            "/repos/{+repo}/issues/{number}", {"repo": "maintainer/widgets", "number": 99}
        )
    assert failure.value.status_code == 404
    counted = await calls(maintainer)
    assert sum(kind["total"] for kind in counted.values()) == 1
