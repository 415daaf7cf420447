"""The sandbox's web pages: a read-only view of a pull request at its `html_url`.

GitHub shows a person a pull request at `/<owner>/<repo>/pull/<n>`; the sandbox does
too, so a link Baton writes (or a demo prints) opens something a person can read.
Bodies and comments render the Markdown Baton and people write; every piece of their
text is escaped first, so a body can never add markup of its own.
"""

from __future__ import annotations

import html
import re

from aiohttp import web

from bot.sandbox import pulls
from bot.sandbox.hub import hub_of
from bot.sandbox.middleware import PAGE_ROUTE
from bot.sandbox.render import PullFacts, latest_runs
from bot.sandbox.state import CheckRun, CommitStatus, Issue, Repo, parse_iso

routes = web.RouteTableDef()

_HIDDEN = re.compile(r"<!--.*?-->", re.DOTALL)  # GitHub hides HTML comments in Markdown
_PASSING = frozenset({"success", "neutral", "skipped"})
_SYMBOLS = {"pass": "✓", "fail": "✗", "pending": "●"}
_REVIEW_VERBS = {"APPROVED": "approved these changes", "CHANGES_REQUESTED": "requested changes"}

_STYLE = """
* { box-sizing: border-box; }
body { margin: 0; background: #fff; color: #1f2328;
  font: 14px/1.5 -apple-system, "Segoe UI", "Noto Sans", Helvetica, Arial, sans-serif; }
.bar { background: #f6f8fa; border-bottom: 1px solid #d1d9e0; padding: 14px 32px;
  color: #59636e; }
.bar strong { color: #1f2328; }
main { max-width: 980px; margin: 0 auto; padding: 24px 32px 48px; }
h1 { font-size: 28px; font-weight: 400; margin: 0 0 8px; overflow-wrap: anywhere; }
h1 .number { color: #59636e; }
.meta { display: flex; align-items: center; gap: 8px; flex-wrap: wrap; padding-bottom: 16px;
  border-bottom: 1px solid #d1d9e0; color: #59636e; }
.state { color: #fff; border-radius: 999px; padding: 4px 12px; font-weight: 600; }
.open { background: #1f883d; } .merged { background: #8250df; } .closed { background: #cf222e; }
code { font: 12px ui-monospace, SFMono-Regular, Menlo, monospace; background: #ddf4ff;
  color: #0969da; border-radius: 6px; padding: 2px 6px; }
.stat { margin-left: auto; } .add { color: #1a7f37; } .del { color: #d1242f; }
.box { border: 1px solid #d1d9e0; border-radius: 6px; margin-top: 16px; overflow: hidden; }
.box header { background: #f6f8fa; border-bottom: 1px solid #d1d9e0; padding: 8px 16px;
  color: #59636e; }
.box header strong { color: #1f2328; }
.text { padding: 4px 16px; overflow-wrap: anywhere; }
.text h2, .text h3, .text h4 { font-size: 16px; margin: 16px 0 8px; padding-bottom: 4px;
  border-bottom: 1px solid #d1d9e0; }
.text p, .text ul, .text ol, .text table, .text pre { margin: 8px 0 12px; }
.text table { border-collapse: collapse; }
.text th, .text td { border: 1px solid #d1d9e0; padding: 4px 12px; }
.text th { background: #f6f8fa; }
.text pre { background: #f6f8fa; border-radius: 6px; padding: 12px; overflow: auto; }
.text pre code, .text code { color: #1f2328; background: #eff1f3; }
.text pre code { background: none; padding: 0; }
.checks header { font-weight: 600; color: #1f2328; }
.check { display: flex; gap: 10px; padding: 8px 16px; border-top: 1px solid #eef1f4; }
.check:first-of-type { border-top: 0; }
.check .detail { color: #59636e; }
.pass { color: #1a7f37; } .fail { color: #d1242f; } .pending { color: #9a6700; }
.empty { padding: 12px 16px; color: #59636e; margin: 0; }
"""


def _e(value: object) -> str:
    return html.escape(str(value))


def _when(iso_time: str) -> str:
    return parse_iso(iso_time).strftime("%Y-%m-%d %H:%M UTC")


_LINK = re.compile(r"\[([^\]]+)\]\((https?://[^)\s]+)\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_LIST_ITEM = re.compile(r"^(?:[-*]|\d+\.) ")
_HEADING = re.compile(r"^(#{1,6}) (.*)$")


def _inline(text: str) -> str:
    """Render code spans, bold and web links of one line; everything else is escaped text."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unclosed backtick is a backtick
        parts[-2:] = [parts[-2] + "`" + parts[-1]]
    shown = []
    for i, part in enumerate(parts):
        if i % 2:
            shown.append(f"<code>{_e(part)}</code>")
            continue
        escaped = _BOLD.sub(r"<strong>\1</strong>", _e(part))
        shown.append(_LINK.sub(r'<a href="\2">\1</a>', escaped))
    return "".join(shown)


def _block(lines: list[str]) -> str:
    """Render one block of lines: a table, a list, or a paragraph."""
    if all(line.startswith("|") for line in lines):
        rows = [[cell.strip() for cell in line.strip().strip("|").split("|")] for line in lines]
        body = [row for row in rows[1:] if not all(set(cell) <= set("-: ") for cell in row)]
        head = "".join(f"<th>{_inline(cell)}</th>" for cell in rows[0])
        cells = "".join(
            "<tr>" + "".join(f"<td>{_inline(cell)}</td>" for cell in row) + "</tr>" for row in body
        )
        return f"<table><thead><tr>{head}</tr></thead><tbody>{cells}</tbody></table>"
    if all(_LIST_ITEM.match(line) for line in lines):
        tag = "ul" if lines[0][0] in "-*" else "ol"
        items = "".join(f"<li>{_inline(_LIST_ITEM.sub('', line))}</li>" for line in lines)
        return f"<{tag}>{items}</{tag}>"
    return "<p>" + "<br>".join(_inline(line) for line in lines) + "</p>"


def _markdown(text: str) -> str:
    """Render the Markdown GitHub users and Baton write: headings, fences, lists, tables."""
    shown: list[str] = []
    block: list[str] = []
    fence: list[str] | None = None
    for line in text.splitlines():
        if fence is not None:
            if line.startswith("```"):
                shown.append(f"<pre><code>{_e(chr(10).join(fence))}</code></pre>")
                fence = None
            else:
                fence.append(line)
            continue
        heading = _HEADING.match(line)
        if line.startswith("```") or heading or not line.strip():
            if block:
                shown.append(_block(block))
                block = []
            if line.startswith("```"):
                fence = []
            elif heading:
                level = min(len(heading[1]) + 1, 6)  # the page's title is the only h1
                shown.append(f"<h{level}>{_inline(heading[2])}</h{level}>")
            continue
        block.append(line)
    if fence is not None:
        shown.append(f"<pre><code>{_e(chr(10).join(fence))}</code></pre>")
    if block:
        shown.append(_block(block))
    return "".join(shown)


def _text(body: str | None) -> str:
    shown = _HIDDEN.sub("", body or "").strip()
    if not shown:
        return '<p class="empty">No description provided.</p>'
    return f'<div class="text">{_markdown(shown)}</div>'


def _entry(author: str, what: str, at: str | None, body: str | None) -> str:
    when = f" on {_e(_when(at))}" if at else ""
    return (
        f'<div class="box"><header><strong>{_e(author)}</strong> {_e(what)}{when}</header>'
        f"{_text(body)}</div>"
    )


def _tone(outcome: str | None) -> str:
    """Return how a check's outcome reads: pass, fail, or pending (None: still running)."""
    if outcome is None or outcome == "pending":
        return "pending"
    return "pass" if outcome in _PASSING else "fail"


def _details(url: str | None) -> str:
    """Link a check's details page, as GitHub's "Details" does (web addresses only)."""
    if url is None or not url.startswith(("https://", "http://")):
        return ""
    return f' <a class="details" href="{_e(url)}">Details</a>'


def _checks(runs: list[CheckRun], statuses: list[CommitStatus]) -> str:
    lines = []  # (tone, name, what it says, its details link)
    for run in runs:
        done = run.status == "completed"
        said = (run.conclusion or "completed") if done else run.status.replace("_", " ")
        title = f" — {run.output.title}" if run.output.title else ""
        tone = _tone(run.conclusion if done else None)
        lines.append((tone, run.name, said + title, _details(run.details_url)))
    for status in statuses:
        description = f" — {status.description}" if status.description else ""
        outcome = "failure" if status.state == "error" else status.state
        said = status.state + description
        lines.append((_tone(outcome), status.context, said, _details(status.target_url)))
    tones = {tone for tone, _, _, _ in lines}
    if not lines:
        summary = "No checks reported"
    elif "fail" in tones:
        summary = "Some checks were not successful"
    elif "pending" in tones:
        summary = "Some checks haven't completed yet"
    else:
        summary = "All checks have passed"
    rows = "".join(
        f'<div class="check"><span class="{tone}">{_SYMBOLS[tone]}</span><span><strong>'
        f'{_e(name)}</strong> <span class="detail">{_e(said)}</span>{link}</span></div>'
        for tone, name, said, link in lines
    )
    return f'<div class="box checks"><header>{_e(summary)}</header>{rows}</div>'


def pull_request_page(
    repo: Repo,
    issue: Issue,
    facts: PullFacts,
    runs: list[CheckRun],
    statuses: list[CommitStatus],
) -> str:
    """Return the HTML page of a pull request: its description, head → base, checks, comments.

    runs and statuses are the latest of each check on the pull request's head.
    """
    pull = issue.pull
    assert pull is not None
    if pull.merged_at is not None:
        state, verb = "merged", "merged"
    elif issue.state == "closed":
        state, verb = "closed", "wanted to merge"
    else:
        state, verb = "open", "wants to merge"
    commits = f"{facts.commits} commit" + ("" if facts.commits == 1 else "s")
    files = f"{facts.changed_files} file" + ("" if facts.changed_files == 1 else "s")
    timeline = [
        (c.created_at, _entry(c.user, "commented", c.created_at, c.body)) for c in issue.comments
    ]
    timeline += [
        (
            r.submitted_at,
            _entry(r.user, _REVIEW_VERBS.get(r.state, "reviewed"), r.submitted_at, r.body),
        )
        for r in pull.reviews
        if r.submitted_at is not None  # a pending review is its author's draft
    ]
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{_e(issue.title)} · Pull Request #{issue.number} · {_e(repo.full_name)}</title>"
        f"<style>{_STYLE}</style></head><body>"
        f'<div class="bar">sandbox GitHub · <strong>{_e(repo.full_name)}</strong></div><main>'
        f'<h1>{_e(issue.title)} <span class="number">#{issue.number}</span></h1>'
        f'<div class="meta"><span class="state {state}">{state.capitalize()}</span>'
        f"<span><strong>{_e(issue.user)}</strong> {verb} {commits} into "
        f"<code>{_e(pull.base_ref)}</code> from <code>{_e(pull.head_ref)}</code></span>"
        f'<span class="stat"><span class="add">+{facts.additions}</span> '
        f'<span class="del">&minus;{facts.deletions}</span> in {files}</span></div>'
        f"{_entry(issue.user, 'opened this pull request', issue.created_at, issue.body)}"
        f"{''.join(entry for _, entry in sorted(timeline, key=lambda item: item[0]))}"
        f"{_checks(runs, statuses)}"
        "</main></body></html>\n"
    )


def _latest_checks(repo: Repo, sha: str) -> tuple[list[CheckRun], list[CommitStatus]]:
    """Return the newest check run per app and name, and the newest status per context."""
    statuses = {s.context: s for s in repo.statuses if s.sha == sha}
    return latest_runs([r for r in repo.check_runs if r.head_sha == sha]), list(statuses.values())


@routes.get("/{owner}/{repo}/pull/{number:\\d+}", name=PAGE_ROUTE)
async def pull_request(request: web.Request) -> web.Response:
    """Serve a public repository's pull request as a page a person reads."""
    hub = hub_of(request)
    repo = hub.repo(request.match_info["owner"], request.match_info["repo"])
    issue = repo.issues.get(int(request.match_info["number"])) if repo is not None else None
    if repo is None or repo.private or issue is None or issue.pull is None:
        return web.Response(status=404, text="Not Found\n")
    facts = await pulls.facts(hub, repo, issue)
    runs, statuses = _latest_checks(repo, issue.pull.head_sha)
    page = pull_request_page(repo, issue, facts, runs, statuses)
    return web.Response(text=page, content_type="text/html")
