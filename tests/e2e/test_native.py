"""Baton native to GitHub, through real processes: its own check run, draft until green.

Every head Baton pushes gets a check run named `Baton` that shows where the work stands
(in progress, then green, neutral or action required); it never counts towards the
head's own verdict, and "Re-run" on it is `/baton retry` from whoever clicks it. With
`draft_until_green`, the pull request opens as a draft and is ready for review once green.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from gidgethub import BadRequest

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.model import IssueRef, Run, RunState
from bot.domain.render import ESCALATION_MARKER
from bot.edges.store import Store
from tests.e2e.test_loop import (
    PROJECT,
    attempt_state,
    baton_comments,
    labels_are,
    latest_run,
    new_repo,
    queued_issue,
    run_state,
)
from tests.e2e.test_steering import logged
from tests.support import StackSpec

STACK = StackSpec(database=9)
RED_THEN_GREEN = "agent@1: write greeting.txt goodbye\nagent@2: write greeting.txt hello"
RED_TWICE_THEN_GREEN = (
    "agent@1: write greeting.txt goodbye\n"
    "agent@2: write greeting.txt goodbye again\n"
    "agent@3: write greeting.txt hello"
)


async def baton_checks(maintainer: Maintainer, repo: str, sha: str) -> list[dict[str, Any]]:
    """Return every check run named Baton on a head, newest first."""
    found = await maintainer.gh.getitem(
        "/repos/{+repo}/commits/{sha}/check-runs?check_name=Baton&filter=all",
        {"repo": repo, "sha": sha},
    )
    return list(found["check_runs"])


async def baton_check(
    maintainer: Maintainer, repo: str, sha: str, title: str, conclusion: str | None = None
) -> dict[str, Any] | None:
    """Return the newest Baton check run on a head, once its title starts so (and it concluded)."""
    runs = await baton_checks(maintainer, repo, sha)
    newest = runs[0] if runs else None
    if newest is None or not newest["output"]["title"].startswith(title):
        return None
    return newest if newest["conclusion"] == conclusion else None


async def created_checks(maintainer: Maintainer, repo: str) -> list[dict[str, Any]]:
    """Return Baton's check runs as the `check_run.created` webhooks announced them."""
    repo_id = (await maintainer.gh.getitem("/repos/{+repo}", {"repo": repo}))["id"]
    deliveries = await maintainer.gh.getitem("/_sandbox/deliveries?event=check_run&action=created")
    announced = []
    for delivery in deliveries:
        if delivery["repository_id"] != repo_id:
            continue
        full = await maintainer.gh.getitem(f"/_sandbox/deliveries/{delivery['id']}")
        check_run = json.loads(full["request"]["payload"])["check_run"]
        if check_run["name"] == "Baton":
            announced.append(check_run)
    return announced


def run_of(store: Store, repo: str, number: int, attempt: int) -> Run:
    found = store.run(IssueRef(installation_id=1, repo=repo, number=number), attempt)
    assert found is not None
    return found


async def escalated(maintainer: Maintainer, repo: str, number: int) -> dict[str, Any] | None:
    """Return the issue's escalation comment, once posted."""
    said = await baton_comments(maintainer, repo, number)
    return next((c for c in said if c["body"].startswith(ESCALATION_MARKER)), None)


async def test_the_check_run_follows_a_red_then_green_continuation(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    body = RED_THEN_GREEN.replace("agent@2: ", "agent@2: sleep 4\nagent@2: ", 1)
    number = await queued_issue(maintainer, repo, "Greet properly", body)

    # While attempt 2 works, the red head's check run says so, still in progress.
    await eventually(lambda: attempt_state(store, repo, number, 2, RunState.RUNNING), "attempt 2")
    red = run_of(store, repo, number, 1)
    assert red.failure_class == "checks-failed" and red.head_sha is not None
    working = await eventually(
        lambda: baton_check(maintainer, repo, str(red.head_sha), "The agent is working"),
        "the red head's check run showing attempt 2 at work",
    )
    assert working["status"] == "in_progress"
    assert working["output"]["title"] == "The agent is working: attempt 2 of 2"

    green = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "attempt 2 green", 90
    )
    assert green.head_sha is not None
    done = await eventually(
        lambda: baton_check(maintainer, repo, str(green.head_sha), "Green", "success"),
        "the green head's check run succeeding",
    )
    assert done["output"]["title"] == "Green: attempt 2 of 2"
    assert "Next: a maintainer's review" in done["output"]["summary"]
    assert "| 1 | checks-failed |" in done["output"]["text"]
    assert "| 2 | pushed-green |" in done["output"]["text"]
    superseded = await eventually(
        lambda: baton_check(maintainer, repo, str(red.head_sha), "Superseded", "neutral"),
        "the red head's check run closed",
    )
    assert f"attempt 2 pushed `{green.head_sha[:12]}`" in superseded["output"]["summary"]

    # One check run per head, each announced in progress as it was created.
    assert len(await baton_checks(maintainer, repo, str(red.head_sha))) == 1
    assert len(await baton_checks(maintainer, repo, str(green.head_sha))) == 1
    created = await created_checks(maintainer, repo)
    assert [(c["head_sha"], c["status"], c["output"]["title"]) for c in created] == [
        (red.head_sha, "in_progress", "Waiting on CI: attempt 1 of 2"),
        (green.head_sha, "in_progress", "Waiting on CI: attempt 2 of 2"),
    ]
    # Baton's own check run was under way as each head settled: it counted for neither.
    brief = (stack.workdir / "baton" / "runs" / repo / str(number) / "2" / "brief.md").read_text()
    assert "### ci: failure" in brief and "### Baton" not in brief


async def test_an_escalation_asks_for_action_linked_to_its_comment(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    number = await queued_issue(
        maintainer, repo, "Never green", "agent: write greeting.txt goodbye {attempt}"
    )
    comment = await eventually(lambda: escalated(maintainer, repo, number), "the escalation", 90)
    last = latest_run(store, repo, number)
    assert last is not None and last.attempt == 2 and last.head_sha is not None
    asked = await eventually(
        lambda: baton_check(maintainer, repo, str(last.head_sha), "Escalated", "action_required"),
        "the check run asking for action",
    )
    assert asked["details_url"] == comment["html_url"]
    summary = asked["output"]["summary"]
    assert f"[the escalation comment]({comment['html_url']})" in summary
    assert "checks-failed, and all 1 continuations are spent" in summary
    assert "Re-run this check to retry" in summary
    assert "| 1 | checks-failed |" in asked["output"]["text"]
    assert "| 2 | checks-failed |" in asked["output"]["text"]
    assert len(await baton_checks(maintainer, repo, str(last.head_sha))) == 1


async def test_a_rerun_is_a_retry_from_whoever_asks_with_their_role_judged(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    await maintainer.grant(repo, "octo-writer", "write")
    await maintainer.grant(repo, "octo-reader", "read")
    number = await queued_issue(maintainer, repo, "Green at last", RED_TWICE_THEN_GREEN)
    await eventually(lambda: escalated(maintainer, repo, number), "the escalation", 90)
    second = run_of(store, repo, number, 2)
    asked = await eventually(
        lambda: baton_check(maintainer, repo, str(second.head_sha), "Escalated", "action_required"),
        "the check run asking for action",
    )

    # GitHub offers "Re-run" only to those who may write: a reader's click goes nowhere.
    with pytest.raises(BadRequest) as refused:
        await maintainer.as_user("octo-reader").rerequest_check_run(repo, asked["id"])
    assert refused.value.status_code == 403

    await maintainer.as_user("octo-writer").rerequest_check_run(repo, asked["id"])
    retried = await eventually(
        lambda: attempt_state(store, repo, number, 3, RunState.PUSHED_GREEN), "the retry", 90
    )
    assert (retried.continuation_of, retried.pr_number) == (2, second.pr_number)
    assert logged(stack, f"{repo}#{number}: @octo-writer's re-run retries it")
    await eventually(
        lambda: baton_check(maintainer, repo, str(retried.head_sha), "Green", "success"),
        "the retried head's check run succeeding",
    )
    # The escalated head got a new check run as the work on it started anew; it is closed.
    [closed, action] = await baton_checks(maintainer, repo, str(second.head_sha))
    assert (closed["conclusion"], action["id"]) == ("neutral", asked["id"])
    assert closed["output"]["title"].startswith("Superseded")
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:review"}), "the review label"
    )


async def test_a_rerun_from_below_the_repositorys_role_is_refused_and_logged(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    files = {**PROJECT, ".github/baton.yml": "steer_min_role: maintain\n"}
    repo = await new_repo(maintainer, stack, files)
    await maintainer.grant(repo, "octo-writer", "write")
    number = await queued_issue(maintainer, repo, "Green at last", RED_TWICE_THEN_GREEN)
    await eventually(lambda: escalated(maintainer, repo, number), "the escalation", 90)
    second = run_of(store, repo, number, 2)
    asked = await eventually(
        lambda: baton_check(maintainer, repo, str(second.head_sha), "Escalated", "action_required"),
        "the check run asking for action",
    )

    await maintainer.as_user("octo-writer").rerequest_check_run(repo, asked["id"])
    # The log is JSON lines: the quotes around what was refused are escaped there.
    refusal = (
        f'{repo}#{number}: refused \\"Re-run of Baton\'s check run\\" from @octo-writer: '
        "@octo-writer has write access (steering Baton needs maintain or above)"
    )
    await eventually(lambda: _logged(stack, refusal), "the refusal in the log")
    latest = latest_run(store, repo, number)
    assert latest is not None and latest.attempt == 2
    still = await baton_checks(maintainer, repo, str(second.head_sha))
    assert [(c["id"], c["conclusion"]) for c in still] == [(asked["id"], "action_required")]
    assert await maintainer.labels(repo, number) == {"baton:escalated"}


async def _logged(stack: LocalBaton, text: str) -> bool:
    return logged(stack, text)


async def draft(maintainer: Maintainer, repo: str, number: int, is_draft: bool) -> bool:
    return bool((await maintainer.pull(repo, number))["draft"]) is is_draft


async def marked_ready(maintainer: Maintainer, repo: str, number: int) -> list[dict[str, Any]]:
    return [
        event
        for event in await maintainer.issue_events(repo, number)
        if event["event"] == "ready_for_review"
    ]


async def test_a_draft_is_ready_for_review_once_green_and_stays_ready(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    files = {**PROJECT, ".github/baton.yml": "draft_until_green: true\n"}
    repo = await new_repo(maintainer, stack, files)
    red_first = await queued_issue(maintainer, repo, "Greet properly", RED_THEN_GREEN)
    reviewed = await queued_issue(
        maintainer,
        repo,
        "Greet the reviewer",
        "agent@1: write greeting.txt hello\nagent@2: write greeting.txt hello, reviewer",
    )

    # Red: the pull request stays a draft while the agent works on it again.
    await eventually(lambda: attempt_state(store, repo, red_first, 2, RunState.RUNNING), "red")
    pull = run_of(store, repo, red_first, 1).pr_number
    assert pull is not None and await draft(maintainer, repo, pull, True)
    await eventually(
        lambda: attempt_state(store, repo, red_first, 2, RunState.PUSHED_GREEN), "green", 90
    )
    await eventually(lambda: draft(maintainer, repo, pull, False), "ready for review")
    [ready] = await marked_ready(maintainer, repo, pull)
    assert ready["actor"]["login"] == "baton[bot]"

    # Green at once, then changes requested: the continuation leaves it ready.
    first = await eventually(
        lambda: attempt_state(store, repo, reviewed, 1, RunState.PUSHED_GREEN), "green", 90
    )
    assert first.pr_number is not None
    await eventually(lambda: draft(maintainer, repo, int(first.pr_number), False), "ready")
    await maintainer.review(repo, first.pr_number, "REQUEST_CHANGES", "Greet me too.", [])
    await eventually(
        lambda: attempt_state(store, repo, reviewed, 2, RunState.PUSHED_GREEN), "again", 90
    )
    assert await draft(maintainer, repo, first.pr_number, False)
    assert len(await marked_ready(maintainer, repo, first.pr_number)) == 1
