"""The spend ledger: what agents cost, in US dollars and turns, per UTC day and repository.

Each day is one hash (`keys.spend_day`), kept as long as the budgets' window needs it:
the deployment's totals in the fields `cost`, `turns` and `attempts`, each repository's
in `cost:{repo}`, `turns:{repo}` and `attempts:{repo}`. An attempt's spend is added
once (`keys.spent` marks it), on the day its agent ended, however often its recording
is tried. What bot/domain/spend.py judges and shows is read from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, date, datetime
from typing import cast

import redis

from bot.domain.model import Run
from bot.domain.spend import Budgets, DaySpend, Ledger, Spending, run_cost_cap, window
from bot.edges.store import keys
from bot.edges.store.base import LOCK_TTL_MS, StoreBase, text

SPEND_TTL_S = 40 * 24 * 3600
_MEASURES = ("cost", "turns", "attempts")

# Add an attempt's spend to its day, once. KEYS: the attempt's mark, the day's hash.
# ARGV: TTL (s), cost, turns, then the deployment's and the repository's field of each.
_RECORD = """
if not redis.call('SET', KEYS[1], '1', 'NX', 'EX', ARGV[1]) then return 0 end
for offset = 0, 1 do
  redis.call('HINCRBYFLOAT', KEYS[2], ARGV[4 + offset * 3], ARGV[2])
  redis.call('HINCRBY', KEYS[2], ARGV[5 + offset * 3], ARGV[3])
  redis.call('HINCRBY', KEYS[2], ARGV[6 + offset * 3], 1)
end
redis.call('EXPIRE', KEYS[2], ARGV[1])
return 1
"""


def _fields(repo: str | None) -> list[str]:
    """Return the fields of a day's hash holding the deployment's spend, or a repository's."""
    return list(_MEASURES) if repo is None else [f"{measure}:{repo}" for measure in _MEASURES]


def _day_spend(day: date, values: Sequence[object]) -> DaySpend | None:
    """Return a day's spend from its cost, turns and attempts fields; None when it has none."""
    cost, turns, attempts = values
    if attempts is None:
        return None
    return DaySpend(
        day=day,
        cost_usd=float(text(cost or 0)),
        turns=int(text(turns or 0)),
        attempts=int(text(attempts)),
    )


def _spent_days(
    days: Sequence[date], replies: Sequence[Sequence[object]], first: int = 0
) -> tuple[DaySpend, ...]:
    """Return the days with spend, from each day's fields read from first on."""
    found = [
        _day_spend(day, values[first : first + len(_MEASURES)])
        for day, values in zip(days, replies, strict=True)
    ]
    return tuple(day for day in found if day is not None)


class SpendStore(StoreBase):
    """The spend ledger, and each repository's own budget as its latest start read it."""

    def __init__(self, client: redis.Redis, lock_ttl_ms: int = LOCK_TTL_MS) -> None:
        super().__init__(client, lock_ttl_ms)
        self._record_spend = client.register_script(_RECORD)

    def record_spend(self, run: Run) -> bool:
        """Add what the run's agent spent to the day it ended on; False if added before, or none.

        Turns and cost an agent does not report count as none; the attempt counts all the same.
        One run counts for at most its issue's cost cap, or MAX_RUN_COST_USD without one:
        the cost is the agent's claim.
        """
        result = run.agent_result
        if result is None:
            return False
        day = result.ended_at.astimezone(UTC).date()
        cost = min(result.cost_usd or 0.0, run_cost_cap(run))
        measured: list[str | int] = [SPEND_TTL_S, repr(cost), result.turns or 0]
        added = self._record_spend(
            keys=[keys.spent(run.issue, run.attempt), keys.spend_day(day)],
            args=[*measured, *_fields(None), *_fields(run.issue.repo)],
        )
        return bool(added)

    def spending(self, repo: str, budgets: Budgets, now: datetime) -> Spending:
        """Return what a new start in repo is judged by at now: budgets and the window's spend.

        The repository's own budget is noted with it, for the status views.
        """
        days = window(now)
        fields = [*_fields(None), *_fields(repo)]
        with self.redis.pipeline(transaction=False) as pipe:
            if budgets.repository_usd is None:
                pipe.hdel(keys.SPEND_BUDGETS, repo)
            else:
                pipe.hset(keys.SPEND_BUDGETS, repo, repr(budgets.repository_usd))
            for day in days:
                pipe.hmget(keys.spend_day(day), fields)
            replies = cast(list[list[object]], pipe.execute()[1:])
        return Spending(
            budgets=budgets,
            deployment=_spent_days(days, replies),
            repository=_spent_days(days, replies, len(_MEASURES)),
        )

    def spend_ledger(self, now: datetime) -> Ledger:
        """Return the whole ledger over the window at now, and the repositories' own budgets."""
        days = window(now)
        with self.redis.pipeline(transaction=False) as pipe:
            for day in days:
                pipe.hgetall(keys.spend_day(day))
            pipe.hgetall(keys.SPEND_BUDGETS)
            *replies, budgets = cast(list[dict[object, object]], pipe.execute())
        held = [{text(name): value for name, value in reply.items()} for reply in replies]
        repos = sorted({name.split(":", 1)[1] for fields in held for name in fields if ":" in name})

        def of(repo: str | None) -> tuple[DaySpend, ...]:
            return _spent_days(
                days, [[fields.get(name) for name in _fields(repo)] for fields in held]
            )

        return Ledger(
            deployment=of(None),
            repositories={repo: of(repo) for repo in repos},
            budgets={text(repo): float(text(budget)) for repo, budget in budgets.items()},
        )
