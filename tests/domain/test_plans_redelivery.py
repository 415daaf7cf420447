"""Which failed webhook deliveries are asked for again; pure, no I/O.

GitHub's guide: "Automatically redelivering failed deliveries for a GitHub App webhook"
(https://docs.github.com/en/webhooks/using-webhooks/automatically-redelivering-failed-deliveries-for-a-github-app-webhook):
find each event none of whose deliveries succeeded, and redeliver it.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.domain.plans.redelivery import HookDelivery, failed_events, to_redeliver, within

NOW = datetime(2026, 12, 6, 12, tzinfo=UTC)


def delivery(id: int, guid: str, status_code: int, *, minutes_ago: int = 5) -> HookDelivery:
    return HookDelivery(
        id=id,
        guid=guid,
        delivered_at=NOW - timedelta(minutes=minutes_ago),
        status_code=status_code,
        status="OK" if status_code == 200 else "Invalid HTTP Response: 503",
        redelivery=False,
    )


def test_an_event_is_lost_only_when_none_of_its_deliveries_succeeded() -> None:
    listed = [  # newest first, as GitHub lists them
        delivery(6, "c", 0),  # no answer came: Baton was down
        delivery(5, "b", 200),  # redelivered already, and accepted
        delivery(4, "b", 503),
        delivery(3, "a", 503),
        delivery(2, "a", 502),
        delivery(1, "ok", 202),
    ]
    assert [(d.id, d.guid) for d in failed_events(listed)] == [(2, "a"), (6, "c")]


def test_each_lost_event_is_asked_for_once_and_a_pass_asks_for_so_many() -> None:
    lost = [delivery(n, f"g{n}", 503) for n in range(1, 6)]
    due, left = to_redeliver(lost, asked={"g2"}, per_pass=3)
    assert [d.guid for d in due] == ["g1", "g3", "g4"] and left == 1
    assert to_redeliver(lost, asked={d.guid for d in lost}, per_pass=3) == ([], 0)


def test_a_pass_looks_only_within_its_window() -> None:
    window = timedelta(hours=6)
    assert within(delivery(1, "a", 503, minutes_ago=359), NOW, window)
    assert not within(delivery(1, "a", 503, minutes_ago=361), NOW, window)


def test_github_s_listing_is_read_as_it_comes() -> None:
    item = {
        "id": 12,
        "guid": "0b989ba4-242f-11e5-81e1-c7b6966d2516",
        "delivered_at": "2019-06-03T00:57:16Z",
        "redelivery": False,
        "duration": 0.27,
        "status": "Invalid HTTP Response: 503",
        "status_code": 503,
        "event": "issues",
        "action": "labeled",
        "installation_id": 123,
        "repository_id": 456,
        "throttled_at": None,
    }
    read = HookDelivery.model_validate(item)
    assert (read.id, read.event, read.action, read.succeeded) == (12, "issues", "labeled", False)
