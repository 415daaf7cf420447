"""Queueing by comment, and the agent an issue runs, through real processes.

`/baton start` from a collaborator with the role queues the issue as the queue label
does, and Baton puts the label on; from anyone else it is refused and nothing moves.
The deployment runs two agents: the scripted agent as `command` (its default), and
aider, whose CLI here is a script that does the scripted agent's work behind aider's
banner. A steerer's `baton:agent:aider` label picks aider for the issue; anyone
else's is ignored.
"""

from __future__ import annotations

from pathlib import Path

from bot.devkit.devstack import LocalBaton
from bot.devkit.maintainer import Maintainer, eventually
from bot.domain.model import IssueRef, RunState
from bot.domain.render import STATUS_MARKER
from bot.edges.store import Store
from tests.e2e.test_loop import (
    GREETING_FIX,
    baton_comments,
    labels_are,
    latest_run,
    new_repo,
    reacted,
    run_state,
)
from tests.e2e.test_steering import logged
from tests.support import StackSpec

SCRIPTED_AIDER = Path(__file__).parents[1] / "stand_ins" / "scripted_aider"

STACK = StackSpec(
    database=6,
    env={"BATON_AGENTS": "command,aider", "BATON_AGENT_BINARIES": f"aider={SCRIPTED_AIDER}"},
)


async def _status_saying(maintainer: Maintainer, repo: str, number: int, text: str) -> str | None:
    for comment in await baton_comments(maintainer, repo, number):
        body = str(comment["body"])
        if body.startswith(STATUS_MARKER) and text in body:
            return body
    return None


async def test_a_writers_start_queues_the_issue_and_a_readers_changes_nothing(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    await maintainer.grant(repo, "octo-writer", "write")
    await maintainer.grant(repo, "octo-reader", "read")
    opened = await maintainer.open_issue(repo, "Greet by comment", GREETING_FIX)
    number = int(opened["number"])
    issue = IssueRef(installation_id=1, repo=repo, number=number)

    async def command(body: str, author: str) -> list[str]:
        posted = await maintainer.comment(repo, number, body, as_user=author)
        return await eventually(
            lambda: reacted(maintainer, repo, int(posted["id"])), f"{body!r} acknowledged"
        )

    # A reader's start is refused: no label, no run, no word but the reaction.
    assert await command("/baton start", "octo-reader") == ["confused"]
    assert logged(stack, "refused '/baton start' from @octo-reader: @octo-reader has read access")
    # An agent the deployment does not run: refused, with the agents it does run.
    assert await command("/baton start --agent claude", "octo-writer") == ["confused"]
    [reply] = await eventually(lambda: baton_comments(maintainer, repo, number), "the reply")
    assert "`claude` is not an agent this deployment runs" in reply["body"]
    assert "It runs `command`, `aider`" in reply["body"]
    assert await maintainer.labels(repo, number) == set()
    assert latest_run(store, repo, number) is None

    # A writer's start puts the queue label on and runs the issue, once.
    assert await command("/baton start", "octo-writer") == ["+1"]
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN, RunState.FAILED),
        "the run settling",
        90,
    )
    assert run.state is RunState.PUSHED_GREEN, run.reason
    assert run.agent == "command"
    labelled = [
        (event["actor"]["login"], event["label"]["name"])
        for event in await maintainer.issue_events(repo, number)
        if event["event"] == "labeled"
    ]
    assert labelled[0] == ("baton[bot]", "baton:queue")
    await eventually(lambda: labels_are(maintainer, repo, number, {"baton:review"}), "review")
    [pull] = await maintainer.pulls(repo)
    assert pull["head"]["sha"] == run.head_sha
    assert [(r.attempt, r.state) for r in store.runs(issue)] == [(1, RunState.PUSHED_GREEN)]
    queued = store.queued_text(issue)
    assert queued is not None and queued.queued is not None
    assert (queued.queued.by, queued.queued.how) == ("octo-writer", "command")
    status = await eventually(
        lambda: _status_saying(maintainer, repo, number, "pushed-green"), "the status comment"
    )
    assert "Agent: `command`" in status


async def test_a_steerers_agent_label_picks_the_agent_and_a_strangers_is_ignored(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    await maintainer.grant(repo, "octo-triager", "triage")
    picked = int((await maintainer.open_issue(repo, "Greet, by aider", GREETING_FIX))["number"])
    passed = int((await maintainer.open_issue(repo, "Greet, as usual", GREETING_FIX))["number"])
    await maintainer.add_label(repo, picked, "baton:agent:aider")
    await maintainer.as_user("octo-triager").add_label(repo, passed, "baton:agent:aider")
    for number in (picked, passed):
        await maintainer.add_label(repo, number, "baton:queue")

    for number, agent in ((picked, "aider"), (passed, "command")):
        run = await eventually(
            lambda n=number: run_state(store, repo, n, RunState.PUSHED_GREEN, RunState.FAILED),
            f"#{number}'s run settling",
            90,
        )
        assert run.state is RunState.PUSHED_GREEN, run.reason
        assert run.agent == agent
        assert run.agent_result is not None and run.agent_result.agent == agent
        status = await eventually(
            lambda n=number: _status_saying(maintainer, repo, n, "pushed-green"),
            f"#{number}'s status comment",
        )
        assert f"Agent: `{agent}`" in status
    assert logged(
        stack,
        f"{repo}#{passed}: ignored the label `baton:agent:aider`: @octo-triager has triage access",
    )
    assert len(await maintainer.pulls(repo)) == 2


async def test_a_start_a_pause_held_runs_as_the_steerer_queued_it_when_resumed(
    stack: LocalBaton, maintainer: Maintainer, store: Store
) -> None:
    repo = await new_repo(maintainer, stack)
    await maintainer.grant(repo, "octo-writer", "write")
    number = int((await maintainer.open_issue(repo, "Greet after a pause", GREETING_FIX))["number"])
    issue = IssueRef(installation_id=1, repo=repo, number=number)

    async def command(body: str) -> list[str]:
        posted = await maintainer.comment(repo, number, body, as_user="octo-writer")
        return await eventually(
            lambda: reacted(maintainer, repo, int(posted["id"])), f"{body!r} acknowledged"
        )

    assert await command("/baton pause") == ["+1"]
    assert await command("/baton start --agent aider") == ["+1"]
    await eventually(lambda: _held(store, issue), "the start held")
    assert await maintainer.labels(repo, number) == {"baton:queue"}
    # Baton put the label on: the resumed start is the writer's, not Baton's own.
    assert await command("/baton resume") == ["+1"]
    run = await eventually(
        lambda: run_state(store, repo, number, RunState.PUSHED_GREEN, RunState.FAILED),
        "the resumed run settling",
        90,
    )
    assert run.state is RunState.PUSHED_GREEN, run.reason
    assert run.agent == "aider", "the pause kept the agent the writer picked"
    queued = store.queued_text(issue)
    assert queued is not None and queued.queued is not None
    assert queued.queued.by == "octo-writer"
    said = [c["body"] for c in await baton_comments(maintainer, repo, number)]
    assert not any("did not start" in body for body in said)


async def _held(store: Store, issue: IssueRef) -> bool:
    return issue.number in store.held_issues(issue.repo)
