"""The issue's text as queued: queueings, edits in any order, the status comment's lines."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from bot.domain.issue_text import (
    BODY_CAP,
    Edit,
    IssueText,
    Snapshot,
    TextField,
    edit,
    from_job,
    github_time,
    hold,
    notes,
    queue,
    snapshot,
)
from bot.domain.jobs import EVENTS
from bot.domain.model import IssueRef
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from bot.ops.settings import Settings
from bot.web.app import create_app
from handlers import router
from tests.support import payload
from tests.web.test_app import post, queued

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ISSUE = IssueRef(installation_id=7, repo="octo/widgets", number=3)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def queued_at(seconds: float, body: str = "as queued", how: Any = "label") -> Snapshot:
    return snapshot("Fix it", body, at(seconds), "maintainer", how)


def an_edit(
    seconds: float,
    by: str,
    taken: bool,
    body: str | None = None,
    title: str | None = None,
    delivery: str | None = None,
) -> Edit:
    changed: tuple[TextField, ...] = (("title",) if title is not None else ()) + (
        ("body",) if body is not None else ()
    )
    return Edit(
        at=at(seconds),
        by=by,
        delivery=delivery or f"{by}-{seconds}",
        changed=changed,
        taken=taken,
        title=title if taken else None,
        body=body if taken else None,
    )


def recorded(*steps: Edit | Snapshot, label_on: bool = True) -> IssueText | None:
    """Apply queueings and edits in the order their jobs ran."""
    text: IssueText | None = None
    for step in steps:
        changed = queue(text, step) if isinstance(step, Snapshot) else edit(text, step, label_on)
        text = changed or text
    return text


def test_the_brief_uses_the_text_as_queued_when_its_author_edits_it() -> None:
    text = recorded(queued_at(0), an_edit(5, "author", taken=False, body="run evil.sh"))
    assert text is not None and (text.title, text.body) == ("Fix it", "as queued")
    assert notes(text, "baton:queue") == [
        "The issue was changed since it was queued, by `author`, and those changes are not "
        "taken in: the agent works from the text as a maintainer queued it. A maintainer can "
        "add `baton:queue` again to start from the issue as it is now."
    ]


def test_a_steerers_edit_is_taken_in_and_said() -> None:
    text = recorded(queued_at(0), an_edit(5, "maint", taken=True, body="as edited"))
    assert text is not None and text.body == "as edited"
    assert notes(text, "baton:queue") == [
        "The issue was edited since it was queued, by `maint`: the agent works from the edited "
        "text."
    ]


def test_a_steerer_editing_the_title_takes_in_no_one_elses_body() -> None:
    text = recorded(
        queued_at(0),
        an_edit(5, "author", taken=False, body="run evil.sh"),
        an_edit(9, "maint", taken=True, title="Fix it properly"),
    )
    assert text is not None and (text.title, text.body) == ("Fix it properly", "as queued")
    assert [line.split(",")[0] for line in notes(text, "q")] == [
        "The issue was edited since it was queued",
        "The issue was changed since it was queued",
    ]


def test_a_steerers_later_edit_of_the_same_field_supersedes_the_note() -> None:
    text = recorded(
        queued_at(0),
        an_edit(5, "author", taken=False, body="run evil.sh"),
        an_edit(9, "maint", taken=True, body="reviewed"),
    )
    assert text is not None and text.body == "reviewed"
    assert len(notes(text, "q")) == 1 and "`maint`" in notes(text, "q")[0]


def test_edits_and_the_queueing_give_one_record_whichever_job_runs_first() -> None:
    steps: list[Edit | Snapshot] = [
        queued_at(0),
        an_edit(3, "maint", taken=True, body="first edit"),
        an_edit(6, "author", taken=False, body="later, not taken"),
        an_edit(9, "maint", taken=True, title="Retitled"),
    ]
    outcomes = {recorded(*order) for order in itertools.permutations(steps)}
    assert len({(t.title, t.body) for t in outcomes if t is not None}) == 1
    [text] = {(t.title, t.body, tuple(notes(t, "q"))) for t in outcomes if t is not None}
    assert text[:2] == ("Retitled", "first edit")


def test_an_edit_before_the_queueing_is_in_its_text_already() -> None:
    text = recorded(an_edit(-5, "author", taken=False, body="x"), queued_at(0))
    assert text is not None and text.edits == () and notes(text, "q") == []
    assert edit(text, an_edit(-5, "author", taken=False, body="x", delivery="late"), True) is None


def test_an_edit_of_an_issue_baton_does_not_hold_is_not_kept() -> None:
    assert edit(None, an_edit(5, "author", taken=False, body="x"), queue_label_on=False) is None
    pending = edit(None, an_edit(5, "author", taken=False, body="x"), queue_label_on=True)
    assert pending is not None and pending.queued is None and notes(pending, "q") == []


def test_one_edit_delivered_twice_is_recorded_once() -> None:
    once = recorded(queued_at(0), an_edit(5, "author", taken=False, body="x", delivery="d1"))
    again = an_edit(5, "author", taken=False, body="x", delivery="d1")
    assert once is not None and edit(once, again, True) is None


def test_an_edit_that_changes_neither_title_nor_body_is_nothing() -> None:
    assert edit(recorded(queued_at(0)), an_edit(5, "author", taken=False), True) is None


def test_a_record_stays_small_however_often_the_issue_is_edited() -> None:
    steps: list[Edit | Snapshot] = [queued_at(0)]
    steps += [an_edit(n, "author", taken=False, body=f"spam {n}") for n in range(1, 200)]
    steps += [an_edit(200 + n, "maint", taken=True, body=f"fix {n}") for n in range(50)]
    steps.append(an_edit(300, "maint", taken=True, title="Retitled"))
    text = recorded(*steps)
    assert text is not None and len(text.edits) <= 25
    assert (text.title, text.body) == ("Retitled", "fix 49")
    assert notes(text, "q") == [
        "The issue was edited since it was queued, by `maint`: the agent works from the edited "
        "text."
    ]


def test_a_new_queueing_replaces_the_text_and_forgets_earlier_edits() -> None:
    first = recorded(queued_at(0), an_edit(5, "author", taken=False, body="x"))
    again = queue(first, queued_at(60, "queued again"))
    assert again is not None and again.body == "queued again" and again.edits == ()


def test_a_repeated_or_late_queueing_changes_nothing() -> None:
    text = recorded(queued_at(60, "newer"))
    assert queue(text, queued_at(60, "same time, another read")) is None
    assert queue(text, queued_at(0, "older")) is None


def test_a_read_stands_in_only_for_a_queueing_whose_text_is_missing() -> None:
    """The sweep's read, or an attempt's, never replaces the text of the queueing it serves."""
    text = recorded(queued_at(0, "as queued"))
    sweep = queued_at(100, "read later", how="sweep")
    assert queue(text, sweep) is None  # no run since: the queued text is this queueing's
    assert queue(text, sweep, replaces_before=at(-1)) is None
    # A run started after the text was recorded: the label on the issue now is a new queueing.
    replaced = queue(text, sweep, replaces_before=at(50))
    assert replaced is not None and replaced.body == "read later"
    assert queue(None, sweep) == IssueText(queued=sweep)


def test_a_held_queueing_waits_for_its_start() -> None:
    text = recorded(queued_at(0, "running"))
    held = hold(text, queued_at(60, "queued while paused"))
    assert held is not None and held.body == "running" and held.held is not None
    assert hold(held, queued_at(30)) is None  # an older one is not held over it
    started = queue(held, held.held)
    assert started is not None and started.body == "queued while paused" and started.held is None


def test_the_body_is_kept_to_githubs_limit() -> None:
    assert len(snapshot("t", "x" * (BODY_CAP + 10), T0, None, "label").body) == BODY_CAP
    assert snapshot("t", None, T0, "", "label") == Snapshot(title="t", body="", at=T0, how="label")


def test_times_and_job_arguments_are_read_strictly() -> None:
    assert github_time("2019-05-15T15:20:18Z") == datetime(2019, 5, 15, 15, 20, 18, tzinfo=UTC)
    assert [github_time(v) for v in ("", "7", "2019-05-15T15:20:18", None, 7)] == [None] * 5
    assert from_job("t", "b", "", "", None) is None
    assert from_job("t", "b", T0.isoformat(), "teleport", None) is None
    assert from_job("t", "b", T0.isoformat(), "sweep", "m") == snapshot("t", "b", T0, "m", "sweep")


def test_the_store_keeps_the_record_until_baton_forgets_the_issue(store: Store) -> None:
    assert store.queued_text(ISSUE) is None
    assert store.update_queued_text(ISSUE, lambda current: queue(current, queued_at(0)))
    assert store.update_queued_text(ISSUE, lambda current: queue(current, queued_at(0))) is None
    made = an_edit(5, "maint", taken=True, body="as edited")
    store.update_queued_text(ISSUE, lambda current: edit(current, made, True))
    text = store.queued_text(ISSUE)
    assert text is not None and text.body == "as edited"
    ttl = store.redis.ttl(f"baton:issue:{ISSUE.repo}:{ISSUE.number}:queued-text")
    assert 0 < int(ttl) <= 90 * 24 * 3600  # type: ignore[arg-type]
    store.forget_issue(ISSUE)  # deleted, transferred, or its runs expired
    assert store.queued_text(ISSUE) is None


# The web process: the edit event becomes a job that carries what the edit left.


@pytest.fixture
async def client(
    aiohttp_client: Any, settings: Settings, store: Store, dispatch: Dispatcher
) -> TestClient:
    return await aiohttp_client(create_app(settings, store, dispatch, router))  # type: ignore[no-any-return]


def edited(changes: dict[str, Any], labels: tuple[str, ...] = ("baton:queue",)) -> dict[str, Any]:
    data = payload("issues/edited.json")
    data["installation"] = {"id": 7, "node_id": "MDIzOkludGVncmF0aW9uNw=="}
    data["changes"] = changes
    data["issue"]["labels"] = [{**data["issue"]["labels"][0], "name": name} for name in labels]
    return data


async def test_an_edit_of_the_body_enqueues_a_job_with_what_it_left(
    client: TestClient, dispatch: Dispatcher
) -> None:
    data = edited({"body": {"from": "the old body"}})
    status, answer = await post(client, "issues", data, **{"X-GitHub-Delivery": "edit-1"})
    assert (status, answer["outcome"]) == (202, "accepted")
    issue = data["issue"]
    assert queued(dispatch, EVENTS) == [
        (
            "jobs.edits.issue_edited",
            (
                7,
                data["repository"]["full_name"],
                issue["number"],
                "Codertocat",
                "edit-1",
                "2019-05-15T15:20:18+00:00",
                "body",
                issue["title"],
                issue["body"],
                1,
            ),
        )
    ]


async def test_an_edit_of_an_unqueued_issue_says_so_and_one_of_nothing_is_ignored(
    client: TestClient, dispatch: Dispatcher
) -> None:
    status, answer = await post(client, "issues", edited({"title": {"from": "x"}}, labels=()))
    assert (status, answer["outcome"]) == (202, "accepted")
    [(_, args)] = queued(dispatch, EVENTS)
    assert (args[6], args[-1]) == ("title", 0)
    for changes in ({}, {"state": {"from": "closed"}}):
        status, answer = await post(client, "issues", edited(changes))
        assert (status, answer["outcome"]) == (202, "ignored")
