"""Ingress that never fails open: GitHub's payloads mutated field by field, signed and posted
to the web app, and the limits the web process holds against requests it cannot trust yet."""

from __future__ import annotations

import asyncio
import copy
import hashlib
import hmac
import importlib
import inspect
import ipaddress
import json
import typing
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from bot.domain.ingress import (
    DEFAULT_TRUSTED,
    FailedTokens,
    UnverifiedReads,
    client_address,
    is_loopback_host,
    new_session,
    session_key,
    session_valid,
    signature_matches,
)
from bot.domain.jobs import JOB_SPECS
from bot.domain.payloads import PAYLOADS
from bot.edges.queue import Dispatcher
from bot.edges.store import INTAKE_STREAM, Store
from bot.ops.settings import Settings
from bot.web.app import create_app
from handlers import router
from tests.support import payload

SECRET = "It's a Secret to Everybody"  # the `settings` fixture's webhook secret
Json = Any
Path = tuple[str | int, ...]


def baton_branch(data: Json, *keys: str) -> None:
    node = data
    for key in keys[:-1]:
        node = node[key]
    node[keys[-1]] = "baton/issue-1-fix"


# One payload per routed (event, action): GitHub's example, edited (as the comment says) so
# that Baton acts on it; the mutations then start from a delivery that matters.
BASES: dict[tuple[str, str | None], tuple[str, Callable[[Json], object], str]] = {
    ("issues", "labeled"): (
        "issues/labeled.ghes-3.5.json",
        lambda d: d["label"].update(name="baton:queue"),
        "accepted",
    ),
    ("issues", "edited"): (
        "issues/edited.json",
        lambda d: d.update(changes={"body": {"from": "The body before the edit"}}),
        "accepted",
    ),
    ("issues", "closed"): (
        "issues/reopened.json",
        lambda d: d.update(action="closed"),
        "accepted",
    ),
    ("issues", "unlabeled"): ("issues/unlabeled.json", lambda d: None, "accepted"),
    ("issues", "deleted"): (
        "issues/reopened.json",
        lambda d: d.update(action="deleted"),
        "accepted",
    ),
    ("issue_comment", "created"): (
        "issue_comment/created.json",
        lambda d: d["comment"].update(body="/baton retry"),
        "accepted",
    ),
    ("issue_comment", "edited"): (
        "issue_comment/edited.json",
        lambda d: d["comment"].update(body="/baton stop"),
        "ignored",  # only logged: edits never command Baton
    ),
    ("pull_request", "closed"): (
        "pull_request/closed.json",
        lambda d: baton_branch(d, "pull_request", "head", "ref"),
        "accepted",
    ),
    ("pull_request_review", "submitted"): (
        "pull_request_review/submitted.json",
        lambda d: (
            baton_branch(d, "pull_request", "head", "ref"),
            d["review"].update(state="changes_requested"),
        ),
        "accepted",
    ),
    ("check_suite", "completed"): (
        "check_suite/completed.json",
        lambda d: baton_branch(d, "check_suite", "head_branch"),
        "accepted",
    ),
    ("check_run", "completed"): (
        "check_run/completed.json",
        lambda d: baton_branch(d, "check_run", "check_suite", "head_branch"),
        "accepted",
    ),
    ("check_run", "rerequested"): ("check_run/rerequested.json", lambda d: None, "accepted"),
    ("check_suite", "rerequested"): (
        "check_suite/rerequested.json",
        lambda d: d["sender"].update(login="octocat", type="User"),  # the example's is a bot
        "accepted",
    ),
    ("status", None): (
        "status/event.with-installation.json",
        lambda d: d["branches"].append({"name": "baton/issue-1-fix"}),
        "accepted",
    ),
    ("push", None): (
        "push/event.with-installation.json",
        lambda d: d.update(
            ref="refs/heads/master",
            deleted=False,
            commits=[{"added": [], "modified": [".github/baton.yml"], "removed": []}],
        ),
        "accepted",
    ),
}


def base_payload(route: tuple[str, str | None]) -> Json:
    fixture, edit, _ = BASES[route]
    data = copy.deepcopy(payload(fixture))
    data.setdefault("installation", {"id": 7, "node_id": "MDIzOkludGVncmF0aW9uNw=="})
    edit(data)
    return data


def routes_of_the_router() -> set[tuple[str, str | None]]:
    """Every (event, action) the handlers are registered for (read from gidgethub's router)."""
    found: set[tuple[str, str | None]] = {(event, None) for event in router._shallow_routes}
    for event, details in router._deep_routes.items():
        for key, values in details.items():
            assert key == "action", f"{event} is routed on {key}, which no model checks"
            found |= {(event, action) for action in values}
    return found


def test_every_routed_event_has_its_fields_checked_and_a_mutation_base() -> None:
    assert routes_of_the_router() == set(PAYLOADS) == set(BASES)


# --- Mutations ---------------------------------------------------------------------------------


def node_paths(node: Json, prefix: Path = ()) -> Iterator[Path]:
    """Every key and list item of a payload (the first three items of each list)."""
    if isinstance(node, dict):
        children: list[tuple[str | int, Json]] = list(node.items())
    elif isinstance(node, list):
        children = list(enumerate(node[:3]))
    else:
        return
    for key, child in children:
        yield (*prefix, key)
        yield from node_paths(child, (*prefix, key))


def _models_in(annotation: object, in_list: bool = False) -> Iterator[tuple[bool, type[BaseModel]]]:
    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        yield in_list, annotation
    origin = typing.get_origin(annotation)
    for arg in typing.get_args(annotation):
        yield from _models_in(arg, in_list or origin is list)


def read_paths(model: type[BaseModel], prefix: Path = ()) -> Iterator[Path]:
    """The paths a model checks (list items as item 0): the fields its handler reads."""
    for name, field in model.model_fields.items():
        yield (*prefix, name)
        if typing.get_origin(field.annotation) is list:
            yield (*prefix, name, 0)
        for in_list, inner in _models_in(field.annotation):
            yield from read_paths(inner, (*prefix, name, 0) if in_list else (*prefix, name))


def _as_item_0(path: Path) -> Path:
    return tuple(0 if isinstance(part, int) else part for part in path)


def touches_what_is_read(path: Path, read: set[Path]) -> bool:
    """Whether a mutation at path changes a field a handler reads (or routing does)."""
    path = _as_item_0(path)
    return path[0] == "action" or any(
        path[: len(known)] == known or known[: len(path)] == path for known in read
    )


DEEP = "\x00deep\x00"  # replaced by nesting in the JSON text: json.dumps would recurse
HUGE = 10_000
WRONG_VALUES: list[Json] = [
    None,
    True,
    False,
    0,
    -1,
    7,
    2**53,
    2**64,  # past what a JSON parser keeps as an integer
    1.5,
    "",
    "7",
    "baton/issue-1-fix",
    [],
    {},
    [None],
    {"id": 7},
    {"name": None},
]


@st.composite
def mutation(draw: st.DrawFn, all_paths: list[Path], read: list[Path]) -> tuple[Path, str, Json]:
    path = draw(st.one_of(st.sampled_from(read), st.sampled_from(all_paths)))
    kind = draw(st.sampled_from(["replace", "delete", "huge", "deep"]))
    value: Json = None
    if kind == "replace":
        value = draw(st.sampled_from(WRONG_VALUES))
    elif kind == "huge":
        value = draw(st.sampled_from([[0] * HUGE, ["x"] * HUGE, [{}] * HUGE, [[]] * HUGE]))
    elif kind == "deep":
        value = draw(st.sampled_from([50, 2_000]))  # within and past the parser's depth limit
    return path, kind, value


def mutated(data: Json, path: Path, kind: str, value: Json) -> bytes | None:
    """Return the payload with one mutation applied, as JSON; None when the path is gone."""
    parent = data
    for part in path[:-1]:
        try:
            parent = parent[part]
        except (KeyError, IndexError, TypeError):
            return None
    last = path[-1]
    if isinstance(parent, dict):
        if last not in parent:
            return None
    elif not isinstance(parent, list) or not isinstance(last, int) or last >= len(parent):
        return None
    if kind == "delete":
        del parent[last]  # type: ignore[arg-type]
    else:
        parent[last] = DEEP if kind == "deep" else value  # type: ignore[index]
    text = json.dumps(data)
    if kind == "deep":
        text = text.replace(json.dumps(DEEP), "[" * value + "]" * value)
    return text.encode()


def signed_headers(event: str, body: bytes) -> dict[str, str]:
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": str(uuid.uuid4()),
        "X-Hub-Signature-256": "sha256="
        + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest(),
        "Content-Type": "application/json",
    }


def all_recorded_jobs(store: Store) -> dict[str, list[Any]]:
    """Return the jobs the web process recorded, by delivery."""
    found: dict[str, list[Any]] = {}
    for _, fields in store.redis.xrange(INTAKE_STREAM):
        values = {str(key): str(value) for key, value in fields.items()}
        found.setdefault(values["delivery"], []).extend(JOB_SPECS.validate_json(values["jobs"]))
    return found


def recorded_jobs(store: Store, delivery: str) -> list[Any]:
    """Return the jobs the web process recorded for a delivery, and empty the intake."""
    found = all_recorded_jobs(store).get(delivery, [])
    store.redis.delete(INTAKE_STREAM)
    return found


def assert_arguments_fit_the_worker(job: Any) -> None:
    """A job's arguments have exactly the types its worker function takes."""
    module, name = job.func.rsplit(".", 1)
    func = inspect.unwrap(getattr(importlib.import_module(module), name))
    hints = typing.get_type_hints(func)
    try:
        bound = inspect.signature(func).bind(*job.args)
    except TypeError as exc:
        raise AssertionError(f"{job.func} cannot take {job.args}: {exc}") from exc
    for parameter, arg in bound.arguments.items():
        assert type(arg) is hints[parameter], (job.func, parameter, arg)


@pytest.fixture
async def web(
    aiohttp_client: Any, settings: Settings, store: Store, dispatch: Dispatcher
) -> TestClient:
    return await aiohttp_client(create_app(settings, store, dispatch, router))  # type: ignore[no-any-return]


ROUTES = sorted(BASES, key=str)
ROUTE_IDS = [".".join(filter(None, route)) for route in ROUTES]


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
async def test_each_mutation_base_is_a_delivery_baton_acts_on(
    web: TestClient, store: Store, route: tuple[str, str | None]
) -> None:
    body = json.dumps(base_payload(route)).encode()
    headers = signed_headers(route[0], body)
    response = await web.post("/webhook", data=body, headers=headers)
    assert (response.status, (await response.json())["outcome"]) == (202, BASES[route][2])
    assert bool(recorded_jobs(store, headers["X-GitHub-Delivery"])) == (
        BASES[route][2] == "accepted"
    )


# One of each kind of wrong: the field-by-field sweep tries each on every field read.
SWEEP: list[tuple[str, Json]] = [
    *(("replace", value) for value in (None, True, 0, -1, 1.5, 2**64, "", "7", [], {})),
    ("delete", None),
    ("huge", [0] * HUGE),
    ("deep", 50),
]


async def post_all(web: TestClient, event: str, bodies: list[bytes]) -> list[tuple[str, int, Json]]:
    """Post signed bodies a few at a time; return each one's delivery id, status and answer."""

    async def one(body: bytes) -> tuple[str, int, Json]:
        headers = signed_headers(event, body)
        response = await web.post("/webhook", data=body, headers=headers)
        return headers["X-GitHub-Delivery"], response.status, await response.json()

    answers = []
    for start in range(0, len(bodies), 16):
        answers += await asyncio.gather(*(one(body) for body in bodies[start : start + 16]))
    return answers


Mutation = tuple[Path, str, Json]


def fields_read(route: tuple[str, str | None]) -> list[Path]:
    """The paths of a route's mutation base that its handler reads, and the action."""
    checked = set(read_paths(PAYLOADS[route]))
    found = [path for path in node_paths(base_payload(route)) if _as_item_0(path) in checked]
    return [*found, ("action",)]


def field_by_field(route: tuple[str, str | None]) -> list[tuple[Mutation, bytes]]:
    """Each wrong of SWEEP alone on each field read: the mutation and the payload it makes."""
    base = base_payload(route)
    tried = [(path, kind, value) for path in fields_read(route) for kind, value in SWEEP]
    bodies = [mutated(copy.deepcopy(base), path, kind, value) for path, kind, value in tried]
    return [(m, body) for m, body in zip(tried, bodies, strict=True) if body is not None]


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
async def test_every_field_a_handler_reads_mutated_alone_is_accepted_ignored_or_refused(
    web: TestClient, store: Store, route: tuple[str, str | None]
) -> None:
    read = fields_read(route)
    kept = field_by_field(route)
    store.redis.delete(INTAKE_STREAM)
    answers = await post_all(web, route[0], [body for _, body in kept])
    accepted = set()
    for (mutation_, _), (delivery, status, answer) in zip(kept, answers, strict=True):
        assert status in (202, 400), (mutation_, status, answer)
        expected = {202: ("accepted", "ignored"), 400: ("refused",)}[status]
        assert answer["outcome"] in expected, (mutation_, answer)
        if answer["outcome"] == "accepted":
            accepted.add(delivery)
    recorded = all_recorded_jobs(store)
    assert set(recorded) == accepted, "jobs for exactly the accepted deliveries"
    for jobs in recorded.values():
        for job in jobs:
            assert_arguments_fit_the_worker(job)
    refused = sum(answer["outcome"] == "refused" for _, _, answer in answers)
    assert refused >= len(read), "each field read has some value Baton cannot use"


@pytest.mark.parametrize("route", ROUTES, ids=ROUTE_IDS)
@settings(
    max_examples=30,
    deadline=None,
    database=None,
    # One app serves every example, as one web process serves every delivery.
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(drawn=st.data())
async def test_github_payloads_mutated_field_by_field_are_accepted_ignored_or_refused(
    web: TestClient, store: Store, route: tuple[str, str | None], drawn: st.DataObject
) -> None:
    event, _ = route
    base = base_payload(route)
    all_paths = list(node_paths(base))
    read = sorted(set(read_paths(PAYLOADS[route])) & set(map(_as_item_0, all_paths)))
    expected = BASES[route][2]
    mutations = drawn.draw(st.lists(mutation(all_paths, read), min_size=1, max_size=2))
    body = None
    for path, kind, value in mutations:
        body = mutated(base, path, kind, value) or body
        if kind == "deep":
            break  # the nesting is in the text only
    if body is None:
        return
    headers = signed_headers(event, body)
    response = await web.post("/webhook", data=body, headers=headers)
    answer = await response.json()
    assert response.status in (202, 400), (response.status, answer, mutations)
    jobs = recorded_jobs(store, headers["X-GitHub-Delivery"])
    if response.status == 400:
        assert answer["outcome"] == "refused" and jobs == [], (answer, mutations)
        return
    assert answer["outcome"] in ("accepted", "ignored"), answer
    assert (answer["outcome"] == "accepted") == bool(jobs)
    for job in jobs:
        assert_arguments_fit_the_worker(job)
    unread = not any(touches_what_is_read(path, set(read)) for path, _, _ in mutations)
    too_deep = any(kind == "deep" and value > 1_000 for _, kind, value in mutations)
    if unread and not too_deep:
        assert answer["outcome"] == expected, ("a field no handler reads", mutations)


@pytest.mark.parametrize(
    ("route", "edit", "field"),
    [
        (("issues", "labeled"), lambda d: d["issue"].update(number="1"), "issue.number"),
        (("issues", "labeled"), lambda d: d.update(label=None), "label"),
        (("issues", "labeled"), lambda d: d.update(installation=None), "installation"),
        (("issues", "labeled"), lambda d: d["installation"].update(id=True), "installation.id"),
        (("push", None), lambda d: d.update(commits="many"), "commits"),
        (("pull_request_review", "submitted"), lambda d: d["review"].update(id="9"), "review.id"),
        (("pull_request", "closed"), lambda d: d["pull_request"].update(merged=None), "merged"),
        (("issue_comment", "created"), lambda d: d["comment"].update(body=None), "comment.body"),
        (("check_run", "completed"), lambda d: d["check_run"].pop("head_sha"), "head_sha"),
        (("status", None), lambda d: d["branches"].insert(0, None), "branches.0"),
        (("issues", "labeled"), lambda d: d.update(action=["labeled"]), "action"),
        # The brief works from the text as of this time: one that does not parse is refused.
        (
            ("issues", "labeled"),
            lambda d: d["issue"].update(updated_at="2019-13-45T25:61:00Z"),
            "issue.updated_at",
        ),
        (
            ("issues", "labeled"),
            lambda d: d["issue"].update(updated_at="yesterday"),
            "issue.updated_at",
        ),
        (
            ("issues", "edited"),
            lambda d: d["issue"].update(updated_at="2019-05-15T15:20:18"),  # no zone
            "issue.updated_at",
        ),
    ],
)
async def test_a_signed_payload_baton_cannot_use_is_refused_in_one_log_line(
    web: TestClient,
    store: Store,
    caplog: pytest.LogCaptureFixture,
    route: tuple[str, str | None],
    edit: Callable[[Json], object],
    field: str,
) -> None:
    event, action = route
    data = base_payload(route)
    edit(data)
    body = json.dumps(data).encode()
    headers = signed_headers(event, body)
    with caplog.at_level("INFO"):
        response = await web.post("/webhook", data=body, headers=headers)
    answer = await response.json()
    assert (response.status, answer["outcome"]) == (400, "refused")
    assert field in answer["reason"]
    assert recorded_jobs(store, headers["X-GitHub-Delivery"]) == []
    [line] = [r.getMessage() for r in caplog.records if r.name == "bot.web.app"]
    named = f"{event}.{action}" if action and field != "action" else event
    assert line.startswith(f"refused {named}: ") and field in line
    assert not [r for r in caplog.records if r.exc_info], "no traceback"


# --- The limits, as pure parts -----------------------------------------------------------------


def test_only_an_hmac_sha256_of_the_body_with_the_secret_matches() -> None:
    body, secret = b'{"action": "labeled"}', "s" * 20
    right = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    assert signature_matches(body, right, secret)
    sha1 = "sha1=" + hmac.new(secret.encode(), body, hashlib.sha1).hexdigest()
    for wrong in (sha1, right.upper(), right[:-1], right + "0", "", "sha256=", "\udcff\u00e9"):
        assert not signature_matches(body, wrong, secret), wrong
    assert not signature_matches(body + b" ", right, secret)
    assert not signature_matches(body, right, secret + "x")


def test_unverified_reads_are_bounded_in_number_and_bytes() -> None:
    reads = UnverifiedReads(reads=2, budget_bytes=100)
    assert reads.take(60)
    assert not reads.take(41), "over the byte budget"
    assert reads.take(40)
    assert not reads.take(0), "over the number of reads"
    reads.give_back(60)
    assert reads.take(60)


def test_sessions_are_signed_expiring_and_tied_to_the_token() -> None:
    key = session_key("t" * 32)
    session = new_session(key, now=1_000.0, ttl_s=60)
    assert "t" * 32 not in session
    assert session_valid(key, session, now=1_059.0)
    assert not session_valid(key, session, now=1_060.0), "expired"
    assert not session_valid(session_key("u" * 32), session, now=1_000.0), "another token"
    expiry, _, mac = session.partition(".")
    for forged in (f"{int(expiry) + 1}.{mac}", f"{expiry}.", "", ".", "9" * 5000 + "." + mac):
        assert not session_valid(key, forged, now=1_000.0), forged
    # int() reads other scripts' digits too: the same expiry in Arabic-Indic ones is no session.
    other_digits = expiry.translate({ord(d): 0x0660 + int(d) for d in "0123456789"})
    assert int(other_digits) == int(expiry)
    assert not session_valid(key, f"{other_digits}.{mac}", now=1_000.0)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.1:8000", True),
        ("127.1.2.3:80", True),
        ("localhost", True),
        ("LOCALHOST:8000", True),
        ("app.localhost", True),
        ("[::1]:8000", True),
        ("[::1]", True),
        ("::1", True),
        ("baton.example.com", False),
        ("localhost.example.com", False),
        ("10.0.0.1:8000", False),
        ("[2001:db8::1]:443", False),
        ("", False),
        ("[", False),
    ],
)
def test_loopback_hosts(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback


def test_wrong_tokens_are_limited_per_address_in_bounded_memory() -> None:
    limit = FailedTokens(allowed=3, window_s=60.0, addresses=100)
    for _ in range(3):
        assert limit.retry_after("203.0.113.9", now=10.0) == 0
        limit.failed("203.0.113.9", now=10.0)
    assert limit.retry_after("203.0.113.9", now=10.0) == 60
    assert limit.retry_after("203.0.113.9", now=69.5) == 1
    assert limit.retry_after("198.51.100.1", now=10.0) == 0, "another address may still try"
    assert limit.retry_after("203.0.113.9", now=70.0) == 0, "a new window"

    for n in range(10_000):
        limit.failed(f"10.0.{n // 256}.{n % 256}", now=100.0 + n / 1000)
    assert len(limit) <= 100


@pytest.mark.parametrize(
    ("remote", "forwarded_for", "counted_as"),
    [
        ("93.184.216.34", None, "93.184.216.34"),
        ("93.184.216.34", "198.51.100.1", "93.184.216.34"),  # a public peer picks nothing
        ("127.0.0.1", "198.51.100.1", "198.51.100.1"),  # the reverse proxy on this machine
        ("10.1.2.3", "192.0.2.7, 198.51.100.1", "198.51.100.1"),  # the client the router saw
        ("fdaa::3", "198.51.100.1", "198.51.100.1"),
        ("127.0.0.1", "", "127.0.0.1"),
        ("127.0.0.1", "x" * 1000, "x" * 64),  # bounded, whatever the header holds
        (None, "198.51.100.1", ""),
    ],
)
def test_wrong_tokens_count_against_the_client_a_proxy_saw(
    remote: str | None, forwarded_for: str | None, counted_as: str
) -> None:
    assert client_address(remote, forwarded_for) == counted_as


def test_a_configured_proxy_and_header_name_the_client() -> None:
    """Behind Fly's proxy the client is in Fly-Client-IP; only that proxy may name it."""
    fly = [ipaddress.ip_network("172.16.0.0/12")]
    assert client_address("172.19.0.2", "198.51.100.1", fly) == "198.51.100.1"
    assert client_address("10.1.2.3", "198.51.100.1", fly) == "10.1.2.3"  # not the proxy
    settings = Settings(
        BATON_TRUSTED_PROXY_HEADER="Fly-Client-IP", BATON_TRUSTED_PROXIES="172.16.0.0/12, ::1"
    )
    assert settings.trusted_proxies == [*fly, ipaddress.ip_network("::1/128")]
    assert Settings().trusted_proxies == list(DEFAULT_TRUSTED)


def test_the_failed_token_table_forgets_expired_windows_first() -> None:
    limit = FailedTokens(allowed=1, window_s=60.0, addresses=2)
    limit.failed("old", now=0.0)
    limit.failed("blocked", now=50.0)
    limit.failed("new", now=70.0)  # "old" has expired: it goes, "blocked" stays
    assert limit.retry_after("blocked", now=70.0) > 0
