"""Write pacing decisions: GitHub's "About secondary rate limits" and REST best practices."""

from __future__ import annotations

import pytest

from bot.domain.pacing import HOLD_WORKER_S, reschedules, secondary_stop_s


@pytest.mark.parametrize(
    ("retry_after", "consecutive", "expected"),
    [
        ("7", 1, 7.0),
        ("7200", 1, 7200.0),  # two hours: honoured in full, never cut
        (None, 1, 60.0),  # none given: GitHub's minute
        (None, 2, 120.0),
        (None, 4, 480.0),  # doubled for each answer in a row
        ("soon", 1, 60.0),  # malformed: as if none
        ("-5", 2, 120.0),
        ("inf", 1, 60.0),  # not a finite number of seconds: as if none
        ("nan", 3, 240.0),
        ("1e12", 1, 86400.0),  # no answer silences an installation for more than a day
    ],
)
def test_a_secondary_limit_stops_for_retry_after_or_a_growing_minute(
    retry_after: str | None, consecutive: int, expected: float
) -> None:
    assert secondary_stop_s(retry_after, consecutive) == expected


def test_only_a_long_wait_gives_the_worker_back() -> None:
    assert not reschedules(HOLD_WORKER_S)
    assert reschedules(HOLD_WORKER_S + 1)
