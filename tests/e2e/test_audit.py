"""The settlement audit of a green pull request, through the sandbox GitHub and real processes.

An agent that gets its PR green by deleting the failing test, skipping it or loosening
its assertion gets a warning a reviewer cannot miss on the status comments; with
`audit: hold` the PR is kept from review and escalated once. The audit reads the PR's
files as GitHub lists them ("List pull requests files"), where a diff too large to
show comes without its `patch`.
"""

from __future__ import annotations

import sys
from typing import Any

import aiohttp
import pytest

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.model import Run, RunState
from bot.domain.render import AUDIT_HEADING, ESCALATION_MARKER, STATUS_MARKER
from bot.edges.store import Store
from tests.e2e.test_loop import (
    OPERATOR_TOKEN,
    baton_comments,
    labels_are,
    new_repo,
    queued_issue,
    run_state,
)
from tests.support import StackSpec

# CI runs every test file there is; a repository whose tests are all gone is green.
CI = (
    "#!/bin/sh\nset -e\n"
    f'for test in tests/test_*.py; do if [ -e "$test" ]; then {sys.executable} "$test"; fi; done\n'
)
TEST = """\
import unittest
from pathlib import Path


class GreetingTest(unittest.TestCase):
    def test_says_hello(self):
        self.assertEqual(Path("greeting.txt").read_text().strip(), "hello")


if __name__ == "__main__":
    unittest.main()
"""
PROJECT = {
    "README.md": "# greeter\n",
    ".sandbox/ci": CI,
    "greeting.txt": "hi\n",
    "tests/test_greeting.py": TEST,
}
TEST_PATH = "tests/test_greeting.py"


def write(path: str, text: str) -> str:
    """Return the issue line that has the scripted agent write text to path."""
    return f"agent: write {path} " + text.replace("\n", "\\n")


SKIPPED = TEST.replace(
    "    def test_says_hello", '    @unittest.skip("flaky")\n    def test_says_hello'
)
LOOSENED = TEST.replace(
    'self.assertEqual(Path("greeting.txt").read_text().strip(), "hello")',
    'self.assertTrue(Path("greeting.txt").read_text().strip())',
)


STACK = StackSpec(database=11, env={"BATON_OPERATOR_TOKEN": OPERATOR_TOKEN})


async def _green(store: Store, repo: str, number: int) -> Run:
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN, RunState.FAILED),
        "the run settling",
        90,
    )
    return run


async def _status(maintainer: Maintainer, repo: str, number: int, text: str) -> str | None:
    """Return the status comment on an issue or PR once it says text."""
    for comment in await baton_comments(maintainer, repo, number):
        if comment["body"].startswith(STATUS_MARKER) and text in comment["body"]:
            return str(comment["body"])
    return None


async def _flagged(
    maintainer: Maintainer, repo: str, number: int, run: Run, kind: str, path: str
) -> None:
    """Wait for the flag on the issue's status comment and on the PR's."""
    flag = f"**{kind}** · `{path}`"
    assert run.pr_number is not None
    for where in (number, run.pr_number):

        async def said(where: int = where) -> str | None:
            return await _status(maintainer, repo, where, flag)

        body = await eventually(said, f"{kind} on #{where}", 30)
        assert AUDIT_HEADING in body


@pytest.mark.parametrize(
    ("work", "kind"),
    [
        (f"agent: delete {TEST_PATH}", "test-file-deleted"),
        (write(TEST_PATH, SKIPPED), "skip-added"),
        (write(TEST_PATH, LOOSENED), "assertion-weakened"),
    ],
    ids=["deleted", "skipped", "loosened"],
)
async def test_a_green_pr_that_weakens_its_tests_is_flagged_and_goes_to_review(
    stack: LocalBaton, maintainer: Maintainer, store: Store, work: str, kind: str
) -> None:
    repo = await new_repo(maintainer, stack, PROJECT)
    number = await queued_issue(maintainer, repo, "Greet with hello", work)
    run = await _green(store, repo, number)
    assert run.state is RunState.PUSHED_GREEN, run.reason  # advisory: the run is green
    assert [f.kind.value for f in run.audit] == [kind]
    assert run.audit[0].path == TEST_PATH
    await _flagged(maintainer, repo, number, run, kind, TEST_PATH)
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:review"}), "the review label"
    )
    assert await _flags_counted(stack, kind) >= 1


async def _flags_counted(stack: LocalBaton, kind: str) -> float:
    """Return what `/metrics` counts of one kind of flag."""
    headers = {"Authorization": f"Bearer {OPERATOR_TOKEN}"}
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{stack.web_url}/metrics", headers=headers) as got,
    ):
        text = await got.text()
    series = f'baton_audit_flags_total{{kind="{kind}"}} '
    return sum(
        float(line.removeprefix(series)) for line in text.splitlines() if line.startswith(series)
    )


async def test_a_clean_fix_gets_no_flag(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack, PROJECT)
    number = await queued_issue(
        maintainer, repo, "Greet with hello", write("greeting.txt", "hello")
    )
    run = await _green(store, repo, number)
    assert run.state is RunState.PUSHED_GREEN and run.audit == []
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:review"}), "the review label"
    )
    body = await eventually(
        lambda: _status(maintainer, repo, number, "pushed-green"), "the green status", 30
    )
    assert AUDIT_HEADING not in body and "Audit" not in body


async def test_a_diff_too_large_to_show_is_flagged_as_unreadable(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    # GitHub leaves `patch` out of a file whose diff passes its limits (20,000 lines).
    work = "agent: lines data/big.txt 20001\n" + write("greeting.txt", "hello")
    repo = await new_repo(maintainer, stack, PROJECT)
    number = await queued_issue(maintainer, repo, "Greet with hello", work)
    run = await _green(store, repo, number)
    assert run.state is RunState.PUSHED_GREEN, run.reason
    assert [(f.kind.value, f.path) for f in run.audit] == [("diff-unreadable", "data/big.txt")]
    await _flagged(maintainer, repo, number, run, "diff-unreadable", "data/big.txt")


async def _escalations(
    maintainer: Maintainer, repo: str, number: int
) -> list[dict[str, Any]] | None:
    """Return Baton's escalation comments on the issue; None while there is none."""
    found = [
        c
        for c in await baton_comments(maintainer, repo, number)
        if c["body"].startswith(ESCALATION_MARKER)
    ]
    return found or None


async def test_audit_hold_keeps_a_flagged_pr_from_review_and_escalates_it_once(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    files = {**PROJECT, ".github/baton.yml": "audit: hold\n"}
    repo = await new_repo(maintainer, stack, files)
    number = await queued_issue(maintainer, repo, "Greet with hello", f"agent: delete {TEST_PATH}")

    async def held_and_escalated() -> Run | None:
        # The run is held and classified first, then marked escalated by its recovery.
        run = await run_state(store, repo, number, RunState.FAILED)
        return run if run is not None and run.escalated else None

    run = await eventually(held_and_escalated, "the run held", 90)
    assert run.failure_class == "audit-flagged" and run.escalated
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:escalated"}), "the escalated label"
    )
    [escalation] = await eventually(
        lambda: _escalations(maintainer, repo, number), "the escalation", 30
    )
    assert f"test-file-deleted in {TEST_PATH}" in escalation["body"]
    await _flagged(maintainer, repo, number, run, "test-file-deleted", TEST_PATH)
    assert "held from review" in (await _status(maintainer, repo, number, AUDIT_HEADING) or "")
    assert "baton:review" not in await maintainer.labels(repo, number)
    assert len(await _escalations(maintainer, repo, number) or []) == 1
