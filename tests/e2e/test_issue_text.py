"""The issue's text through real processes: the brief uses it as queued, the agent's is inert.

The scripted agent follows the `agent:` lines of its brief, so what it writes to the
branch shows which text it was given. Its first attempt fails CI while the issue is
edited; the continuation's brief then shows whether the edit reached the agent.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.inert import JOINER
from bot.domain.model import IssueRef, RunState
from bot.domain.render import STATUS_MARKER
from bot.edges.store import Store
from bot.sandbox.auth import ADMIN_LOGIN
from bot.sandbox.references import closing_references, mentions
from tests.e2e.test_loop import (
    attempt_state,
    baton_comments,
    closed_issue,
    new_repo,
    run_state,
)
from tests.support import StackSpec

AUTHOR = "octo-author"  # opened the issue; no role on the repository


STACK = StackSpec(database=7)


# The first attempt fails CI, slowly enough for the issue to be edited while it runs;
# every attempt writes which text it was briefed with to said.txt.
QUEUED = (
    "agent@1: write greeting.txt goodbye\n"
    "agent@1: sleep 8\n"
    "agent@2: write greeting.txt hello\n"
    "agent: write said.txt queued text\n"
)
EDITED = (
    QUEUED.replace("queued text", "edited text")
    + "agent@2: write extra.txt the edit's own instruction\n"
)


async def file_on(maintainer: Maintainer, repo: str, path: str, ref: str) -> str:
    found = await maintainer.gh.getitem(
        "/repos/{+repo}/contents/{+path}{?ref}", {"repo": repo, "path": path, "ref": ref}
    )
    return base64.b64decode(found["content"]).decode()


def brief(stack: LocalBaton, repo: str, number: int, attempt: int) -> str:
    path = stack.workdir / "baton" / "runs" / repo / str(number) / str(attempt) / "brief.md"
    return path.read_text()


async def status_saying(
    maintainer: Maintainer, repo: str, number: int, text: str
) -> dict[str, Any] | None:
    for comment in await baton_comments(maintainer, repo, number):
        if comment["body"].startswith(STATUS_MARKER) and text in comment["body"]:
            return comment
    return None


@pytest.mark.parametrize(
    ("editor", "taken"), [(AUTHOR, False), (ADMIN_LOGIN, True)], ids=["author", "maintainer"]
)
async def test_an_edit_after_queueing_reaches_the_brief_only_from_a_maintainer(
    stack: LocalBaton, maintainer: Maintainer, store: Store, editor: str, taken: bool
) -> None:
    repo = await new_repo(maintainer, stack)
    author = maintainer.as_user(AUTHOR)
    number = int((await author.open_issue(repo, "Greet properly", QUEUED))["number"])
    await maintainer.add_label(repo, number, "baton:queue")
    await eventually(lambda: run_state(store, repo, number, RunState.RUNNING), "the first attempt")

    edits = maintainer if editor == ADMIN_LOGIN else author
    await edits.edit_issue(repo, number, body=EDITED)
    said = (
        f"edited since it was queued, by `{editor}`: the agent works from the edited text"
        if taken
        else f"changed since it was queued, by `{editor}`, and those changes are not taken in"
    )
    await eventually(lambda: status_saying(maintainer, repo, number, said), "the edit noted")

    run = await eventually(
        lambda: attempt_state(store, repo, number, 2, RunState.PUSHED_GREEN),
        "the continuation going green",
        90,
    )
    first = store.run(IssueRef(installation_id=1, repo=repo, number=number), 1)
    assert first is not None and first.failure_class == "checks-failed"
    assert "queued text" in brief(stack, repo, number, 1)
    second = brief(stack, repo, number, 2)
    on_branch = await file_on(maintainer, repo, "said.txt", run.branch)
    if taken:
        assert "edited text" in second and "extra.txt" in second
        assert on_branch == "edited text"
        assert sorted(run.changed_files) == ["extra.txt", "greeting.txt", "said.txt"]
    else:
        assert "edited text" not in second and "extra.txt" not in second
        assert on_branch == "queued text"
        assert sorted(run.changed_files) == ["greeting.txt", "said.txt"]
    # The line stays on the status comment as the run moves on.
    green = await eventually(
        lambda: status_saying(maintainer, repo, number, "pushed-green"), "the green status"
    )
    assert said in green["body"]


async def test_the_agents_report_closes_no_other_issue_and_notifies_nobody(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    unrelated = int((await maintainer.open_issue(repo, "Unrelated", "Leave me open."))["number"])
    report = "Fixes #1 and closes GH-1; thanks @octo-org/team and @octocat (mail: dev@example.com)"
    body = f"agent: write greeting.txt hello\nagent: say {report}"
    number = int((await maintainer.open_issue(repo, "Greet", body))["number"])
    await maintainer.add_label(repo, number, "baton:queue")
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN), "the PR going green", 90
    )

    [pr] = await maintainer.pulls(repo)
    assert pr["number"] == run.pr_number
    assert report in pr["body"].replace(JOINER, "")  # it reads as the agent wrote it
    assert closing_references(pr["body"], repo) == {(repo.lower(), number)}
    assert mentions(pr["body"]) == set()
    for comment in await baton_comments(maintainer, repo, number):
        assert mentions(comment["body"]) == set()

    await maintainer.merge(repo, int(pr["number"]))
    await eventually(lambda: closed_issue(maintainer, repo, number), "the merge closing it")
    assert (await maintainer.issue(repo, unrelated))["state"] == "open"


async def test_a_chain_link_works_from_its_text_as_read_when_the_chain_was_queued(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    author = maintainer.as_user(AUTHOR)
    first = await maintainer.open_issue(
        repo, "Link 1", "agent: write greeting.txt hello\nagent: sleep 4"
    )
    second = await author.open_issue(repo, "Link 2", "agent: write said.txt queued text")
    links = [int(first["number"]), int(second["number"])]
    tasks = "".join(f"- [ ] #{n}\n" for n in links)
    tracking = int((await maintainer.open_issue(repo, "A chain", tasks))["number"])
    await maintainer.add_label(repo, tracking, "baton:queue")
    await eventually(lambda: run_state(store, repo, links[0], RunState.RUNNING), "link 1 running")

    await author.edit_issue(repo, links[1], body="agent: write said.txt edited text")
    said = f"changed since it was queued, by `{AUTHOR}`, and those changes are not taken in"
    await eventually(lambda: status_saying(maintainer, repo, links[1], said), "the edit noted")

    run = await eventually(
        lambda: run_state(store, repo, links[1], RunState.PUSHED_GREEN), "link 2 going green", 90
    )
    assert "edited text" not in brief(stack, repo, links[1], run.attempt)
    assert await file_on(maintainer, repo, "said.txt", run.branch) == "queued text"


async def set_issue_state(user: Maintainer, repo: str, number: int, state: str) -> None:
    await user.gh.patch(
        "/repos/{+repo}/issues/{number}", {"repo": repo, "number": number}, data={"state": state}
    )


async def test_a_retry_after_the_author_closes_and_reopens_works_from_the_text_as_queued(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    author = maintainer.as_user(AUTHOR)
    queued = (
        "agent@1: sleep 30\nagent: write greeting.txt hello\nagent: write said.txt queued text\n"
    )
    number = int((await author.open_issue(repo, "Greet properly", queued))["number"])
    await maintainer.add_label(repo, number, "baton:queue")
    await eventually(lambda: run_state(store, repo, number, RunState.RUNNING), "the first attempt")

    edited = queued.replace("queued text", "edited text") + "agent: write extra.txt the edit's\n"
    await author.edit_issue(repo, number, body=edited)
    said = f"changed since it was queued, by `{AUTHOR}`, and those changes are not taken in"
    await eventually(lambda: status_saying(maintainer, repo, number, said), "the edit noted")
    # GitHub lets the author close their own issue: that stops the run, steering or not.
    await set_issue_state(author, repo, number, "closed")
    await eventually(lambda: run_state(store, repo, number, RunState.KILLED), "the stop", 30)
    await set_issue_state(author, repo, number, "open")

    await maintainer.comment(repo, number, "/baton retry")
    run = await eventually(
        lambda: attempt_state(store, repo, number, 2, RunState.PUSHED_GREEN),
        "the retried attempt going green",
        90,
    )
    second = brief(stack, repo, number, 2)
    assert "queued text" in second
    assert "edited text" not in second and "extra.txt" not in second
    assert await file_on(maintainer, repo, "said.txt", run.branch) == "queued text"
    assert sorted(run.changed_files) == ["greeting.txt", "said.txt"]
