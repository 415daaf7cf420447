"""Every text Baton writes, rendered from models: briefs, status comments, PR bodies."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from pydantic import BaseModel, ConfigDict

from bot.domain.budget import Spend
from bot.domain.inert import inert
from bot.domain.model import AuditFinding, FailureClass, Limits, Run, RunState

STATUS_MARKER = "<!-- baton:status -->"
ESCALATION_MARKER = "<!-- baton:escalation -->"
CHECK_TEXT_LIMIT = 3000
BODY_LIMIT = 65536  # GitHub refuses an issue, pull request or comment body longer than this
REASON_LIMIT = 4000  # the agent's words quoted in a status comment
FILES_LIST_LIMIT = 20000  # the pull request body's list of changed files
AUDIT_HEADING = "### ⚠ Audit: this green PR may weaken its tests"
AUDIT_SHOWN = 40  # flags listed in a status comment; the rest are counted
AUDIT_IN_REASON = 5  # flags named in an escalation's reason
SALVAGED_NAMED = 20  # salvaged files a brief names
REFUSED_HOSTS_SHOWN = 10  # hosts the sandbox refused that a status line names

_STATE_WORDS = {
    RunState.CLAIMED: "Claimed: getting ready to work on this issue.",
    RunState.PROVISIONING: "Preparing a worktree for the agent.",
    RunState.RUNNING: "The agent is working on this issue.",
    RunState.PUSHED_PENDING: "Pull request opened; waiting for its checks.",
    RunState.PUSHED_GREEN: "The pull request's checks passed; it awaits a maintainer's review.",
    RunState.MERGED: "The pull request was merged.",
    RunState.CLOSED: "The pull request was closed without merging.",
    RunState.FAILED: "This attempt failed.",
    RunState.NO_CHANGE: "The agent finished without changing anything.",
    RunState.KILLED: "This attempt was stopped.",
    RunState.HALTED: "Halted by the agent provider's usage window.",
}

BRIEF_INSTRUCTIONS = """\
## How to work
- You are in a git worktree of the repository, on the branch Baton pushes for this issue.
- Make the change the issue asks for, with tests where the project has them.
- Commit your work with clear messages. Anything you leave uncommitted, Baton commits for you.
- Do not push and do not open a pull request: Baton does both when you exit.
- Finish with a short report of what you changed and why; it goes into the pull request.
"""


def duration(delta: timedelta) -> str:
    """Return a duration the way a person says it: 4.2s, 3m 05s, 1h 02m."""
    seconds = delta.total_seconds()
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m {secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h {minutes:02d}m"


def instant(at: datetime, now: datetime) -> str:
    """Return a time the way a status line gives it: the clock today, the date otherwise."""
    return at.strftime("%H:%M UTC" if at.date() == now.date() else "%Y-%m-%d %H:%M UTC")


def fit_body(
    text: str,
    limit: int = BODY_LIMIT,
    *,
    pointer: str,
    keep: str = "",
    what: str = "The agent's full report",
) -> str:
    """Return text followed by keep, in at most limit characters.

    A text too long for the limit is cut, at a line's end when one is near, and
    closed with a note that says how long it was and where the rest is (pointer).
    keep is Baton's own trailing part (a closing keyword, a hidden marker, a list
    of mentions): it is never cut. A code block or HTML comment the cut leaves
    open is closed, so the note and keep read as Baton wrote them.
    """
    if len(text) + len(keep) <= limit:
        return text + keep
    note = f"\n\n*{what} was {len(text):,} characters; the rest is in {pointer}.*"
    room = limit - len(keep) - len(note) - CLOSER_ROOM
    if room < 0:  # not even Baton's own part fits: keep its end, where the markers are
        return _last(note + keep, limit)
    cut = text[:room]
    newline = cut.rfind("\n")
    if newline >= room * 3 // 4:  # a line's end is near: cut there, not mid-line
        cut = cut[:newline]
    closing, fence_at = _closers(cut)
    if len(closing) > CLOSER_ROOM:  # a fence too long to close in the room left: cut before it
        cut = cut[:fence_at]
        closing, _ = _closers(cut)
    return cut.rstrip("\n") + closing + note + keep


def fit_utf8(text: str, limit: int, *, pointer: str, what: str) -> str:
    """Return fit_body's cut of text in at most limit UTF-8 bytes, whole characters only.

    GitHub measures a check run's summary and text in bytes, not characters. Each pass
    shrinks the room in characters by the share of bytes still over, so it ends.
    """
    room = limit
    while True:
        fitted = fit_body(text, room, pointer=pointer, what=what)
        size = len(fitted.encode())
        if size <= limit:
            return fitted
        room = room * limit // size


CLOSER_ROOM = 24  # what closing an open code block and HTML comment may take
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")


def _closers(text: str) -> tuple[str, int]:
    """Return what closes a code block or HTML comment open at text's end, and where it opened."""
    fence: str | None = None
    fence_at = 0
    at = 0
    for line in text.splitlines(keepends=True):
        if match := _FENCE.match(line):
            run = match[1]
            if fence is None:
                fence, fence_at = run, at
            elif run[0] == fence[0] and len(run) >= len(fence) and not line.strip(" \r\n`~"):
                fence = None
        at += len(line)
    closing = ""
    if fence is not None:
        closing += "\n" + fence
    comment = text.rfind("<!--")
    if comment > text.rfind("-->") and (fence is None or comment < fence_at):
        closing += "\n-->"
    return closing, fence_at


def _closed(text: str) -> str:
    """Return the agent's text with any code block or HTML comment it left open closed.

    Left open, it would swallow what Baton writes after it.
    """
    return text + _closers(text)[0]


def _last(text: str, limit: int) -> str:
    return text[len(text) - limit :] if len(text) > limit else text


def transcript_pointer(run: Run) -> str:
    """Return where the whole of what the run's agent said can be read: its transcript.

    It is kept where every machine reads it (bot/workflows/transcripts.py): the operator
    reads it with `baton transcript` or from the status page.
    """
    if run.agent_result is None:
        return f"the run's logs on the worker (run `{run.run_id}`)"
    issue = run.issue
    return (
        f"the run's transcript (`baton transcript {issue.repo}#{issue.number} "
        f"--attempt {run.attempt}`, or the status page)"
    )


class CheckSummary(BaseModel):
    """One failing check, as its app reported it."""

    model_config = ConfigDict(frozen=True)

    name: str
    conclusion: str
    title: str = ""
    summary: str = ""
    text: str = ""


class ReviewComment(BaseModel):
    """One line comment of a review."""

    model_config = ConfigDict(frozen=True)

    path: str
    line: int | None
    body: str


class ReviewSummary(BaseModel):
    """A review that requested changes."""

    model_config = ConfigDict(frozen=True)

    author: str
    body: str
    comments: tuple[ReviewComment, ...] = ()


class Continuation(BaseModel):
    """Why an attempt continues its predecessor's work, for the brief."""

    model_config = ConfigDict(frozen=True)

    previous: Run
    failing_checks: tuple[CheckSummary, ...] = ()
    review: ReviewSummary | None = None
    salvaged_at: datetime | None = None  # when the uncommitted edits it starts with were saved
    salvaged_files: tuple[str, ...] = ()


def brief(
    title: str,
    body: str | None,
    issue: str,
    attempt: int,
    max_runs: int,
    continuation: Continuation | None = None,
) -> str:
    """Return the brief an agent reads: the issue as data, what happened before, how to work."""
    parts = [
        f"# Issue {issue}: {title}",
        f"Attempt {attempt} of {max_runs}.",
        "## The issue, as its author wrote it",
        (body or "").strip() or "(The issue has no description.)",
    ]
    if continuation is not None:
        parts += _continuation_sections(continuation)
    return "\n\n".join(parts) + "\n\n" + BRIEF_INSTRUCTIONS


def _continuation_sections(continuation: Continuation) -> list[str]:
    previous = continuation.previous
    why = previous.classification.evidence if previous.classification else previous.reason
    sections = [
        "## Where the previous attempt stopped",
        f"Attempt {previous.attempt} pushed `{previous.branch}`"
        + (f" at {previous.head_sha[:12]}" if previous.head_sha else "")
        + (f" and opened {previous.pr_url}" if previous.pr_url else "")
        + f". It ended as {previous.failure_class or previous.state.value} ({why}).",
        "You are on the same branch, with its work checked out. Build on it; do not start over.",
    ]
    report = previous.agent_result.result_text if previous.agent_result else None
    if report:
        sections += ["### The previous attempt's report", report.strip()]
    if continuation.salvaged_at is not None:
        files = ", ".join(f"`{name}`" for name in continuation.salvaged_files[:SALVAGED_NAMED])
        more = len(continuation.salvaged_files) - SALVAGED_NAMED
        sections += [
            "## Uncommitted work salvaged",
            "The worker running an earlier attempt stopped before that work was committed. "
            f"Its edits as saved at {continuation.salvaged_at:%Y-%m-%d %H:%M:%S} UTC are in "
            "your checkout as uncommitted changes"
            + (f", to {files}" if files else "")
            + (f" and {more} more files" if more > 0 else "")
            + ". Review them and carry on from them.",
        ]
    if continuation.failing_checks:
        sections.append("## Failing checks\n\nMake these pass:")
        sections += [_check_section(check) for check in continuation.failing_checks]
    if continuation.review is not None:
        sections += _review_sections(continuation.review)
    if previous.failure_class == "merge-conflict" and previous.base_branch:
        base = previous.base_branch
        sections += [
            "## Merge conflict",
            f"The branch this pull request builds on moved: {previous.reason}. Merge it into "
            f"this branch (`git merge origin/{base}`), resolve the conflicts so both sides' "
            "intent survives, and commit the merge.",
        ]
    return sections


def _check_section(check: CheckSummary) -> str:
    lines = [f"### {check.name}: {check.conclusion}"]
    lines += [part for part in (check.title, check.summary) if part]
    if check.text:
        text = check.text[-CHECK_TEXT_LIMIT:]
        lines.append(f"```\n{text.strip()}\n```")
    return "\n\n".join(lines)


def _review_sections(review: ReviewSummary) -> list[str]:
    sections = [
        "## Changes requested by a reviewer",
        f"@{review.author} wrote:\n\n{review.body.strip() or '(no summary)'}",
    ]
    sections += [
        f"- `{c.path}`" + (f" line {c.line}" if c.line else "") + f": {c.body.strip()}"
        for c in review.comments
    ]
    return sections


DRAFTS_REFUSED_LINE = (
    "The pull request opened ready for review, not as a draft: GitHub has no drafts in "
    "this repository (private, on GitHub Free)."
)


def status_comment(
    run: Run,
    now: datetime,
    next_step: str | None = None,
    pull_comment_url: str | None = None,
    notes: Sequence[str] = (),
) -> str:
    """Return the issue's status comment for the run's current state (short: the PR has more).

    notes are Baton's lines about the issue's text (bot/domain/issue_text.py notes).
    """
    lines = [
        STATUS_MARKER,
        f"**Baton** · attempt {run.attempt} · {run.state.value}",
        "",
        state_words(run),
    ]
    for note in notes:
        lines += ["", note]
    if run.reason:
        # The reason may be the agent's own words: quoted, inert, and only so much of them.
        pointer = transcript_pointer(run)
        reason = fit_body(
            _closed(inert(run.reason)), REASON_LIMIT, pointer=pointer, what="The full reason"
        )
        lines += ["", f"Reason: {reason}"]
    if run.agent_result is not None and (refused := refusals(run.agent_result.denials)):
        lines += ["", refused]
    if run.agent_result is not None and (hosts := sandbox_refusals(run.agent_result.refused_hosts)):
        lines += ["", hosts]
    if run.state is RunState.PUSHED_PENDING and run.policy and run.policy.required_checks:
        names = ", ".join(f"`{inert(name)}`" for name in run.policy.required_checks)
        lines += ["", f"Waiting for its required checks: {names}."]
    lines += audit_section(run)
    if run.drafts_refused:
        lines += ["", DRAFTS_REFUSED_LINE]
    if next_step:
        lines += ["", f"Next: {inert(next_step)}"]
    if run.pr_url:
        history = f" ([history and checks]({pull_comment_url}))" if pull_comment_url else ""
        lines += ["", f"Pull request: {run.pr_url}{history}"]
    if run.agent is not None:
        lines += ["", f"Agent: `{run.agent}`"]
    spent = duration(run.wall_clock(now))
    lines += ["", f"Branch `{run.branch}` · {spent} {'so far' if run.state.is_live else 'in all'}"]
    return _fit_comment(lines, run)


def status_phase(state: RunState) -> str:
    """Return the phase of a run a status comment shows: one write per phase, not per step.

    Claiming, provisioning and running are one phase (Baton is at work); every other
    state is a phase of its own.
    """
    return "working" if state.is_live else state.value


def status_key(
    run: Run,
    next_step: str | None,
    pull_comment_url: str | None,
    notes: Sequence[str] = (),
) -> str:
    """Return what the issue's status comment says, as a key: the comment is rewritten
    only when this changes (the time spent, shown in passing, does not count)."""
    parts: list[object] = [
        run.attempt,
        status_phase(run.state),
        next_step,
        run.reason,
        run.pr_url,
        pull_comment_url,
        list(notes),
        run.agent_result.denials if run.agent_result is not None else [],
        [finding.model_dump() for finding in run.audit],
    ]
    if run.agent_result is not None and (hosts := sandbox_refusals(run.agent_result.refused_hosts)):
        parts.append(hosts)  # only then: the keys of comments without the line stay the same
    if run.agent is not None:
        parts.append(f"agent {run.agent}")  # likewise
    if run.drafts_refused:
        parts.append(DRAFTS_REFUSED_LINE)  # likewise
    if run.pull_pending is not None:
        parts.append(state_words(run))  # likewise
    return _key(*parts)


def pull_comment_due(runs: Sequence[Run], has_comment: bool, told: bool = False) -> bool:
    """Return whether the PR needs its status comment: once it has a story of its own.

    A PR whose only attempt is waiting for checks, green, merged or closed shows all
    of that itself and on the issue's status comment; a failed attempt, a second
    attempt on it, what its settlement audit flagged, or a next step Baton has to tell
    (told) is what its comment says (and, once posted, keeps current).
    """
    if has_comment or told or len(runs) > 1 or any(run.audit for run in runs):
        return True
    return any(run.state not in _PLAIN_PULL_STATES or run.failure_class for run in runs)


_PLAIN_PULL_STATES = frozenset(
    {RunState.PUSHED_PENDING, RunState.PUSHED_GREEN, RunState.MERGED, RunState.CLOSED}
)


def pull_status_key(runs: Sequence[Run], checks: Sequence[CheckSummary], next_step: str) -> str:
    """Return what the PR's status comment says, as a key (see status_key)."""
    return _key(
        [(r.attempt, status_phase(r.state), r.failure_class, r.head_sha) for r in runs],
        [finding.model_dump() for finding in runs[-1].audit],
        [(c.name, c.conclusion, c.title) for c in checks],
        next_step,
    )


def body_key(body: str) -> str:
    """Return a status comment body that is not a run's, as a key (see status_key)."""
    return _key(body)


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()


# The tool names agent CLIs give their shell in the denials they report ("<tool>: <target>").
SHELL_TOOLS = frozenset({"Bash", "shell", "exec_command", "local_shell"})


def refusals(denials: Sequence[str]) -> str | None:
    """Return the line that says how many tool calls the agent's CLI refused, None if none."""
    if not denials:
        return None
    shell = sum(1 for denial in denials if denial.split(":", 1)[0].strip() in SHELL_TOOLS)
    other = len(denials) - shell
    parts = [
        f"{count} {what}{'' if count == 1 else 's'}"
        for count, what in ((shell, "shell command"), (other, "other tool call"))
        if count
    ]
    verb = "was" if len(denials) == 1 else "were"
    return (
        f"{' and '.join(parts)} {verb} refused by the agent CLI's permission rules "
        "(each is listed in the run record)."
    )


def sandbox_refusals(hosts: Sequence[str]) -> str | None:
    """Return the line naming the hosts the agent's sandbox refused to connect to, None if none.

    The first REFUSED_HOSTS_SHOWN are named and the rest counted: the worker's log names each.
    """
    if not hosts:
        return None
    named = ", ".join(hosts[:REFUSED_HOSTS_SHOWN])
    more = len(hosts) - REFUSED_HOSTS_SHOWN
    rest = f" and {more} more (the worker's log names each)" if more > 0 else ""
    return f"The sandbox refused connections to: {inert(named)}{rest}."


def _fit_comment(lines: list[str], run: Run) -> str:
    """Join a comment's lines and make it fit GitHub; its marker is first and stays."""
    pointer = f"Baton's status page (run `{run.run_id}`)"
    return fit_body("\n".join(lines), pointer=pointer, what="This comment")


def queued_comment(notes: Sequence[str]) -> str:
    """Return the status comment of an issue queued and not started yet, with notes on its text."""
    lines = [
        STATUS_MARKER,
        "**Baton** · queued",
        "",
        "Queued: an attempt starts when a worker takes it.",
    ]
    for note in notes:
        lines += ["", note]
    return "\n".join(lines)


def waiting_comment(account: str, reopens_at: datetime, now: datetime) -> str:
    """Return the status comment of an issue that waits, unstarted, for a usage window."""
    return "\n".join(
        [
            STATUS_MARKER,
            "**Baton** · waiting for a usage window",
            "",
            f"The agent's provider account `{account}` is in a usage window, so no run on it "
            "starts until the window reopens; nothing was spent.",
            "",
            f"Next: starting at {instant(reopens_at, now)}, when the window reopens.",
        ]
    )


def slot_wait_comment(repo: str, limit: int, retry_at: datetime, now: datetime) -> str:
    """Return the status comment of an issue that waits, unstarted, for a run slot."""
    runs = "run" if limit == 1 else "runs"
    return "\n".join(
        [
            STATUS_MARKER,
            "**Baton** · waiting for a run slot",
            "",
            f"`{repo}` allows {limit} agent {runs} at once (`max_concurrent_runs`), and "
            f"{limit} {'is' if limit == 1 else 'are'} under way; this issue starts when one "
            "ends. Nothing was spent.",
            "",
            f"Next: looking again at {instant(retry_at, now)}.",
        ]
    )


def no_record_comment(label: str, queue_label: str) -> str:
    """Return the status comment of an issue shown in progress that Baton holds no run of."""
    return "\n".join(
        [
            STATUS_MARKER,
            "**Baton** · not working on this issue",
            "",
            f"This issue carried `{label}`, but Baton holds no record of a run of it (its "
            "records expired or were lost), so nothing was working on it. The label is "
            "taken off; no attempt starts unasked.",
            "",
            f"Next: a maintainer can add `{queue_label}` to start it again.",
        ]
    )


def refusal_comment(reason: str) -> str:
    """Return the status comment of an issue Baton refused to start, and why."""
    return "\n".join([STATUS_MARKER, "**Baton** · not started", "", reason])


def config_error_comment(path: str, ref: str, problems: Sequence[str]) -> str:
    """Return the comment that says the repository's Baton file is invalid and nothing started."""
    return "\n".join(
        [
            STATUS_MARKER,
            f"**Baton** · `{path}` on `{ref}` is not valid, so nothing was started.",
            "",
            *(f"- {problem}" for problem in problems),
            "",
            "Fix the file on the default branch, then add the queue label again.",
        ]
    )


def pull_status_comment(
    runs: list[Run], checks: list[CheckSummary], next_step: str, now: datetime
) -> str:
    """Return the PR's status comment: where it stands, what comes next, checks, history."""
    current = runs[-1]
    lines = [
        STATUS_MARKER,
        f"**Baton** · attempt {current.attempt} · {current.state.value}",
        "",
        state_words(current),
        *audit_section(current),
        "",
        f"Next: {inert(next_step)}",
    ]
    if checks:
        # What a check says comes from the code under test, which the agent wrote.
        lines += ["", "Latest checks:", ""]
        lines += [
            inert(f"- {c.name}: {c.conclusion}" + (f" ({c.title})" if c.title else ""))
            for c in checks
        ]
    lines += ["", *attempt_table(runs, now)]
    return _fit_comment(lines, current)


def attempt_table(runs: Sequence[Run], now: datetime) -> list[str]:
    """Return the lines of the table of attempts: result, duration, turns, cost and head of each."""
    return [
        "| attempt | result | duration | turns | cost | head |",
        "|---|---|---|---|---|---|",
        *(_history_row(run, now) for run in runs),
    ]


def state_words(run: Run) -> str:
    """Return where the run stands, in a sentence."""
    if run.failure_class == FailureClass.AUDIT_FLAGGED.value:
        return "The pull request's checks passed, but its settlement audit holds it from review."
    if run.pull_pending is not None:
        at = run.pull_pending.at.astimezone(UTC)
        return (
            f"The work is pushed; GitHub did not let Baton open its pull request yet, so it "
            f"opens at {at:%H:%M} UTC ({inert(run.pull_pending.why)})."
        )
    return _STATE_WORDS[run.state]


def audit_section(run: Run) -> list[str]:
    """Return the lines that list what the run's settlement audit flagged; none when nothing.

    Each flag names its file and line and quotes the diff, which the agent wrote: inert,
    as inline code.
    """
    if not run.audit:
        return []
    count = len(run.audit)
    if run.failure_class == FailureClass.AUDIT_FLAGGED.value:
        effect = "It is held from review (`audit: hold`): a maintainer decides."
    else:
        effect = "The audit is advisory: look at each before merging."
    lines = [
        "",
        AUDIT_HEADING,
        "",
        f"The settlement audit read this pull request's own diff and flagged {count} "
        f"thing{'' if count == 1 else 's'}. {effect}",
        "",
    ]
    lines += [f"- {audit_line(finding)}" for finding in run.audit[:AUDIT_SHOWN]]
    if count > AUDIT_SHOWN:
        lines.append(f"- ... and {count - AUDIT_SHOWN} more")
    return lines


def audit_line(finding: AuditFinding) -> str:
    """Return one flag as a reviewer reads it: kind, file and line, what was seen there."""
    where = _code(finding.path) if finding.path else "the pull request"
    if finding.line is not None:
        where += f" line {finding.line}" + (" of the base" if finding.side == "base" else "")
    line = f"**{finding.kind.value}** · {where}: {inert(finding.note)}"
    if finding.text:
        line += f": {_code(finding.text)}"
    if finding.was:
        line += f" (was {_code(finding.was)})"
    return line


def audit_reason(findings: Sequence[AuditFinding]) -> str:
    """Return why an audit holds a green pull request: the flags, the first few by place."""
    named = [
        f"{f.kind.value} in {f.path or 'the pull request'}"
        + (f" line {f.line}" if f.line is not None else "")
        for f in findings[:AUDIT_IN_REASON]
    ]
    more = len(findings) - len(named)
    listed = "; ".join(named) + (f"; and {more} more" if more else "")
    return (
        "the settlement audit flagged this green pull request (`audit: hold`), "
        f"each listed in its status comment: {listed}"
    )


def _history_row(run: Run, now: datetime) -> str:
    result = run.failure_class or run.state.value
    agent = run.agent_result
    turns = str(agent.turns) if agent and agent.turns is not None else "-"
    cost = f"${agent.cost_usd:.2f}" if agent and agent.cost_usd is not None else "-"
    head = f"`{run.head_sha[:7]}`" if run.head_sha else "-"
    return (
        f"| {run.attempt} | {result} | {duration(run.wall_clock(now))} | {turns} | {cost} "
        f"| {head} |"
    )


def escalation_comment(
    reason: str,
    spent: Spend,
    limits: Limits,
    work: Run | None,
    mentions: list[str],
) -> str:
    """Return the one comment that tells a human Baton stopped, why, and what they can do.

    The reason is made inert; mentions, the configured logins and teams, notify.
    """
    pointer = transcript_pointer(work) if work is not None else "the runs' logs on the worker"
    lines = [
        ESCALATION_MARKER,
        f"**Baton stopped working on this issue**: "
        f"{fit_body(inert(reason), REASON_LIMIT, pointer=pointer, what='The full reason')}.",
        "",
        "| budget | spent | cap |",
        "|---|---|---|",
        f"| failed attempts | {spent.failed_attempts} | {limits.max_attempts} |",
        f"| continuations | {spent.continuations} | {limits.max_continuations} |",
    ]
    if spent.reentries:
        lines.append(
            f"| re-entries after usage windows | {spent.reentries} | {limits.max_reentries} |"
        )
    if limits.max_cost_usd is not None:
        lines.append(f"| agent cost | ${spent.cost_usd:.2f} | ${limits.max_cost_usd:.2f} |")
    if spent.by_class:
        breakdown = ", ".join(f"{name}: {count}" for name, count in sorted(spent.by_class.items()))
        lines += ["", f"What spent them: {breakdown}."]
        if all(name.startswith("orphan-") for name in spent.by_class):
            lines.append(
                "Every one was spent by a worker that died mid-run, not by the agent's work: "
                "look at the workers (memory, restarts) before queueing it again."
            )
    lines.append("")
    if work is not None and work.head_sha:
        where = f"`{work.branch}` at `{work.head_sha[:12]}`"
        pr = f", pull request {work.pr_url}" if work.pr_url else ""
        lines.append(f"Work to continue from: {where}{pr} (attempt {work.attempt}).")
    else:
        lines.append("There is no work to continue from: no attempt pushed anything.")
    lines += [
        "",
        "What you can do:",
        "- Re-scope the issue (say more precisely what is wanted), then add the queue "
        "label again: a fresh run starts with fresh budgets.",
        "- Raise the budgets for this repository in `.github/baton.yml` (`max_attempts`, "
        "`max_continuations`, `max_cost_usd`), or for every repository in Baton's settings.",
        "- Finish it by hand" + (" from the branch above." if work and work.head_sha else "."),
    ]
    keep = "\n\n" + " ".join(f"@{login}" for login in mentions) if mentions else ""
    return fit_body("\n".join(lines), pointer="Baton's status page", keep=keep, what="This comment")


def pr_title(issue_title: str, number: int) -> str:
    """Return the pull request's title: a merge or squash commit carries it, so inert."""
    return f"{inert(issue_title)} (#{number})"


def pr_body(
    run: Run, agent_report: str, changed_files: list[str] | None, *, limit: int = BODY_LIMIT
) -> str:
    """Return the pull request's body: closing keyword, the agent's report, the diff's files.

    The report is made inert (bot/domain/inert.py): only Baton's own `Closes #N` closes an
    issue, and the report notifies nobody. Only the report is cut to make the body
    fit GitHub; Baton's own parts are whole, and a cut report says where the rest is.
    """
    opening = "\n".join(
        [
            f"Closes #{run.issue.number}",
            "",
            f"Opened by Baton (attempt {run.attempt}) from an AI coding agent's work on "
            f"#{run.issue.number}. Please review it as you would any contribution.",
            "",
            "## The agent's report",
            "",
            "",
        ]
    )
    lines = ["", "", "## Files changed", ""]
    if changed_files is None:
        lines.append("(Listed once GitHub has computed the diff.)")
    else:
        lines += _file_list(changed_files) or ["(none)"]
    files = "\n".join(lines) + "\n"
    report = _closed(inert(agent_report.strip()) or "(The agent gave no report.)")
    return opening + fit_body(
        report, limit - len(opening), pointer=transcript_pointer(run), keep=files
    )


def _file_list(names: list[str]) -> list[str]:
    """Return the list items of changed files, as many as FILES_LIST_LIMIT has room for."""
    items: list[str] = []
    size = 0
    for number, name in enumerate(names):
        item = f"- {_code(name)}"
        if size + len(item) + 1 > FILES_LIST_LIMIT:
            items.append(f"- ... and {len(names) - number} more (see the pull request's files)")
            break
        items.append(item)
        size += len(item) + 1
    return items


def _code(text: str) -> str:
    """Return text as inline code, whatever backticks or line breaks it holds."""
    text = inert(" ".join(text.splitlines()))
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"
