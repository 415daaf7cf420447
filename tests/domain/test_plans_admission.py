"""Admission: whether a start goes ahead, waits, is refused, held or skipped; pure, no I/O."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.domain import render
from bot.domain.commands import Standing
from bot.domain.effects import (
    Enqueue,
    HoldStart,
    PostStatus,
    RecordWait,
    RefuseQueueLabel,
    ReportConfigError,
    SetLabel,
)
from bot.domain.issue_text import IssueText, Snapshot
from bot.domain.jobs import RunMode, run_issue_job
from bot.domain.model import (
    Budget,
    Classification,
    FailureClass,
    IssueRef,
    Recovery,
    Run,
    RunState,
)
from bot.domain.plans.admission import (
    Admission,
    Admit,
    Arrival,
    Fact,
    Hold,
    Learn,
    Refuse,
    RefusedConfig,
    Skip,
    Slot,
    Stack,
    StartFacts,
    Wait,
    Window,
    admit,
    arrival,
)
from bot.ops.settings import Settings

NOW = datetime(2026, 12, 1, 6, tzinfo=UTC)
REOPENS = datetime(2026, 12, 1, 7, tzinfo=UTC)
ISSUE = IssueRef(installation_id=1, repo="octo/widgets", number=7)
SETTINGS = Settings(
    BATON_AGENT="command",
    BATON_AGENT_COMMAND="true",
    BATON_HALT_ON_USAGE_WINDOW=True,
    BATON_MAX_CONCURRENT_RUNS_PER_REPO=None,
)
LABELS = SETTINGS.labels
SLOTTED = SETTINGS.model_copy(update={"max_concurrent_runs_per_repo": 2})
NO_HALTS = SETTINGS.model_copy(update={"halt_on_usage_window": False})
QUEUED = Snapshot(title="Fix it", body="", at=NOW, by="octo", how="label")
TEXT = IssueText(queued=QUEUED)
STEERER = Standing(login="octo", role="admin", minimum="write", allowed=True)
READER = Standing(login="reader", role="read", minimum="write", allowed=False)
CONFIG = RefusedConfig(reason="max_attempts: 9 is more than 3", blob_sha="b1", problems=("x",))
GONE = "#3's branch `baton/issue-3` no longer exists"


def concluded(attempt: int) -> Run:
    run = Run.claimed(ISSUE, attempt, "baton/issue-7-fix-it", NOW - timedelta(hours=1))
    classification = Classification(
        failure_class=FailureClass.CHECKS_FAILED,
        recovery=Recovery.CONTINUE,
        charged_to=Budget.CONTINUATIONS,
        evidence="ended: checks-failed",
    )
    return run.model_copy(update={"classification": classification})


LATEST = concluded(2)
GREEN_LINK = LATEST.model_copy(update={"state": RunState.PUSHED_GREEN, "classification": None})
UNDER_WAY = LATEST.model_copy(update={"state": RunState.RUNNING, "classification": None})


def facts(mode: RunMode = RunMode.FRESH, **fields: object) -> StartFacts:
    base: dict[str, object] = {
        "issue": ISSUE,
        "mode": mode,
        "after": 0 if mode in (RunMode.FRESH, RunMode.CHAIN) else 2,
        "open": True,
        "carried": frozenset({LABELS.queue}),
        "default_branch": "main",
    }
    if mode is RunMode.FRESH:
        base["standing"] = STEERER
    if mode in (RunMode.CONTINUE, RunMode.RETRY):
        base |= {"latest": LATEST, "carried": frozenset({LABELS.in_progress})}
    if mode is RunMode.CHAIN:
        base |= {"chain_link": True, "stack": Stack()}
    base |= {"text": TEXT, "window": Window()}
    return StartFacts.model_validate(base | fields)


def skip(mode: RunMode, why: str) -> Skip:
    return Skip(note=f"not starting a {mode.value} run: {why}")


def escalated(carried: frozenset[str]) -> SetLabel:
    return SetLabel(issue=ISSUE, labels=LABELS, label=LABELS.escalated, live=carried)


def window_wait(mode: RunMode, queued_by: str | None) -> Wait:
    after = 0 if mode is RunMode.FRESH else 2
    key = f"window-{int(REOPENS.timestamp())}"
    job = run_issue_job(SETTINGS, ISSUE, key, mode, after, queued_by=queued_by)
    halted = SetLabel(
        issue=ISSUE, labels=LABELS, label=LABELS.halted, live=frozenset({LABELS.in_progress})
    )
    said = PostStatus(issue=ISSUE, body=render.waiting_comment("command", REOPENS, NOW))
    held = () if mode is RunMode.FRESH else (halted,)
    return Wait(
        note=f"command's usage window is closed; waiting until {REOPENS}",
        on="window",
        until=REOPENS,
        job=job,
        plan=(Enqueue(job=job, at=REOPENS), RecordWait(issue=ISSUE, until=REOPENS), *held, said),
    )


def slot_wait(said: bool) -> Wait:
    retry_at = NOW + timedelta(seconds=30)
    job = run_issue_job(
        SLOTTED, ISSUE, f"slot-{int(retry_at.timestamp())}", RunMode.FRESH, 0, queued_by="octo"
    )
    comment = render.slot_wait_comment(ISSUE.repo, 2, retry_at, NOW)
    told = (PostStatus(issue=ISSUE, body=comment),) if said else ()
    return Wait(
        note="octo/widgets's 2 run slots are taken; waiting",
        on="slot",
        until=retry_at,
        job=job,
        plan=(*told, Enqueue(job=job, at=retry_at), RecordWait(issue=ISSUE, until=retry_at)),
    )


F, C, R, CH = RunMode.FRESH, RunMode.CONTINUE, RunMode.RETRY, RunMode.CHAIN


@pytest.mark.parametrize(
    ("settings", "start", "expected"),
    [
        # Not this issue's next start: skipped, and nothing is done.
        (SETTINGS, facts(open=False), skip(F, "not an open issue")),
        (SETTINGS, facts(C, open=False), skip(C, "not an open issue")),
        (SETTINGS, facts(carried=frozenset()), skip(F, "it no longer carries baton:queue")),
        (SETTINGS, facts(CH, chain_link=False), skip(CH, "it is no longer a link of a chain")),
        # A chain's repeated advance, or its start job run twice, starts no link again.
        (SETTINGS, facts(CH, latest=GREEN_LINK), skip(CH, "the link is green already")),
        (SETTINGS, facts(CH, latest=UNDER_WAY), skip(CH, "the link is in progress already")),
        (SETTINGS, facts(CH, latest=LATEST), skip(CH, "the link is in progress already")),
        (
            SETTINGS,
            facts(C, latest=None),
            skip(C, "attempt 2 is not the latest, concluded attempt"),
        ),
        (
            SETTINGS,
            facts(R, latest=concluded(3)),
            skip(R, "attempt 2 is not the latest, concluded attempt"),
        ),
        (
            SETTINGS,
            facts(C, latest=LATEST.model_copy(update={"classification": None})),
            skip(C, "attempt 2 is not the latest, concluded attempt"),
        ),
        (
            SETTINGS,
            facts(C, carried=frozenset({"bug"})),
            skip(C, "a maintainer withdrew it"),
        ),
        # Who queued a fresh start is asked first, then it is refused if they may not.
        (SETTINGS, facts(standing=None, text=None), Learn(fact="standing")),
        (
            SETTINGS,
            facts(standing=READER, text=None),
            Refuse(
                note=None,
                reason=str(READER),
                plan=(RefuseQueueLabel(issue=ISSUE, label=LABELS.queue, standing=READER),),
            ),
        ),
        (SETTINGS, facts(text=None), Learn(fact="text")),
        (SETTINGS, facts(C, text=None), Learn(fact="text")),
        # A file that starts nothing is refused, once its text is recorded, and said once.
        (
            SETTINGS,
            facts(refused_config=CONFIG),
            Refuse(
                note=f"not starting: {CONFIG.reason}",
                reason=CONFIG.reason,
                plan=(  # said first: a job put back before it was said says it again
                    ReportConfigError(
                        issue=ISSUE,
                        blob_sha="b1",
                        body=render.config_error_comment(".github/baton.yml", "main", ["x"]),
                    ),
                    escalated(frozenset({LABELS.queue})),
                ),
            ),
        ),
        (SETTINGS, facts(refused_config=CONFIG, text=None), Learn(fact="text")),
        # A chain link learns what it builds on, and is refused on a tip that is gone.
        (SETTINGS, facts(CH, stack=None), Learn(fact="stack")),
        (SETTINGS, facts(chain_link=True, stack=None), Learn(fact="stack")),
        (
            SETTINGS,
            facts(CH, stack=Stack(refusal=GONE)),
            Refuse(
                note=f"not starting: {GONE}",
                reason=GONE,
                plan=(
                    PostStatus(issue=ISSUE, body=render.refusal_comment(GONE)),
                    escalated(frozenset({LABELS.queue})),
                ),
            ),
        ),
        (
            SETTINGS,
            facts(CH, stack=Stack(branch="baton/issue-3-base")),
            Admit(base="baton/issue-3-base", text=TEXT),
        ),
        (SETTINGS, facts(CH), Admit(base="main", text=TEXT)),
        # A closed usage window: wait for it (a recovery shows it is held), unless the
        # repository does not halt for windows.
        (SETTINGS, facts(window=None), Learn(fact="window")),
        (SETTINGS, facts(window=Window(reopens_at=REOPENS)), window_wait(F, "octo")),
        (SETTINGS, facts(C, window=Window(reopens_at=REOPENS)), window_wait(C, None)),
        (
            NO_HALTS,
            facts(window=None),
            Admit(base="main", text=TEXT),
        ),
        # The repository's run slots: taken for the start, or waited for (said once).
        (SLOTTED, facts(), Learn(fact="slot")),
        (SLOTTED, facts(slot=Slot(got=False)), slot_wait(said=True)),
        (SLOTTED, facts(slot=Slot(got=False, waiting=True)), slot_wait(said=False)),
        (SLOTTED, facts(slot=Slot(got=True)), Admit(base="main", text=TEXT)),
        # Admitted: a recovery follows the attempt it recovers.
        (SETTINGS, facts(), Admit(base="main", text=TEXT)),
        (SETTINGS, facts(C), Admit(previous=LATEST, base="main", text=TEXT)),
        (SETTINGS, facts(R), Admit(previous=LATEST, base="main", text=TEXT)),
    ],
)
def test_admit(settings: Settings, start: StartFacts, expected: Admission | Learn) -> None:
    assert admit(settings, start, NOW) == expected


@pytest.mark.parametrize(
    ("settings", "start", "asked"),
    [
        (
            SLOTTED,
            facts(standing=None, text=None, window=None),
            ["standing", "text", "window", "slot"],
        ),
        (SETTINGS, facts(C, text=None, window=None), ["text", "window"]),
        (
            SLOTTED,
            facts(CH, text=None, stack=None, window=None),
            ["text", "stack", "window", "slot"],
        ),
        (NO_HALTS, facts(CH, text=None, stack=None, window=None), ["text", "stack"]),
    ],
)
def test_facts_are_asked_for_in_order_and_only_where_they_decide(
    settings: Settings, start: StartFacts, asked: list[Fact]
) -> None:
    answers = {
        "standing": STEERER,
        "text": TEXT,
        "stack": Stack(),
        "window": Window(),
        "slot": Slot(got=True),
    }
    learnt: list[Fact] = []
    verdict = admit(settings, start, NOW)
    while isinstance(verdict, Learn):
        learnt.append(verdict.fact)
        start = start.model_copy(update={verdict.fact: answers[verdict.fact]})
        verdict = admit(settings, start, NOW)
    assert learnt == asked
    assert isinstance(verdict, Admit)


def claim_wait(mode: RunMode, delay_s: float = 30.0) -> Wait:
    job = run_issue_job(SETTINGS, ISSUE, "after-2", mode, 2)
    return Wait(
        note="already claimed (worker-1); not starting a second run",
        on="claim",
        until=NOW + timedelta(seconds=delay_s),
        job=job,
        plan=(Enqueue(job=job, delay_s=delay_s),),
    )


@pytest.mark.parametrize(
    ("facts_", "expected"),
    [
        (
            Arrival(issue=ISSUE, mode=F, after=0, text=QUEUED, paused=True),
            Hold(
                note="octo/widgets is paused; holding a fresh run",
                plan=(HoldStart(issue=ISSUE, mode=F, after=0, text=QUEUED),),
            ),
        ),
        (
            Arrival(issue=ISSUE, mode=C, after=2, paused=True),
            Hold(
                note="octo/widgets is paused; holding a continue run",
                plan=(HoldStart(issue=ISSUE, mode=C, after=2),),
            ),
        ),
        (  # the agent a steerer picked is held with the start
            Arrival(issue=ISSUE, mode=F, after=0, paused=True, agent="codex"),
            Hold(
                note="octo/widgets is paused; holding a fresh run",
                plan=(HoldStart(issue=ISSUE, mode=F, after=0, agent="codex"),),
            ),
        ),
        (
            Arrival(issue=ISSUE, mode=F, after=0, paused=False, holder="worker-1"),
            Skip(note="already claimed (worker-1); not starting a second run"),
        ),
        (
            Arrival(issue=ISSUE, mode=C, after=2, paused=False, holder="worker-1"),
            claim_wait(C),
        ),
        (
            Arrival(issue=ISSUE, mode=R, after=2, paused=False, holder="worker-1"),
            claim_wait(R),
        ),
        (  # the attempt it follows is ending: its claim goes back in moments
            Arrival(
                issue=ISSUE, mode=R, after=2, paused=False, holder="worker-1", handing_over=True
            ),
            claim_wait(R, 2.0),
        ),
        (Arrival(issue=ISSUE, mode=F, after=0, paused=False, claimed=True), None),
        (Arrival(issue=ISSUE, mode=C, after=2, paused=False, claimed=True), None),
    ],
)
def test_arrival(facts_: Arrival, expected: Hold | Skip | Wait | None) -> None:
    assert arrival(SETTINGS, facts_, NOW) == expected
