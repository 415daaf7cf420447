"""Read when a provider's usage window reopens from what an agent CLI printed.

Pure functions: the observation time and the agent process's zone come in, an
aware UTC instant (or None) goes out. A reset is never placed before the moment
it was observed, and a zone that cannot be resolved is never guessed.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# A reset shown with minute precision that passed moments ago means "now", not tomorrow.
GRACE = timedelta(minutes=30)

# Spelled out rather than taken from calendar, whose names follow the process locale.
_MONTH_NAMES = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_MONTHS = {name: n for n, name in enumerate(_MONTH_NAMES, 1)}
_WEEKDAYS = {name: n for n, name in enumerate(("mon", "tue", "wed", "thu", "fri", "sat", "sun"))}

# "7am", "12:50am", "Oct 31, 9am", "Sep 15 at 7pm", "Sep 15th, 2026 7:04 AM", "Mon 12:00am"
_WHEN = re.compile(
    r"^(?:(?P<mon>[a-z]{3})[a-z]*\.?\s+(?P<day>\d{1,2})(?:st|nd|rd|th)?,?"
    r"(?:\s+(?P<year>\d{4}),?)?\s+(?:at\s+)?"
    r"|(?P<wd>[a-z]{3})[a-z]*,?\s+(?:at\s+)?)?"
    r"(?P<h>\d{1,2})(?::(?P<m>\d{2}))?\s*(?P<ap>[ap])\.?m\.?$",
    re.IGNORECASE,
)
_CLAUDE_EPOCH = re.compile(r"limit reached\|(\d{9,13})", re.IGNORECASE)
_CLAUDE_CLOCK = re.compile(
    r"\bresets?\s+(?:at\s+)?(?P<when>[^()·∙•\n]+?)\s*(?:\((?P<zone>[^()\n]+)\))?\s*(?:[·∙•.]|$)",
    re.IGNORECASE | re.MULTILINE,
)
_CODEX_AT = re.compile(r"try again at\s+(?P<when>[^\n]+?)\s*\.?\s*$", re.IGNORECASE | re.MULTILINE)
_DURATION = re.compile(
    r"(?:(?P<h>\d+)h)?(?:(?P<m>\d+)m(?!s))?(?:(?P<s>\d+(?:\.\d+)?)s)?", re.IGNORECASE
)
_AFTER = re.compile(r"reset after\s+(?P<span>\S+)", re.IGNORECASE)


def zone_named(name: str | None, default: tzinfo | None = None) -> tzinfo | None:
    """Return the IANA zone a text or a TZ variable names, the default if none, None if unknown."""
    if not name or not name.strip():
        return default
    try:
        return ZoneInfo(name.strip().removeprefix(":"))
    except (ZoneInfoNotFoundError, ValueError):
        return None


def not_before(instant: datetime, observed_at: datetime) -> datetime | None:
    """Return the instant, moved up to observed_at if it just passed; None if it is stale."""
    if instant < observed_at - GRACE:
        return None
    return max(instant, observed_at).astimezone(UTC)


def from_epoch(value: object, observed_at: datetime) -> datetime | None:
    """Return the instant of a Unix timestamp in seconds (or milliseconds, if that large)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    if value <= 0:
        return None
    seconds = value / 1000 if value >= 1e12 else value
    try:
        return not_before(datetime.fromtimestamp(seconds, tz=UTC), observed_at)
    except (OverflowError, OSError, ValueError):
        return None


def resolve_wall_clock(when: str, zone: tzinfo | None, observed_at: datetime) -> datetime | None:
    """Return the next instant at a wall time shown in zone: '7am', 'Oct 31, 9am', 'Mon 2pm'."""
    match = _WHEN.match(when.strip())
    if match is None or zone is None:
        return None
    hour, minute = int(match["h"]), int(match["m"] or 0)
    if not 1 <= hour <= 12 or minute > 59:
        return None
    hour = hour % 12 + (12 if match["ap"].lower() == "p" else 0)
    today = observed_at.astimezone(zone).date()
    if match["mon"]:
        month = _MONTHS.get(match["mon"].lower())
        if month is None:
            return None
        years = [int(match["year"])] if match["year"] else [today.year, today.year + 1]
        dates = [(year, month, int(match["day"])) for year in years]
    else:
        weekday = _WEEKDAYS.get(match["wd"].lower()) if match["wd"] else None
        if match["wd"] and weekday is None:
            return None
        days = [today + timedelta(days=k) for k in range(8 if match["wd"] else 2)]
        dates = [
            (d.year, d.month, d.day) for d in days if weekday is None or d.weekday() == weekday
        ]
    for year, month, day in dates:
        try:
            local = datetime(year, month, day, hour, minute, tzinfo=zone)
        except ValueError:
            return None
        # Through a timestamp, so a wall time in a DST gap normalises instead of failing.
        if found := not_before(datetime.fromtimestamp(local.timestamp(), tz=UTC), observed_at):
            return found
    return None


def claude_reset(
    text: str, observed_at: datetime, child_tz: tzinfo | None
) -> tuple[datetime, str] | None:
    """Return when a Claude usage-limit text says the window reopens, and how it said so."""
    if epoch := _CLAUDE_EPOCH.search(text):
        found = from_epoch(int(epoch[1]), observed_at)
        return (found, "text-epoch") if found else None
    for clock in _CLAUDE_CLOCK.finditer(text):
        zone = zone_named(clock["zone"], child_tz)
        if found := resolve_wall_clock(clock["when"], zone, observed_at):
            return found, _wall_clock_source(clock["when"])
    return None


def codex_reset(
    text: str, observed_at: datetime, child_tz: tzinfo | None
) -> tuple[datetime, str] | None:
    """Return when a Codex usage-limit text says to try again (shown in codex's own zone)."""
    for at in _CODEX_AT.finditer(text):
        if found := resolve_wall_clock(at["when"], child_tz, observed_at):
            return found, _wall_clock_source(at["when"])
    return None


def duration(text: str) -> timedelta | None:
    """Return a span written like '1h49m8s', '45m' or '12.5s'."""
    match = _DURATION.fullmatch(text.strip().rstrip("."))
    if match is None or not any(match.groups()):
        return None
    return timedelta(
        hours=int(match["h"] or 0), minutes=int(match["m"] or 0), seconds=float(match["s"] or 0)
    )


def after_reset(text: str, observed_at: datetime) -> datetime | None:
    """Return the instant a 'quota will reset after 1h49m8s' text names, from observed_at."""
    match = _AFTER.search(text)
    span = duration(match["span"]) if match else None
    return (observed_at + span).astimezone(UTC) if span is not None else None


def _wall_clock_source(when: str) -> str:
    return "text-datetime" if re.search(r"\d{4}", when) else "text-clock"
