"""The status views of an `Overview`: the operator's HTML page (/status) and `baton status`;
and the page of an attempt's transcript, which the status page links each run to.

Pure functions: every value that reaches the page goes through `html.escape`,
since run reasons and failure text come from agents and issues.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, urlsplit

from bot.domain.chains import LinkStatus
from bot.domain.model import Run, RunState
from bot.domain.plans.redelivery import RedeliveryPass
from bot.domain.render import duration, sandbox_refusals
from bot.domain.spend import WINDOW_DAYS, AgentSpend, BudgetState, usd
from bot.domain.transcript import Entry, Message, Notice, Reasoning, ToolCall, counts
from bot.web.overview import HeldIssue, Overview, RunSummary, SpendRow, TimedIssue

REFRESH_S = 30

_RUN_TONES = {
    RunState.CLAIMED: "busy",
    RunState.PROVISIONING: "busy",
    RunState.RUNNING: "busy",
    RunState.PUSHED_PENDING: "warn",
    RunState.PUSHED_GREEN: "ok",
    RunState.MERGED: "ok",
    RunState.CLOSED: "idle",
    RunState.FAILED: "bad",
    RunState.NO_CHANGE: "idle",
    RunState.KILLED: "bad",
    RunState.HALTED: "warn",
}
_LINK_TONES = {
    LinkStatus.NOT_STARTED: "idle",
    LinkStatus.IN_PROGRESS: "busy",
    LinkStatus.GREEN: "ok",
    LinkStatus.MERGED: "ok",
    LinkStatus.STOPPED: "bad",
    LinkStatus.CLOSED: "idle",
}

_STYLE = """
:root { --ink: #1f2328; --muted: #59636e; --line: #d1d9e0; --soft: #eef1f4; --page: #f6f8fa;
  --blue: #0969da; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--page); color: var(--ink);
  font: 14px/1.5 -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; }
main { max-width: 1160px; margin: 0 auto; padding: 24px 24px 40px; }
header { display: flex; align-items: baseline; justify-content: space-between; gap: 16px;
  flex-wrap: wrap; }
h1 { font-size: 24px; margin: 0; }
.muted { color: var(--muted); }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(160px, 1fr)); gap: 12px;
  margin: 20px 0 4px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; }
.card .label { color: var(--muted); font-size: 13px; }
.card .value { font-size: 24px; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .unit { font-size: 13px; font-weight: 400; color: var(--muted); }
section { background: #fff; border: 1px solid var(--line); border-radius: 8px; margin-top: 16px;
  overflow: hidden; }
h2 { font-size: 15px; margin: 0; padding: 10px 16px; background: #f6f8fa;
  border-bottom: 1px solid var(--line); }
h2 .count { color: var(--muted); font-weight: 400; margin-left: 6px; }
table { width: 100%; border-collapse: collapse; }
th, td { text-align: left; padding: 8px 16px; border-bottom: 1px solid var(--soft);
  vertical-align: top; }
th { font-size: 12px; color: var(--muted); font-weight: 600; }
tr:last-child td { border-bottom: 0; }
td.num { font-variant-numeric: tabular-nums; white-space: nowrap; }
.empty { margin: 0; padding: 12px 16px; color: var(--muted); }
.reason { color: var(--muted); overflow-wrap: anywhere; }
.badge { display: inline-block; padding: 0 8px; border: 1px solid; border-radius: 999px;
  font-size: 12px; font-weight: 600; line-height: 20px; white-space: nowrap; }
.links .badge { margin: 0 6px 4px 0; }
.ok { color: #1a7f37; background: #dafbe1; border-color: #aceebb; }
.warn { color: #9a6700; background: #fff8c5; border-color: #eac54f; }
.bad { color: #d1242f; background: #ffebe9; border-color: #ffcecb; }
.busy { color: #0969da; background: #ddf4ff; border-color: #b6e3ff; }
.idle { color: #59636e; background: #f6f8fa; border-color: var(--line); }
.alert { margin: 16px 0 0; padding: 10px 16px; border: 1px solid; border-radius: 8px;
  font-weight: 600; }
a { color: var(--blue); text-decoration: none; }
a:hover { text-decoration: underline; }
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def _clock(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _relative(at: datetime, now: datetime) -> str:
    return f"{duration(now - at)} ago" if at <= now else f"in {duration(at - now)}"


def _badge(text: str, tone: str) -> str:
    return f'<span class="badge {tone}">{_e(text)}</span>'


def _run_badge(run: RunSummary) -> str:
    return _badge(run.state.value, _RUN_TONES[run.state])


def _cost(run: RunSummary) -> str:
    return "—" if run.cost_usd is None else f"${run.cost_usd:.2f}"


def _pull_link(run: RunSummary) -> str:
    if run.pr_url is None:
        return "—"
    name = f"#{run.pr_number}" if run.pr_number is not None else run.pr_url
    # Only a web address becomes a link: a recorded URL is data, never a script to run.
    if urlsplit(run.pr_url).scheme not in ("http", "https"):
        return _e(name)
    return f'<a href="{_e(run.pr_url)}">{_e(name)}</a>'


def _outcome(run: RunSummary) -> str:
    said = []
    if run.failure_class is not None:
        said.append(run.failure_class + (f": {run.reason}" if run.reason else ""))
    if refused := sandbox_refusals(run.refused_hosts):
        said.append(refused)
    return "<br>".join(f'<span class="reason">{_e(text)}</span>' for text in said)


def _held_why(held: HeldIssue) -> str:
    if held.held_by is None:
        return "its repository is paused"
    return f"chain link #{held.held_by} stopped"


def _escalation(run: RunSummary) -> str:
    parts = [_e(f"after attempt {run.attempt}")]
    if run.failure_class is not None:
        parts.append(_outcome(run))
    if run.pr_url is not None:
        parts.append(_pull_link(run))
    return " · ".join(parts)


def _table(headings: Sequence[str], rows: Iterable[Sequence[str]], empty: str) -> str:
    """Return a table of already escaped cells, or the empty text when there are no rows."""
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    if not body:
        return f'<p class="empty">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(heading)}</th>" for heading in headings)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _section(key: str, title: str, count: int, content: str) -> str:
    return (
        f'<section aria-labelledby="{key}"><h2 id="{key}">{_e(title)}'
        f'<span class="count">{count}</span></h2>{content}</section>'
    )


def _card(label: str, value: str, unit: str = "") -> str:
    unit_text = f' <span class="unit">{_e(unit)}</span>' if unit else ""
    return (
        f'<div class="card"><div class="label">{_e(label)}</div>'
        f'<div class="value">{_e(value)}{unit_text}</div></div>'
    )


def _cards(overview: Overview, now: datetime) -> str:
    cards = [_card("workers", str(overview.workers))]
    cards += [_card(name, str(count), "queued") for name, count in overview.queues.items()]
    cards += [
        _card(f"last {what}", duration(now - at), "ago")
        for what, at in sorted(overview.marks.items())
    ]
    if (lost := overview.redelivery) is not None:
        cards.append(_card("lost deliveries", str(lost.failed), redelivery_words(lost, now)))
    return f'<div class="cards">{"".join(cards)}</div>'


def _repos(overview: Overview) -> str:
    def pause(since: datetime | None, held: int, settled: int) -> str:
        if since is None:
            return _badge("admitting", "ok")
        detail = f"since {_clock(since)}: {held} held, {settled} settled"
        return f'{_badge("paused", "warn")} <span class="muted">{_e(detail)}</span>'

    rows = [
        (
            _e(repo.repo),
            _e(repo.live),
            pause(repo.paused_since, repo.held_starts, repo.settled_while_paused),
        )
        for repo in overview.repos
    ]
    table = _table(("Repository", "Live runs", "New work"), rows, "No repository has runs yet.")
    return _section("repositories", "Repositories", len(rows), table)


def _issue_cell(run: RunSummary) -> str:
    title = f' <span class="muted">{_e(run.title)}</span>' if run.title else ""
    return f"{_e(run.issue)}{title}"


def _live(overview: Overview, now: datetime) -> str:
    rows = [
        (
            _issue_cell(run),
            _e(run.attempt),
            _run_badge(run),
            _e(duration(now - run.changed_at)),
            _e(duration(run.took(now))),
        )
        for run in overview.live_runs
    ]
    table = _table(("Issue", "Attempt", "Phase", "In phase", "Age"), rows, "No run is in progress.")
    return _section("live", "Live runs", len(rows), table)


def _timed(overview: Overview, now: datetime) -> str:
    def row(issue: TimedIssue, badge: str, what: str) -> tuple[str, ...]:
        when = f"{what} {_clock(issue.until)} ({_relative(issue.until, now)})"
        return (_e(issue.issue), badge, _e(when))

    rows = [row(i, _badge("halted", "warn"), "resumes") for i in overview.halted]
    rows += [row(i, _badge("waiting", "idle"), "starts at") for i in overview.waiting]
    table = _table(("Issue", "State", "When"), rows, "No issue is halted or waiting to start.")
    return _section("halted", "Halted and waiting to start", len(rows), table)


def _held(overview: Overview) -> str:
    rows = [(_e(i.issue), _badge("held", "warn"), _e(_held_why(i))) for i in overview.held]
    rows += [
        (
            _issue_cell(run),
            _badge("escalated", "bad"),
            _escalation(run),
        )
        for run in overview.escalated
    ]
    table = _table(("Issue", "State", "Why"), rows, "Nothing is held or escalated.")
    return _section("held", "Held and escalated", len(rows), table)


def _completions(overview: Overview, now: datetime) -> str:
    rows = [
        (
            _issue_cell(run),
            _transcript_link(run),
            _run_badge(run),
            _e(duration(run.took(now))),
            _e(_cost(run)),
            _pull_link(run),
            _outcome(run),
        )
        for run in overview.completions
    ]
    table = _table(
        ("Issue", "Attempt", "State", "Duration", "Cost", "Pull request", "Outcome"),
        rows,
        "No run has pushed or ended yet.",
    )
    return _section("completions", "Recent completions", len(rows), table)


def _chains(overview: Overview) -> str:
    def links(statuses: Sequence[tuple[int, LinkStatus]]) -> str:
        badges = "".join(_badge(f"#{n} {s.value}", _LINK_TONES[s]) for n, s in statuses)
        return f'<div class="links">{badges}</div>'

    rows = [
        (
            _e(chain.chain_id),
            links([(link.number, link.status) for link in chain.links]),
            _e(f"held by #{chain.held_by}" if chain.held_by is not None else "moving"),
        )
        for chain in overview.chains
    ]
    table = _table(("Chain", "Links", "Chain state"), rows, "No chain is queued.")
    return _section("chains", "Chains", len(rows), table)


def _budgets(overview: Overview) -> str:
    rows = [
        (
            _e(budget.installation_id),
            f"{budget.remaining:,} of {budget.limit:,}",
            _e(_clock(budget.resets_at)),
            _badge("sweeps paused", "warn") if budget.sweeps_paused else "",
        )
        for budget in overview.budgets
    ]
    table = _table(
        ("installation", "requests left this hour", "refills", ""),
        rows,
        "No answer from GitHub recorded yet.",
    )
    return _section("budgets", "GitHub API budget", len(rows), table)


def _spent(spend: AgentSpend, attempts: bool = False) -> str:
    if not spend.attempts:
        return "—"
    detail = f"{spend.turns:,} turns" + (f", {spend.attempts:,} attempts" if attempts else "")
    return f'{_e(usd(spend.cost_usd))}<br><span class="muted">{_e(detail)}</span>'


def _left(budget: BudgetState | None) -> str:
    if budget is None:
        return "—"
    if budget.frees_at is not None:
        starts = f"new issues start {_clock(budget.frees_at)}"
        return f'{_badge("spent", "bad")} <span class="muted">{_e(starts)}</span>'
    return _e(usd(budget.left_usd))


def _spend(overview: Overview) -> str:
    spend = overview.spend
    if spend is None:
        return ""

    def row(line: SpendRow) -> list[str]:
        name = _e(line.repo) if line.repo is not None else "<strong>All repositories</strong>"
        budget = _e(usd(line.budget.budget_usd)) if line.budget is not None else "—"
        days = [_spent(day) for day in line.days]
        return [name, *days, _spent(line.window, attempts=True), budget, _left(line.budget)]

    days = ["today", *(day.day.isoformat()[5:] for day in spend.deployment.days[1:])]
    headings = ("Repository", *days, f"{WINDOW_DAYS} days", "Monthly budget", "Left")
    rows = [row(spend.deployment), *(row(repo) for repo in spend.repos)]
    table = _table(headings, rows, "")
    return _section("spend", "Agent spend (UTC days)", len(spend.repos), table)


def _warnings(overview: Overview) -> str:
    return "".join(f'<p class="alert warn" role="alert">{_e(w)}</p>' for w in overview.warnings)


def render_status_page(overview: Overview, now: datetime) -> str:
    """Return the operator's status page: a whole HTML document, no script, no outside asset."""
    taken = overview.taken_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    sections = [
        _warnings(overview),
        _cards(overview, now),
        _repos(overview),
        _live(overview, now),
        _timed(overview, now),
        _held(overview),
        _completions(overview, now),
        _chains(overview),
        _spend(overview),
        _budgets(overview),
    ]
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f'<meta http-equiv="refresh" content="{REFRESH_S}">'
        f"<title>Baton status</title><style>{_STYLE}</style></head><body><main>"
        f'<header><h1>Baton status</h1><p class="muted">as of {_e(taken)} · '
        f"refreshes every {REFRESH_S} s</p></header>"
        f"{''.join(sections)}</main></body></html>\n"
    )


def _run_line(run: RunSummary, now: datetime) -> str:
    pr = f" {run.pr_url}" if run.pr_url else ""
    reason = f" ({run.failure_class}: {run.reason})" if run.failure_class else ""
    cost = f" {_cost(run)}" if run.cost_usd is not None else ""
    refused = sandbox_refusals(run.refused_hosts)
    return (
        f"  #{run.number} attempt {run.attempt:<3} {run.state.value:<15} "
        f"{duration(run.took(now)):>9}{' so far' if run.live else ''}{cost}{pr}{reason}"
        + (f" {refused}" if refused else "")
    )


def _spend_line(row: SpendRow) -> str:
    spent, today, budget = row.window, row.days[0], row.budget
    line = (
        f"{row.repo or 'all repositories'}: {usd(spent.cost_usd)} spent over the rolling "
        f"{WINDOW_DAYS} days, {spent.turns} turns, {spent.attempts} attempts "
        f"(today {usd(today.cost_usd)})"
    )
    if budget is None:
        return line
    if budget.frees_at is not None:
        frees = _clock(budget.frees_at)
        return f"{line}; monthly budget {usd(budget.budget_usd)} spent: new issues start {frees}"
    return f"{line}; monthly budget {usd(budget.budget_usd)}, {usd(budget.left_usd)} left"


def redelivery_words(lost: RedeliveryPass, now: datetime) -> str:
    """Say what the last redelivery pass did, and when."""
    return (
        f"{lost.asked} asked again, {lost.refused} refused, {lost.left} left "
        f"({_relative(lost.at, now)})"
    )


def render_status_text(overview: Overview, now: datetime) -> str:
    """Return what `baton status` prints: one line per fact, runs grouped by repository."""
    depths = ", ".join(f"{name} {count}" for name, count in overview.queues.items())
    lines = [f"warning: {warning}" for warning in overview.warnings]
    lines += [f"queues: {depths}", f"workers: {overview.workers}"]
    lines += [
        f"last {what}: {_clock(at)} ({_relative(at, now)})"
        for what, at in sorted(overview.marks.items())
    ]
    if (lost := overview.redelivery) is not None:
        lines.append(f"lost webhook deliveries: {lost.failed}; {redelivery_words(lost, now)}")
    lines += [
        f"{repo.repo}: paused since {_clock(repo.paused_since)} — nothing admitted "
        f"({repo.held_starts} held), {repo.settled_while_paused} settled"
        for repo in overview.repos
        if repo.paused_since is not None
    ]
    lines += [f"halted until {_clock(i.until)}: {i.issue}" for i in overview.halted]
    lines += [f"waiting until {_clock(i.until)}: {i.issue}" for i in overview.waiting]
    lines += [f"held, {_held_why(i)}: {i.issue}" for i in overview.held]
    lines += [f"escalated after attempt {run.attempt}: {run.issue}" for run in overview.escalated]
    lines += [
        f"chain {chain.chain_id}: "
        + ", ".join(f"#{link.number} {link.status.value}" for link in chain.links)
        for chain in overview.chains
    ]
    lines += [
        f"installation {budget.installation_id}: {budget.remaining} of {budget.limit} "
        f"GitHub requests left until {_clock(budget.resets_at)}"
        + (" (sweeps paused)" if budget.sweeps_paused else "")
        for budget in overview.budgets
    ]
    if overview.spend is not None:
        lines += [_spend_line(row) for row in (overview.spend.deployment, *overview.spend.repos)]
    if not overview.runs:
        lines.append("no runs yet")
    for repo in overview.repos:
        runs = [run for run in overview.runs if run.repo == repo.repo]
        if runs:
            lines.append(f"{repo.repo}: {repo.live} live, recent runs:")
            lines += [_run_line(run, now) for run in runs]
    return "\n".join(lines) + "\n"


# --- An attempt's transcript (/status/transcripts/...) ----------------------------------------

TRANSCRIPTS_PATH = "/status/transcripts"
_TRANSCRIPT_STYLE = """
ol.transcript { list-style: none; margin: 0; padding: 8px 16px 16px; }
.entry { margin: 8px 0; }
pre, .said { margin: 0; white-space: pre-wrap; overflow-wrap: anywhere;
  font: 12px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.said { font: inherit; }
.message { border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; }
.message.agent { background: #f6f8fa; }
.who { color: var(--muted); font-size: 12px; font-weight: 600; }
details { border: 1px solid var(--line); border-radius: 6px; }
summary { cursor: pointer; padding: 6px 12px; }
summary code { font-size: 12px; overflow-wrap: anywhere; }
.tool-name { font-weight: 600; }
.tool-body { border-top: 1px solid var(--soft); padding: 8px 12px; }
.tool-body h3 { font-size: 12px; color: var(--muted); margin: 8px 0 4px; }
details.failed { border-color: #ffcecb; }
details.denied { border-color: #fb8f44; background: #fff1e5; }
.notice { padding: 6px 12px; border-radius: 6px; border-left: 4px solid var(--line);
  overflow-wrap: anywhere; white-space: pre-wrap; }
.notice.info { color: var(--muted); }
.notice.warning { background: #fff8c5; border-left-color: #d4a72c; }
.notice.error { background: #ffebe9; border-left-color: #d1242f; color: #82071e; }
.notice.denial { background: #fff1e5; border-left-color: #bc4c00; color: #953800;
  font-weight: 600; }
.denials { margin: 0; padding: 8px 16px 12px 36px; }
"""
_NOTICE_LABELS = {"info": "", "warning": "warning: ", "error": "error: ", "denial": ""}


def transcript_url(repo: str, number: int, attempt: int) -> str:
    """Return the address of an attempt's transcript on the status page."""
    return f"{TRANSCRIPTS_PATH}/{quote(repo)}/{number}/{attempt}"


def _transcript_link(run: RunSummary) -> str:
    url = transcript_url(run.repo, run.number, run.attempt)
    return f'{_e(run.attempt)} <a href="{_e(url)}">transcript</a>'


def _tool(call: ToolCall) -> str:
    """Return a tool call folded: its name and target shown, its input and output a click away."""
    tone = "denied" if call.denied else "failed" if call.failed else ""
    parts = [f"<h3>input</h3><pre>{_e(call.detail)}</pre>"] if call.detail else []
    if call.output is not None:
        parts.append(f'<h3>output</h3><pre class="output">{_e(call.output)}</pre>')
    shown = "".join(parts) or '<p class="muted">nothing shown</p>'
    return (
        f'<details class="tool {tone}"><summary><span class="tool-name">{_e(call.name)}</span> '
        f"<code>{_e(call.summary)}</code> {_badge(tone, 'bad') if tone else ''}</summary>"
        f'<div class="tool-body">{shown}</div></details>'
    )


def _entry(entry: Entry) -> str:
    if isinstance(entry, Message):
        return (
            f'<li class="entry message {entry.author}"><div class="who">{_e(entry.author)}</div>'
            f'<div class="said">{_e(entry.text)}</div></li>'
        )
    if isinstance(entry, Reasoning):
        return (
            '<li class="entry"><details class="reasoning"><summary>reasoning</summary>'
            f'<div class="tool-body"><pre>{_e(entry.text)}</pre></div></details></li>'
        )
    if isinstance(entry, ToolCall):
        return f'<li class="entry">{_tool(entry)}</li>'
    if isinstance(entry, Notice):
        text = _NOTICE_LABELS[entry.tone] + entry.text
        return f'<li class="entry notice {entry.tone}">{_e(text)}</li>'
    return f'<li class="entry"><pre class="text">{_e(entry.text)}</pre></li>'


def _transcript_document(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title)}</title><style>{_STYLE}{_TRANSCRIPT_STYLE}</style></head><body><main>"
        f'<header><h1>{_e(title)}</h1><p class="muted"><a href="/status">Baton status</a></p>'
        f"</header>{body}</main></body></html>\n"
    )


def render_transcript_page(run: Run, entries: Sequence[Entry], days: int) -> str:
    """Return the page of an attempt's transcript: what its agent said and did, in order."""
    result = run.agent_result
    facts = [result.agent if result is not None else "no agent", run.state.value]
    if result is not None:
        facts.append(f"agent ended {_clock(result.ended_at)}")
        facts.append(f"kept until about {_clock(result.ended_at + timedelta(days=days))}")
    calls = sum(isinstance(entry, ToolCall) for entry in entries)
    found = counts(entries)
    tally = " · ".join(
        f"{count} {word}{'' if count == 1 else 's'}"
        for count, word in (
            (calls, "tool call"),
            (found["error"], "error"),
            (found["denial"], "denial"),
        )
    )
    body = f'<p class="muted">{_e(" · ".join(facts))}</p><p>{_e(tally)}</p>'
    if result is not None and result.denials:
        listed = "".join(f"<li>{_e(denial)}</li>" for denial in result.denials)
        body += _section(
            "denied",
            "Denied by the agent's CLI",
            len(result.denials),
            f'<ul class="denials notice denial">{listed}</ul>',
        )
    shown = "".join(_entry(entry) for entry in entries)
    body += _section(
        "transcript", "Transcript", len(entries), f'<ol class="transcript">{shown}</ol>'
    )
    title = f"Transcript of {run.issue}, attempt {run.attempt}"
    return _transcript_document(title, body)


def render_no_transcript_page(reason: str) -> str:
    """Return the page saying why there is no transcript to show."""
    return _transcript_document("No transcript", f'<p class="alert warn">{_e(reason)}.</p>')
