"""The sandbox GitHub's record of the App's webhook deliveries, read and redelivered as the App.

Each test names the GitHub behaviour it mirrors.
"""

from __future__ import annotations

from typing import Any

from tests.sandbox.test_git_backend import REPO, Reply, Sandbox, receiver, sandbox

__all__ = ["receiver", "sandbox"]  # the fixtures these tests share with test_git_backend.py

LIST = "/app/hook/deliveries"

# GitHub's hook-delivery-item: every field its REST reference lists as required.
HOOK_DELIVERY_FIELDS = (
    "id",
    "guid",
    "delivered_at",
    "redelivery",
    "duration",
    "status",
    "status_code",
    "event",
    "action",
    "installation_id",
    "repository_id",
)


async def as_app(sandbox: Sandbox, method: str, path: str, status: int = 200) -> Reply:
    """Call as the App, with its JWT; the answer must have `status`."""
    bearer = {"Authorization": f"Bearer {sandbox.jwt()}"}
    reply = await sandbox.call(method, path, auth=None, headers=bearer)
    assert reply.status == status, (method, path, reply.status, reply.raw[:300])
    return reply


async def opened(sandbox: Sandbox, *titles: str) -> None:
    """Open issues and wait until each `issues.opened` delivery was attempted."""
    for title in titles:
        await sandbox.ok("POST", f"{REPO}/issues", {"title": title}, status=201)
    await sandbox.hub.webhooks.idle()


def next_page(sandbox: Sandbox, reply: Reply) -> str | None:
    """Return the path of the page the Link header names as next, if any."""
    for part in reply.headers.get("Link", "").split(","):
        url, _, rel = part.partition(";")
        if rel.strip() == 'rel="next"':
            return url.strip(" <>").removeprefix(sandbox.url)
    return None


async def test_deliveries_are_listed_newest_first_a_cursors_page_at_a_time(
    sandbox: Sandbox,
) -> None:
    """Mirrors https://docs.github.com/en/rest/apps/webhooks#list-deliveries-for-an-app-webhook:
    newest first, `per_page` at most 100, the next page named by a `cursor` in the Link
    header, each delivery with its status, status_code and redelivery flag."""
    await sandbox.new_repo()
    await opened(sandbox, "one", "two", "three")
    first = await as_app(sandbox, "GET", f"{LIST}?per_page=2")
    newest = first.json
    assert len(newest) == 2 and newest[0]["id"] > newest[1]["id"]
    assert set(newest[0]) == set(HOOK_DELIVERY_FIELDS)
    assert (newest[0]["status"], newest[0]["status_code"], newest[0]["redelivery"]) == (
        "OK",
        204,
        False,
    )
    seen: list[dict[str, Any]] = list(newest)
    path = next_page(sandbox, first)
    while path is not None:
        assert "cursor=v1_" in path
        page = await as_app(sandbox, "GET", path)
        seen += page.json
        path = next_page(sandbox, page)
    everything = (await as_app(sandbox, "GET", f"{LIST}?per_page=100")).json
    assert [d["id"] for d in seen] == [d["id"] for d in everything]
    assert [d["id"] for d in everything] == sorted((d["id"] for d in everything), reverse=True)
    assert [d["action"] for d in everything if d["event"] == "issues"] == ["opened"] * 3
    await as_app(sandbox, "GET", f"{LIST}?cursor=page-2", status=400)


async def test_a_delivery_answered_otherwise_than_2xx_or_unreached_is_failed(
    sandbox: Sandbox,
) -> None:
    """Mirrors https://docs.github.com/en/webhooks/using-webhooks/handling-failed-webhook-deliveries:
    a receiver that is down, or answers an error, fails the delivery (its status is not
    `OK`), and GitHub does not redeliver it on its own; `status=failure` lists those
    answered 4xx or 5xx."""
    await sandbox.new_repo()
    sandbox.receiver.answer = 503
    await opened(sandbox, "answered 503")
    await sandbox.ok("PATCH", "/_sandbox/config", {"webhook_url": "http://127.0.0.1:9/webhook"})
    await opened(sandbox, "nobody listening")
    down, refused = (await as_app(sandbox, "GET", f"{LIST}?per_page=2")).json
    assert (down["status"], down["status_code"]) == ("failed to connect to host", 0)
    assert (refused["status"], refused["status_code"]) == ("Invalid HTTP Response: 503", 503)
    failures = (await as_app(sandbox, "GET", f"{LIST}?status=failure")).json
    assert [d["id"] for d in failures] == [refused["id"]]
    assert all(
        d["status"] == "OK" for d in (await as_app(sandbox, "GET", f"{LIST}?status=success")).json
    )
    await as_app(sandbox, "GET", f"{LIST}?status=broken", status=422)
    await sandbox.hub.webhooks.idle()
    assert len(sandbox.receiver.matching("issues", "opened")) == 1  # nothing sent again


async def test_one_delivery_shows_its_request_and_the_answer_it_got(sandbox: Sandbox) -> None:
    """Mirrors https://docs.github.com/en/rest/apps/webhooks#get-a-delivery-for-an-app-webhook:
    the delivery with its url, the request's headers and payload, and the response's
    headers and payload."""
    await sandbox.new_repo()
    await opened(sandbox, "shown")
    received = await sandbox.receiver.wait_for("issues", "opened")
    [listed] = [d for d in (await as_app(sandbox, "GET", LIST)).json if d["guid"] == received.guid]
    found = (await as_app(sandbox, "GET", f"{LIST}/{listed['id']}")).json
    assert found["url"] == sandbox.receiver.url
    assert found["request"]["payload"] == received.payload
    assert found["request"]["headers"]["X-GitHub-Delivery"] == received.guid
    assert found["response"]["payload"] == ""
    assert "Date" in found["response"]["headers"]
    await as_app(sandbox, "GET", f"{LIST}/999999", status=404)


async def test_a_redelivery_sends_the_same_guid_and_body_marked_as_one(sandbox: Sandbox) -> None:
    """Mirrors https://docs.github.com/en/rest/apps/webhooks#redeliver-a-delivery-for-an-app-webhook
    (202, the same X-GitHub-Delivery and payload, listed with `redelivery: true`) as
    https://docs.github.com/en/webhooks/using-webhooks/automatically-redelivering-failed-deliveries-for-a-github-app-webhook
    uses it: `redelivery=false` lists the first attempts."""
    await sandbox.new_repo()
    sandbox.receiver.answer = 503
    await opened(sandbox, "lost")
    lost = await sandbox.receiver.wait_for("issues", "opened")
    [failed] = (await as_app(sandbox, "GET", f"{LIST}?status=failure")).json
    sandbox.receiver.answer = 204
    asked = await as_app(sandbox, "POST", f"{LIST}/{failed['id']}/attempts", status=202)
    assert asked.json == {}
    await sandbox.receiver.wait_for("issues", "opened", count=2)
    again = sandbox.receiver.matching("issues", "opened")[1]
    assert (again.guid, again.body) == (lost.guid, lost.body)
    await sandbox.hub.webhooks.idle()
    newest = (await as_app(sandbox, "GET", f"{LIST}?per_page=1")).json[0]
    assert (newest["guid"], newest["redelivery"], newest["status"]) == (lost.guid, True, "OK")
    firsts = (await as_app(sandbox, "GET", f"{LIST}?redelivery=false")).json
    assert newest["id"] not in [d["id"] for d in firsts] and failed["id"] in [
        d["id"] for d in firsts
    ]
    await as_app(sandbox, "POST", f"{LIST}/999999/attempts", status=404)


async def test_only_the_apps_jwt_reads_its_deliveries(sandbox: Sandbox) -> None:
    """Mirrors https://docs.github.com/en/rest/apps/webhooks ("You must use a JWT to access
    this endpoint"): an installation token is refused."""
    await sandbox.new_repo()
    token = await sandbox.installation_token()
    reply = await sandbox.call("GET", LIST, auth=token)
    assert reply.status == 401
