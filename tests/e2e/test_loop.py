"""The whole loop through real processes: the sandbox GitHub, signed webhooks, web, workers."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from gidgethub import BadRequest, GitHubBroken
from playwright.async_api import Browser, async_playwright, expect

from bot.devkit.devstack import LocalBaton, start_redis_server
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.jobs import AGENTS, EVENTS
from bot.domain.model import IssueRef, Run, RunState, utcnow
from bot.domain.render import STATUS_MARKER
from bot.edges.store import Store
from tests.claude_stream import DENIED, claude_code_said
from tests.conftest import RedisServer
from tests.support import StackSpec, post_signed, started

CI_CHECKS_GREETING = "#!/bin/sh\nset -e\ngrep -q 'hello' greeting.txt\n"
PROJECT = {"README.md": "# demo\n", ".sandbox/ci": CI_CHECKS_GREETING, "greeting.txt": "hi\n"}
GREETING_FIX = "agent: write greeting.txt hello"
OPERATOR_TOKEN = "operator-token-of-the-e2e-stack-long-enough-to-keep"
ARTIFACTS = Path(__file__).parents[2] / "test-artifacts"  # screenshots for the README
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
_names = itertools.count(1)


STACK = StackSpec(database=0, env={"BATON_OPERATOR_TOKEN": OPERATOR_TOKEN})


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Chromium driven by Playwright; a test needing it is skipped where none is installed.

    CI installs Chromium, so there a missing one fails the test instead.
    """
    path = os.environ.get("BATON_CHROMIUM") or "/usr/bin/chromium"
    if not os.access(path, os.X_OK):
        if os.environ.get("CI"):
            pytest.fail(f"Chromium not found at {path}: apt-get install chromium")
        pytest.skip("Chromium not found: apt-get install chromium")
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield chromium
        await chromium.close()


@contextlib.asynccontextmanager
async def webhooks_lost(maintainer: Maintainer, stack: LocalBaton) -> AsyncIterator[None]:
    """Inside the block GitHub cannot reach Baton: every webhook it sends is lost."""
    await maintainer.set_webhook_url(None)
    try:
        yield
    finally:
        await maintainer.set_webhook_url(f"{stack.web_url}/webhook")


async def queued_issue(maintainer: Maintainer, repo: str, title: str, body: str) -> int:
    issue = await maintainer.open_issue(repo, title, body)
    number = int(issue["number"])
    await maintainer.add_label(repo, number, "baton:queue")
    return number


async def new_repo(
    maintainer: Maintainer, stack: LocalBaton, files: dict[str, str] = PROJECT
) -> str:
    repo = await maintainer.create_repo(f"project-{next(_names)}", files, stack.workdir)
    return str(repo["full_name"])


def latest_run(store: Store, repo: str, number: int) -> Run | None:
    return store.latest_run(IssueRef(installation_id=1, repo=repo, number=number))


async def run_state(store: Store, repo: str, number: int, *states: RunState) -> Run | None:
    run = latest_run(store, repo, number)
    return run if run is not None and run.state in states else None


async def concluded(store: Store, repo: str, number: int, *states: RunState) -> Run | None:
    """The latest run once it ended in one of states and was classified: a run is recorded
    ended first, then classified by the same job."""
    run = await run_state(store, repo, number, *states)
    return run if run is not None and run.failure_class is not None else None


async def baton_comments(maintainer: Maintainer, repo: str, number: int) -> list[dict[str, Any]]:
    return [
        c for c in await maintainer.comments(repo, number) if c["user"]["login"] == "baton[bot]"
    ]


async def test_labelled_issue_becomes_a_green_pr_then_merges(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    title = "Greet with `hello` $(rm -rf ~); echo ünïcode ☃"
    issue = await maintainer.open_issue(repo, title, "agent: write greeting.txt hello world\\n")
    number = int(issue["number"])
    await maintainer.add_label(repo, number, "baton:queue")

    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN, RunState.FAILED),
        "the run settling",
        90,
    )
    assert run.state is RunState.PUSHED_GREEN, run.reason
    assert run.branch == "baton/issue-1-greet-with-hello-rm-rf-echo-unicode"
    assert [s.state for s in run.history] == [
        RunState.CLAIMED,
        RunState.PROVISIONING,
        RunState.RUNNING,
        RunState.PUSHED_PENDING,
        RunState.PUSHED_GREEN,
    ]
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:review"}), "labels settling"
    )

    [pr] = await maintainer.pulls(repo)
    assert pr["head"]["ref"] == run.branch and pr["head"]["sha"] == run.head_sha
    assert pr["html_url"] == run.pr_url
    assert pr["body"].startswith(f"Closes #{number}\n")
    assert "- `greeting.txt`" in pr["body"]
    assert "Done: followed the issue's instructions." in pr["body"]
    assert run.changed_files == ["greeting.txt"]

    status = await eventually(
        lambda: comment_saying(maintainer, repo, number, "pushed-green"), "the status comment"
    )
    assert status["body"].startswith(STATUS_MARKER) and run.pr_url in status["body"]
    assert len(await baton_comments(maintainer, repo, number)) == 1

    await maintainer.merge(repo, int(pr["number"]))
    closed = await eventually(
        lambda: closed_issue(maintainer, repo, number), "the merge closing the issue"
    )
    assert closed["state_reason"] == "completed"


async def test_a_repository_without_ci_goes_to_review_after_the_no_checks_wait(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """GitHub reports nothing for a head no CI runs on: no suite, no status (pending, 0)."""
    repo = await new_repo(maintainer, stack, {"README.md": "# no ci\n", "greeting.txt": "hi\n"})
    number = await queued_issue(maintainer, repo, "No CI here", GREETING_FIX)
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN, RunState.FAILED),
        "the run settling",
        90,
    )
    assert run.state is RunState.PUSHED_GREEN, run.reason
    pushed, green = run.history[-2], run.history[-1]
    assert pushed.state is RunState.PUSHED_PENDING
    assert (green.at - pushed.at).total_seconds() >= 2, "green only after the wait"
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:review"}), "labels settling"
    )
    assert run.pr_number is not None
    said = await eventually(
        lambda: comment_saying(maintainer, repo, run.pr_number, "No CI reported"),
        "the PR's status comment",
    )
    assert "no checks are required" in said["body"]


# A project whose CI runs its own check script, which an agent may rewrite like any test.
CHECKED_PROJECT = {
    "README.md": "# demo\n",
    ".sandbox/ci": "#!/bin/sh\nset -e\n. ./check.sh\n",
    "check.sh": "grep -q hello greeting.txt\n",
    "greeting.txt": "hi\n",
}
DEPLOY_TOKEN = "deploy-7c41f0e2b9"
# An injected agent's work: the fix asked for, and a check that prints the repository's
# secret encoded, which no log masking hides.
LEAKING_FIX = (
    "agent: write greeting.txt hello\n"
    'agent: write check.sh printf "leaked:%s\\n" "$(printf %s "$DEPLOY_TOKEN" | base64)"'
    "\\ngrep -q hello greeting.txt\\n"
)
LEAKED = f"leaked:{base64.b64encode(DEPLOY_TOKEN.encode()).decode()}"


async def ci_logs(maintainer: Maintainer, repo: str, sha: str) -> str:
    """Return what the repository's CI printed on a head, every check's log."""
    found = await maintainer.gh.getitem(
        "/repos/{+repo}/commits/{sha}/check-runs", {"repo": repo, "sha": sha}
    )
    return "\n".join(str((run["output"] or {}).get("text") or "") for run in found["check_runs"])


async def test_the_agents_code_meets_the_repositorys_secrets_when_its_branch_is_pushed_there(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """What fork mode is for (tests/e2e/test_forks.py): by default Baton pushes the agent's
    branch to the repository itself, where CI runs on every push with the repository's
    secrets ("Using secrets in GitHub Actions"), and an injected agent's check prints one."""
    repo = await new_repo(maintainer, stack, CHECKED_PROJECT)
    await maintainer.set_secret(repo, "DEPLOY_TOKEN", DEPLOY_TOKEN)
    number = await queued_issue(maintainer, repo, "Greet with hello", LEAKING_FIX)
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN, RunState.FAILED),
        "the run settling",
        90,
    )
    assert run.state is RunState.PUSHED_GREEN, run.reason
    assert run.head_sha is not None
    assert LEAKED in await ci_logs(maintainer, repo, run.head_sha)


async def closed_issue(maintainer: Maintainer, repo: str, number: int) -> dict[str, Any] | None:
    issue = await maintainer.issue(repo, number)
    return issue if issue["state"] == "closed" else None


async def test_red_ci_comes_back_to_the_agent_and_goes_green_on_the_same_pr(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    body = "agent@1: write greeting.txt goodbye\nagent@2: write greeting.txt hello"
    number = await queued_issue(maintainer, repo, "Greet properly", body)
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN),
        "the continuation going green",
        90,
    )
    first = store.run(IssueRef(installation_id=1, repo=repo, number=number), 1)
    assert first is not None and first.failure_class == "checks-failed"
    assert (run.attempt, run.continuation_of, run.pr_number) == (2, 1, first.pr_number)
    assert run.head_sha != first.head_sha
    [pr] = await maintainer.pulls(repo)
    assert pr["head"]["sha"] == run.head_sha
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:review"}), "labels settling"
    )

    brief = (stack.workdir / "baton" / "runs" / repo / str(number) / "2" / "brief.md").read_text()
    assert "Attempt 2 of 2." in brief
    assert "## Failing checks" in brief and "### ci: failure" in brief
    assert "Done: followed the issue's instructions." in brief  # the previous report

    # The labels go on before the status comments are written: wait for the comment.
    pr_status = await eventually(
        lambda: comment_saying(maintainer, repo, int(pr["number"]), "| 2 | pushed-green |"),
        "the PR's status comment at green",
    )
    assert "| 1 | checks-failed |" in pr_status["body"]
    assert len(await baton_comments(maintainer, repo, int(pr["number"]))) == 1
    history = f"{pr['html_url']}#issuecomment-{pr_status['id']}"
    await eventually(  # the issue's comment, written after the PR's, links to it
        lambda: comment_saying(maintainer, repo, number, history), "the issue's status comment"
    )
    assert len(await baton_comments(maintainer, repo, number)) == 1

    # A late failure for the old head changes nothing.
    await _redeliver_suite(maintainer, repo, str(first.head_sha))
    await asyncio.sleep(1.5)
    latest = latest_run(store, repo, number)
    assert latest is not None and (latest.attempt, latest.state) == (2, RunState.PUSHED_GREEN)


async def _redeliver_suite(maintainer: Maintainer, repo: str, sha: str) -> None:
    repo_id = (await maintainer.gh.getitem("/repos/{+repo}", {"repo": repo}))["id"]
    deliveries = await maintainer.gh.getitem(
        "/_sandbox/deliveries?event=check_suite&action=completed"
    )
    for delivery in deliveries:
        if delivery["repository_id"] != repo_id:
            continue
        full = await maintainer.gh.getitem(f"/_sandbox/deliveries/{delivery['id']}")
        if json.loads(full["request"]["payload"])["check_suite"]["head_sha"] == sha:
            await maintainer.gh.post(f"/_sandbox/deliveries/{delivery['id']}/redeliver", data={})
            return
    raise AssertionError(f"no check_suite delivery for {sha}")


async def test_requested_changes_come_back_to_the_agent(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    body = "agent@1: write greeting.txt hello\nagent@2: write greeting.txt hello, reviewer"
    number = await queued_issue(maintainer, repo, "Greet the reviewer", body)
    first = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN),
        "the first PR going green",
        90,
    )
    await maintainer.gh.post(
        "/repos/{+repo}/pulls/{number}/reviews",
        {"repo": repo, "number": first.pr_number},
        data={
            "event": "REQUEST_CHANGES",
            "body": "Please greet the reviewer too.",
            "comments": [{"path": "greeting.txt", "line": 1, "body": "Say hello to me."}],
        },
    )
    run = await eventually(
        lambda: attempt_state(store, repo, number, 2, RunState.PUSHED_GREEN),
        "the continuation going green",
        90,
    )
    assert (run.continuation_of, run.pr_number) == (1, first.pr_number)
    brief = (stack.workdir / "baton" / "runs" / repo / str(number) / "2" / "brief.md").read_text()
    assert "Please greet the reviewer too." in brief
    assert "- `greeting.txt` line 1: Say hello to me." in brief
    assert len(await maintainer.pulls(repo)) == 1


async def attempt_state(
    store: Store, repo: str, number: int, attempt: int, state: RunState
) -> Run | None:
    run = latest_run(store, repo, number)
    return run if run is not None and run.attempt == attempt and run.state is state else None


async def test_spent_budget_escalates_once_even_with_every_webhook_delivered_twice(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    await maintainer.gh.post("/_sandbox/faults", data={"webhooks": {"duplicate_rate": 1.0}})
    try:
        number = await queued_issue(
            maintainer, repo, "Never green", "agent: write greeting.txt goodbye {attempt}"
        )
        await eventually(
            lambda: _has_label(maintainer, repo, number, "baton:escalated"), "the escalation", 90
        )
        await asyncio.sleep(2)  # the duplicates have every chance to act twice
    finally:
        await maintainer.gh.post("/_sandbox/faults", data={"webhooks": {"duplicate_rate": 0.0}})
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:escalated"}), "labels settling"
    )
    escalations = [
        c
        for c in await baton_comments(maintainer, repo, number)
        if c["body"].startswith("<!-- baton:escalation -->")
    ]
    assert len(escalations) == 1
    text = escalations[0]["body"]
    assert "checks-failed, and all 1 continuations are spent" in text
    assert "| continuations | 2 | 1 |" in text
    assert "What spent them: checks-failed: 2." in text
    run = latest_run(store, repo, number)
    assert run is not None and run.attempt == 2
    assert f"`{run.branch}` at `{str(run.head_sha)[:12]}`" in text and str(run.pr_url) in text
    assert "@octo-lead" in text


async def comment_saying(
    maintainer: Maintainer, repo: str, number: int, text: str
) -> dict[str, Any] | None:
    return next(
        (c for c in await baton_comments(maintainer, repo, number) if text in c["body"]), None
    )


async def _has_label(maintainer: Maintainer, repo: str, number: int, label: str) -> bool:
    return label in await maintainer.labels(repo, number)


async def test_agent_failures_are_retried_then_escalated_without_a_pr(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    number = await queued_issue(maintainer, repo, "Crash", "agent: write x.txt y\nagent: exit 3")
    await eventually(
        lambda: _has_label(maintainer, repo, number, "baton:escalated"), "the escalation", 60
    )
    runs = store.runs(IssueRef(installation_id=1, repo=repo, number=number))
    assert [r.failure_class for r in runs] == ["agent-error"] * 3
    assert all(r.agent_result is not None and r.agent_result.exit_code == 3 for r in runs)
    assert await maintainer.pulls(repo) == []
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:escalated"}), "labels settling"
    )
    await eventually(
        lambda: comment_saying(
            maintainer, repo, number, "agent-error, and all 3 failed attempts are spent"
        ),
        "the escalation comment",
    )


async def test_an_agent_that_changes_nothing_escalates_no_change(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    number = await queued_issue(maintainer, repo, "Nothing to do", "No instructions for the agent.")
    run = await eventually(lambda: run_state(store, repo, number, RunState.NO_CHANGE), "no-change")
    assert run.head_sha is None
    await eventually(lambda: _has_label(maintainer, repo, number, "baton:escalated"), "escalation")
    assert await maintainer.pulls(repo) == []


async def test_concurrent_and_repeated_deliveries_make_one_run(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    issue = await maintainer.open_issue(
        repo, "Once only", "agent: sleep 1\nagent: write greeting.txt hello"
    )
    number = int(issue["number"])
    await maintainer.add_label(repo, number, "baton:queue")
    await eventually(lambda: run_state(store, repo, number, RunState.RUNNING), "the run starting")
    # GitHub redelivers the label event while two more deliveries of it, with ids of
    # their own, arrive at the same moment.
    delivery = await _last_labeled_delivery(maintainer, repo)
    body = delivery["request"]["payload"].encode()
    async with aiohttp.ClientSession() as session:
        answers = await asyncio.gather(
            maintainer.gh.post(f"/_sandbox/deliveries/{delivery['id']}/redeliver", data={}),
            *(post_signed(session, stack, "issues", body) for _ in range(2)),
        )
    assert [status for status, _ in answers[1:]] == [202, 202]
    await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the run going green", 90
    )
    await asyncio.sleep(1)  # give any duplicate job time to (wrongly) start
    latest = latest_run(store, repo, number)
    assert latest is not None and (latest.attempt, latest.state) == (1, RunState.PUSHED_GREEN)
    assert len(await maintainer.pulls(repo)) == 1
    assert len(await baton_comments(maintainer, repo, number)) == 1


async def test_two_issues_whose_agents_push_the_same_commit_both_go_to_review(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """GitHub reports checks per commit, not per branch: two agents that make the same fix
    on the same parent as of the same second push one head, and each run on it settles."""
    repo = await new_repo(maintainer, stack)
    same_fix = f"{GREETING_FIX}\nagent: commit-at 2026-12-01T09:00:00+00:00 Greet with hello"
    numbers = [
        await queued_issue(maintainer, repo, title, same_fix) for title in ("Greet", "Greet too")
    ]
    runs = [
        await eventually(
            lambda n=n: run_state(store, repo, n, RunState.PUSHED_GREEN), f"#{n} green", 120
        )
        for n in numbers
    ]
    assert runs[0].head_sha == runs[1].head_sha is not None, "one head for both"
    assert runs[0].pr_number != runs[1].pr_number
    for number in numbers:
        await eventually(
            lambda n=number: labels_are(maintainer, repo, n, {"baton:review"}), f"#{number} review"
        )


async def _last_labeled_delivery(maintainer: Maintainer, repo: str) -> dict[str, Any]:
    repo_id = (await maintainer.gh.getitem("/repos/{+repo}", {"repo": repo}))["id"]
    deliveries = await maintainer.gh.getitem("/_sandbox/deliveries?event=issues&action=labeled")
    [latest] = [d for d in deliveries if d["repository_id"] == repo_id][-1:]
    found: dict[str, Any] = await maintainer.gh.getitem(f"/_sandbox/deliveries/{latest['id']}")
    return found


async def test_a_failed_pull_request_creation_is_never_green_and_is_retried(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    await maintainer.gh.post(
        "/_sandbox/faults",
        data={"method": "POST", "path": f"^/repos/{repo}/pulls$", "status": 422, "count": 1},
    )
    try:
        number = await queued_issue(
            maintainer, repo, "PR on second try", "agent: write greeting.txt hello"
        )
        run = await eventually(
            lambda: run_state(store, repo, number, RunState.PUSHED_GREEN),
            "the retry going green",
            60,
        )
    finally:
        await maintainer.gh.delete("/_sandbox/faults")
    first = store.run(IssueRef(installation_id=1, repo=repo, number=number), 1)
    assert first is not None and first.state is RunState.FAILED
    assert first.failure_class == "dispatch-infra" and first.pr_number is None
    assert first.reason is not None and "opening the pull request failed" in first.reason
    assert run.attempt == 2 and len(await maintainer.pulls(repo)) == 1


async def test_labels_converge_through_injected_502s_on_half_the_label_calls(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    await maintainer.gh.post(
        "/_sandbox/faults",
        data={"path": f"^/repos/{repo}/issues/\\d+/labels", "status": 502, "rate": 0.5},
    )
    try:
        issue = await maintainer.open_issue(repo, "Flaky labels", "agent: write greeting.txt hello")
        number = int(issue["number"])
        await eventually(
            lambda: _label_added(maintainer, repo, number, "baton:queue"), "the maintainer's label"
        )
        await eventually(
            lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the run going green", 60
        )
        await eventually(
            lambda: labels_are(maintainer, repo, number, {"baton:review"}), "labels converging", 60
        )
        [rule] = [
            r
            for r in (await maintainer.gh.getitem("/_sandbox/faults"))["api"]
            if r["path"].endswith("/labels")
        ]
    finally:
        await maintainer.gh.delete("/_sandbox/faults")
    assert rule["fired"] > 0, "the faults must have hit Baton's label calls"


async def _label_added(maintainer: Maintainer, repo: str, number: int, label: str) -> bool:
    try:
        await maintainer.add_label(repo, number, label)
    except GitHubBroken:
        return False  # the injected faults hit the maintainer too: try again, as a person would
    return True


async def _unlocked(store: Store, issue: IssueRef) -> bool:
    return store.lock_holder(issue) is None


async def _gone(path: Path) -> bool:
    return not path.exists()


async def labels_are(maintainer: Maintainer, repo: str, number: int, labels: set[str]) -> bool:
    try:
        return await maintainer.labels(repo, number) == labels
    except GitHubBroken:
        return False  # the injected faults hit the test's own reads too


async def test_merge_settles_the_run_and_cleans_up(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """The merge is settled on another machine than the one that ran the issue.

    What a deployment of several machines guarantees: the merge settles wherever its job
    runs, and that machine removes only its own copy of the worktree; the machine that
    ran the issue, whose disk no other reaches, removes its copy when it next works on
    the repository.
    """
    shared = [name for name in stack.processes if name.startswith("worker-")]
    for name in shared:
        stack.processes[name].stop()
    runner, settler = (stack.workdir / "machines" / name for name in ("runner", "settler"))
    stack.start_worker("runner", (AGENTS,), runner)
    stack.start_worker("settler", (EVENTS,), settler)
    try:
        repo = await new_repo(maintainer, stack)
        number = await queued_issue(maintainer, repo, "Merge me", "agent: write greeting.txt hello")
        run = await eventually(
            lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the run going green", 60
        )
        worktree = runner / "worktrees" / repo / f"issue-{number}"
        assert worktree.exists()
        await maintainer.merge(repo, int(str(run.pr_number)))
        merged = await eventually(lambda: run_state(store, repo, number, RunState.MERGED), "merged")
        assert merged.attempt == run.attempt
        await eventually(lambda: labels_are(maintainer, repo, number, set()), "labels off")
        assert store.lock_holder(IssueRef(installation_id=1, repo=repo, number=number)) is None
        await eventually(
            lambda: comment_saying(maintainer, repo, number, "The pull request was merged."),
            "the status comment saying so",
        )
        assert len(await baton_comments(maintainer, repo, number)) == 1
        assert not (settler / "worktrees" / repo / f"issue-{number}").exists()
        assert worktree.exists(), "settled elsewhere: the machine that ran it still has its copy"
        later = await queued_issue(maintainer, repo, "Next", "agent: write notes.txt next")
        await eventually(lambda: _gone(worktree), "the worktree's removal by the machine")
        await eventually(
            lambda: run_state(store, repo, later, RunState.PUSHED_GREEN), "the next run", 60
        )
    finally:
        for name in ("runner", "settler"):
            stack.processes.pop(name).stop()
        for name in shared:
            stack.start_worker(name)


async def test_closing_a_pr_unmerged_ends_the_run_without_a_requeue(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    number = await queued_issue(maintainer, repo, "Close me", "agent: write greeting.txt hello")
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the run going green", 60
    )
    await maintainer.gh.patch(
        "/repos/{+repo}/pulls/{number}",
        {"repo": repo, "number": run.pr_number},
        data={"state": "closed"},
    )
    await eventually(lambda: run_state(store, repo, number, RunState.CLOSED), "closed")
    await eventually(lambda: labels_are(maintainer, repo, number, set()), "labels off")
    await asyncio.sleep(1)
    assert latest_run(store, repo, number).attempt == run.attempt  # type: ignore[union-attr]


async def close_issue(maintainer: Maintainer, repo: str, number: int) -> None:
    await maintainer.gh.patch(
        "/repos/{+repo}/issues/{number}", {"repo": repo, "number": number}, data={"state": "closed"}
    )


async def take_in_progress_off(maintainer: Maintainer, repo: str, number: int) -> None:
    await maintainer.remove_label(repo, number, "baton:in-progress")


@pytest.mark.parametrize("stop", [close_issue, take_in_progress_off])
async def test_a_maintainer_stops_a_live_run_and_its_work_is_kept(
    stack: LocalBaton,
    maintainer: Maintainer,
    store: Store,
    stop: Callable[[Maintainer, str, int], Awaitable[None]],
) -> None:
    """Closing the issue, or taking its in-progress label off, stops the agent at once."""
    repo = await new_repo(maintainer, stack)
    body = "agent: write greeting.txt hello\nagent: commit Work in progress\nagent: sleep 30"
    number = await queued_issue(maintainer, repo, "Stop me", body)
    transcript_path = stack.workdir / "baton/runs" / repo / str(number) / "1/transcript.log"

    async def sleeping() -> bool:  # it has written, committed and started its sleep
        return transcript_path.exists() and "committed" in transcript_path.read_text()

    await eventually(sleeping, "the agent's commit", 60)
    await stop(maintainer, repo, number)

    run = await eventually(lambda: concluded(store, repo, number, RunState.KILLED), "the stop", 30)
    assert run.failure_class == "admin-kill"
    assert run.agent_result is not None and run.agent_result.stop_reason == "cancelled"
    transcript = run.agent_result.transcript_path.read_text()
    assert "wrote greeting.txt" in transcript
    assert "Done: followed the issue's instructions." not in transcript, "stopped mid-sleep"
    await eventually(lambda: labels_are(maintainer, repo, number, set()), "labels off")
    branch = await maintainer.gh.getitem(
        "/repos/{+repo}/branches/{branch}", {"repo": repo, "branch": run.branch}
    )
    assert branch["commit"]["sha"] == run.head_sha, "the work is kept on its branch"
    await asyncio.sleep(1)
    latest = latest_run(store, repo, number)
    assert latest is not None and latest.attempt == run.attempt, "no new attempt after a stop"


async def test_a_withdrawn_issue_gets_no_further_attempt(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    files = {**PROJECT, ".sandbox/ci": "#!/bin/sh\nsleep 2\nexit 1\n"}
    repo = await new_repo(maintainer, stack, files)
    number = await queued_issue(maintainer, repo, "Withdraw me", "agent: write greeting.txt hi")
    await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_PENDING), "the PR opening"
    )
    await maintainer.gh.delete(
        "/repos/{+repo}/issues/{number}/labels/{name}",
        {"repo": repo, "number": number, "name": "baton:in-progress"},
    )
    run = await eventually(lambda: run_state(store, repo, number, RunState.FAILED), "red checks")
    await eventually(
        lambda: comment_saying(maintainer, repo, number, "a maintainer withdrew the issue"),
        "the status comment saying so",
    )
    await asyncio.sleep(1)
    latest = latest_run(store, repo, number)
    assert latest is not None and latest.attempt == run.attempt == 1
    await eventually(lambda: labels_are(maintainer, repo, number, set()), "labels settling")


async def test_wall_clock_caps_continue_from_pushed_work_or_escalate_when_spinning(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    # A second Baton beside the first: its own Redis database, so their queues stay apart.
    capped = started(
        redis_server.url.rsplit("/", 1)[0] + "/1", tmp_path, BATON_AGENT_WALL_CLOCK_MINUTES="0.05"
    )
    try:
        store = Store.from_url(capped.redis_url)
        async with aiohttp.ClientSession() as session:
            maintainer = Maintainer(session, capped.sandbox_url, capped.admin_token)
            repo = await new_repo(maintainer, capped)
            progress = await queued_issue(
                maintainer,
                repo,
                "Slow but steady",
                "agent@1: write greeting.txt hello\nagent@1: commit Half done\n"
                "agent@1: sleep 30\nagent@2: write greeting.txt hello world",
            )
            run = await eventually(
                lambda: run_state(store, repo, progress, RunState.PUSHED_GREEN),
                "the continuation going green",
                60,
            )
            first = store.run(IssueRef(installation_id=1, repo=repo, number=progress), 1)
            assert first is not None and first.failure_class == "wall-clock-cap-progress"
            assert first.head_sha is not None and run.continuation_of == 1

            spinning = await queued_issue(maintainer, repo, "Stuck", "agent: sleep 30")
            await eventually(
                lambda: _has_label(maintainer, repo, spinning, "baton:escalated"), "escalation", 60
            )
            stuck = latest_run(store, repo, spinning)
            assert stuck is not None and stuck.failure_class == "wall-clock-cap-spinning"
            assert stuck.attempt == 1
    finally:
        capped.stop()


async def test_a_usage_window_halts_the_issue_and_it_resumes_at_the_reset(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    body = "agent@1: write greeting.txt hel\nagent@1: window 3\nagent@2: write greeting.txt hello"
    number = await queued_issue(maintainer, repo, "Finish after the window", body)
    halted = await eventually(
        lambda: run_state(store, repo, number, RunState.HALTED), "the halt", 30
    )
    assert halted.failure_class == "provider-window" and halted.resume_at is not None
    issue = IssueRef(installation_id=1, repo=repo, number=number)
    await eventually(lambda: _unlocked(store, issue), "the job releasing the issue's lock")
    await eventually(lambda: _has_label(maintainer, repo, number, "baton:halted"), "halted label")
    await eventually(
        lambda: comment_saying(maintainer, repo, number, "resumable at"), "the halt comment"
    )
    resumed = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the resumed run", 60
    )
    assert resumed.attempt == 2 and resumed.continuation_of == 1
    assert resumed.started_at >= halted.resume_at
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:review"}), "labels settling"
    )


async def test_a_usage_window_holds_the_accounts_queue_instead_of_failing_it_in_a_cascade(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """A run's window is its agent's word: alone it halts its own issue; a second issue's
    agent saying the same shuts the account, and its queue waits instead of failing."""
    repo = await new_repo(maintainer, stack)
    meets = "agent@1: write greeting.txt hel\nagent@1: window 20\nagent@2: write greeting.txt hello"
    first = await queued_issue(maintainer, repo, "Meets the window", meets)
    halted = await eventually(
        lambda: run_state(store, repo, first, RunState.HALTED), "the first issue halting", 30
    )
    assert halted.resume_at is not None
    assert store.window_reopens_at("command", utcnow()) is None  # one agent's claim
    honest = await queued_issue(maintainer, repo, "Another issue, meanwhile", GREETING_FIX)
    await eventually(
        lambda: run_state(store, repo, honest, RunState.PUSHED_GREEN), "the other issue green", 30
    )
    second = await queued_issue(maintainer, repo, "Meets it too", meets)
    await eventually(
        lambda: run_state(store, repo, second, RunState.HALTED), "the second issue halting", 30
    )
    shut = store.window_reopens_at("command", utcnow())
    assert shut is not None and shut.timestamp() <= halted.resume_at.timestamp() + 0.001
    # The account's window is confirmed shut: what is queued now waits for it, unstarted.
    waiting = [
        await queued_issue(maintainer, repo, f"Queued behind the window {n}", GREETING_FIX)
        for n in (1, 2)
    ]
    for number in waiting:
        comment = await eventually(
            lambda number=number: comment_saying(maintainer, repo, number, "waiting for a usage"),
            "the waiting comment",
            30,
        )
        assert "`command`" in comment["body"] and "nothing was spent" in comment["body"]
        assert latest_run(store, repo, number) is None
        assert "baton:queue" in await maintainer.labels(repo, number)
    for number in (first, second, *waiting):
        await eventually(
            lambda number=number: run_state(store, repo, number, RunState.PUSHED_GREEN),
            "every issue of the account going green after the reset",
            60,
        )
    runs = [store.runs(IssueRef(installation_id=1, repo=repo, number=n)) for n in waiting]
    assert [[run.attempt for run in issue_runs] for issue_runs in runs] == [[1], [1]]
    assert all(issue_runs[0].started_at >= shut for issue_runs in runs)
    for number in (first, second):
        halts = store.runs(IssueRef(installation_id=1, repo=repo, number=number))
        assert [r.failure_class for r in halts] == ["provider-window", None]
    assert store.waits() == []


async def test_an_invalid_repository_file_is_explained_once_and_starts_nothing(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    config = "agent:\n  adapter: command\n  max_turns: 0\nmax_atempts: 2\n"
    repo = await new_repo(maintainer, stack, {**PROJECT, ".github/baton.yml": config})
    number = await queued_issue(maintainer, repo, "Never starts", GREETING_FIX)
    comment = await eventually(
        lambda: comment_saying(maintainer, repo, number, "is not valid"), "the config comment"
    )
    assert "line 3: `agent.max_turns`: Input should be greater than 0" in comment["body"]
    assert "line 4: `max_atempts`" in comment["body"] and "max_attempts" in comment["body"]
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:escalated"}), "the escalated label"
    )
    assert latest_run(store, repo, number) is None
    # Queued again with the file unchanged: no second comment.
    await maintainer.remove_label(repo, number, "baton:escalated")
    await maintainer.add_label(repo, number, "baton:queue")
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:escalated"}), "the second refusal"
    )
    assert len(await baton_comments(maintainer, repo, number)) == 1


async def test_the_repositorys_cost_cap_stops_further_attempts(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    files = {**PROJECT, ".github/baton.yml": "max_cost_usd: 2.5\n"}
    repo = await new_repo(maintainer, stack, files)
    number = await queued_issue(maintainer, repo, "Expensive", "agent: fail-costing 1.5")
    escalation = await eventually(
        lambda: comment_saying(maintainer, repo, number, "Baton stopped working"),
        "the cost-cap escalation",
        60,
    )
    assert "$3.00 of the $2.50 cost cap is spent" in escalation["body"]
    assert "| agent cost | $3.00 | $2.50 |" in escalation["body"]
    runs = store.runs(IssueRef(installation_id=1, repo=repo, number=number))
    assert [run.attempt for run in runs] == [1, 2]
    assert all(run.policy is not None and run.policy.limits.max_cost_usd == 2.5 for run in runs)


async def test_a_halt_survives_stopping_every_process_and_redis(tmp_path: Path) -> None:
    # Redis with persistence, as deployed: the halt must outlive every process, Redis too.
    redis_url, redis_process = start_redis_server(tmp_path / "redis", appendonly=True)
    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    rebooted = started(redis_url, tmp_path / "stack")
    try:
        store = Store.from_url(redis_url)
        async with aiohttp.ClientSession() as session:
            maintainer = Maintainer(session, rebooted.sandbox_url, rebooted.admin_token)
            repo = await new_repo(maintainer, rebooted)
            number = await queued_issue(
                maintainer,
                repo,
                "Outlive a reboot",
                "agent@1: write greeting.txt hel\nagent@1: window 12\n"
                "agent@2: write greeting.txt hello",
            )
            issue = IssueRef(installation_id=1, repo=repo, number=number)
            halted = await eventually(
                lambda: run_state(store, repo, number, RunState.HALTED), "the halt", 30
            )
            await eventually(lambda: _unlocked(store, issue), "the halted job releasing its lock")
            halted = latest_run(store, repo, number)  # as its job left it: its recovery done
            assert halted is not None and not halted.recovery_owed
            # Everything of Baton's goes down, then Redis; GitHub (the sandbox) stays up.
            for name, process in rebooted.processes.items():
                if name != "sandbox":
                    process.stop()
            redis_process.stop()
            redis_url, redis_process = start_redis_server(
                tmp_path / "redis", appendonly=True, port=port
            )
            assert [halt for halt, _ in store.halts()] == [issue]
            assert store.lock_holder(issue) is None
            assert latest_run(store, repo, number) == halted
            rebooted.start_web()
            for n in (1, 2):
                rebooted.start_worker(f"worker-{n}")
            resumed = await eventually(
                lambda: run_state(store, repo, number, RunState.PUSHED_GREEN),
                "the re-entry after the reboot",
                60,
            )
            assert resumed.attempt == 2 and resumed.continuation_of == 1
            assert halted.resume_at is not None and resumed.started_at >= halted.resume_at
    finally:
        rebooted.stop()
        redis_process.stop()


async def reacted(maintainer: Maintainer, repo: str, comment_id: int) -> list[str] | None:
    return await maintainer.reactions(repo, comment_id) or None


async def test_maintainers_steer_baton_from_comments_and_others_cannot(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    await maintainer.grant(repo, "octo-writer", "write")
    await maintainer.grant(repo, "octo-reader", "read")
    number = await queued_issue(
        maintainer,
        repo,
        "Steered by comments",
        "agent@1: sleep 30\nagent@2: write greeting.txt hello",
    )
    issue = IssueRef(installation_id=1, repo=repo, number=number)
    await eventually(lambda: run_state(store, repo, number, RunState.RUNNING), "the run", 30)

    async def command(body: str, author: str) -> list[str]:
        posted = await maintainer.comment(repo, number, body, as_user=author)
        return await eventually(
            lambda: reacted(maintainer, repo, int(posted["id"])), f"{body!r} acknowledged"
        )

    # A reader is refused, whatever the command; nothing changes.
    for body in ("/baton stop", "/baton budget +5", "/baton retry", "/baton status"):
        assert await command(body, "octo-reader") == ["confused"]
    assert store.extra_continuations(issue) == 0
    assert (await run_state(store, repo, number, RunState.RUNNING)) is not None
    # A writer stops the live run: the work is kept, nothing else starts.
    assert await command("/baton stop", "octo-writer") == ["+1"]
    stopped = await eventually(
        lambda: concluded(store, repo, number, RunState.KILLED), "the stopped run", 30
    )
    assert stopped.failure_class == "admin-kill"
    assert await command("/baton stop", "octo-writer") == ["confused"]  # nothing live to stop
    assert await command("/baton budget +2", "octo-writer") == ["+1"]
    assert store.extra_continuations(issue) == 2
    assert await command("/baton status", "octo-writer") == ["+1"]
    assert await command("/baton retry", "octo-writer") == ["+1"]
    retried = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the retried attempt", 60
    )
    assert retried.attempt == 2
    assert await command("/baton launch", "octo-writer") == ["confused"]


async def test_a_paused_repository_settles_but_admits_nothing_until_resumed(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    slow_ci = {**PROJECT, ".sandbox/ci": "#!/bin/sh\nsleep 2\n" + CI_CHECKS_GREETING}
    repo = await new_repo(maintainer, stack, slow_ci)
    settling = await queued_issue(maintainer, repo, "Settles while paused", GREETING_FIX)
    await eventually(
        lambda: run_state(store, repo, settling, RunState.PUSHED_PENDING), "the push", 30
    )
    await maintainer.grant(repo, "octo-reader", "read")
    refused = await maintainer.comment(repo, settling, "/baton pause", as_user="octo-reader")
    assert await eventually(
        lambda: reacted(maintainer, repo, int(refused["id"])), "the reader refused"
    ) == ["confused"]
    assert store.paused_since(repo) is None
    pause = await maintainer.comment(repo, settling, "/baton pause")
    await eventually(lambda: reacted(maintainer, repo, int(pause["id"])), "the pause")
    held = await queued_issue(maintainer, repo, "Held by the pause", GREETING_FIX)
    await eventually(
        lambda: run_state(store, repo, settling, RunState.PUSHED_GREEN), "settling while paused"
    )
    status = await eventually(
        lambda: _status_saying(stack, f"{repo}: paused since"), "the pause in baton status"
    )
    assert "nothing admitted (1 held), 1 settled" in status
    assert latest_run(store, repo, held) is None
    refused = await maintainer.comment(repo, settling, "/baton resume", as_user="octo-reader")
    assert await eventually(
        lambda: reacted(maintainer, repo, int(refused["id"])), "the reader refused"
    ) == ["confused"]
    assert store.paused_since(repo) is not None
    resume = await maintainer.comment(repo, settling, "/baton resume")
    assert await eventually(lambda: reacted(maintainer, repo, int(resume["id"])), "resume") == [
        "+1"
    ]
    await eventually(
        lambda: run_state(store, repo, held, RunState.PUSHED_GREEN), "the held issue after", 60
    )
    after = await _status_saying(stack, "queues:")
    assert after is not None and f"{repo}: paused" not in after


async def _status_saying(stack: LocalBaton, text: str) -> str | None:
    result = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-m", "bot", "status"],
        env=stack.baton_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    return result.stdout if text in result.stdout else None


async def test_the_status_page_shows_a_green_run_and_its_pull_request_in_a_browser(
    stack: LocalBaton, maintainer: Maintainer, store: Store, browser: Browser
) -> None:
    repo = await new_repo(maintainer, stack)
    said = f"{GREETING_FIX}\n{claude_code_said()}"  # the agent's transcript: Claude Code's shape
    number = await queued_issue(maintainer, repo, "Greet the operator", said)
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the run going green", 90
    )
    assert run.pr_url is not None
    ARTIFACTS.mkdir(exist_ok=True)

    operator = await browser.new_context(viewport={"width": 1280, "height": 800})
    page = await operator.new_page()
    await page.goto(f"{stack.web_url}/status?token={OPERATOR_TOKEN}")
    assert page.url == f"{stack.web_url}/status"  # the token left the address bar
    cookies = await operator.cookies()
    assert [c["name"] for c in cookies] == ["baton_operator"]
    assert all(OPERATOR_TOKEN not in c["value"] for c in cookies)  # a signed session instead
    await expect(page.get_by_role("heading", name="Baton status")).to_be_visible()
    await expect(page.get_by_role("region", name="Repositories")).to_contain_text(repo)
    completions = page.get_by_role("region", name="Recent completions")
    row = completions.get_by_role("row").filter(has_text=f"{repo}#{number}")
    await expect(row).to_contain_text("pushed-green")
    await expect(row).to_contain_text("Greet the operator")
    pull_link = row.get_by_role("link", name=f"#{run.pr_number}")
    await expect(pull_link).to_have_attribute("href", run.pr_url)
    assert OPERATOR_TOKEN not in await page.content()
    await page.screenshot(path=ARTIFACTS / "status-page.png", full_page=True)

    await row.get_by_role("link", name="transcript").click()
    await expect(page.get_by_role("heading", level=1)).to_have_text(
        f"Transcript of {repo}#{number}, attempt 1"
    )
    call = page.locator("details.tool").filter(has_text="cat greeting.txt")
    await expect(call).to_have_js_property("open", False)  # folded: its output a click away
    await expect(call.locator("pre.output")).to_be_hidden()
    await call.locator("summary").click()
    await expect(call.locator("pre.output")).to_have_text("hi there")
    refused = page.locator("details.tool.denied")
    await expect(refused.locator("summary")).to_contain_text(DENIED)
    await expect(refused.locator("summary .badge")).to_have_text("denied")
    denial = page.locator(".notice.denial")
    await expect(denial).to_have_text(f"Denied Bash: {DENIED}")
    await expect(denial).to_have_css("background-color", "rgb(255, 241, 229)")  # highlighted
    await page.screenshot(path=ARTIFACTS / "transcript.png", full_page=True)
    await page.go_back()

    await pull_link.click()
    await expect(page).to_have_url(run.pr_url)
    await expect(page.get_by_role("heading", level=1)).to_contain_text(
        f"Greet the operator (#{number})"
    )
    await expect(page.get_by_text("All checks have passed")).to_be_visible()
    await expect(page.get_by_text(f"Closes #{number}")).to_be_visible()
    await page.screenshot(path=ARTIFACTS / "pull-request.png", full_page=True)

    stranger = await (await browser.new_context()).new_page()
    refused = await stranger.goto(f"{stack.web_url}/status")
    assert refused is not None and refused.status == 401
    await expect(stranger.locator("body")).to_contain_text("/status?token=<token>")
    await expect(stranger.locator("body")).not_to_contain_text(repo)


async def test_an_agents_skip_directive_skips_no_ci(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """Mirrors https://docs.github.com/en/actions/managing-workflow-runs-and-deployments/managing-workflow-runs/skipping-workflow-runs:
    `[skip ci]` in a pushed head's message runs no workflow, and with no CI reported a
    head counts as green. The agent's message is made to ask for nothing: CI runs, fails."""
    repo = await new_repo(maintainer, stack)
    body = (
        "agent@1: write greeting.txt hel\nagent@1: commit Greet [skip ci]\n"
        "agent@2: write greeting.txt hello"
    )
    number = await queued_issue(maintainer, repo, "Skips its checks", body)
    await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "attempt 2 green", 90
    )
    first = store.run(IssueRef(installation_id=1, repo=repo, number=number), 1)
    assert first is not None and first.failure_class == "checks-failed"


AWS_KEY = "AKIAIOSFODNN7EXAMPLE"  # the format AWS documents; detect-secrets knows it


async def test_work_that_carries_a_credential_is_never_pushed_and_escalates_once(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """An injected agent commits a key it found: a push would publish it for good."""
    repo = await new_repo(maintainer, stack)
    body = f"agent: write greeting.txt hello\nagent: write deploy/settings.py KEY = '{AWS_KEY}'\n"
    number = await queued_issue(maintainer, repo, "Carries a key", body)
    # The status comment may say why before the escalation is posted: wait for the one.
    comment = await eventually(
        lambda: comment_saying(maintainer, repo, number, "stopped working"),
        "the escalation",
        60,
    )
    assert "carry a credential" in comment["body"]
    assert "`deploy/settings.py` line 1: AWS Access Key" in comment["body"], comment["body"][:900]
    assert AWS_KEY not in comment["body"]
    run = latest_run(store, repo, number)
    assert run is not None and run.failure_class == "credential-found"
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:escalated"}), "the escalated label"
    )
    with pytest.raises(BadRequest) as missing:  # nothing of the attempt left the machine
        await maintainer.gh.getitem(
            "/repos/{+repo}/branches/{+branch}", {"repo": repo, "branch": run.branch}
        )
    assert missing.value.status_code == 404
    comments = await baton_comments(maintainer, repo, number)
    assert len([c for c in comments if "stopped working" in c["body"]]) == 1, "escalated once"


async def test_the_agents_report_reaches_its_pull_request_with_credentials_masked(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    body = f"{GREETING_FIX}\nagent: say Greeted. The deploy key was {AWS_KEY}, I left it alone."
    number = await queued_issue(maintainer, repo, "Reports a key", body)
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the run going green", 60
    )
    pull = next(p for p in await maintainer.pulls(repo) if p["number"] == run.pr_number)
    assert "The deploy key was ***, I left it alone." in pull["body"]
    assert AWS_KEY not in pull["body"]
