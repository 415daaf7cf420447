"""The `aider` adapter: `aider --message-file`, its plain-text output read into a result.

aider runs as a developer runs it, inside Baton's jail: it edits, commits each edit to
the issue's branch with the checkout's own identity, and runs the shell commands its
model proposes (tests, linters) there. Every question it asks takes its default answer,
which in aider 0.86 is always yes: stdin is empty, so each prompt ends at once.
`--yes-always` is not used because under it aider refuses every shell command.

Nothing it keeps for itself reaches the pull request: its chat and input histories live
in the agent home, it adds nothing to `.gitignore`, and the checkout's own
`.git/info/exclude` hides the repository-map cache it writes beside the code. It talks
to its model provider only: no update check, release notes, analytics, price-list
download, URL scraping or browser.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from datetime import datetime, tzinfo
from pathlib import Path

from bot.agents.base import AgentRequest, agent_environment
from bot.agents.home import HomeLayout
from bot.agents.output import Unreadable, read_capped
from bot.agents.process import run_process
from bot.agents.stream import (
    Clock,
    Reading,
    StopReason,
    interpret,
    safe_session_id,
    transcript_text,
)
from bot.domain.model import AgentResult, bounded_denials

SUMMARY_LINES = 10

# aider retries a throttled or failing provider for about a minute (0.25 s, doubling, to
# 32 s). Baton lets one streak of its retries go on this long (aider's retries up to its
# 4 s one: about 8 s in all); at the next retry aider announces, Baton stops it and the
# wait is Baton's own backoff, which frees the run's slot. A spent quota is not waited on.
RETRY_PATIENCE_S = 7.0

# Wide enough that aider (rich, without a terminal) never wraps an error message.
COLUMNS = 32767
# aider's own price list, fetched from the internet when its cached copy is missing or a
# day old. A copy that names no model makes aider take litellm's bundled list instead.
PRICE_CACHE = (".aider", "caches", "model_prices_and_context_window.json")
PRICE_CACHE_TEXT = '{"baton": "not fetched: litellm\'s bundled model list is used"}\n'
HISTORY_DIR = (".aider", "history")
HOME = HomeLayout(carried=(HISTORY_DIR,))  # a continuation reads its chat history again
EXCLUDED = ".aider*"  # aider's files in the checkout: its repository-map cache, and any other
QUIET_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # litellm's price list: its bundled copy
    "BROWSER": "true",  # aider offers to open URLs (release notes, an error's docs): no-op
    "COLUMNS": str(COLUMNS),
}

HISTORY_CAP = 8 << 20  # bytes of a chat history Baton reads for what aider refused

_BANNER = re.compile(r"^Aider v\d")
# A question aider asked (stdin is empty, so the default was taken): what follows on the
# same line is whatever aider printed next.
_PROMPT = re.compile(r"^.*?\? \(Y\)es/\(N\)o(?:/\([A-Z]\)[^/\[]*)* \[(?:Yes|No)\]: ")
# Where a provider error starts: litellm's exception, or aider's own words for one.
_PROVIDER_ERROR = re.compile(
    r"^(?:litellm\.\w+|The API provider\b|Insufficient credits with the API provider"
    r"|OpenRouter or the upstream API provider)"
)
_RETRYING = re.compile(r"^Retrying in [\d.]+ seconds")
# What aider prints only after a model call came back: the run went on past the error.
_PROGRESS = re.compile(r"^(?:Applied edit to |Commit [0-9a-f]{7,} |Tokens: )")
# How aider's chat history records a shell command it refused: the question, answered no.
# Only `--yes-always` (from a config file: a repository's own `.aider.conf.yml` may say
# it) refuses them; the history is the one place aider says so.
_REFUSED_SHELL = re.compile(r"^> Run shell commands?\? \(Y\)es/\(N\)o.*\]: n\s*$")
_COST = re.compile(r"Cost: \$[\d.]+ message, \$(?P<session>[\d.]+) session")
_SPENT = re.compile(
    r"insufficient_quota|credit balance|exceeded your current quota|insufficient credits"
    r"|billing",
    re.I,
)
_ERROR_CLASSES: tuple[tuple[re.Pattern[str], StopReason], ...] = (
    (_SPENT, "provider_credit"),
    (
        re.compile(
            r"AuthenticationError|not able to authenticate|invalid[_ ]api[_ ]key"
            r"|PermissionDeniedError",
            re.I,
        ),
        "auth",
    ),
    (
        re.compile(
            r"RateLimitError|rate limit|overloaded|servers are down|timed? ?out"
            r"|InternalServerError|ServiceUnavailable|BadGatewayError|APIConnectionError"
            r"|litellm\.APIError",
            re.I,
        ),
        "provider_transient",
    ),
)


class AiderAdapter:
    """Run aider on the brief file and read its text output; aider has no turn cap.

    Its session is its chat history, a file in the agent home: a continuation on the
    same machine restores it with `--restore-chat-history` and goes on writing it.
    """

    name = "aider"

    def __init__(
        self,
        binary: str = "aider",
        *,
        model: str | None = None,
        extra_flags: tuple[str, ...] = (),
        clock: Clock | None = None,
    ) -> None:
        self.binary = binary
        self.model = model
        self.extra_flags = extra_flags
        self.clock = clock

    def argv(self, request: AgentRequest) -> list[str]:
        """Return the command line; the brief is a file aider reads, never text in argv."""
        history = history_dir(request)
        session = session_of(request)
        argv = [
            self.binary,
            "--message-file",
            str(request.brief_path),
            "--no-pretty",
            "--no-stream",
            "--no-fancy-input",
            "--encoding",
            "utf-8",
            # Its own traffic: none but the model provider's.
            "--no-check-update",
            "--no-show-release-notes",
            "--analytics-disable",
            "--no-show-model-warnings",
            "--no-detect-urls",
            "--disable-playwright",
            # It commits its edits, as a developer would; Baton commits what is left over.
            "--auto-commits",
            "--no-dirty-commits",
            # Its bookkeeping stays out of the checkout.
            "--no-gitignore",
            "--chat-history-file",
            str(history / f"{session}.chat.md"),
            "--input-history-file",
            str(history / f"{session}.input"),
        ]
        if safe_session_id(request.resume_session_id) is not None:
            argv.append("--restore-chat-history")
        if self.model is not None:
            argv += ["--model", self.model]
        return [*argv, *self.extra_flags]

    def environment(self, request: AgentRequest) -> dict[str, str]:
        """Return the agent environment plus what keeps aider's own traffic off."""
        return {**agent_environment(request), **QUIET_ENV}

    async def run(self, request: AgentRequest) -> AgentResult:
        """Run aider in the worktree and report what it printed."""
        if not session_exists(request):
            request = replace(request, resume_session_id=None)
        prepare(request)
        history = history_dir(request) / f"{session_of(request)}.chat.md"
        before = _size(history)
        argv, env = request.contain(self.argv(request), self.environment(request))
        patience = RetryPatience()
        outcome = await run_process(
            argv,
            cwd=request.worktree,
            env=env,
            stdin=Path(os.devnull),  # every question takes its default answer at once
            transcript=request.transcript_path,
            stderr=request.stderr_path,
            deadline=request.deadline,
            stop_on=patience,
        )
        observed_at = self.clock() if self.clock is not None else outcome.ended_at
        text, problem = transcript_text(request)
        reading = read(text, outcome.exit_code, observed_at, None)
        notes = [problem] if problem is not None else []
        if patience.gave_up is not None:
            outcome = replace(outcome, turn_capped=False)  # Baton's stop, not a turn cap
            notes.append(patience.gave_up)
        refused = bounded_denials(denials(_appended(history, before, request)))
        reading = replace(reading, evidence=(*reading.evidence, *notes), denials=refused)
        result = interpret(self.name, reading, outcome, request)
        if history.is_file():
            result = result.model_copy(update={"session_id": session_of(request)})
        return result


class RetryPatience:
    """Stop aider once its retries of a failing provider outlast Baton's patience.

    Read live, line by line. A streak of retries starts at aider's first report of a
    provider error since its last answer from the model; the first `Retrying in N
    seconds...` once the streak is RETRY_PATIENCE_S old, or the first after a report of a
    spent quota or credit, ends the run. The report before it is what the run is then
    classified by.
    """

    def __init__(
        self, patience_s: float = RETRY_PATIENCE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.patience_s = patience_s
        self.clock = clock
        self.report: list[str] = []
        self.streak_since: float | None = None
        self.gave_up: str | None = None

    def __call__(self, line: str) -> bool:
        """Take one line of aider's stdout; return whether Baton stops aider now."""
        line = _unprompted(line.rstrip("\r"))
        if _PROGRESS.match(line):
            self.streak_since = None
        retry = _RETRYING.match(line)
        if retry is None:
            if _PROVIDER_ERROR.match(line):
                if self.streak_since is None:
                    self.streak_since = self.clock()
                self.report.append(line)
            elif self.report and line.strip():
                self.report.append(line)  # a report's wrapped lines, or aider's words for it
            else:
                self.report = []
            return False
        spent = _SPENT.search(" ".join(self.report)) is not None
        self.report = []
        now = self.clock()
        waited = now - (self.streak_since if self.streak_since is not None else now)
        if spent:
            self.gave_up = "Baton stopped aider's retries: the quota or credit is spent"
        elif waited >= self.patience_s:
            self.gave_up = (
                f"Baton stopped aider's retries after {waited:.0f} s: waiting longer is"
                " Baton's backoff"
            )
        return self.gave_up is not None


def history_dir(request: AgentRequest) -> Path:
    """Return where aider's chat and input histories live: the agent home, not the checkout."""
    return request.home.joinpath(*HISTORY_DIR)


def session_of(request: AgentRequest) -> str:
    """Return the session (chat history) this run writes: the one it resumes, or its own."""
    resumed = safe_session_id(request.resume_session_id)
    if resumed is not None:
        return resumed
    return "aider-" + hashlib.sha256(request.run_id.encode()).hexdigest()[:24]


def session_exists(request: AgentRequest) -> bool:
    """Return whether the chat history to restore is stored here."""
    session = safe_session_id(request.resume_session_id)
    return session is not None and (history_dir(request) / f"{session}.chat.md").is_file()


def denials(history: str) -> Iterator[str]:
    """Yield `shell: <command>` for each shell command aider's chat history says it refused."""
    lines = history.splitlines()
    for n, line in enumerate(lines):
        if not _REFUSED_SHELL.match(line):
            continue
        # The commands come just before the question: the first line quoted, the rest not.
        start = n - 1
        while start > 0 and not lines[start].startswith("> "):
            start -= 1
        for command in lines[start:n]:
            command = " ".join(command.removeprefix("> ").split())
            if command and not command.startswith("#"):
                yield f"shell: {command}"


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def _appended(history: Path, before: int, request: AgentRequest) -> str:
    """Return what this run added to the chat history (read as Baton reads agent files)."""
    try:
        found = read_capped(history, HISTORY_CAP, within=request.home)
    except Unreadable:
        return ""
    if found is None or found.cut or found.size < before:
        return ""
    return found.data[before:].decode(errors="replace")


def prepare(request: AgentRequest) -> None:
    """Write what keeps aider off the network and out of the pull request, before it runs.

    Both places are the agent's to write, so nothing on the way is followed as a link.
    """
    request.home.mkdir(parents=True, exist_ok=True)  # Baton's own path, made as agent_home does
    _write_within(request.home, PRICE_CACHE, PRICE_CACHE_TEXT)
    _write_within(request.home, (*HISTORY_DIR, ""), "")
    exclude = request.worktree / ".git" / "info" / "exclude"
    if not (request.worktree / ".git").is_dir():
        return  # not a checkout Baton made: nothing of its git to add to
    try:
        found = read_capped(exclude, 1 << 20, within=request.worktree)
    except Unreadable:
        return
    present = found.text() if found is not None else ""
    if EXCLUDED not in present.splitlines():
        line = f"{EXCLUDED}\n" if not present or present.endswith("\n") else f"\n{EXCLUDED}\n"
        _write_within(request.worktree, (".git", "info", "exclude"), line, append=True)


def _write_within(root: Path, parts: Sequence[str], text: str, *, append: bool = False) -> None:
    """Write text to root/parts..., making directories and following no link on the way.

    An empty last part only makes the directories. Whatever is not a directory or a
    regular file where one is expected is left alone, and nothing is written.
    """
    dir_flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fds = [os.open(root, dir_flags)]
    except OSError:
        return
    try:
        for name in parts[:-1]:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, 0o755, dir_fd=fds[-1])
            try:
                fds.append(os.open(name, dir_flags, dir_fd=fds[-1]))
            except OSError:
                return
        if not parts[-1]:
            return
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
        try:
            fd = os.open(parts[-1], flags | (os.O_APPEND if append else 0), 0o644, dir_fd=fds[-1])
        except OSError:
            return
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            if not append:
                out.truncate(0)
            out.write(text)
    finally:
        for fd in fds:
            os.close(fd)


def read(
    text: str, exit_code: int | None, observed_at: datetime, child_tz: tzinfo | None
) -> Reading:
    """Read aider's output: it exits 0 even when the provider failed, so the text decides."""
    lines = [_unprompted(line.rstrip("\r")) for line in text.split("\n")]
    costs = [match["session"] for line in lines if (match := _COST.search(line))]
    summary = [line.rstrip() for line in lines if line.strip()][-SUMMARY_LINES:]
    return replace(
        _verdict(lines, exit_code),
        cost_usd=float(costs[-1]) if costs else None,
        result_text="\n".join(summary) or None,
    )


def _unprompted(line: str) -> str:
    """Return a line without the question aider asked at its start (its answer is the default)."""
    while match := _PROMPT.match(line):
        line = line[match.end() :]
    return line


def _verdict(lines: list[str], exit_code: int | None) -> Reading:
    # A provider's failure is what ended the run, however aider then exited (Baton may
    # have stopped its retries); any other non-zero exit is aider's own failure.
    if block := _unrecovered_provider_error(lines):
        text = " ".join(block)
        for pattern, stop_reason in _ERROR_CLASSES:
            if pattern.search(text):
                return Reading(stop_reason, evidence=tuple(block))
        return Reading("cli_error", evidence=tuple(block))
    if exit_code != 0:
        return Reading("cli_error", evidence=(f"aider exited {exit_code}",))
    if not any(_BANNER.match(line) for line in lines):
        return Reading("no_result", evidence=("the output is not aider's: no version banner",))
    return Reading("completed")


def _unrecovered_provider_error(lines: list[str]) -> list[str]:
    """Return aider's last provider-error report, whole, unless aider went on working after it.

    A report is litellm's exception (`litellm.RateLimitError: ...`) and aider's words for
    it (`The API provider has rate limited you...`), either one wrapped over as many
    lines as it takes; it ends at a blank line or at `Retrying in ...`.
    """
    starts = [n for n, line in enumerate(lines) if _PROVIDER_ERROR.match(line)]
    if not starts or any(_PROGRESS.match(line) for line in lines[starts[-1] :]):
        return []
    start = end = starts[-1]
    if not lines[start].startswith("litellm."):
        # aider's words follow litellm's exception: take the exception and its wrapped lines.
        back = start
        while back > 0 and lines[back - 1].strip() and not _RETRYING.match(lines[back - 1]):
            back -= 1
            if lines[back].startswith("litellm."):
                start = back
                break
    while end + 1 < len(lines) and lines[end + 1].strip() and not _RETRYING.match(lines[end + 1]):
        end += 1
    return lines[start : end + 1]
