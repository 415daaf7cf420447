"""The webhook endpoint: signatures, deduplication, bad input, and routing of GitHub's payloads."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import json
import logging
import uuid
import zlib
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from gidgethub.routing import Router
from gidgethub.sansio import Event
from rq import Queue

from bot.devkit.devstack import free_port
from bot.domain.ingress import UnverifiedReads
from bot.domain.jobs import AGENTS, EVENTS
from bot.edges.intake import forward_once
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from bot.ops.settings import Settings, SettingsError
from bot.web import app as web_module
from bot.web.app import CONTEXT, MAX_PAYLOAD_BYTES, create_app
from handlers import router
from handlers.pushes import touches_config
from tests.support import payload

SECRET = "It's a Secret to Everybody"


def signed(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def headers_for(event: str, body: bytes, **overrides: str) -> dict[str, str]:
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": signed(body),
        "Content-Type": "application/json",
    }
    headers.update(overrides)
    return {k: v for k, v in headers.items() if v != ""}


def labeled(label: str = "baton:queue", installation: int | None = 7) -> dict[str, Any]:
    data = copy.deepcopy(payload("issues/labeled.json"))
    data["label"]["name"] = label
    if installation is not None:
        data["installation"] = {
            "id": installation,
            "node_id": "MDIzOkludGVncmF0aW9uSW5zdGFsbGF0aW9uNw==",
        }
    return data


@pytest.fixture
async def client(
    aiohttp_client: Any, settings: Settings, store: Store, dispatch: Dispatcher
) -> TestClient:
    return await aiohttp_client(create_app(settings, store, dispatch, router))  # type: ignore[no-any-return]


def queued(dispatch: Dispatcher, name: str) -> list[tuple[str, tuple[Any, ...]]]:
    """Return the jobs on a queue once a forwarder has moved what the web process accepted."""
    store = Store.from_url(dispatch.settings.redis_url)
    store.ensure_intake_group()
    forward_once(store, dispatch, "test-forwarder", None)
    queue: Queue = dispatch.queues[name]
    return [(job.func_name, tuple(job.args)) for job in queue.get_jobs()]


async def post(
    client: TestClient, event: str, data: object, **headers: str
) -> tuple[int, dict[str, Any]]:
    body = json.dumps(data).encode()
    response = await client.post("/webhook", data=body, headers=headers_for(event, body, **headers))
    return response.status, await response.json()


async def test_labelled_issue_enqueues_one_run(client: TestClient, dispatch: Dispatcher) -> None:
    data = labeled()
    status, answer = await post(client, "issues", data)
    assert (status, answer["outcome"]) == (202, "accepted")
    repo, issue = data["repository"]["full_name"], data["issue"]
    [(func, args)] = queued(dispatch, AGENTS)
    assert func == "jobs.run.run_issue"
    assert args[:6] == (7, repo, issue["number"], "fresh", 0, "Codertocat")
    # The issue as the label event carried it: the run works from this text, and its
    # labels stand for a read of the issue when the run starts promptly.
    shown = json.dumps(sorted(label["name"] for label in issue["labels"]))
    assert args[6:] == (issue["title"], issue["body"], "2019-05-15T15:20:18+00:00", "label", shown)


@pytest.mark.parametrize(
    ("case", "header_overrides", "expected_status"),
    [
        ("no signature", {"X-Hub-Signature-256": ""}, 401),
        ("wrong signature", {"X-Hub-Signature-256": signed(b"other body")}, 401),
        ("signed with another secret", {"X-Hub-Signature-256": "<other-secret>"}, 401),
        ("sha1 prefix missing", {"X-Hub-Signature-256": "deadbeef"}, 401),
        ("not ASCII", {"X-Hub-Signature-256": "sha256=\u00e9" + "0" * 63}, 401),
        ("SHA-1 in the SHA-256 header", {"X-Hub-Signature-256": "<sha1>"}, 401),
        ("no event header", {"X-GitHub-Event": ""}, 400),
        ("no delivery header", {"X-GitHub-Delivery": ""}, 400),
    ],
)
async def test_bad_deliveries_are_refused_and_enqueue_nothing(
    client: TestClient,
    dispatch: Dispatcher,
    case: str,
    header_overrides: dict[str, str],
    expected_status: int,
) -> None:
    body = json.dumps(labeled()).encode()
    if header_overrides.get("X-Hub-Signature-256") == "<other-secret>":
        header_overrides = {"X-Hub-Signature-256": signed(body, "another secret")}
    if header_overrides.get("X-Hub-Signature-256") == "<sha1>":
        sha1 = hmac.new(SECRET.encode(), body, hashlib.sha1).hexdigest()
        header_overrides = {"X-Hub-Signature-256": f"sha1={sha1}"}
    response = await client.post(
        "/webhook", data=body, headers=headers_for("issues", body, **header_overrides)
    )
    assert response.status == expected_status, case
    assert queued(dispatch, AGENTS) == []


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b""])
async def test_body_that_is_not_a_json_object_is_400(client: TestClient, body: bytes) -> None:
    response = await client.post("/webhook", data=body, headers=headers_for("issues", body))
    assert response.status == 400


async def test_oversized_payload_is_413(client: TestClient, dispatch: Dispatcher) -> None:
    body = b"{" + b" " * MAX_PAYLOAD_BYTES + b"}"
    response = await client.post("/webhook", data=body, headers=headers_for("issues", body))
    assert response.status == 413
    assert queued(dispatch, AGENTS) == []


async def test_a_compressed_delivery_is_refused_unread(
    client: TestClient, dispatch: Dispatcher
) -> None:
    # GitHub never compresses; a deflated body would weigh far more once read than it says.
    body = zlib.compress(b"{" + b" " * 10_000_000 + b"}")
    headers = {**headers_for("issues", body), "Content-Encoding": "deflate"}
    response = await client.post("/webhook", data=body, headers=headers)
    assert response.status == 415
    assert queued(dispatch, AGENTS) == []


async def test_redelivery_does_nothing_twice(client: TestClient, dispatch: Dispatcher) -> None:
    body = json.dumps(labeled()).encode()
    headers = headers_for("issues", body)
    first = await client.post("/webhook", data=body, headers=headers)
    again = await client.post("/webhook", data=body, headers=headers)
    assert (first.status, (await first.json())["outcome"]) == (202, "accepted")
    assert (again.status, (await again.json())["outcome"]) == (202, "duplicate")
    assert len(queued(dispatch, AGENTS)) == 1


async def test_other_labels_and_unrouted_events_are_accepted_and_ignored(
    client: TestClient, dispatch: Dispatcher
) -> None:
    status, _ = await post(client, "issues", labeled("bug"))
    assert status == 202
    status, answer = await post(client, "ping", payload("ping/event.with-app_id.json"))
    assert (status, answer["outcome"]) == (202, "ignored")
    assert queued(dispatch, AGENTS) == []


async def test_label_event_without_installation_is_dropped(
    client: TestClient, dispatch: Dispatcher
) -> None:
    # GitHub's own example has no installation: a repository webhook, not the App's.
    data = payload("issues/labeled.json")
    data["label"]["name"] = "baton:queue"
    status, _ = await post(client, "issues", data)
    assert status == 202
    assert queued(dispatch, AGENTS) == []


async def test_ghes_payload_with_installation_enqueues(
    client: TestClient, dispatch: Dispatcher
) -> None:
    data = payload("issues/labeled.ghes-3.5.json")
    data["label"]["name"] = "baton:queue"
    status, _ = await post(client, "issues", data)
    assert status == 202
    [(_, args)] = queued(dispatch, AGENTS)
    assert args[:5] == (
        data["installation"]["id"],
        data["repository"]["full_name"],
        data["issue"]["number"],
        "fresh",
        0,
    )
    assert args[5:] == (
        data["sender"]["login"],
        data["issue"]["title"],
        data["issue"]["body"],
        "2019-05-15T19:37:54+00:00",
        "label",
        json.dumps(sorted(label["name"] for label in data["issue"]["labels"])),
    )


async def test_label_added_by_baton_itself_is_ignored(
    client: TestClient, dispatch: Dispatcher, store: Store
) -> None:
    store.set_bot_login("baton[bot]")
    data = labeled()
    data["sender"] = {**data["sender"], "login": "baton[bot]", "type": "Bot"}
    status, _ = await post(client, "issues", data)
    assert status == 202
    assert queued(dispatch, AGENTS) == []


async def test_check_suite_on_a_baton_branch_enqueues_settlement(
    client: TestClient, dispatch: Dispatcher
) -> None:
    data = payload("check_suite/completed.json")
    data["installation"] = {"id": 7}
    repo, sha = data["repository"]["full_name"], data["check_suite"]["head_sha"]
    status, _ = await post(client, "check_suite", data)
    assert status == 202
    assert queued(dispatch, EVENTS) == [], "a branch that is not Baton's is not its business"

    data["check_suite"]["head_branch"] = "baton/issue-3-fix-it"
    status, _ = await post(client, "check_suite", data)
    assert queued(dispatch, EVENTS) == [("jobs.settle.settle_head", (7, repo, sha))]


async def test_health_reports_redis_and_queue_depths(client: TestClient) -> None:
    response = await client.get("/healthz")
    assert response.status == 200
    body = await response.json()
    assert body["redis"] == "ok"
    assert set(body["queues"]) == {"baton-events", "baton-agents"}


def test_app_refuses_to_start_without_a_secret(redis_url: str, store: Store) -> None:
    settings = Settings(REDIS_URL=redis_url)
    with pytest.raises(SettingsError, match="GITHUB_WEBHOOK_SECRET"):
        create_app(settings, store, Dispatcher.from_url(redis_url, settings), router)


@pytest.mark.parametrize(
    "signature", ["", "sha256=", "sha1=" + "0" * 40, "sha256=" + "0" * 64, "garbage"]
)
async def test_an_unsigned_delivery_is_always_refused_whatever_the_settings_say(
    aiohttp_client: Any,
    settings: Settings,
    store: Store,
    monkeypatch: pytest.MonkeyPatch,
    signature: str,
) -> None:
    # What once turned signature checks off is now nothing: in the environment, or as a field.
    monkeypatch.setenv("BATON_DEMO", "1")
    loose = Settings(**{**settings.model_dump(by_alias=True), "BATON_DEMO": True})
    assert loose.webhook_secret == SECRET
    dispatch = Dispatcher.from_url(loose.redis_url, loose)
    client = await aiohttp_client(create_app(loose, store, dispatch, router))
    status, answer = await post(client, "issues", labeled(), **{"X-Hub-Signature-256": signature})
    assert (status, answer["outcome"]) == (401, "refused")
    assert queued(dispatch, AGENTS) == []


async def test_health_shows_no_redis_error_to_the_public(
    aiohttp_client: Any, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    down = settings.model_copy(update={"redis_url": nowhere})
    client = await aiohttp_client(
        create_app(down, Store.from_url(nowhere), Dispatcher.from_url(nowhere, down), router)
    )
    with caplog.at_level(logging.ERROR, logger="bot.web.app"):
        response = await client.get("/healthz")
    assert response.status == 503
    assert await response.json() == {"status": "degraded", "redis": "unavailable"}
    assert str(nowhere.split(":")[2].split("/")[0]) in caplog.text, "the detail is in the log"


async def test_a_chunked_body_over_the_cap_is_413(client: TestClient, dispatch: Dispatcher) -> None:
    chunk = b" " * (1024 * 1024)

    async def body() -> Any:
        yield b"{"
        for _ in range(MAX_PAYLOAD_BYTES // len(chunk) + 1):
            yield chunk
        yield b"}"

    headers = headers_for("issues", b"")  # no Content-Length: only the read can tell
    headers.pop("X-Hub-Signature-256")
    response = await client.post("/webhook", data=body(), headers=headers)
    assert response.status == 413
    assert queued(dispatch, AGENTS) == []


async def test_deliveries_beyond_the_unverified_reads_are_told_to_retry(
    client: TestClient, dispatch: Dispatcher
) -> None:
    client.app[CONTEXT].reads = UnverifiedReads(reads=1, budget_bytes=MAX_PAYLOAD_BYTES)
    body = json.dumps(labeled()).encode()
    sending = asyncio.Event()
    finish = asyncio.Event()

    async def slowly() -> Any:
        yield body[:10]
        sending.set()
        await finish.wait()
        yield body[10:]

    first = asyncio.create_task(
        client.post("/webhook", data=slowly(), headers=headers_for("issues", body))
    )
    await sending.wait()
    await asyncio.sleep(0.05)  # the first body is being read
    status, answer = await post(client, "issues", labeled())
    assert (status, answer["outcome"]) == (503, "retry")
    again = await client.post("/webhook", data=body, headers=headers_for("issues", body))
    assert again.headers["Retry-After"] == "1"
    finish.set()
    assert (await first).status == 202, "the slow one is read, verified and accepted"
    status, _ = await post(client, "issues", labeled())
    assert status == 202, "the read's slot is back"
    assert len(queued(dispatch, AGENTS)) == 2


async def test_a_body_that_never_arrives_is_given_up_on(
    client: TestClient, dispatch: Dispatcher, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(web_module, "READ_TIMEOUT_S", 0.2)
    body = json.dumps(labeled()).encode()

    async def never_finishes() -> Any:
        yield body[:10]
        await asyncio.sleep(30)
        yield body[10:]

    response = await client.post(
        "/webhook", data=never_finishes(), headers=headers_for("issues", body)
    )
    assert response.status == 408
    assert client.app[CONTEXT].reads.reading == 0
    assert queued(dispatch, AGENTS) == []


def on_baton_branch(data: dict[str, Any], pull_key: str = "pull_request") -> dict[str, Any]:
    data[pull_key]["head"]["ref"] = "baton/issue-1-fix"
    return data


@pytest.mark.parametrize(
    ("event", "fixture", "edit", "func"),
    [
        (
            "check_run",
            "check_run/completed.json",
            lambda d: d["check_run"]["check_suite"].update(head_branch="baton/issue-1-fix"),
            "jobs.settle.settle_head",
        ),
        (
            "status",
            "status/event.with-installation.json",
            lambda d: d["branches"].append({"name": "baton/issue-1-fix"}),
            "jobs.settle.settle_head",
        ),
        (
            "pull_request",
            "pull_request/closed.json",
            on_baton_branch,
            "jobs.settle.settle_pull_closed",
        ),
        (
            "pull_request_review",
            "pull_request_review/submitted.json",
            lambda d: (on_baton_branch(d), d["review"].update(state="changes_requested")),
            "jobs.settle.settle_review",
        ),
        (
            "issues",
            "issues/reopened.json",
            lambda d: d.update(action="closed"),
            "jobs.settle.settle_issue_closed",
        ),
        (
            "issue_comment",
            "issue_comment/created.json",
            lambda d: d["comment"].update(body="Thanks!\n/baton retry"),
            "jobs.steering.handle_command",
        ),
        (
            "push",
            "push/event.with-installation.json",
            lambda d: d.update(
                ref="refs/heads/master",
                deleted=False,
                commits=[{"added": [], "modified": [".github/baton.yml"], "removed": []}],
            ),
            "jobs.config.read_repo_config",
        ),
    ],
)
async def test_github_payloads_about_batons_work_enqueue_their_job(
    client: TestClient,
    dispatch: Dispatcher,
    event: str,
    fixture: str,
    edit: Any,
    func: str,
) -> None:
    untouched = payload(fixture)
    untouched.setdefault("installation", {"id": 7})
    if event != "issues":
        status, _ = await post(client, event, untouched)
        assert status == 202
        assert queued(dispatch, EVENTS) == [], "not Baton's branch or not a change request"
    data = payload(fixture)
    data.setdefault("installation", {"id": 7})
    edit(data)
    status, _ = await post(client, event, data)
    assert status == 202
    assert [name for name, _ in queued(dispatch, EVENTS)] == [func]


async def test_a_pull_request_from_someone_elses_branch_named_like_batons_is_not_batons(
    client: TestClient, dispatch: Dispatcher
) -> None:
    """Anyone can open a pull request from a fork's branch named `baton/issue-1-fix`: only
    the repository's own branch (or, in fork mode, the fork's) is Baton's."""
    for fixture, key in [
        ("pull_request/closed.json", "pull_request"),
        ("pull_request_review/submitted.json", "pull_request"),
    ]:
        data = on_baton_branch(payload(fixture), key)
        data.setdefault("installation", {"id": 7})
        data["review"] = {**data.get("review", {}), "state": "changes_requested"}
        data[key]["head"]["repo"] = {**data[key]["head"]["repo"], "full_name": "stranger/fork"}
        status, _ = await post(client, fixture.split("/")[0], data)
        assert status == 202
    assert queued(dispatch, EVENTS) == []


async def test_a_repository_s_own_queue_label_routes_once_known(
    aiohttp_client: Any, settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    data = labeled("agent:go")
    store.record_queue_label(data["repository"]["full_name"], "agent:go")
    client = await aiohttp_client(create_app(settings, store, dispatch, router))
    await post(client, "issues", labeled("baton:queue"))
    assert queued(dispatch, AGENTS) == [], "the deployment's label is not this repository's"
    status, answer = await post(client, "issues", data)
    assert (status, answer["outcome"]) == (202, "accepted")
    assert [name for name, _ in queued(dispatch, AGENTS)] == ["jobs.run.run_issue"]


@pytest.mark.parametrize(
    ("commits", "touched"),
    [
        ([], False),
        ([{"added": ["README.md"], "modified": [], "removed": []}], False),
        ([{"added": [], "modified": [], "removed": [".github/baton.yml"]}], True),
        ([{"added": ["README.md"]}, {"added": [".github/baton.yml"]}], True),
        ([{"added": [], "modified": []}] * 20, True),  # the payload lists only 20
    ],
)
def test_a_push_touches_the_config_when_a_listed_commit_changes_it(
    commits: list[dict[str, list[str]]], touched: bool
) -> None:
    assert touches_config(commits) is touched


async def test_a_pending_status_and_an_approving_review_enqueue_nothing(
    client: TestClient, dispatch: Dispatcher
) -> None:
    status_event = payload("status/event.with-installation.json")
    status_event["branches"].append({"name": "baton/issue-1-fix"})
    status_event["state"] = "pending"
    review = on_baton_branch(payload("pull_request_review/submitted.json"))
    review["review"]["state"] = "approved"
    for event, data in (("status", status_event), ("pull_request_review", review)):
        status, _ = await post(client, event, data)
        assert status == 202
    assert queued(dispatch, EVENTS) == []


@pytest.mark.parametrize(
    ("fixture", "edit"),
    [
        ("issue_comment/edited.json", lambda d: d["comment"].update(body="/baton stop")),
        (
            "issue_comment/created.json",
            lambda d: (d["comment"].update(body="/baton stop"), d["sender"].update(type="Bot")),
        ),
    ],
)
async def test_edited_comments_and_bots_command_nothing(
    client: TestClient,
    dispatch: Dispatcher,
    fixture: str,
    edit: Any,
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = payload(fixture)
    data.setdefault("installation", {"id": 7})
    edit(data)
    with caplog.at_level(logging.INFO, logger="handlers.comments"):
        status, _ = await post(client, "issue_comment", data)
    assert status == 202
    assert queued(dispatch, EVENTS) == []
    assert "ignored a command" in caplog.text


async def test_a_handler_that_fails_refuses_the_delivery_in_one_line(
    aiohttp_client: Any,
    settings: Settings,
    store: Store,
    dispatch: Dispatcher,
    caplog: pytest.LogCaptureFixture,
) -> None:
    misreading = Router()

    @misreading.register("issues", action="labeled")
    async def misread(event: Event, *_: object) -> None:
        raise LookupError("a field the handler did not expect")

    client = await aiohttp_client(create_app(settings, store, dispatch, misreading))
    with caplog.at_level(logging.INFO):
        status, answer = await post(client, "issues", labeled())
    assert (status, answer["outcome"]) == (400, "refused")
    assert "LookupError" in answer["reason"]
    [line] = [r.getMessage() for r in caplog.records if r.name == "bot.web.app"]
    assert line.startswith("refused issues.labeled: ") and "LookupError" in line
    assert not [r for r in caplog.records if r.exc_info] and "Traceback" not in caplog.text
    assert queued(dispatch, AGENTS) == []


async def test_a_handler_without_redis_asks_github_to_come_back(
    aiohttp_client: Any, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"
    down = settings.model_copy(update={"redis_url": nowhere})
    client = await aiohttp_client(
        create_app(down, Store.from_url(nowhere), Dispatcher.from_url(nowhere, down), router)
    )
    data = labeled()
    data["sender"] = {**data["sender"], "type": "Bot"}  # was it Baton? Redis knows its login
    with caplog.at_level(logging.INFO, logger="bot.web.app"):
        status, answer = await post(client, "issues", data)
    assert (status, answer["outcome"]) == (503, "retry")
    assert "Redis unavailable" in caplog.text and "Traceback" not in caplog.text
