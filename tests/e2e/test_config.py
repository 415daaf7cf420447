"""A repository's `.github/baton.yml` at work: setup commands, required checks, run slots,
and the deployment's limits it cannot raise."""

from __future__ import annotations

import asyncio

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.model import Run, RunState
from bot.edges.store import Store
from bot.web.app import QUEUE_LABELS_REFRESH_S
from tests.e2e.test_loop import (
    GREETING_FIX,
    PROJECT,
    baton_comments,
    comment_saying,
    concluded,
    labels_are,
    latest_run,
    new_repo,
    queued_issue,
    run_state,
)
from tests.support import StackSpec

# A deployment that runs a repository's own setup commands.
STACK = StackSpec(database=4, env={"BATON_ALLOW_REPO_COMMANDS": "true"})


async def test_setup_commands_prepare_the_worktree_before_the_agent(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    config = "setup:\n  - sh -c 'printf prepared > setup-ran.txt'\n  - git status --short\n"
    repo = await new_repo(maintainer, stack, {**PROJECT, ".github/baton.yml": config})
    number = await queued_issue(maintainer, repo, "Greet", GREETING_FIX)
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "a green run", 60
    )
    assert sorted(run.changed_files) == ["greeting.txt", "setup-ran.txt"]


async def test_a_failing_setup_command_starts_no_agent_and_says_which(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    config = "setup:\n  - sh -c 'echo registry unreachable >&2; exit 3'\n"
    repo = await new_repo(maintainer, stack, {**PROJECT, ".github/baton.yml": config})
    number = await queued_issue(maintainer, repo, "Greet", GREETING_FIX)
    run = await eventually(
        lambda: concluded(store, repo, number, RunState.FAILED), "the failed attempt", 60
    )
    assert run.failure_class == "env-start-failure"
    assert (
        run.reason == "setup command `sh -c 'echo registry unreachable >&2; exit 3'` exited with 3"
    )
    assert (
        run.agent_result is not None and "stderr: registry unreachable" in run.agent_result.evidence
    )
    assert await maintainer.pulls(repo) == []


async def test_only_the_required_checks_decide_green(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    # The repository's CI fails on every commit; only the `deploy` status is required.
    files = {**PROJECT, ".sandbox/ci": "#!/bin/sh\nexit 1\n"}
    files[".github/baton.yml"] = "required_checks:\n  - deploy\n"
    repo = await new_repo(maintainer, stack, files)
    number = await queued_issue(maintainer, repo, "Greet", GREETING_FIX)
    pushed = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_PENDING), "the pushed run", 60
    )
    assert pushed.head_sha is not None

    async def ci_failed() -> bool:
        runs = await maintainer.gh.getitem(
            "/repos/{+repo}/commits/{sha}/check-runs", {"repo": repo, "sha": pushed.head_sha}
        )
        return any(run["conclusion"] == "failure" for run in runs["check_runs"])

    await eventually(ci_failed, "the optional CI failing", 60)
    settled = latest_run(store, repo, number)
    assert settled is not None and settled.state is RunState.PUSHED_PENDING  # not sent back
    await maintainer.gh.post(
        "/repos/{+repo}/statuses/{sha}",
        {"repo": repo, "sha": pushed.head_sha},
        data={"state": "success", "context": "deploy", "description": "preview deployed"},
    )
    green = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "green on deploy", 60
    )
    assert green.attempt == 1


async def test_a_repository_runs_no_more_agents_at_once_than_its_slots(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    # Two workers are free, but the repository allows one run at a time.
    files = {**PROJECT, ".github/baton.yml": "max_concurrent_runs: 1\n"}
    repo = await new_repo(maintainer, stack, files)
    first = await queued_issue(maintainer, repo, "Slow", f"agent: sleep 3\n{GREETING_FIX}")
    await eventually(lambda: run_state(store, repo, first, RunState.RUNNING), "the first run")
    second = await queued_issue(maintainer, repo, "Quick", GREETING_FIX)
    waiting = await eventually(
        lambda: comment_saying(maintainer, repo, second, "waiting for a run slot"),
        "the second issue waiting",
    )
    assert "allows 1 agent run at once" in waiting["body"]
    assert latest_run(store, repo, second) is None
    green = await eventually(
        lambda: run_state(store, repo, second, RunState.PUSHED_GREEN), "the second run", 90
    )
    first_run = latest_run(store, repo, first)
    assert first_run is not None
    first_pushed = next(s.at for s in first_run.history if s.state is RunState.PUSHED_PENDING)
    assert green.started_at >= first_pushed


async def test_a_repository_names_its_own_labels(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    config = "labels:\n  queue: agent:go\n  in_progress: agent:working\n  review: agent:review\n"
    repo = await new_repo(maintainer, stack, {**PROJECT, ".github/baton.yml": config})

    async def label_known() -> bool:
        return store.queue_labels().get(repo) == "agent:go"

    # The push that created the repository carried the file: a worker reads it at once,
    # and the web process picks the label up on its next refresh.
    await eventually(label_known, "the repository's queue label read from its push")
    await asyncio.sleep(QUEUE_LABELS_REFRESH_S + 1)
    ignored = await maintainer.open_issue(repo, "Not queued here", GREETING_FIX)
    await maintainer.add_label(repo, int(ignored["number"]), "baton:queue")
    issue = await maintainer.open_issue(repo, "Greet", GREETING_FIX)
    number = int(issue["number"])
    await maintainer.add_label(repo, number, "agent:go")
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"agent:working"}), "agent:working", 30
    )
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"agent:review"}), "agent:review", 60
    )
    assert latest_run(store, repo, int(ignored["number"])) is None
    assert await maintainer.labels(repo, int(ignored["number"])) == {"baton:queue"}


async def test_a_file_raising_a_limit_is_explained_once_and_starts_nothing(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    # The deployment allows 3 failed attempts (BATON_MAX_ATTEMPTS left at its default).
    config = "max_continuations: 1\nmax_attempts: 10\n"
    repo = await new_repo(maintainer, stack, {**PROJECT, ".github/baton.yml": config})
    number = await queued_issue(maintainer, repo, "Never starts", GREETING_FIX)
    comment = await eventually(
        lambda: comment_saying(maintainer, repo, number, "is not valid"), "the config comment"
    )
    assert (
        "- line 2: `max_attempts`: asks for 10, above this deployment's limit of 3 "
        "(`BATON_MAX_ATTEMPTS`)" in comment["body"]
    )
    assert "max_continuations" not in comment["body"]
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:escalated"}), "the escalated label"
    )
    assert latest_run(store, repo, number) is None
    # Queued again with the file unchanged: refused again, with no second comment.
    await maintainer.remove_label(repo, number, "baton:escalated")
    await maintainer.add_label(repo, number, "baton:queue")
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:escalated"}), "the second refusal"
    )
    assert latest_run(store, repo, number) is None
    assert len(await baton_comments(maintainer, repo, number)) == 1


MATRIX_CI = """#!/bin/sh
# 38 jobs; only job-35, the required one, checks the greeting.
if [ "$SANDBOX_CHECK" = job-35 ]; then
    grep -q hello greeting.txt || { echo "job-35: greeting.txt does not say hello"; exit 1; }
fi
"""


async def test_a_required_check_on_the_second_page_of_a_matrix_decides(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """GitHub lists 30 check runs a page by default: job-35 of 38 is only on page 2."""
    files = {
        **PROJECT,
        ".sandbox/ci": MATRIX_CI,
        ".sandbox/checks": "".join(f"job-{n:02}\n" for n in range(1, 39)),
        ".github/baton.yml": "required_checks:\n  - job-35\n",
    }
    repo = await new_repo(maintainer, stack, files)
    body = "agent@1: write greeting.txt nope\nagent@2: write greeting.txt hello"
    number = await queued_issue(maintainer, repo, "A matrix", body)
    green = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "green on job-35", 120
    )
    assert green.attempt == 2
    first = store.run(green.issue, 1)
    assert first is not None and first.failure_class == "checks-failed"
    brief = (stack.workdir / "baton" / "runs" / repo / str(number) / "2" / "brief.md").read_text()
    assert "### job-35: failure" in brief
    assert "greeting.txt does not say hello" in brief
    assert "job-01" not in brief, "only the required check's failure goes back"


async def test_an_agent_outliving_its_token_still_opens_its_pull_request(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """An installation token expires (here after 3 s instead of an hour); Baton asks for a
    valid one on every call, so the PR opens after an agent working longer than that.
    Mirrors https://docs.github.com/en/apps/creating-github-apps/authenticating-with-a-github-app/authenticating-as-a-github-app-installation
    ("installation access tokens expire after 1 hour").
    """
    repo = await new_repo(maintainer, stack, PROJECT)
    await maintainer.gh.patch("/_sandbox/config", data={"token_lifetime_seconds": 3})
    try:
        number = await queued_issue(maintainer, repo, "Slow", f"agent: sleep 5\n{GREETING_FIX}")
        green = await eventually(
            lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "a green run", 90
        )
    finally:
        await maintainer.gh.patch("/_sandbox/config", data={"token_lifetime_seconds": 3600})
    assert green.attempt == 1, "the first attempt opened the PR"
    [pull] = await maintainer.pulls(repo)
    assert f"#{number}" in pull["body"]
    said = " ".join(comment["body"] for comment in await baton_comments(maintainer, repo, number))
    assert "failed" not in said


async def test_a_pull_request_github_puts_off_opens_when_the_wait_ends_without_a_second_run(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    """GitHub answers opening the PR with a secondary rate limit asking for 35 s, longer
    than a job holds its worker. The pushed head is kept, the PR opens once the wait has
    passed, and the agent never runs again for it. Mirrors
    https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api#exceeding-the-rate-limit
    ("If the retry-after response header is present, you should not retry your request
    until after that many seconds has elapsed").
    """
    repo = await new_repo(maintainer, stack, PROJECT)
    await maintainer.gh.post(
        "/_sandbox/faults",
        data={
            "method": "POST",
            "path": f"^/repos/{repo}/pulls$",
            "status": 403,
            "retry_after": 35,
            "count": 1,
        },
    )
    try:
        number = await queued_issue(maintainer, repo, "Greet", GREETING_FIX)

        async def put_off() -> Run | None:
            run = latest_run(store, repo, number)
            return run if run is not None and run.pull_pending is not None else None

        pending = await eventually(put_off, "the pushed run with its PR put off", 60)
        assert pending.state is RunState.PUSHED_PENDING and pending.pr_number is None
        assert await maintainer.pulls(repo) == []
        green = await eventually(
            lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "a green run", 120
        )
    finally:
        await maintainer.gh.delete("/_sandbox/faults")
    assert green.attempt == 1 and green.pull_pending is None, "the one attempt opened the PR"
    assert green.head_sha == pending.head_sha
    [pull] = await maintainer.pulls(repo)
    assert pull["number"] == green.pr_number
    assert len(store.runs(green.issue)) == 1
    said = " ".join(comment["body"] for comment in await baton_comments(maintainer, repo, number))
    assert "failed" not in said
