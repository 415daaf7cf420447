"""Every Redis key is built in bot/edges/store/keys.py, listed in its table, and unchanged."""

from __future__ import annotations

import ast
import inspect
import re
from datetime import date
from pathlib import Path

import pytest

from bot.domain.model import IssueRef, Labels
from bot.edges.store import keys

ROOT = Path(__file__).parents[2]
KEYS_MODULE = ROOT / "bot" / "edges" / "store" / "keys.py"
ISSUE = IssueRef(installation_id=3, repo="octo/widgets", number=12)
URL = "https://api.github.com/repos/octo/widgets"

# What deployments hold today: a key that changes orphans their data.
KEYS = {
    "INTAKE_STREAM": (keys.INTAKE_STREAM, "baton:intake"),
    "delivery": (keys.delivery("d-1"), "baton:delivery:d-1"),
    "redelivery_asked": (keys.redelivery_asked("g-1"), "baton:redelivery-asked:g-1"),
    "REDELIVERY_PASS": (keys.REDELIVERY_PASS, "baton:redelivery-pass"),
    "lock": (keys.lock(ISSUE), "baton:issue:octo/widgets:12:lock"),
    "fence": (keys.fence(ISSUE), "baton:issue:octo/widgets:12:fence"),
    "CLAIMS": (keys.CLAIMS, "baton:claims"),
    "attempts": (keys.attempts(ISSUE), "baton:issue:octo/widgets:12:attempts"),
    "run": (keys.run(ISSUE, 2), "baton:issue:octo/widgets:12:run:2"),
    "recent_run": (keys.recent_run("octo/widgets:12:run:2"), "baton:issue:octo/widgets:12:run:2"),
    "RECENT_RUNS": (keys.RECENT_RUNS, "baton:runs:recent"),
    "head": (keys.head("octo/widgets", "a" * 40), f"baton:head:octo/widgets:{'a' * 40}"),
    "head_runs": (
        keys.head_runs("octo/widgets", "a" * 40),
        f"baton:head-runs:octo/widgets:{'a' * 40}",
    ),
    "pull": (keys.pull("octo/widgets", 5), "baton:pull:octo/widgets:5"),
    "IN_FLIGHT": (keys.IN_FLIGHT, "baton:in-flight"),
    "open_pulls": (keys.open_pulls("octo/widgets"), "baton:open-pulls:octo/widgets"),
    "checkpoint": (keys.checkpoint(ISSUE, 2), "baton:issue:octo/widgets:12:checkpoint:2"),
    "recovering": (keys.recovering(ISSUE, 2), "baton:issue:octo/widgets:12:recovering:2"),
    "owed_replays": (keys.owed_replays(ISSUE, 2), "baton:issue:octo/widgets:12:owed-replays:2"),
    "owed_pause": (keys.owed_pause(ISSUE, 2), "baton:issue:octo/widgets:12:owed-pause:2"),
    "salvage": (keys.salvage(ISSUE), "baton:issue:octo/widgets:12:salvage"),
    "transcript": (keys.transcript(ISSUE, 2), "baton:issue:octo/widgets:12:transcript:2"),
    "checked": (keys.checked("octo/widgets", "b" * 40), f"baton:checked:octo/widgets:{'b' * 40}"),
    "settling": (
        keys.settling("octo/widgets", "c" * 40),
        f"baton:settling:octo/widgets:{'c' * 40}",
    ),
    "desired_label": (keys.desired_label(ISSUE), "baton:issue:octo/widgets:12:desired-label"),
    "label_set": (keys.label_set(ISSUE), "baton:issue:octo/widgets:12:label-set"),
    "label_applied": (keys.label_applied(ISSUE), "baton:issue:octo/widgets:12:label-applied"),
    "label_removals": (keys.label_removals(ISSUE), "baton:issue:octo/widgets:12:label-removals"),
    "status_comment": (keys.status_comment(ISSUE), "baton:issue:octo/widgets:12:status-comment"),
    "pull_status_comment": (
        keys.pull_status_comment("octo/widgets", 5),
        "baton:pull:octo/widgets:5:status-comment",
    ),
    "comment_said": (keys.comment_said("octo/widgets", 100), "baton:comment:octo/widgets:100:said"),
    "check_run": (
        keys.check_run("octo/widgets", "f" * 40),
        f"baton:check-run:octo/widgets:{'f' * 40}",
    ),
    "draft_pull": (keys.draft_pull("octo/widgets", 5), "baton:pull:octo/widgets:5:draft"),
    "comment_lock": (keys.comment_lock(ISSUE), "baton:issue:octo/widgets:12:comment-lock"),
    "status_turns": (keys.status_turns(ISSUE), "baton:issue:octo/widgets:12:status-turns"),
    "escalated": (
        keys.escalated(ISSUE, 2, "budget"),
        "baton:issue:octo/widgets:12:escalated:2:budget",
    ),
    "withdrawn": (keys.withdrawn(ISSUE), "baton:issue:octo/widgets:12:withdrawn"),
    "stop": (keys.stop(ISSUE), "baton:issue:octo/widgets:12:stop"),
    "queued_text": (keys.queued_text(ISSUE), "baton:issue:octo/widgets:12:queued-text"),
    "queue_refused": (keys.queue_refused(ISSUE), "baton:issue:octo/widgets:12:queue-refused"),
    "config_error": (
        keys.config_error(ISSUE, "d" * 40),
        f"baton:issue:octo/widgets:12:config-error:{'d' * 40}",
    ),
    "command": (keys.command("octo/widgets", 7), "baton:command:octo/widgets:7"),
    "review": (keys.review("octo/widgets", 8), "baton:review:octo/widgets:8"),
    "rerun": (keys.rerun("octo/widgets", "d-2"), "baton:rerun:octo/widgets:d-2"),
    "chain": (keys.chain("octo/widgets#12"), "baton:chain:octo/widgets#12"),
    "chain_generation": (
        keys.chain_generation("octo/widgets#12"),
        "baton:chain-generation:octo/widgets#12",
    ),
    "CHAINS": (keys.CHAINS, "baton:chains"),
    "issue_chain": (keys.issue_chain(ISSUE), "baton:issue:octo/widgets:12:chain"),
    "chain_lock": (keys.chain_lock("octo/widgets#12"), "baton:chain-lock:octo/widgets#12"),
    "window": (keys.window("claude"), "baton:window:claude"),
    "window_claims": (keys.window_claims("claude"), "baton:window-claims:claude"),
    "slots": (keys.slots("octo/widgets"), "baton:slots:octo/widgets"),
    "WAITING": (keys.WAITING, "baton:waiting"),
    "HALTED": (keys.HALTED, "baton:halted"),
    "PAUSED": (keys.PAUSED, "baton:paused"),
    "held": (keys.held("octo/widgets"), "baton:held:octo/widgets"),
    "held_settled": (keys.held_settled("octo/widgets"), "baton:held-settled:octo/widgets"),
    "extra_continuations": (
        keys.extra_continuations(ISSUE),
        "baton:issue:octo/widgets:12:extra-continuations",
    ),
    "SWEEP_LEASE": (keys.SWEEP_LEASE, "baton:sweep-lease"),
    "BOT_LOGIN": (keys.BOT_LOGIN, "baton:app:bot-login"),
    "BOT_USER_ID": (keys.BOT_USER_ID, "baton:app:bot-user-id"),
    "app_id": (keys.app_id("gh"), "baton:app:gh:id"),
    "installation_token": (
        keys.installation_token("gh", 3),
        "baton:app:gh:installation:3:token",
    ),
    "rate_limits": (keys.rate_limits("gh"), "baton:app:gh:rate-limits"),
    "secondary_stop": (keys.secondary_stop("gh", 7), "baton:app:gh:installation:7:stop"),
    "secondary_limits": (keys.secondary_limits("gh", 7), "baton:app:gh:installation:7:limits"),
    "write_slots": (keys.write_slots("gh", 7), "baton:app:gh:installation:7:writes"),
    "conditional_read": (
        keys.conditional_read("installation-3", URL),
        "baton:etag:installation-3:2e1aaba365ffb4b610ce550c484272f5",
    ),
    "role": (keys.role("octo/widgets", "alice"), "baton:role:octo/widgets:alice"),
    "notice": (
        keys.notice("octo/widgets has no baton.yml"),
        "baton:notice:df2ee3976c5f32d35b1bb9e4b2a84b8f",
    ),
    "QUEUE_LABELS": (keys.QUEUE_LABELS, "baton:queue-labels"),
    "config_seen": (keys.config_seen("octo/widgets"), "baton:config-seen:octo/widgets"),
    "repo_seen": (keys.repo_seen("octo/widgets"), "baton:repo-seen:octo/widgets"),
    "repo_config": (
        keys.repo_config("octo/widgets", "e" * 40),
        f"baton:config:octo/widgets:{'e' * 40}",
    ),
    "LAST": (keys.LAST, "baton:last"),
    "UNCONTAINED": (keys.UNCONTAINED, "baton:workers:uncontained"),
    "metric": (keys.metric("baton_jobs_total"), "baton:metrics:baton_jobs_total"),
    "spend_day": (keys.spend_day(date(2026, 12, 1)), "baton:spend:2026-12-01"),
    "spent": (keys.spent(ISSUE, 2), "baton:issue:octo/widgets:12:spent:2"),
    "SPEND_BUDGETS": (keys.SPEND_BUDGETS, "baton:spend-budgets"),
}
MEMBERS = {
    "indexed_issue": (keys.indexed_issue(ISSUE), "3:octo/widgets:12"),
    "recent_member": (keys.recent_member(ISSUE, 2), "octo/widgets:12:run:2"),
}


def table(heading: str) -> dict[str, list[str]]:
    """Return the rows of the keys module's table headed `| Built by | heading |`, by name."""
    rows: dict[str, list[str]] = {}
    lines = iter((keys.__doc__ or "").splitlines())
    for line in lines:
        if line.startswith("|") and cells_of(line)[1] == heading:
            break
    next(lines)  # the rule under the headings
    for line in lines:
        if not line.startswith("|"):
            break
        cells = cells_of(line)
        for name in re.findall(r"`(\w+)`", cells[0]):
            assert name not in rows, f"{name} is listed twice"
            rows[name] = cells
    return rows


def cells_of(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


KEY_ROWS = table("Key")
MEMBER_ROWS = table("Member")


def public_names() -> set[str]:
    """Return what keys.py defines for others: its key functions and key constants."""
    return {
        name
        for name, value in vars(keys).items()
        if not name.startswith("_")
        and (
            isinstance(value, str)
            or (inspect.isfunction(value) and value.__module__ == keys.__name__)
        )
    }


def pattern(text: str) -> re.Pattern[str]:
    """Return the regex of a table's key pattern: each `{placeholder}` one key segment."""
    expanded = text.replace("{issue}", "baton:issue:{repo}:{number}")
    return re.compile(re.sub(r"\\\{[^}]*\\\}", "[^:]+", re.escape(expanded)))


def test_every_key_function_is_in_the_table_and_every_row_is_one() -> None:
    assert set(KEY_ROWS) | set(MEMBER_ROWS) == public_names()
    assert not set(KEY_ROWS) & set(MEMBER_ROWS)


def test_every_key_is_the_string_deployments_already_hold() -> None:
    assert set(KEYS) == set(KEY_ROWS), "every key has its expected string here"
    assert {name: built for name, (built, _) in KEYS.items()} == {
        name: expected for name, (_, expected) in KEYS.items()
    }


@pytest.mark.parametrize("name", sorted(KEYS))
def test_the_table_shows_each_key_as_it_is_built(name: str) -> None:
    built, _ = KEYS[name]
    assert pattern(KEY_ROWS[name][1]).fullmatch(built), (name, KEY_ROWS[name][1], built)


def test_index_members_read_back_as_what_they_name() -> None:
    assert set(MEMBERS) | {"issue_from_index"} == set(MEMBER_ROWS)
    for name, (built, expected) in MEMBERS.items():
        assert built == expected
        assert pattern(MEMBER_ROWS[name][1]).fullmatch(built)
    assert keys.issue_from_index(keys.indexed_issue(ISSUE)) == ISSUE
    assert keys.recent_run(keys.recent_member(ISSUE, 2)) == keys.run(ISSUE, 2)


def test_each_key_without_a_ttl_says_what_bounds_it() -> None:
    doc = keys.__doc__ or ""
    untimed = {name for name, cells in KEY_ROWS.items() if cells[4] == "none"}
    explained = {
        name
        for line in doc.splitlines()
        if line.startswith("- ")
        for name in re.findall(r"`(\w+)`", line.split(":", 1)[0])
    }
    assert untimed == explained
    stores = {path.stem for path in KEYS_MODULE.parent.glob("*.py")}
    assert {cells[3] for cells in KEY_ROWS.values()} <= stores


def key_literals(path: Path) -> list[tuple[int, str]]:
    """Return the string literals in a module that begin a Baton key (`baton:` and a segment).

    Baton's own GitHub labels (and the agent label's prefix) share the prefix and are not
    keys; `baton: ` with a space begins a message.
    """
    labels = Labels().states | {Labels().agent_prefix}
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and re.match(r"baton:(?!\s)", node.value)
        and node.value not in labels
    ]


def test_no_module_but_the_keys_module_spells_a_key() -> None:
    modules = [
        path
        for package in ("bot", "handlers", "jobs")
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != KEYS_MODULE
    ]
    assert len(modules) > 50
    spelled = {
        str(path.relative_to(ROOT)): literals
        for path in modules
        if (literals := key_literals(path))
    }
    assert spelled == {}


def test_the_key_check_sees_a_key_spelled_out(tmp_path: Path) -> None:
    module = tmp_path / "module.py"
    module.write_text(
        'LOCK = "baton:issue:octo/widgets:12:lock"\n'
        'KEY = f"baton:run:{1}"\n'
        'LABEL = "baton:queue"\n'
        'MESSAGE = "baton: a message"\n'
    )
    assert key_literals(module) == [(1, "baton:issue:octo/widgets:12:lock"), (2, "baton:run:")]
