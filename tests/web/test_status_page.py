"""The status views: both renderers over hand-built overviews, the overview read from Redis,
and the operator token in front of GET /status."""

from __future__ import annotations

import html
import re
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientResponse, web
from aiohttp.test_utils import TestClient
from aiohttp.typedefs import Handler, Middleware
from pydantic import SecretStr

from bot.domain.chains import LinkStatus
from bot.domain.model import AgentResult, Chain, IssueRef, Run, RunState
from bot.domain.pacing import RateBudget
from bot.domain.plans.redelivery import RedeliveryPass
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from bot.ops.settings import Settings, SettingsError
from bot.web.app import OPERATOR_COOKIE, create_app
from bot.web.overview import (
    SANDBOX_OFF_WARNING,
    ChainSummary,
    HeldIssue,
    InstallationBudget,
    LinkSummary,
    Overview,
    RepoSummary,
    RunSummary,
    TimedIssue,
    deployment_warnings,
    gather_overview,
)
from bot.web.status_page import render_status_page, render_status_text
from handlers import router
from tests.conftest import OPERATOR_TOKEN

NOW = datetime(2026, 12, 1, 7, 0, tzinfo=UTC)
QUEUES = {"baton-events": 1, "baton-agents": 3}


def run(number: int, state: RunState, **fields: Any) -> RunSummary:
    values: dict[str, Any] = {
        "repo": "octo/widgets",
        "number": number,
        "attempt": 1,
        "state": state,
        "started_at": NOW - timedelta(minutes=10),
        "changed_at": NOW - timedelta(minutes=4),
    }
    return RunSummary(**{**values, **fields})


def busy_overview() -> Overview:
    return Overview(
        taken_at=NOW,
        queues=QUEUES,
        workers=2,
        marks={"dispatch": NOW - timedelta(seconds=5), "sweep": NOW - timedelta(minutes=3)},
        repos=[
            RepoSummary(repo="octo/gadgets", live=0, paused_since=NOW, held_starts=1),
            RepoSummary(repo="octo/widgets", live=1),
        ],
        runs=[
            run(3, RunState.RUNNING, changed_at=NOW - timedelta(seconds=90)),
            run(
                2,
                RunState.PUSHED_GREEN,
                pr_number=12,
                pr_url="https://github.com/octo/widgets/pull/12",
                cost_usd=0.4213,
            ),
            run(
                1,
                RunState.NO_CHANGE,
                attempt=2,
                failure_class="no-change",
                reason="the agent changed nothing",
                escalated=True,
            ),
        ],
        halted=[TimedIssue(repo="octo/widgets", number=7, until=NOW + timedelta(hours=2))],
        waiting=[TimedIssue(repo="octo/widgets", number=8, until=NOW + timedelta(minutes=30))],
        held=[
            HeldIssue(repo="octo/gadgets", number=9),
            HeldIssue(repo="octo/widgets", number=5, held_by=4),
        ],
        chains=[
            ChainSummary(
                chain_id="octo/widgets#6",
                links=[
                    LinkSummary(number=4, status=LinkStatus.STOPPED),
                    LinkSummary(number=5, status=LinkStatus.NOT_STARTED),
                ],
                held_by=4,
            )
        ],
        budgets=[
            InstallationBudget(
                installation_id=1,
                limit=5000,
                remaining=4210,
                resets_at=NOW + timedelta(minutes=20),
                sweeps_paused=False,
            ),
            InstallationBudget(
                installation_id=2,
                limit=5000,
                remaining=312,
                resets_at=NOW + timedelta(minutes=5),
                sweeps_paused=True,
            ),
        ],
    )


def shown_text(page: str) -> str:
    """Return the words a reader sees in a piece of the page, tags left out."""
    return " ".join(re.sub(r"<[^>]+>", " ", page).split())


def section(page: str, key: str) -> str:
    start = page.index(f'<section aria-labelledby="{key}">')
    return page[start : page.index("</section>", start)]


# --- The HTML page --------------------------------------------------------------------------------


def test_page_shows_every_section_with_its_facts() -> None:
    page = render_status_page(busy_overview(), NOW)
    assert page.startswith("<!doctype html>") and page.rstrip().endswith("</html>")
    assert '<meta http-equiv="refresh" content="30">' in page
    head = page.split("<body>")[0]
    assert "<script" not in page and "src=" not in head and "href=" not in head  # nothing fetched
    assert "as of 2026-12-01 07:00:00 UTC" in page
    cards = shown_text(page[: page.index("<section")])
    assert "workers 2 baton-events 1 queued baton-agents 3 queued" in cards
    assert "last dispatch 5.0s ago last sweep 3m 00s ago" in cards

    budgets = shown_text(section(page, "budgets"))
    assert "1 4,210 of 5,000 2026-12-01 07:20 UTC" in budgets
    assert "2 312 of 5,000 2026-12-01 07:05 UTC sweeps paused" in budgets

    repos = section(page, "repositories")
    assert "octo/gadgets" in repos and "paused" in repos
    assert "since 2026-12-01 07:00 UTC: 1 held, 0 settled" in repos
    assert "admitting" in repos

    live = section(page, "live")
    assert "octo/widgets#3" in live and ">running<" in live
    assert "1m 30s" in live and "10m 00s" in live  # in its phase, and since its claim
    assert "octo/widgets#2" not in live

    timed = section(page, "halted")
    assert "octo/widgets#7" in timed and "resumes 2026-12-01 09:00 UTC (in 2h 00m)" in timed
    assert "octo/widgets#8" in timed and "(in 30m 00s)" in timed

    held = section(page, "held")
    assert "octo/gadgets#9" in held and "its repository is paused" in held
    assert "octo/widgets#5" in held and "chain link #4 stopped" in held
    assert "octo/widgets#1" in held and "after attempt 2" in held
    assert "no-change: the agent changed nothing" in held

    completions = section(page, "completions")
    assert "octo/widgets#2" in completions and ">pushed-green<" in completions
    assert '<a href="https://github.com/octo/widgets/pull/12">#12</a>' in completions
    assert "$0.42" in completions and "6m 00s" in completions
    assert "octo/widgets#3" not in completions

    chains = section(page, "chains")
    assert "octo/widgets#6" in chains and "#4 stopped" in chains and "#5 not started" in chains
    assert "held by #4" in chains


def test_page_escapes_what_agents_and_issues_wrote() -> None:
    hostile = '<script>alert("owned")</script>'
    overview = Overview(
        taken_at=NOW,
        queues=QUEUES,
        workers=0,
        marks={"<b>sweep</b>": NOW},
        repos=[RepoSummary(repo="octo/widgets", live=0)],
        runs=[
            run(
                1,
                RunState.FAILED,
                failure_class='agent-error"><img src=x onerror=alert(1)>',
                reason=hostile,
                title='<iframe src="https://evil.example">',
                pr_number=4,
                pr_url="javascript:alert(1)",
                escalated=True,
            )
        ],
    )
    page = render_status_page(overview, NOW)
    assert "<script>" not in page and "<img" not in page and "<b>" not in page
    assert "&lt;script&gt;alert(&quot;owned&quot;)&lt;/script&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page
    assert "<iframe" not in page and "&lt;iframe src=&quot;https://evil.example&quot;&gt;" in page
    assert "javascript:" not in page  # not a link, and not shown as one
    assert "#4" in section(page, "completions")


def test_an_empty_page_says_so_in_each_section() -> None:
    overview = Overview(taken_at=NOW, queues=QUEUES, workers=0, marks={})
    page = render_status_page(overview, NOW)
    for key, empty in [
        ("repositories", "No repository has runs yet."),
        ("live", "No run is in progress."),
        ("halted", "No issue is halted or waiting to start."),
        ("held", "Nothing is held or escalated."),
        ("completions", "No run has pushed or ended yet."),
        ("chains", "No chain is queued."),
    ]:
        assert empty in section(page, key)
    assert "<table>" not in page


def test_a_deployment_warning_stands_above_everything() -> None:
    overview = Overview(
        taken_at=NOW, queues=QUEUES, workers=0, marks={}, warnings=[SANDBOX_OFF_WARNING]
    )
    page = render_status_page(overview, NOW)
    alert = '<p class="alert warn" role="alert">Agents run without a sandbox'
    assert alert in page and page.index(alert) < page.index('<div class="cards">')
    assert "(BATON_AGENT_SANDBOX=off)" in page
    assert 'role="alert"' not in render_status_page(busy_overview(), NOW)


def test_the_warnings_come_from_the_process_settings(settings: Settings) -> None:
    assert deployment_warnings(settings) == []  # the sandbox is on by default
    off = settings.model_copy(update={"agent_sandbox": "off"})
    [warning] = deployment_warnings(off)
    assert warning.startswith("Agents run without a sandbox (BATON_AGENT_SANDBOX=off)")
    assert "loopback services such as Redis" in warning


# --- The terminal ---------------------------------------------------------------------------------


def test_text_lists_the_same_facts_line_by_line() -> None:
    lines = render_status_text(busy_overview(), NOW).splitlines()
    assert lines[:4] == [
        "queues: baton-events 1, baton-agents 3",
        "workers: 2",
        "last dispatch: 2026-12-01 06:59 UTC (5.0s ago)",
        "last sweep: 2026-12-01 06:57 UTC (3m 00s ago)",
    ]
    for line in [
        "octo/gadgets: paused since 2026-12-01 07:00 UTC — nothing admitted (1 held), 0 settled",
        "halted until 2026-12-01 09:00 UTC: octo/widgets#7",
        "waiting until 2026-12-01 07:30 UTC: octo/widgets#8",
        "held, its repository is paused: octo/gadgets#9",
        "held, chain link #4 stopped: octo/widgets#5",
        "escalated after attempt 2: octo/widgets#1",
        "chain octo/widgets#6: #4 stopped, #5 not started",
        "octo/widgets: 1 live, recent runs:",
        "  #3 attempt 1   running           10m 00s so far",
        "  #2 attempt 1   pushed-green       6m 00s $0.42 https://github.com/octo/widgets/pull/12",
        "  #1 attempt 2   no-change          6m 00s (no-change: the agent changed nothing)",
    ]:
        assert line in lines
    assert not any(line.startswith("octo/gadgets: 0 live") for line in lines)  # no runs there


def test_text_warns_first() -> None:
    overview = busy_overview().model_copy(update={"warnings": [SANDBOX_OFF_WARNING]})
    lines = render_status_text(overview, NOW).splitlines()
    assert lines[0] == f"warning: {SANDBOX_OFF_WARNING}"
    assert lines[1] == "queues: baton-events 1, baton-agents 3"


def test_the_last_redelivery_pass_says_what_was_lost_and_asked_for_again() -> None:
    lost = RedeliveryPass(
        at=NOW - timedelta(minutes=3), listed=40, failed=3, asked=2, refused=0, left=1
    )
    overview = Overview(taken_at=NOW, queues=QUEUES, workers=1, marks={}, redelivery=lost)
    lines = render_status_text(overview, NOW).splitlines()
    assert "lost webhook deliveries: 3; 2 asked again, 0 refused, 1 left (3m 00s ago)" in lines
    page = render_status_page(overview, NOW)
    assert "lost deliveries" in page and "2 asked again, 0 refused, 1 left" in page


def test_text_says_when_there_are_no_runs() -> None:
    text = render_status_text(Overview(taken_at=NOW, queues=QUEUES, workers=0, marks={}), NOW)
    assert text.splitlines()[-1] == "no runs yet"


def test_a_run_names_the_hosts_its_sandbox_refused() -> None:
    started = NOW - timedelta(minutes=10)
    agent = AgentResult(
        agent="claude",
        status="success",
        stop_reason="completed",
        started_at=started,
        ended_at=NOW - timedelta(minutes=4),
        transcript_path=Path("/var/lib/baton/runs/transcript.log"),
        stderr_path=Path("/var/lib/baton/runs/stderr.log"),
        refused_hosts=["example.com:443", "<b>.example:80"],
    )
    issue = IssueRef(installation_id=1, repo="octo/widgets", number=4)
    record = Run.claimed(issue, 1, "baton/issue-4", started).moved(
        RunState.PUSHED_GREEN, NOW - timedelta(minutes=4)
    )
    summary = RunSummary.of(record.model_copy(update={"agent_result": agent}))
    overview = Overview(
        taken_at=NOW,
        queues=QUEUES,
        workers=1,
        marks={},
        repos=[RepoSummary(repo="octo/widgets", live=0)],
        runs=[summary],
    )
    said = "The sandbox refused connections to: example.com:443, <b>.example:80."
    completions = section(render_status_page(overview, NOW), "completions")
    assert said in html.unescape(shown_text(completions))
    assert "<b>" not in completions  # what the agent asked for is escaped
    assert f"  #4 attempt 1   pushed-green       6m 00s {said}" in (
        render_status_text(overview, NOW).splitlines()
    )


# --- The overview, read from Redis ----------------------------------------------------------------


def recorded(store: Store, number: int, state: RunState, minutes_ago: int, **fields: Any) -> Run:
    """Record a run of octo/widgets#number claimed minutes_ago, in state since a moment ago."""
    issue = IssueRef(installation_id=1, repo="octo/widgets", number=number)
    claim = store.claim(issue) or pytest.fail(f"{issue} could not be claimed")
    attempt = store.next_attempt(claim)
    started = NOW - timedelta(minutes=minutes_ago)
    run = Run.claimed(issue, attempt, f"baton/issue-{number}", started)
    if state is not RunState.CLAIMED:
        run = run.moved(state, NOW - timedelta(seconds=1))
    run = run.model_copy(update=fields)
    store.save_run(run, claim)
    store.release(claim)
    return run


def test_gather_reads_runs_pauses_holds_windows_and_chains(
    store: Store, dispatch: Dispatcher
) -> None:
    recorded(store, 1, RunState.RUNNING, minutes_ago=30)
    recorded(store, 2, RunState.PUSHED_GREEN, 2, pr_number=9, pr_url="https://x.test/pull/9")
    recorded(store, 4, RunState.KILLED, minutes_ago=1, escalated=True)
    store.save_chain(
        Chain(installation_id=1, repo="octo/widgets", head=5, tracking=False, links=(4, 5))
    )
    store.pause("octo/gadgets", NOW)
    store.hold(IssueRef(installation_id=1, repo="octo/gadgets", number=3), "fresh", 0)
    store.record_halt(IssueRef(installation_id=1, repo="octo/widgets", number=7), NOW)
    store.mark("sweep", NOW)

    store.record_rate_limit(
        "1@https://api.github.com",
        7,
        RateBudget(limit=5000, remaining=900, reset_at=NOW.timestamp() + 60, seen_at=0),
    )

    overview = gather_overview(
        store, dispatch, NOW, limit=1, app_identity="1@https://api.github.com"
    )

    assert overview.budgets == [
        InstallationBudget(
            installation_id=7,
            limit=5000,
            remaining=900,
            resets_at=NOW + timedelta(seconds=60),
            sweeps_paused=True,
        )
    ]

    assert overview.taken_at == NOW and overview.marks == {"sweep": NOW}
    assert overview.queues == {"baton-events": 0, "baton-agents": 0}
    # Within a limit of one recent run, the older live run is listed all the same.
    assert [(r.number, r.state) for r in overview.runs] == [
        (4, RunState.KILLED),
        (1, RunState.RUNNING),
    ]
    assert [(r.repo, r.live, r.paused_since, r.held_starts) for r in overview.repos] == [
        ("octo/gadgets", 0, NOW, 1),
        ("octo/widgets", 1, None, 0),
    ]
    assert [h.issue for h in overview.halted] == ["octo/widgets#7"]
    assert [(h.issue, h.held_by) for h in overview.held] == [
        ("octo/gadgets#3", None),
        ("octo/widgets#5", 4),
    ]
    [chain] = overview.chains
    assert [(link.number, link.status) for link in chain.links] == [
        (4, LinkStatus.STOPPED),
        (5, LinkStatus.NOT_STARTED),
    ]
    assert [r.issue for r in overview.escalated] == ["octo/widgets#4"]
    assert [r.number for r in gather_overview(store, dispatch, NOW, 10).completions] == [4, 2]


# --- GET /status and the operator token ----------------------------------------------------------


async def client_for(
    aiohttp_client: Any, settings: Settings, store: Store, dispatch: Dispatcher
) -> TestClient:
    return await aiohttp_client(create_app(settings, store, dispatch, router))  # type: ignore[no-any-return]


async def test_the_page_is_not_there_without_an_operator_token(
    aiohttp_client: Any, settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    unset = settings.model_copy(update={"operator_token": None})
    client = await client_for(aiohttp_client, unset, store, dispatch)
    for path in ("/status", f"/status?token={OPERATOR_TOKEN}"):
        response = await client.get(path, allow_redirects=False)
        assert response.status == 404
        assert "BATON_OPERATOR_TOKEN" in await response.text()


@pytest.mark.parametrize(
    ("path", "headers"),
    [
        ("/status", {}),
        ("/status?token=guess", {}),
        ("/status", {"Authorization": "Bearer guess"}),
        ("/status", {"Cookie": f"{OPERATOR_COOKIE}=guess"}),
        ("/status", {"Authorization": f"Basic {OPERATOR_TOKEN}"}),
    ],
)
async def test_a_wrong_or_missing_token_is_refused_with_how_to_pass_it(
    aiohttp_client: Any,
    operator_settings: Settings,
    store: Store,
    dispatch: Dispatcher,
    path: str,
    headers: dict[str, str],
) -> None:
    client = await client_for(aiohttp_client, operator_settings, store, dispatch)
    response = await client.get(path, headers=headers, allow_redirects=False)
    assert response.status == 401
    assert response.headers["WWW-Authenticate"].startswith("Bearer")
    text = await response.text()
    assert "/status?token=<token>" in text and "Authorization: Bearer <token>" in text
    assert "Set-Cookie" not in response.headers and OPERATOR_TOKEN not in text


async def test_a_token_in_the_address_becomes_a_cookie_and_leaves_the_address(
    aiohttp_client: Any, operator_settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    client = await client_for(aiohttp_client, operator_settings, store, dispatch)
    response = await client.get(f"/status?token={OPERATOR_TOKEN}", allow_redirects=False)
    assert (response.status, response.headers["Location"]) == (303, "/status")
    cookie = response.cookies[OPERATOR_COOKIE]
    assert OPERATOR_TOKEN not in response.headers["Set-Cookie"]  # a signed session instead
    assert cookie["httponly"] and cookie["samesite"] == "Strict" and cookie["path"] == "/"
    assert int(cookie["max-age"]) == 12 * 3600
    assert not cookie["secure"]  # plain HTTP to 127.0.0.1 here

    page = await client.get("/status")  # the client sends the cookie back
    assert page.status == 200 and page.content_type == "text/html"
    text = await page.text()
    assert "<h1>Baton status</h1>" in text and OPERATOR_TOKEN not in text
    assert page.headers["Cache-Control"] == "no-store"
    assert "default-src 'none'" in page.headers["Content-Security-Policy"]


@pytest.mark.parametrize(
    ("headers", "secure"),
    [
        ({}, False),  # the test client's Host: 127.0.0.1:<port>
        ({"Host": "localhost:8000"}, False),
        ({"Host": "[::1]:8000"}, False),
        ({"Host": "127.0.0.1", "X-Forwarded-Proto": "https"}, True),
        ({"Host": "baton.example.com"}, True),  # plain HTTP, but not this machine
        ({"Host": "baton.example.com", "X-Forwarded-Proto": "https"}, True),
        ({"Host": "10.0.0.5:8000"}, True),
        ({"Host": "localhost.example.com"}, True),
        # A proxy on this machine: it connects from loopback, and may pass a loopback Host.
        ({"Host": "127.0.0.1:8000", "X-Forwarded-For": "198.51.100.1"}, True),
        ({"Host": "localhost", "Forwarded": "for=198.51.100.1;proto=http"}, True),
        ({"Host": "127.0.0.1", "X-Forwarded-Host": "baton.example.com"}, True),
        ({"Host": "127.0.0.1", "X-Forwarded-Proto": "http"}, True),
        ({"Host": "[::1]:8000", "X-Real-IP": "198.51.100.1"}, True),
    ],
)
async def test_the_cookie_is_secure_except_on_a_loopback_host(
    aiohttp_client: Any,
    operator_settings: Settings,
    store: Store,
    dispatch: Dispatcher,
    headers: dict[str, str],
    secure: bool,
) -> None:
    client = await client_for(aiohttp_client, operator_settings, store, dispatch)
    response = await client.get(
        f"/status?token={OPERATOR_TOKEN}", headers=headers, allow_redirects=False
    )
    assert response.status == 303
    assert bool(response.cookies[OPERATOR_COOKIE]["secure"]) is secure


def seen_from(peer: str) -> Middleware:
    """Have the app see every request as coming from peer (a test client is on loopback)."""

    @web.middleware
    async def from_peer(request: web.Request, handler: Handler) -> web.StreamResponse:
        return await handler(request.clone(remote=peer))

    return from_peer


@pytest.mark.parametrize(
    ("peer", "host", "secure"),
    [
        ("127.0.0.1", "127.0.0.1:8000", False),
        ("::1", "localhost:8000", False),
        ("203.0.113.9", "127.0.0.1:8000", True),  # a loopback Host says nothing of the peer
        ("10.0.0.5", "localhost", True),
        ("2001:db8::1", "[::1]:8000", True),
    ],
)
async def test_the_cookie_is_secure_unless_asked_for_from_this_machine(
    aiohttp_client: Any,
    operator_settings: Settings,
    store: Store,
    dispatch: Dispatcher,
    peer: str,
    host: str,
    secure: bool,
) -> None:
    app = create_app(operator_settings, store, dispatch, router)
    app.middlewares.append(seen_from(peer))
    client = await aiohttp_client(app)
    response = await client.get(
        f"/status?token={OPERATOR_TOKEN}", headers={"Host": host}, allow_redirects=False
    )
    assert response.status == 303
    assert bool(response.cookies[OPERATOR_COOKIE]["secure"]) is secure


def session_cookie(response: ClientResponse) -> str:
    return response.cookies[OPERATOR_COOKIE].value


async def test_the_cookie_opens_the_page_only_as_signed_until_it_expires(
    aiohttp_client: Any,
    operator_settings: Settings,
    store: Store,
    dispatch: Dispatcher,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    client = await client_for(aiohttp_client, operator_settings, store, dispatch)
    session = session_cookie(
        await client.get(f"/status?token={OPERATOR_TOKEN}", allow_redirects=False)
    )
    client.session.cookie_jar.clear()

    async def page_with(cookie: str) -> int:
        response = await client.get("/status", headers={"Cookie": f"{OPERATOR_COOKIE}={cookie}"})
        return response.status

    assert await page_with(session) == 200
    assert await page_with(OPERATOR_TOKEN) == 401, "the token itself is not a session"
    expiry, _, mac = session.partition(".")
    assert await page_with(f"{int(expiry) + 3600}.{mac}") == 401, "a longer session is forged"
    assert await page_with(f"{expiry}.{'0' * len(mac)}") == 401
    metrics = await client.get("/metrics", headers={"Cookie": f"{OPERATOR_COOKIE}={session}"})
    assert metrics.status == 200

    later = time.time() + 12 * 3600 + 1
    monkeypatch.setattr(time, "time", lambda: later)
    assert await page_with(session) == 401, "an expired session"

    other = operator_settings.model_copy(
        update={"operator_token": SecretStr(OPERATOR_TOKEN + "-rotated")}
    )
    rotated = await client_for(aiohttp_client, other, store, dispatch)
    response = await rotated.get("/status", headers={"Cookie": f"{OPERATOR_COOKIE}={session}"})
    assert response.status == 401, "a new token ends the old token's sessions"


async def test_wrong_tokens_from_one_address_are_slowed_down(
    aiohttp_client: Any, operator_settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    client = await client_for(aiohttp_client, operator_settings, store, dispatch)
    for _ in range(5):
        response = await client.get("/status?token=guess", allow_redirects=False)
        assert response.status == 401
    for path, headers in (
        ("/status?token=guess", {}),
        (f"/status?token={OPERATOR_TOKEN}", {}),  # even the right one, for a while
        ("/metrics", {"Authorization": f"Bearer {OPERATOR_TOKEN}"}),
    ):
        response = await client.get(path, headers=headers, allow_redirects=False)
        assert response.status == 429
        assert 1 <= int(response.headers["Retry-After"]) <= 60
        assert OPERATOR_TOKEN not in await response.text()


async def test_behind_a_proxy_each_client_it_saw_is_slowed_down_on_its_own(
    aiohttp_client: Any, operator_settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    client = await client_for(aiohttp_client, operator_settings, store, dispatch)
    guesser = {"X-Forwarded-For": "198.51.100.1"}
    for _ in range(5):
        assert (await client.get("/status?token=guess", headers=guesser)).status == 401
    assert (await client.get("/status?token=guess", headers=guesser)).status == 429
    operator = {"X-Forwarded-For": "192.0.2.7", "Authorization": f"Bearer {OPERATOR_TOKEN}"}
    assert (await client.get("/status", headers=operator)).status == 200


async def test_behind_a_configured_proxy_its_own_client_header_names_each_client(
    aiohttp_client: Any, operator_settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    """Fly's proxy names the client in Fly-Client-IP; an X-Forwarded-For picks nothing."""
    behind_fly = operator_settings.model_copy(update={"trusted_proxy_header": "Fly-Client-IP"})
    client = await client_for(aiohttp_client, behind_fly, store, dispatch)
    guesser = {"Fly-Client-IP": "198.51.100.1", "X-Forwarded-For": "203.0.113.9"}
    for _ in range(5):
        assert (await client.get("/status?token=guess", headers=guesser)).status == 401
    dodging = {"Fly-Client-IP": "198.51.100.1", "X-Forwarded-For": "203.0.113.10"}
    assert (await client.get("/status?token=guess", headers=dodging)).status == 429
    operator = {"Fly-Client-IP": "192.0.2.7", "Authorization": f"Bearer {OPERATOR_TOKEN}"}
    assert (await client.get("/status", headers=operator)).status == 200


async def test_asking_without_a_token_is_never_slowed_down(
    aiohttp_client: Any, operator_settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    client = await client_for(aiohttp_client, operator_settings, store, dispatch)
    for _ in range(20):
        assert (await client.get("/status")).status == 401
    bearer = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    assert (await client.get("/status", headers=bearer)).status == 200


def test_an_operator_token_short_enough_to_guess_is_refused(
    operator_settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    short = operator_settings.model_copy(update={"operator_token": SecretStr("x" * 31)})
    with pytest.raises(SettingsError, match="BATON_OPERATOR_TOKEN is 31 characters: use 32"):
        create_app(short, store, dispatch, router)


async def test_a_bearer_token_opens_the_page_with_what_redis_holds(
    aiohttp_client: Any, operator_settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    recorded(store, 3, RunState.RUNNING, minutes_ago=5)
    client = await client_for(aiohttp_client, operator_settings, store, dispatch)
    response = await client.get("/status", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
    assert response.status == 200
    live = section(await response.text(), "live")
    assert "octo/widgets#3" in live and ">running<" in live


async def test_the_page_warns_when_this_deployment_runs_agents_unsandboxed(
    aiohttp_client: Any, operator_settings: Settings, store: Store, dispatch: Dispatcher
) -> None:
    bearer = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    sandboxed = await client_for(aiohttp_client, operator_settings, store, dispatch)
    assert "without a sandbox" not in await (await sandboxed.get("/status", headers=bearer)).text()
    off = operator_settings.model_copy(update={"agent_sandbox": "off"})
    client = await client_for(aiohttp_client, off, store, dispatch)
    response = await client.get("/status", headers=bearer)
    assert response.status == 200
    text = shown_text(await response.text())
    assert "Agents run without a sandbox (BATON_AGENT_SANDBOX=off)" in text
