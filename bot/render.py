"""Every text Baton writes, rendered from models: briefs, status comments, PR bodies."""

from __future__ import annotations

from datetime import datetime, timedelta

from bot.model import Run, RunState

STATUS_MARKER = "<!-- baton:status -->"

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


def brief(title: str, body: str | None, issue: str, attempt: int) -> str:
    """Return the brief an agent reads: the issue as data, then how to work."""
    return (
        f"# Issue {issue}: {title}\n\n"
        f"Attempt {attempt}.\n\n"
        "## The issue, as its author wrote it\n\n"
        f"{(body or '').strip() or '(The issue has no description.)'}\n\n"
        f"{BRIEF_INSTRUCTIONS}"
    )


def status_comment(run: Run, now: datetime) -> str:
    """Return the issue's status comment for the run's current state."""
    lines = [
        STATUS_MARKER,
        f"**Baton** · attempt {run.attempt} · {run.state.value}",
        "",
        _STATE_WORDS[run.state],
    ]
    if run.reason:
        lines += ["", f"Reason: {run.reason}"]
    if run.pr_url:
        lines += ["", f"Pull request: {run.pr_url}"]
    lines += ["", f"Branch `{run.branch}` · {duration(run.wall_clock(now))} so far"]
    return "\n".join(lines)


def pr_title(issue_title: str, number: int) -> str:
    """Return the pull request's title."""
    return f"{issue_title} (#{number})"


def pr_body(run: Run, agent_report: str, changed_files: list[str] | None) -> str:
    """Return the pull request's body: closing keyword, the agent's report, the diff's files."""
    lines = [
        f"Closes #{run.issue.number}",
        "",
        f"Opened by Baton (attempt {run.attempt}) from an AI coding agent's work on "
        f"#{run.issue.number}. Please review it as you would any contribution.",
        "",
        "## The agent's report",
        "",
        agent_report.strip() or "(The agent gave no report.)",
        "",
        "## Files changed",
        "",
    ]
    if changed_files is None:
        lines.append("(Listed once GitHub has computed the diff.)")
    else:
        lines += [f"- `{name}`" for name in changed_files] or ["(none)"]
    return "\n".join(lines) + "\n"
