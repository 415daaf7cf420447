"""Comment commands: who may give each, what it acts on, and what Baton does about it."""

from __future__ import annotations

import ast
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import get_args

import pytest

import bot.domain.plans.commands
from bot.domain.commands import (
    Command,
    CommandName,
    Refused,
    Standing,
    budget_reply,
    ignored_bot,
    judge,
    parse_command,
)
from bot.domain.effects import (
    Effect,
    Enqueue,
    PauseRepo,
    PostComment,
    PostStatus,
    React,
    Report,
    SetLabel,
    StopRun,
)
from bot.domain.jobs import RunMode, run_issue_job
from bot.domain.model import (
    Budget,
    Classification,
    FailureClass,
    IssueRef,
    Labels,
    Recovery,
    Run,
    RunState,
)
from bot.domain.plans.commands import (
    COMMANDS,
    Answer,
    CommandFacts,
    Grant,
    Granted,
    HeldStart,
    Learn,
    Need,
    Scope,
    answer,
    scope_of,
)
from bot.domain.render import refusal_comment
from bot.ops.settings import Settings

SETTINGS = Settings(agent="command", agent_command="true", max_budget_grant=10)
NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)
ISSUE = IssueRef(installation_id=3, repo="octo/widgets", number=7)
PULL = IssueRef(installation_id=3, repo="octo/widgets", number=12)  # the run's pull request
COMMENT = 99
LABELS = Labels()
TRUSTED_BOTS = ("helper[bot]",)

STEERER = judge("maintainer", False, "write", "write", TRUSTED_BOTS)
ADMIN = judge("owner", False, "admin", "write", TRUSTED_BOTS)
TRUSTED_BOT = judge("helper[bot]", True, None, "write", TRUSTED_BOTS)
READER = judge("reader", False, "read", "write", TRUSTED_BOTS)
TRIAGER = judge("triager", False, "triage", "write", TRUSTED_BOTS)
STRANGER = judge("passer-by", False, None, "write", TRUSTED_BOTS)
UNTRUSTED_BOT = judge("spam[bot]", True, None, "write", TRUSTED_BOTS)
WRITER_UNDER_MAINTAIN = judge("writer", False, "write", "maintain", TRUSTED_BOTS)

ALLOWED = {"write": STEERER, "admin": ADMIN, "trusted bot": TRUSTED_BOT}
REFUSED = {
    "read": READER,
    "triage": TRIAGER,
    "no role": STRANGER,
    "untrusted bot": UNTRUSTED_BOT,
    "write where maintain is asked": WRITER_UNDER_MAINTAIN,
}

ENDED = Classification(
    failure_class=FailureClass.CHECKS_FAILED,
    recovery=Recovery.ESCALATE,
    charged_to=Budget.NOTHING,
    evidence="the checks failed 3 times",
)


def run(state: RunState, head: str | None = None, classified: bool = True) -> Run:
    claimed = Run.claimed(ISSUE, 2, "baton/issue-7", NOW)
    return claimed.model_copy(
        update={
            "state": state,
            "head_sha": head,
            "classification": ENDED if classified and state.is_terminal else None,
        }
    )


def facts(
    text: str,
    standing: Standing = STEERER,
    latest: Run | None = None,
    commented: IssueRef = ISSUE,
    open: bool | None = None,
    granted: Granted | None = None,
    released: tuple[HeldStart, ...] | None = None,
) -> CommandFacts:
    command = parse_command(text)
    assert command is not None
    return CommandFacts(
        command=command,
        standing=standing,
        text=text,
        comment_id=COMMENT,
        commented=commented,
        issue=ISSUE,
        run=latest,
        labels=LABELS,
        now=NOW,
        open=open,
        granted=granted,
        released=released,
    )


def react(content: str, on: IssueRef = ISSUE) -> React:
    return React(repo=on.repo, comment_id=COMMENT, content=content)


def acted(*effects: Effect, note: str | None = None, level: int = logging.INFO) -> Answer:
    return Answer(reaction="+1", effects=(*effects, react("+1")), note=note, level=level)


def declined(*effects: Effect, note: str | None = None, level: int = logging.INFO) -> Answer:
    return Answer(
        reaction="confused", effects=(*effects, react("confused")), note=note, level=level
    )


def resumed(number: int, mode: RunMode, after: int, agent: str | None = None) -> Enqueue:
    issue = ISSUE.model_copy(update={"number": number})
    key = f"resumed-{COMMENT}"
    return Enqueue(job=run_issue_job(SETTINGS, issue, key, mode, after, agent=agent))


def retried(mode: RunMode) -> tuple[SetLabel, Enqueue]:
    job = run_issue_job(SETTINGS, ISSUE, f"command-{COMMENT}", mode, 2)
    return SetLabel(issue=ISSUE, labels=LABELS, label=LABELS.in_progress), Enqueue(job=job)


GRANTED = budget_reply(2, True, 5, 10)
BEYOND = budget_reply(8, False, 5, 10)
WARNING = logging.WARNING

ANSWERS: dict[str, tuple[CommandFacts, Answer | Need]] = {
    "status before any run says so": (
        facts("/baton status"),
        acted(PostStatus(issue=ISSUE, body=refusal_comment("Baton has not run it yet."))),
    ),
    "status rewrites the run's status comment": (
        facts("/baton status", latest=run(RunState.RUNNING)),
        acted(Report(issue=ISSUE, attempt=2)),
    ),
    "stop stops a live run": (
        facts("/baton stop", latest=run(RunState.RUNNING)),
        acted(
            StopRun(issue=ISSUE),
            note="octo/widgets#7: a maintainer stopped attempt 2",
            level=WARNING,
        ),
    ),
    "stop has nothing to stop once the run ended": (
        facts("/baton stop", latest=run(RunState.FAILED)),
        declined(),
    ),
    "stop has nothing to stop before any run": (facts("/baton stop"), declined()),
    "retry asks whether the issue is open": (
        facts("/baton retry", latest=run(RunState.FAILED)),
        Learn(fact="open"),
    ),
    "retry of an open issue starts a new attempt from the base branch": (
        facts("/baton retry", latest=run(RunState.FAILED), open=True),
        acted(*retried(RunMode.RETRY)),
    ),
    "retry after pushed work continues on its branch": (
        facts("/baton retry", latest=run(RunState.FAILED, head="a" * 40), open=True),
        acted(*retried(RunMode.CONTINUE)),
    ),
    "retry of a closed issue does nothing": (
        facts("/baton retry", latest=run(RunState.FAILED), open=False),
        declined(),
    ),
    "retry of a live run does nothing": (
        facts("/baton retry", latest=run(RunState.RUNNING)),
        declined(),
    ),
    "retry of a run not yet classified does nothing": (
        facts("/baton retry", latest=run(RunState.FAILED, classified=False)),
        declined(),
    ),
    "retry before any run does nothing": (facts("/baton retry"), declined()),
    "budget asks the store to grant within the cap": (
        facts("/baton budget +2"),
        Grant(amount=2, cap=10),
    ),
    "budget granted says how many are left": (
        facts("/baton budget +2", granted=Granted(granted=True, total=5)),
        Answer(
            reaction="+1",
            effects=(react("+1"), PostComment(issue=ISSUE, body=GRANTED)),
            note="octo/widgets#7: granted 2 more continuations (5 of 10 granted in all)",
        ),
    ),
    "budget beyond the grant cap is refused, and says so": (
        facts("/baton budget +8", granted=Granted(granted=False, total=5)),
        Answer(
            reaction="confused",
            effects=(react("confused"), PostComment(issue=ISSUE, body=BEYOND)),
            note="octo/widgets#7: refused 8 more continuations (5 of 10 granted in all)",
        ),
    ),
    "pause holds the repository's claims": (
        facts("/baton pause"),
        acted(
            PauseRepo(repo="octo/widgets", at=NOW),
            note="octo/widgets: paused by a maintainer",
            level=WARNING,
        ),
    ),
    "resume asks for the starts the pause held": (facts("/baton resume"), Learn(fact="release")),
    "resume makes every start the pause held": (
        facts(
            "/baton resume",
            released=(
                HeldStart(number=4, mode=RunMode.FRESH, after=0, agent="codex"),
                HeldStart(number=9, mode=RunMode.CONTINUE, after=3),
            ),
        ),
        acted(
            resumed(4, RunMode.FRESH, 0, "codex"),
            resumed(9, RunMode.CONTINUE, 3),
            note="octo/widgets: resumed by a maintainer; 2 held start(s) released",
        ),
    ),
    "resume with nothing held only lifts the pause": (
        facts("/baton resume", released=()),
        acted(note="octo/widgets: resumed by a maintainer; 0 held start(s) released"),
    ),
    "an unknown command is refused with what Baton knows": (
        facts("/baton dance"),
        declined(
            note="octo/widgets#7: refused '/baton dance' from @maintainer: Baton knows "
            "`status`, `start [--agent NAME]`, `stop`, `retry`, `budget +N`, `pause` and "
            "`resume`",
            level=WARNING,
        ),
    ),
    "a budget without an amount is refused": (
        facts("/baton budget"),
        declined(
            note="octo/widgets#7: refused '/baton budget' from @maintainer: say how many "
            "more continuations, e.g. `+2`",
            level=WARNING,
        ),
    ),
}


@pytest.mark.parametrize(("given", "expected"), ANSWERS.values(), ids=ANSWERS.keys())
def test_each_command_from_a_steerer_is_answered_as_the_table_says(
    given: CommandFacts, expected: Answer | Need
) -> None:
    assert answer(SETTINGS, given) == expected


EVERY_COMMAND = {
    "status": "/baton status",
    "start": "/baton start",
    "stop": "/baton stop",
    "retry": "/baton retry",
    "budget": "/baton budget +2",
    "pause": "/baton pause",
    "resume": "/baton resume",
}


def test_the_table_has_a_row_for_every_command_baton_parses() -> None:
    assert set(COMMANDS) == set(get_args(CommandName)) == set(EVERY_COMMAND)


@pytest.mark.parametrize("text", EVERY_COMMAND.values(), ids=EVERY_COMMAND.keys())
@pytest.mark.parametrize("standing", REFUSED.values(), ids=REFUSED.keys())
def test_every_command_from_someone_without_the_standing_is_refused(
    text: str, standing: Standing
) -> None:
    latest = run(RunState.RUNNING)
    assert answer(SETTINGS, facts(text, standing, latest)) == declined(
        note=f"octo/widgets#7: refused {text!r} from @{standing.login}: {standing}",
        level=WARNING,
    )


@pytest.mark.parametrize("text", EVERY_COMMAND.values(), ids=EVERY_COMMAND.keys())
@pytest.mark.parametrize("standing", ALLOWED.values(), ids=ALLOWED.keys())
def test_every_command_from_a_steerer_or_a_trusted_bot_is_carried_out_alike(
    text: str, standing: Standing
) -> None:
    latest, granted = run(RunState.RUNNING), Granted(granted=True, total=2)

    def given(by: Standing) -> CommandFacts:
        return facts(text, by, latest, granted=granted, released=())

    assert answer(SETTINGS, given(standing)) == answer(SETTINGS, given(STEERER))
    assert answer(SETTINGS, given(standing)) != answer(SETTINGS, given(READER))


def test_a_bot_baton_does_not_trust_is_ignored_before_any_answer() -> None:
    assert ignored_bot("spam[bot]", "Bot", TRUSTED_BOTS)
    assert ignored_bot("ci-runner", "Bot", TRUSTED_BOTS)
    assert not ignored_bot("helper[bot]", "Bot", TRUSTED_BOTS)
    assert not ignored_bot("maintainer", "User", TRUSTED_BOTS)


SCOPES = {
    "status": Scope.ISSUE,
    "stop": Scope.ISSUE,
    "retry": Scope.ISSUE,
    "budget": Scope.ISSUE,
    "pause": Scope.REPOSITORY,
    "resume": Scope.REPOSITORY,
}


@pytest.mark.parametrize(("name", "scope"), SCOPES.items(), ids=SCOPES.keys())
def test_each_command_acts_on_the_issue_or_on_the_repository(name: str, scope: Scope) -> None:
    command = parse_command(EVERY_COMMAND[name])
    assert isinstance(command, Command)
    assert scope_of(command) is scope


def test_a_refused_line_concerns_the_issue_it_is_on() -> None:
    assert scope_of(Refused(text="/baton dance", reason="no")) is Scope.ISSUE


def test_on_a_pull_request_the_answer_goes_to_the_comment_and_the_work_to_its_issue() -> None:
    given = facts("/baton budget +2", commented=PULL, granted=Granted(granted=True, total=5))
    assert answer(SETTINGS, given) == Answer(
        reaction="+1",
        effects=(react("+1", on=PULL), PostComment(issue=PULL, body=GRANTED)),
        note="octo/widgets#7: granted 2 more continuations (5 of 10 granted in all)",
    )
    stop = answer(SETTINGS, facts("/baton stop", latest=run(RunState.RUNNING), commented=PULL))
    assert isinstance(stop, Answer)
    assert stop.effects == (StopRun(issue=ISSUE), react("+1", on=PULL))


FORBIDDEN = {"redis", "aiohttp", "gidgethub", "rq", "subprocess"}


def test_the_command_plans_do_no_io() -> None:
    tree = ast.parse(Path(bot.domain.plans.commands.__file__).read_text())
    names = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
    }
    names |= {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert not {name for name in names if name.split(".")[0] in FORBIDDEN}
    assert not {name for name in names if name.startswith(("bot.edges", "bot.workflows"))}
