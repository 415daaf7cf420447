"""The whole loop through real processes: the sandbox GitHub, signed webhooks, web, workers."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import redis

from bot.devstack import LocalBaton
from bot.model import IssueRef, Run, RunState
from bot.render import STATUS_MARKER
from bot.sandbox.maintainer import Maintainer, eventually
from bot.store import Store
from tests.conftest import RedisServer

AGENT = Path(__file__).parent / "agents" / "scripted_agent.py"
CI_CHECKS_GREETING = "#!/bin/sh\nset -e\ngrep -q 'hello' greeting.txt\n"
PROJECT = {"README.md": "# demo\n", ".sandbox/ci": CI_CHECKS_GREETING, "greeting.txt": "hi\n"}
_names = itertools.count(1)


@pytest.fixture(scope="module")
def stack(
    redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalBaton]:
    redis.Redis.from_url(redis_server.url).flushall()
    baton = LocalBaton(
        workdir=tmp_path_factory.mktemp("e2e"),
        redis_url=redis_server.url,
        agent_command=f"{sys.executable} {AGENT}",
        extra_env={"BATON_AGENT_WALL_CLOCK_MINUTES": "1"},
    )
    baton.start(workers=2)
    yield baton
    baton.stop()
    if any(not p.alive() for p in baton.processes.values()):
        print(baton.logs())


@pytest.fixture
async def maintainer(stack: LocalBaton) -> AsyncIterator[Maintainer]:
    async with aiohttp.ClientSession() as session:
        yield Maintainer(session, stack.sandbox_url, stack.admin_token)


@pytest.fixture
def store(stack: LocalBaton) -> Store:
    return Store.from_url(stack.redis_url)


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
    assert await maintainer.labels(repo, number) == {"baton:review"}

    [pr] = await maintainer.pulls(repo)
    assert pr["head"]["ref"] == run.branch and pr["head"]["sha"] == run.head_sha
    assert pr["html_url"] == run.pr_url
    assert pr["body"].startswith(f"Closes #{number}\n")
    assert "- `greeting.txt`" in pr["body"]
    assert "Done: followed the issue's instructions." in pr["body"]
    assert run.changed_files == ["greeting.txt"]

    [status] = await baton_comments(maintainer, repo, number)
    assert status["body"].startswith(STATUS_MARKER)
    assert "pushed-green" in status["body"] and run.pr_url in status["body"]

    await maintainer.merge(repo, int(pr["number"]))
    closed = await eventually(
        lambda: _issue_closed(maintainer, repo, number), "the merge closing the issue"
    )
    assert closed["state_reason"] == "completed"


async def _issue_closed(maintainer: Maintainer, repo: str, number: int) -> dict[str, Any] | None:
    issue = await maintainer.issue(repo, number)
    return issue if issue["state"] == "closed" else None


async def test_red_ci_fails_the_run_as_checks_failed(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    issue = await maintainer.open_issue(repo, "Say goodbye", "agent: write greeting.txt goodbye\\n")
    number = int(issue["number"])
    await maintainer.add_label(repo, number, "baton:queue")
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN, RunState.FAILED),
        "the run settling",
        90,
    )
    assert (run.state, run.failure_class) == (RunState.FAILED, "checks-failed")
    assert await maintainer.labels(repo, number) == {"baton:failed"}
    [pr] = await maintainer.pulls(repo)
    assert pr["state"] == "open", "the work stays on its PR for a human (or a continuation)"


async def test_agent_failure_fails_the_run_without_a_pr(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    issue = await maintainer.open_issue(repo, "Crash", "agent: write x.txt y\nagent: exit 3")
    number = int(issue["number"])
    await maintainer.add_label(repo, number, "baton:queue")
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.FAILED), "the run failing"
    )
    assert run.failure_class == "agent-error"
    assert run.agent_result is not None and run.agent_result.exit_code == 3
    assert await maintainer.pulls(repo) == []
    assert await maintainer.labels(repo, number) == {"baton:failed"}
    [status] = await baton_comments(maintainer, repo, number)
    assert "exited 3" in status["body"]


async def test_an_agent_that_changes_nothing_ends_no_change(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    issue = await maintainer.open_issue(repo, "Nothing to do", "No instructions for the agent.")
    number = int(issue["number"])
    await maintainer.add_label(repo, number, "baton:queue")
    run = await eventually(lambda: run_state(store, repo, number, RunState.NO_CHANGE), "no-change")
    assert run.head_sha is None
    assert await maintainer.pulls(repo) == []


async def test_the_agent_holds_no_credential(
    stack: LocalBaton, maintainer: Maintainer, store: Store, tmp_path: Path
) -> None:
    dump = tmp_path / "agent-env.json"
    repo = await new_repo(maintainer, stack)
    issue = await maintainer.open_issue(repo, "Show env", f"agent: env-dump {dump}")
    number = int(issue["number"])
    await maintainer.add_label(repo, number, "baton:queue")
    await eventually(lambda: run_state(store, repo, number, RunState.NO_CHANGE), "the run ending")
    env = json.loads(dump.read_text())
    secrets = {
        stack.webhook_secret,
        stack.admin_token,
        Path(stack.sandbox_env["GITHUB_PRIVATE_KEY_PATH"]).read_text().strip(),
    }
    assert not [name for name, value in env.items() if any(s in value for s in secrets)]
    assert not {"GITHUB_PRIVATE_KEY_PATH", "GITHUB_WEBHOOK_SECRET", "REDIS_URL"} & set(env)
    identity = f"{stack.sandbox_env['GITHUB_APP_ID']}@{stack.sandbox_url}"
    token = store.installation_token(identity, 1)
    assert token is not None and not [v for v in env.values() if token in v]


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
            *(_post_signed(session, stack, body, str(uuid.uuid4())) for _ in range(2)),
        )
    assert answers[1:] == [202, 202]
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the run going green", 90
    )
    await asyncio.sleep(1)  # give any duplicate job time to (wrongly) start
    assert run.attempt == 1 and latest_run(store, repo, number) == run
    assert len(await maintainer.pulls(repo)) == 1
    assert len(await baton_comments(maintainer, repo, number)) == 1


async def _last_labeled_delivery(maintainer: Maintainer, repo: str) -> dict[str, Any]:
    repo_id = (await maintainer.gh.getitem("/repos/{+repo}", {"repo": repo}))["id"]
    deliveries = await maintainer.gh.getitem("/_sandbox/deliveries?event=issues&action=labeled")
    [latest] = [d for d in deliveries if d["repository_id"] == repo_id][-1:]
    found: dict[str, Any] = await maintainer.gh.getitem(f"/_sandbox/deliveries/{latest['id']}")
    return found


async def _post_signed(
    session: aiohttp.ClientSession, stack: LocalBaton, body: bytes, delivery: str
) -> int:
    signature = (
        "sha256=" + hmac.new(stack.webhook_secret.encode(), body, hashlib.sha256).hexdigest()
    )
    headers = {
        "X-GitHub-Event": "issues",
        "X-GitHub-Delivery": delivery,
        "X-Hub-Signature-256": signature,
        "Content-Type": "application/json",
    }
    async with session.post(f"{stack.web_url}/webhook", data=body, headers=headers) as response:
        return response.status


async def test_failed_pull_request_creation_fails_the_run_with_its_reason(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    await maintainer.gh.post(
        "/_sandbox/faults",
        data={"method": "POST", "path": f"^/repos/{repo}/pulls$", "status": 422, "rate": 1.0},
    )
    try:
        issue = await maintainer.open_issue(
            repo, "No PR possible", "agent: write greeting.txt hello"
        )
        number = int(issue["number"])
        await maintainer.add_label(repo, number, "baton:queue")
        run = await eventually(
            lambda: run_state(store, repo, number, RunState.FAILED), "the failure"
        )
    finally:
        await maintainer.gh.delete("/_sandbox/faults")
    assert run.failure_class == "pr-failed"
    assert run.reason is not None and "opening the pull request failed" in run.reason
    assert await maintainer.labels(repo, number) == {"baton:failed"}
