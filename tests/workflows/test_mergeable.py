"""Keeping PRs mergeable, piece by piece: the push that starts it, the index, the trial merge."""

from __future__ import annotations

import copy
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from bot.domain.jobs import EVENTS
from bot.domain.model import IssueRef, Run, RunState
from bot.edges.git import Workspace
from bot.edges.queue import Dispatcher
from bot.edges.store import Store
from tests.edges.test_git import TOKEN, origin, sh, workspace
from tests.support import payload
from tests.web.test_app import client, post, queued

__all__ = ["client", "origin", "workspace"]  # fixtures this module uses

AFTER = "f" * 40
AT = datetime(2024, 5, 2, 9, 0, tzinfo=UTC)


def push(ref: str, **changes: Any) -> dict[str, Any]:
    data = copy.deepcopy(payload("push/event.with-installation.json"))
    data.update({"ref": ref, "deleted": False, "created": False, "after": AFTER, "commits": []})
    data.update(changes)
    return data


async def test_a_push_to_the_default_branch_looks_at_batons_pull_requests_on_it(
    client: TestClient, dispatch: Dispatcher
) -> None:
    data = push("refs/heads/master")
    status, _ = await post(client, "push", data)
    assert status == 202
    repo = data["repository"]["full_name"]
    assert queued(dispatch, EVENTS) == [
        (
            "jobs.mergeable.keep_mergeable",
            (data["installation"]["id"], repo, "master", AFTER, 0, "", ""),
        )
    ]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(push("refs/heads/feature"), id="another branch"),
        pytest.param(push("refs/heads/baton/issue-3-greet"), id="Baton's own branch"),
        pytest.param(push("refs/tags/v1"), id="a tag"),
        pytest.param(push("refs/heads/master", deleted=True, after="0" * 40), id="deleted"),
    ],
)
async def test_other_pushes_look_at_nothing(
    client: TestClient, dispatch: Dispatcher, data: dict[str, Any]
) -> None:
    status, _ = await post(client, "push", data)
    assert status == 202
    assert queued(dispatch, EVENTS) == []


def run_on(number: int, pull: int, base: str | None, state: RunState) -> Run:
    issue = IssueRef(installation_id=3, repo="octo/widgets", number=number)
    run = Run.claimed(issue, 1, f"baton/issue-{number}", AT).model_copy(
        update={"pr_number": pull, "base_branch": base}
    )
    return run.moved(state, AT) if state is not RunState.CLAIMED else run


def write(store: Store, run: Run) -> None:
    claim = store.claim(run.issue)
    assert claim is not None
    store.save_run(run, claim)
    store.release(claim)


def test_open_pull_requests_are_indexed_by_base_until_they_merge_or_close(store: Store) -> None:
    write(store, run_on(1, 11, "main", RunState.PUSHED_GREEN))
    write(store, run_on(2, 12, "main", RunState.PUSHED_PENDING))
    write(store, run_on(3, 13, "baton/issue-2", RunState.PUSHED_GREEN))
    write(store, run_on(4, 14, None, RunState.CLAIMED))  # not on a base yet
    assert store.open_pulls("octo/widgets", "main") == [11, 12]
    assert store.open_pulls("octo/widgets", "baton/issue-2") == [13]
    assert store.open_pulls("octo/other", "main") == []

    store.update_run(
        IssueRef(installation_id=3, repo="octo/widgets", number=1),
        1,
        lambda current: current.moved(RunState.MERGED, AT),
    )
    assert store.open_pulls("octo/widgets", "main") == [12]
    # Retargeted by its chain: it is indexed under its new base.
    store.update_run(
        IssueRef(installation_id=3, repo="octo/widgets", number=3),
        1,
        lambda current: current.model_copy(update={"base_branch": "main"}),
    )
    assert store.open_pulls("octo/widgets", "main") == [12, 13]
    store.forget_open_pull("octo/widgets", 12)
    assert store.open_pulls("octo/widgets", "main") == [13]


def commit(seed: Path, files: dict[str, str], message: str) -> str:
    for path, text in files.items():
        (seed / path).write_text(text)
    sh(seed, "add", "-A")
    sh(seed, "commit", "-q", "-m", message)
    return sh(seed, "rev-parse", "HEAD")


async def test_a_trial_merge_names_the_conflicting_files_and_pushes_nothing(
    workspace: Workspace, origin: Path, tmp_path: Path
) -> None:
    seed = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(origin), str(seed)], check=True)
    sh(seed, "checkout", "-q", "-b", "baton/issue-1")
    head = commit(seed, {"app.py": "print('agent')\n", "new.py": "x = 1\n"}, "Agent's work")
    sh(seed, "push", "-q", "origin", "baton/issue-1")
    sh(seed, "checkout", "-q", "main")
    base = commit(seed, {"app.py": "print('maintainer')\n"}, "Maintainer's change")
    sh(seed, "push", "-q", "origin", "main")
    await workspace.refresh_mirror("octo/app", str(origin), TOKEN)

    tried = await workspace.trial_merge("octo/app", "baton/issue-1", head, "main")
    assert tried.conflicts == ("app.py",)
    assert tried.behind
    assert tried.parents == (sh(origin, "rev-parse", "main~1"),)
    assert sh(origin, "rev-parse", "baton/issue-1") == head  # nothing pushed
    assert sh(origin, "rev-parse", "main") == base
    # Again: its scratch worktree was removed, and is made afresh.
    again = await workspace.trial_merge("octo/app", "baton/issue-1", head, "main")
    assert again == tried


async def test_a_trial_merge_tells_behind_from_up_to_date(
    workspace: Workspace, origin: Path, tmp_path: Path
) -> None:
    seed = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(origin), str(seed)], check=True)
    sh(seed, "checkout", "-q", "-b", "baton/issue-2")
    head = commit(seed, {"new.py": "x = 1\n"}, "Agent's work")
    sh(seed, "push", "-q", "origin", "baton/issue-2")
    await workspace.refresh_mirror("octo/app", str(origin), TOKEN)
    current = await workspace.trial_merge("octo/app", "baton/issue-2", head, "main")
    assert not current.behind and current.conflicts == ()

    sh(seed, "checkout", "-q", "main")
    commit(seed, {"other.py": "y = 2\n"}, "Maintainer's change")
    sh(seed, "push", "-q", "origin", "main")
    await workspace.refresh_mirror("octo/app", str(origin), TOKEN)
    behind = await workspace.trial_merge("octo/app", "baton/issue-2", head, "main")
    assert behind.behind and behind.conflicts == ()
