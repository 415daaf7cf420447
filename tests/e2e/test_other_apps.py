"""Baton among other Apps, as on github.com, through real processes: GITHUB_APP_ID is the
App's client ID (the JWT issuer GitHub recommends), a linter App with `checks: write` gets
a queued suite with no runs on every push, drafts are refused on a private repository of
an account on GitHub Free, and "Re-run all checks" of Baton's suite is `/baton retry`.
"""

from __future__ import annotations

from typing import Any

import pytest

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.model import RunState
from bot.domain.render import DRAFTS_REFUSED_LINE
from bot.edges.store import Store
from bot.sandbox.auth import APP_CLIENT_ID
from tests.e2e.test_loop import (
    GREETING_FIX,
    PROJECT,
    attempt_state,
    baton_comments,
    labels_are,
    new_repo,
    queued_issue,
)
from tests.e2e.test_native import (
    RED_TWICE_THEN_GREEN,
    baton_check,
    escalated,
    run_of,
)
from tests.e2e.test_steering import logged
from tests.support import StackSpec, sweep

STACK = StackSpec(database=1, env={"GITHUB_APP_ID": APP_CLIENT_ID})
NO_CI = {"README.md": "# demo\n", "greeting.txt": "hi\n"}


@pytest.fixture(autouse=True)
async def linter(maintainer: Maintainer) -> None:
    """Install the sandbox's linter App on the maintainer's account (every repository)."""
    await maintainer.install_app("sandbox-lint", "maintainer")


async def suites(maintainer: Maintainer, repo: str, sha: str) -> list[dict[str, Any]]:
    found = await maintainer.gh.getitem(
        "/repos/{+repo}/commits/{sha}/check-suites", {"repo": repo, "sha": sha}
    )
    return list(found["check_suites"])


async def test_no_ci_but_a_linters_queued_suite_goes_green(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack, NO_CI)
    number = await queued_issue(maintainer, repo, "Greet properly", GREETING_FIX)
    green = await eventually(
        lambda: attempt_state(store, repo, number, 1, RunState.PUSHED_GREEN), "green", 90
    )
    on_head = await suites(maintainer, repo, str(green.head_sha))
    assert ("sandbox-lint", "queued", 0) in [
        (s["app"]["slug"], s["status"], s["latest_check_runs_count"]) for s in on_head
    ]
    await eventually(
        lambda: labels_are(maintainer, repo, number, {"baton:review"}), "the review label"
    )


async def test_with_a_client_id_batons_own_check_run_is_not_ci(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    number = await queued_issue(maintainer, repo, "Greet properly", GREETING_FIX)
    green = await eventually(
        lambda: attempt_state(store, repo, number, 1, RunState.PUSHED_GREEN), "green", 90
    )
    await eventually(
        lambda: baton_check(maintainer, repo, str(green.head_sha), "Green", "success"),
        "Baton's own check run succeeding",
    )


async def test_a_draft_refused_on_github_free_opens_as_a_normal_pull_request(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    files = {**PROJECT, ".github/baton.yml": "draft_until_green: true\n"}
    made = await maintainer.create_repo("private-drafts", files, stack.workdir, private=True)
    repo = str(made["full_name"])
    number = await queued_issue(maintainer, repo, "Greet properly", GREETING_FIX)
    green = await eventually(
        lambda: attempt_state(store, repo, number, 1, RunState.PUSHED_GREEN), "green", 90
    )
    assert green.pr_number is not None and green.drafts_refused
    pull = await maintainer.pull(repo, green.pr_number)
    assert (pull["draft"], pull["state"]) == (False, "open")

    async def said() -> bool:
        bodies = [c["body"] for c in await baton_comments(maintainer, repo, number)]
        return any(DRAFTS_REFUSED_LINE in body for body in bodies)

    await eventually(said, "the status comment saying why it is no draft")


async def test_re_run_all_checks_of_batons_suite_is_a_retry(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    await maintainer.grant(repo, "octo-writer", "write")
    number = await queued_issue(maintainer, repo, "Green at last", RED_TWICE_THEN_GREEN)
    await eventually(lambda: escalated(maintainer, repo, number), "the escalation", 90)
    second = run_of(store, repo, number, 2)
    asked = await eventually(
        lambda: baton_check(maintainer, repo, str(second.head_sha), "Escalated", "action_required"),
        "the check run asking for action",
    )

    await maintainer.as_user("octo-writer").rerequest_check_suite(repo, asked["check_suite"]["id"])
    retried = await eventually(
        lambda: attempt_state(store, repo, number, 3, RunState.PUSHED_GREEN), "the retry", 90
    )
    assert (retried.continuation_of, retried.pr_number) == (2, second.pr_number)
    assert logged(stack, f"{repo}#{number}: @octo-writer's re-run retries it")


async def test_a_failed_ready_for_review_is_asked_again_by_the_sweep(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    files = {**PROJECT, ".github/baton.yml": "draft_until_green: true\n"}
    repo = await new_repo(maintainer, stack, files)
    # GitHub's GraphQL fails for a while: more than any retry of one call would cover.
    fault = {"method": "POST", "path": "^/graphql$", "status": 502, "count": 6}
    await maintainer.gh.post("/_sandbox/faults", data=fault)
    number = await queued_issue(maintainer, repo, "Greet properly", GREETING_FIX)
    green = await eventually(
        lambda: attempt_state(store, repo, number, 1, RunState.PUSHED_GREEN), "green", 90
    )
    assert green.pr_number is not None

    async def failed() -> bool:
        return logged(stack, f"PR #{green.pr_number} was not marked ready for review")

    await eventually(failed, "the failed ready-for-review in the log")
    await maintainer.gh.delete("/_sandbox/faults")
    assert (await maintainer.pull(repo, green.pr_number))["draft"] is True

    assert f"readied {repo}#{number}" in sweep(stack)
    assert (await maintainer.pull(repo, green.pr_number))["draft"] is False
    assert "readied" not in sweep(stack)  # ready now: not asked again
