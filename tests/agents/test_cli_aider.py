"""The real aider CLI through Baton's adapter, in Baton's jail, against a scripted provider.

Each test runs `aider --message-file` exactly as the runner does: a checkout provisioned
by Baton's Workspace, the issue's agent home, the jail with its allow-list proxy, and the
provider's address and key passed through the agent's environment (`OPENAI_API_BASE`,
`ANTHROPIC_API_BASE`: a custom endpoint). The provider (tests/providers/openai_chat.py)
plays the model: it answers with aider's SEARCH/REPLACE edits and shell blocks, or the
way OpenAI and Anthropic answer when something is wrong. The tests assert what Baton
concluded (the AgentResult, and the recovery `classify` picks) against what aider really
did: what it sent the provider, what it left in the checkout, what Baton's collect takes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.agents import TESTED_VERSIONS
from bot.agents import aider as aider_adapter
from bot.agents.aider import RETRY_PATIENCE_S, AiderAdapter
from bot.agents.egress import provider_hosts
from bot.domain.model import FailureClass, Recovery
from tests.cli_harness import (
    ROOT,
    Cli,
    Issue,
    IssueRig,
    Outcome,
    credentials,
    git,
    plain_request,
    to_review,
)
from tests.conftest import RedisServer
from tests.providers.openai_chat import (
    Cut,
    Failure,
    Reply,
    ScriptedChat,
    Seen,
    Step,
    credit_too_low,
    edit,
    insufficient_quota,
    invalid_key,
    overloaded,
    say,
    serving,
    shell,
    throttled,
    window_closed,
)

REPO = "octo/greeter"
GPT = "openai/gpt-4o"
CLAUDE = "anthropic/claude-sonnet-4-5"
KEYS = {"OPENAI_API_KEY": "sk-proj-scripted", "ANTHROPIC_API_KEY": "sk-ant-api03-scripted"}
AIDER = Cli(
    agent="aider",
    title="aider",
    binary=ROOT / ".agents" / "aider" / "bin" / "aider",
    adapter=AiderAdapter,
    passthrough=("OPENAI_API_BASE", "ANTHROPIC_API_BASE", *KEYS),
    with_sandbox=True,
)
CHECK = "python3 -B check_greeting.py"
PROJECT = {
    "greeting.txt": "hi\n",
    "check_greeting.py": (
        "import socket\n\n"
        "print('checked on', socket.gethostname())\n"
        "with open('greeting.txt') as f:\n"
        "    said = f.read()\n"
        "assert said == 'hello\\n', f'greeting.txt says {said!r}'\n"
        "print('greeting ok')\n"
    ),
}
GREETER = Issue(
    repo=REPO,
    files=PROJECT,
    subject="Greeter",
    check=CHECK,
    title="Greet with hello",
    body="greeting.txt says hi; it should say hello. check_greeting.py checks it.",
    branch="baton/issue-{number}-greet",
    # Naming its files puts them in aider's chat: it asks the model again when a reply
    # names a file the chat does not hold.
    brief="Fix issue #{number}: greeting.txt should say hello; check_greeting.py checks it.\n",
)
FIX = edit("greeting.txt", "hi\n", "hello\n")


@pytest.fixture(scope="module")
def aider() -> Cli:
    """Return the pinned aider; skip (outside CI) or fail (in CI) without it or a sandbox."""
    return AIDER.installed()


def reached_through_litellm(monkeypatch: pytest.MonkeyPatch, provider: ScriptedChat) -> None:
    """Point aider at the provider through litellm's own variables, with a key for each API."""
    monkeypatch.setenv("OPENAI_API_BASE", provider.openai_base)
    monkeypatch.setenv("ANTHROPIC_API_BASE", provider.base_url)
    credentials(monkeypatch, KEYS)


@pytest.fixture
async def provider(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ScriptedChat]:
    """Serve the scripted provider; aider finds it through litellm's own variables."""
    async with serving() as scripted:
        reached_through_litellm(monkeypatch, scripted)
        yield scripted


class Rig(IssueRig[ScriptedChat]):
    """Baton's side of one issue of the greeter, whose agent is aider with the model given."""

    def __init__(
        self,
        root: Path,
        aider: Cli,
        provider: ScriptedChat,
        *,
        model: str = GPT,
        number: int = 7,
        wall_clock_s: float = 120.0,
    ) -> None:
        super().__init__(
            root,
            provider,
            GREETER,
            aider,
            public=provider_hosts("aider", model),
            number=number,
            wall_clock_minutes=wall_clock_s / 60,
            env={"BATON_AGENT_MODEL": model},
        )


def commits(outcome: Outcome, rig: Rig) -> list[str]:
    """Return `author <email> | subject` of each commit the run added, oldest first."""
    added = f"{outcome.start}..{outcome.head}"
    return git(rig.mirror, "log", "--reverse", "--format=%an <%ae> | %s", added).splitlines()


def kept_out(outcome: Outcome) -> None:
    """Assert nothing aider keeps for itself is in the checkout's tracked or untracked files,
    and that it reached nothing but its provider."""
    assert outcome.result.refused_hosts == []
    assert not any(name.startswith(".aider") or name == ".gitignore" for name in outcome.changed)
    assert git(outcome.worktree, "status", "--porcelain") == ""
    assert not (outcome.worktree / ".gitignore").exists()
    history = outcome.request.home / ".aider" / "history"
    session = outcome.result.session_id
    assert session is not None and (history / f"{session}.chat.md").is_file()
    assert not list(outcome.worktree.glob(".aider.*.history*"))


# ---------------------------------------------------------------- success


async def test_a_file_edited_through_aiders_own_edit_format_is_a_success(
    tmp_path: Path, aider: Cli, provider: ScriptedChat
) -> None:
    rig = Rig(tmp_path, aider, provider)
    start = await rig.provision()
    provider.script(say("greeting.txt should say hello; changing it.", FIX))
    outcome = await rig.run(start)

    result = outcome.result
    assert (result.status, result.stop_reason, result.failure_class) == (
        "success",
        "completed",
        None,
    )
    assert result.exit_code == 0
    assert result.cost_usd is not None and result.cost_usd > 0  # litellm's bundled prices
    assert (outcome.worktree / "greeting.txt").read_text() == "hello\n"
    # aider committed its edit itself, as the checkout's identity; Baton had nothing left over.
    assert commits(outcome, rig) == ["Baton <baton@example.invalid> | Fix the greeting"]
    assert outcome.changed == ["greeting.txt"]
    kept_out(outcome)
    [chat] = provider.chat_requests
    assert chat.headers["Authorization"] == f"Bearer {KEYS['OPENAI_API_KEY']}"
    assert "greeting.txt should say hello" in chat.user_text  # the brief, read from its file
    assert "hi\n" in chat.user_text  # the file aider added to the chat on seeing it named
    assert len(provider.seen) == 2 and provider.overrun == 0  # the chat, its commit message


async def test_aider_runs_the_projects_tests_and_shell_commands_in_the_jail(
    tmp_path: Path, aider: Cli, provider: ScriptedChat
) -> None:
    """The project's own `.aider.conf.yml` names its tests; aider runs them after each edit
    and sends a failure back to the model, then runs the commands the model proposes."""
    rig = Rig(tmp_path, aider, provider)
    conf = f"test-cmd: {CHECK}\nauto-test: true\n"
    start = await rig.provision({**PROJECT, ".aider.conf.yml": conf})
    provider.script(
        say("Changing the greeting.", edit("greeting.txt", "hi\n", "hallo\n")),
        say(
            "The check wants hello, not hallo.",
            edit("greeting.txt", "hallo\n", "hello\n"),
            shell(CHECK, "git log -1 --format='%an <%ae> %s'"),
        ),
    )
    outcome = await rig.run(start)

    assert (outcome.result.status, outcome.result.stop_reason) == ("success", "completed")
    _, second = provider.chat_requests
    # The check ran in the jail (its hostname) and its failure went back to the model.
    assert "checked on baton-agent" in second.user_text
    assert "greeting.txt says 'hallo\\n'" in second.user_text
    # The commands the model proposed ran too, inside the jail, with git's identity.
    assert f"Running {CHECK}" in outcome.transcript
    assert "greeting ok" in outcome.transcript
    assert "Baton <baton@example.invalid> Fix the greeting" in outcome.transcript
    assert commits(outcome, rig) == ["Baton <baton@example.invalid> | Fix the greeting"] * 2
    assert outcome.changed == ["greeting.txt"]
    assert outcome.result.denials == []
    kept_out(outcome)


async def test_a_continuation_restores_the_chat_of_the_run_before(
    tmp_path: Path, aider: Cli, provider: ScriptedChat
) -> None:
    rig = Rig(tmp_path, aider, provider)
    start = await rig.provision()
    provider.script(say("Saying hello now.", FIX))
    first = await rig.run(start)
    session = first.result.session_id
    assert first.result.status == "success" and session is not None

    await rig.workspace.provision(REPO, rig.number, rig.branch, first.head)  # a new attempt
    provider.script(say(edit("greeting.txt", "hello\n", "hello, world\n")))
    brief = "A reviewer asked: greeting.txt should greet the world too.\n"
    second = await rig.run(first.head, resume=session, brief=brief)

    assert (second.result.status, second.result.session_id) == ("success", session)
    [chat] = [seen for seen in provider.chat_requests if "greet the world" in seen.user_text]
    assert "greeting.txt should say hello" in chat.user_text  # the first run's brief, restored
    assert (second.worktree / "greeting.txt").read_text() == "hello, world\n"
    # A session this machine does not have is not resumed: the run starts a chat of its own.
    missing = dataclasses.replace(second.request, resume_session_id="aider-elsewhere")
    assert not aider_adapter.session_exists(missing)
    assert aider_adapter.session_exists(second.request)


# ---------------------------------------------------------------- many issues at once
#
# Each of these runs is an issue of its own, all at once, against one provider that
# answers each model its own way: aider's startup is the slow part of a run, and its
# retries are mostly waiting.


@dataclass(frozen=True)
class Scenario:
    """One issue's run: its model, how the provider answers that model, its wall clock."""

    model: str
    steps: tuple[Step, ...] = ()
    then: Step | None = None
    wall_clock_s: float = 120.0
    files: tuple[tuple[str, str], ...] = ()  # the project's, besides PROJECT


@dataclass(frozen=True)
class Trouble:
    """What Baton must conclude from a provider that keeps failing one way."""

    scenario: str
    stop_reason: str
    failure_class: FailureClass
    recovery: Recovery


def _in_one_hour() -> int:
    return int(time.time()) + 3600


SCENARIOS = {
    "cut-once": Scenario("openai/gpt-4o-2024-11-20", steps=(Cut(), say(FIX))),
    # A project of aider users may say `yes-always` in its own config, which aider reads
    # from the checkout: then every shell command the model proposes is refused.
    "repo-says-yes-always": Scenario(
        "openai/gpt-4.1-nano",
        steps=(say(FIX, shell(CHECK, "git status --short")),),
        files=((".aider.conf.yml", "yes-always: true\n"),),
    ),
    # aider has no turns to cap: Baton's wall clock is what bounds it, however far it got.
    "stalled": Scenario(
        "anthropic/claude-sonnet-4-20250514", then=Reply("...", delay_s=300), wall_clock_s=20
    ),
    "throttle-429": Scenario(GPT, then=throttled()),
    "overloaded-503": Scenario("openai/gpt-4.1", then=overloaded()),
    "overloaded-529": Scenario(CLAUDE, then=Failure(529, "overloaded_error", "Overloaded")),
    # aider prints neither the window nor its reset: to it, a closed window is a throttle.
    "five-hour-window": Scenario(
        "anthropic/claude-opus-4-1", then=window_closed("five_hour", _in_one_hour())
    ),
    "weekly-window": Scenario(
        "anthropic/claude-3-5-haiku-20241022",
        then=window_closed("seven_day", _in_one_hour() + 5 * 86400),
    ),
    "openai-insufficient-quota": Scenario("openai/gpt-4.1-mini", then=insufficient_quota()),
    "anthropic-credit-too-low": Scenario(
        "anthropic/claude-3-7-sonnet-20250219", then=credit_too_low()
    ),
    "bad-key-401": Scenario("openai/gpt-4o-2024-08-06", then=invalid_key()),
}
BACKOFF = ("provider_transient", FailureClass.PROVIDER_TRANSIENT, Recovery.BACKOFF)
ESCALATE = ("provider_credit", FailureClass.PROVIDER_CREDIT, Recovery.ESCALATE)
KEEPS_FAILING = {
    name: Trouble(name, *BACKOFF)
    for name in (
        "throttle-429",
        "overloaded-503",
        "overloaded-529",
        "five-hour-window",
        "weekly-window",
    )
}
NOT_WAITED_ON = {
    "openai-insufficient-quota": Trouble("openai-insufficient-quota", *ESCALATE),
    "anthropic-credit-too-low": Trouble("anthropic-credit-too-low", *ESCALATE),
    # A key that does not authenticate: waiting cannot fix it.
    "bad-key-401": Trouble("bad-key-401", "auth", FailureClass.PROVIDER_CREDIT, Recovery.ESCALATE),
}


@dataclass
class Batch:
    """The runs of every scenario, and what the provider saw of each model."""

    outcomes: dict[str, Outcome]
    asked: dict[str, list[Seen]]


@pytest.fixture(scope="module")
def batch(aider: Cli, tmp_path_factory: pytest.TempPathFactory) -> Batch:
    root = tmp_path_factory.mktemp("at-once")
    with pytest.MonkeyPatch.context() as patch:
        return asyncio.run(_all_at_once(root, aider, patch))


async def _all_at_once(root: Path, aider: Cli, patch: pytest.MonkeyPatch) -> Batch:
    async with serving() as provider:
        reached_through_litellm(patch, provider)
        rigs = {}
        for number, (name, scenario) in enumerate(SCENARIOS.items(), start=1):
            model = scenario.model.split("/", 1)[1]
            provider.script(*scenario.steps, then=scenario.then, model=model)
            (root / name).mkdir()
            rigs[name] = Rig(
                root / name,
                aider,
                provider,
                model=scenario.model,
                number=number,
                wall_clock_s=scenario.wall_clock_s,
            )
        starts = await asyncio.gather(
            *(
                rig.provision({**PROJECT, **dict(SCENARIOS[name].files)})
                for name, rig in rigs.items()
            )
        )
        outcomes = await asyncio.gather(
            *(rig.run(start) for rig, start in zip(rigs.values(), starts, strict=True))
        )
    asked = {
        name: [s for s in provider.chat_requests if s.body.get("model") == model]
        for name, model in ((n, sc.model.split("/", 1)[1]) for n, sc in SCENARIOS.items())
    }
    return Batch(dict(zip(rigs, outcomes, strict=True)), asked)


def _concluded(trouble: Trouble, outcome: Outcome) -> None:
    result, classification = outcome.result, outcome.classification
    said = f"{trouble.scenario}: {result.stop_reason} {result.evidence[:3]}"
    assert (result.status, result.stop_reason) == ("failed", trouble.stop_reason), said
    assert result.resets_at is None, said
    assert classification is not None, said
    assert classification.failure_class is trouble.failure_class, said
    assert classification.recovery is trouble.recovery, said
    assert outcome.new_commits == 0 and outcome.result.refused_hosts == [], said


@pytest.mark.parametrize("name", sorted(KEEPS_FAILING))
def test_a_provider_that_keeps_failing_is_left_to_batons_backoff(batch: Batch, name: str) -> None:
    """aider retries for a minute; Baton lets it for RETRY_PATIENCE_S, then backs off."""
    outcome = batch.outcomes[name]
    _concluded(KEEPS_FAILING[name], outcome)
    stopped = "Baton stopped aider's retries after "
    [note] = [line for line in outcome.result.evidence if line.startswith(stopped)]
    assert float(note.removeprefix(stopped).split()[0]) >= RETRY_PATIENCE_S - 0.5
    assert "Retrying in 2.0 seconds" in outcome.transcript  # aider's own retries ran...
    assert "Retrying in 16.0 seconds" not in outcome.transcript  # ...up to Baton's patience
    assert len(batch.asked[name]) >= 5  # the first try and a retry at 0.2, 0.5, 1, 2 s


@pytest.mark.parametrize("name", sorted(NOT_WAITED_ON))
def test_a_spent_account_or_a_bad_key_escalates_at_once(batch: Batch, name: str) -> None:
    outcome = batch.outcomes[name]
    _concluded(NOT_WAITED_ON[name], outcome)
    evidence = outcome.result.evidence
    assert "Retrying in 0.5 seconds" not in outcome.transcript
    said = {
        "openai-insufficient-quota": "exceeded your current quota",
        "anthropic-credit-too-low": "credit balance is too low",
        "bad-key-401": "Incorrect API key provided",
    }[name]
    assert any(line.startswith("litellm.") and said in line for line in evidence), evidence


def test_a_connection_cut_once_is_retried_and_the_run_succeeds(batch: Batch) -> None:
    outcome = batch.outcomes["cut-once"]
    assert (outcome.result.status, outcome.result.stop_reason) == ("success", "completed")
    assert [type(seen.step) for seen in batch.asked["cut-once"]] == [Cut, Reply]
    assert outcome.changed == ["greeting.txt"] and outcome.new_commits == 1


def test_shell_commands_aider_refused_are_kept_with_the_run(batch: Batch) -> None:
    outcome = batch.outcomes["repo-says-yes-always"]
    assert (outcome.result.status, outcome.result.stop_reason) == ("success", "completed")
    assert outcome.result.denials == [f"shell: {CHECK}", "shell: git status --short"]
    assert f"Running {CHECK}" not in outcome.transcript
    assert outcome.changed == ["greeting.txt"]


def test_the_wall_clock_is_what_bounds_aider(batch: Batch) -> None:
    outcome = batch.outcomes["stalled"]
    result = outcome.result
    assert (result.stop_reason, result.failure_class) == ("wall_clock", "wall-clock-cap")
    assert outcome.classification is not None
    assert outcome.classification.failure_class is FailureClass.WALL_CLOCK_CAP_SPINNING
    assert outcome.classification.recovery is Recovery.ESCALATE


# ---------------------------------------------------------------- reading what aider prints

# aider 0.86.2's own output at its default 80 columns (no terminal): each error wraps, and
# rich leaves a space at the end of each wrapped line.
WRAPPED_CREDIT = "\n".join(
    [
        "Aider v0.86.2",
        "Model: anthropic/claude-sonnet-4-5 with diff edit format, infinite output",
        "Git repo: .git with 0 files",
        "Repo-map: using 4096 tokens, auto refresh",
        "",
        'litellm.BadRequestError: AnthropicException - {"type": "error", "error": ',
        '{"type": "invalid_request_error", "message": "Your credit balance is too low to ',
        "access the Anthropic API. Please go to Plans & Billing to upgrade or purchase ",
        'credits."}, "request_id": "req_failed"}',
        "",
        "",
    ]
)
WRAPPED_QUOTA = "\n".join(
    [
        "Aider v0.86.2",
        "Main model: openai/gpt-4o with diff edit format",
        "Weak model: gpt-4o-mini",
        "Git repo: .git with 0 files",
        "Repo-map: using 4096 tokens, auto refresh",
        "",
        "litellm.RateLimitError: RateLimitError: OpenAIException - You exceeded your ",
        "current quota, please check your plan and billing details. For more information ",
        "on this error, read the docs: ",
        "https://platform.openai.com/docs/guides/error-codes/api-errors.",
        "The API provider has rate limited you. Try again later or check your quotas.",
        "",
        "https://platform.openai.com/docs/guides/error-codes/api-errors",
        "Open URL for more info? (Y)es/(N)o/(D)on't ask again [Yes]: ",
    ]
)


@pytest.mark.parametrize("text", [WRAPPED_CREDIT, WRAPPED_QUOTA], ids=["credit", "quota"])
def test_an_error_wrapped_over_lines_is_read_whole(text: str) -> None:
    reading = aider_adapter.read(text, 0, datetime(2026, 9, 14, tzinfo=UTC), UTC)
    assert reading.stop_reason == "provider_credit"
    assert reading.evidence[0].startswith("litellm.")


RETRIES = [
    "litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached",
    "The API provider has rate limited you. Try again later or check your quotas.",
]


def test_retries_are_stopped_by_the_time_they_take_not_by_what_they_announce() -> None:
    now = [0.0]
    patience = aider_adapter.RetryPatience(7.0, clock=lambda: now[0])
    for delay in (0.2, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0):
        assert not any(patience(line) for line in RETRIES)
        assert not patience(f"Retrying in {delay} seconds...")  # printed at once: no wait
    now[0] = 7.5  # a streak that has lasted longer than Baton's patience
    assert not any(patience(line) for line in RETRIES)
    assert patience("Retrying in 32.0 seconds...")
    assert (
        patience.gave_up
        == "Baton stopped aider's retries after 8 s: waiting longer is Baton's backoff"
    )


def test_a_model_answer_ends_a_streak_and_a_spent_quota_is_not_waited_on() -> None:
    now = [0.0]
    patience = aider_adapter.RetryPatience(7.0, clock=lambda: now[0])
    assert not any(patience(line) for line in RETRIES)
    now[0] = 30.0
    assert not patience("Tokens: 1.2k sent, 60 received.")  # aider got its answer
    assert not any(patience(line) for line in RETRIES)
    assert not patience("Retrying in 0.2 seconds...")  # a new streak, just begun
    spent = "litellm.RateLimitError: RateLimitError: OpenAIException - You exceeded your "
    assert not patience("Add file to the chat? (Y)es/(N)o [Yes]: " + spent)
    assert not patience("current quota, please check your plan and billing details.")
    assert patience("Retrying in 0.5 seconds...")
    assert patience.gave_up == "Baton stopped aider's retries: the quota or credit is spent"


def test_what_baton_writes_before_aider_runs_follows_no_link(tmp_path: Path) -> None:
    worktree, home, elsewhere = tmp_path / "checkout", tmp_path / "home", tmp_path / "elsewhere"
    (worktree / ".git" / "info").mkdir(parents=True)
    (worktree / ".git" / "info" / "exclude").write_text("*.log")  # no newline at its end
    (home / ".aider").mkdir(parents=True)
    elsewhere.mkdir()
    (home / ".aider" / "caches").symlink_to(elsewhere)  # the agent's doing, in its home
    request = plain_request(worktree, home, tmp_path)
    aider_adapter.prepare(request)
    aider_adapter.prepare(request)
    assert list(elsewhere.iterdir()) == []
    assert (worktree / ".git" / "info" / "exclude").read_text() == "*.log\n.aider*\n"
    assert (home / ".aider" / "history").is_dir()


def test_aider_is_told_its_width_and_kept_off_the_network(tmp_path: Path) -> None:
    request = plain_request(tmp_path, tmp_path / "home", tmp_path)
    adapter = AiderAdapter()
    env, argv = adapter.environment(request), adapter.argv(request)
    assert int(env["COLUMNS"]) >= 10_000 and env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert env["BROWSER"] == "true"
    quiet = {"--no-check-update", "--no-show-release-notes", "--analytics-disable"}
    assert quiet | {"--no-detect-urls", "--no-gitignore", "--disable-playwright"} <= set(argv)
    assert "--yes-always" not in argv and "--restore-chat-history" not in argv
    assert TESTED_VERSIONS["aider"][0] == "0.86.2"


# ---------------------------------------------------------------- the whole loop


async def test_a_labelled_issue_is_fixed_by_aider_and_goes_to_review(
    aider: Cli, provider: ScriptedChat, redis_server: RedisServer, tmp_path: Path
) -> None:
    """The sandbox GitHub, Baton's web process and a worker, every one a real process; the
    worker runs aider in its jail, which edits the code and runs the check itself."""
    provider.commit_message = "Greet with hello"
    provider.script(
        say(
            "greeting.txt says hi; the check wants hello.",
            FIX,
            shell(CHECK),
        )
    )
    run, pull, comments = await to_review(
        tmp_path,
        redis_server,
        GREETER,
        aider,
        provider,
        env={
            "BATON_AGENT_MODEL": GPT,
            "BATON_AGENT_PASSTHROUGH_ENV": "OPENAI_API_BASE,OPENAI_API_KEY",
            "OPENAI_API_BASE": provider.openai_base,
            "OPENAI_API_KEY": KEYS["OPENAI_API_KEY"],
        },
    )

    agent = run.agent_result
    assert agent is not None
    assert (agent.agent, agent.status, agent.stop_reason) == ("aider", "success", "completed")
    assert agent.refused_hosts == [] and agent.session_id
    assert run.changed_files == ["greeting.txt"]
    assert pull["head"]["sha"] == run.head_sha
    assert "greeting ok" in (agent.result_text or "")
    assert any("pushed-green" in body for body in comments)
    assert provider.overrun == 0
