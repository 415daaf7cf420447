"""Chains: parsing dependencies and task lists, ordering, link status, and what Baton writes."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from bot.domain.chains import (
    STACK_MARKER,
    ChainRefused,
    ChainStep,
    IssueFacts,
    LinkStatus,
    ManifestLink,
    chain_from_dependencies,
    chain_status_comment,
    dependencies,
    dependency_closure,
    held_comment,
    is_tracking_issue,
    link_status,
    next_step,
    predecessor_of,
    preflight,
    stack_manifest,
    successors,
    task_list,
)
from bot.domain.model import Budget, Classification, FailureClass, IssueRef, Recovery, Run, RunState
from bot.domain.render import STATUS_MARKER

REPO = "owner/name"
AT = datetime(2026, 5, 1, 9, tzinfo=UTC)
S = LinkStatus


def issue(number: int, body: str | None = None, title: str = "", open: bool = True) -> IssueFacts:
    return IssueFacts(number=number, title=title or f"Issue {number}", body=body, open=open)


def issues(*facts: IssueFacts) -> dict[int, IssueFacts]:
    return {fact.number: fact for fact in facts}


# --- dependencies() ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("Depends on #3", (3,)),
        ("Blocked by #3", (3,)),
        ("After #3", (3,)),
        ("depends on #3", (3,)),
        ("DEPENDS ON #3", (3,)),
        ("blocked BY #3", (3,)),
        ("after #3", (3,)),
        ("Depends on: #3", (3,)),
        ("**Depends on** #3", (3,)),
        ("**Depends on:** #3", (3,)),
        ("_Blocked by_ #3", (3,)),
        ("- Depends on #3", (3,)),
        ("* Blocked by #3", (3,)),
        ("1. After #3", (3,)),
        ("  - **After** #3", (3,)),
        ("> Depends on #3", (3,)),
        ("### Depends on #3", (3,)),
        ("Depends on #3, #4 and #5", (3, 4, 5)),
        ("Depends on #3, #4, and #5", (3, 4, 5)),
        ("Depends on #3 & #4", (3, 4)),
        ("Depends on #3 #4", (3, 4)),
        ("Depends on #3 and then some words #9", (3,)),
        ("Depends on #3.", (3,)),
        ("Depends on #3 (the parser)", (3,)),
        ("Depends on owner/name#7", (7,)),
        ("Depends on OWNER/Name#7", (7,)),
        ("Depends on https://github.com/owner/name/issues/7", (7,)),
        ("Depends on https://ghe.example.com/owner/name/issues/7", (7,)),
        ("Depends on http://github.com/Owner/Name/issues/7#issuecomment-1", (7,)),
        ("Depends on #3, owner/name#4 and https://github.com/owner/name/issues/5", (3, 4, 5)),
        ("Depends on #3\nBlocked by #4\nAfter #5", (3, 4, 5)),
        ("Depends on #4\nBlocked by #3, #4\nAfter #4", (4, 3)),
        ("Depends on #3, #3", (3,)),
    ],
)
def test_dependencies_are_read(body: str, expected: tuple[int, ...]) -> None:
    assert dependencies(body, REPO) == expected


@pytest.mark.parametrize(
    "body",
    [
        None,
        "",
        "Nothing to see here.",
        "This depends on #3 in passing.",
        "Fixes #3",
        "Afterwards #3",
        "After all, #3 was wrong.",
        "Depends on the parser (#3)",
        "Depends on #3abc",
        "Depends on https://github.com/owner/name/pull/3",
        "```\nDepends on #3\n```",
        "~~~\nDepends on #3\n~~~",
        "````md\n```\nDepends on #3\n```\n````",
    ],
)
def test_dependencies_ignore_other_text(body: str | None) -> None:
    assert dependencies(body, REPO) == ()


def test_inline_code_with_three_backticks_opens_no_fence() -> None:
    assert dependencies("```inline```\nDepends on #3", REPO) == (3,)


def test_dependencies_resume_after_a_fence_closes() -> None:
    body = "Depends on #1\n```python\nDepends on #2\n```\nDepends on #3\n```\nDepends on #4"
    assert dependencies(body, REPO) == (1, 3)


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ("Depends on other/repo#3", "`other/repo#3`"),
        ("Blocked by #2, other/repo#3", "`other/repo#3`"),
        ("After https://github.com/other/repo/issues/3", "`other/repo#3`"),
        ("Depends on owner/name-two#3", "`owner/name-two#3`"),
    ],
)
def test_dependencies_refuse_another_repository(body: str, named: str) -> None:
    with pytest.raises(ChainRefused) as refused:
        dependencies(body, REPO)
    assert str(refused.value) == (
        f"{named} is in another repository: a chain stays within one repository"
    )


def test_a_foreign_reference_in_a_fence_is_ignored() -> None:
    assert dependencies("```\nDepends on other/repo#3\n```\nDepends on #4", REPO) == (4,)


# --- task_list() and is_tracking_issue() ---------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("- [ ] #12", (12,)),
        ("- [x] #12", (12,)),
        ("- [X] #12", (12,)),
        ("* [ ] #12", (12,)),
        ("+ [ ] #12", (12,)),
        ("1. [ ] #12", (12,)),
        ("    - [ ] #12", (12,)),
        ("- [ ] #14 some words", (14,)),
        ("- [ ] owner/name#12", (12,)),
        ("- [ ] https://github.com/owner/name/issues/12", (12,)),
        ("- [ ] #12\n- [x] #13\n* [ ] #14 some words", (12, 13, 14)),
        ("- [ ] #14\n- [ ] #12\n- [ ] #13", (14, 12, 13)),
        ("- [ ] #12\n- [x] #12", (12,)),
        ("Intro\n\n- [ ] #12\n\nsome text\n\n- [ ] #13", (12, 13)),
    ],
)
def test_task_list_is_read_in_order(body: str, expected: tuple[int, ...]) -> None:
    assert task_list(body, REPO) == expected
    assert is_tracking_issue(body, REPO)


@pytest.mark.parametrize(
    "body",
    [
        None,
        "",
        "#12 #13",
        "- #12",
        "- [ ] Fix #12",
        "- [ ] write the docs",
        "- [] #12",
        "-[ ] #12",
        "```\n- [ ] #12\n```",
        "Depends on #12",
    ],
)
def test_task_list_ignores_other_text(body: str | None) -> None:
    assert task_list(body, REPO) == ()
    assert not is_tracking_issue(body, REPO)


def test_task_list_skips_a_fenced_example() -> None:
    assert task_list("- [ ] #1\n```\n- [ ] #2\n```\n- [ ] #3", REPO) == (1, 3)


@pytest.mark.parametrize(
    "body", ["- [ ] #1\n- [ ] other/repo#3", "- [ ] https://github.com/other/repo/issues/3"]
)
def test_task_list_refuses_another_repository(body: str) -> None:
    with pytest.raises(ChainRefused, match=r"`other/repo#3` is in another repository"):
        task_list(body, REPO)
    assert is_tracking_issue(body, REPO)


def test_a_foreign_reference_after_the_start_of_an_item_is_no_link() -> None:
    assert task_list("- [ ] #1, see other/repo#3", REPO) == (1,)


# --- dependency_closure() and chain_from_dependencies() ------------------------------------------


def test_closure_names_what_is_still_to_fetch() -> None:
    known = issues(issue(5, "Depends on #3, #4"), issue(3, "Depends on #1"))
    assert dependency_closure(5, known, REPO) == (4, 1)


def test_closure_of_an_unfetched_head_is_the_head() -> None:
    assert dependency_closure(5, {}, REPO) == (5,)


def test_closure_is_empty_once_everything_is_fetched() -> None:
    known = issues(issue(5, "Depends on #3"), issue(3, "Depends on #5"))
    assert dependency_closure(5, known, REPO) == ()


def test_closure_refuses_another_repository() -> None:
    with pytest.raises(ChainRefused, match="another repository"):
        dependency_closure(5, issues(issue(5, "Depends on other/repo#1")), REPO)


def test_an_issue_without_dependencies_is_a_chain_of_one() -> None:
    assert chain_from_dependencies(5, issues(issue(5, "Just do it.")), REPO) == (5,)


def test_a_linear_chain_runs_from_the_bottom() -> None:
    known = issues(issue(5, "Depends on #4"), issue(4, "Blocked by #9"), issue(9, "After #2"))
    known |= issues(issue(2))
    assert chain_from_dependencies(5, known, REPO) == (2, 9, 4, 5)


def test_a_diamond_runs_each_once_ties_by_number() -> None:
    known = issues(
        issue(10, "Depends on #8, #6"),
        issue(8, "Depends on #2"),
        issue(6, "Depends on #2"),
        issue(2),
    )
    assert chain_from_dependencies(10, known, REPO) == (2, 6, 8, 10)


def test_unrelated_issues_are_left_out() -> None:
    known = issues(issue(5, "Depends on #3"), issue(3), issue(4, "Depends on #3"))
    assert chain_from_dependencies(5, known, REPO) == (3, 5)


def test_a_missing_dependency_is_refused() -> None:
    with pytest.raises(ChainRefused) as refused:
        chain_from_dependencies(5, issues(issue(5, "Depends on #3"), issue(3, "After #9")), REPO)
    assert str(refused.value) == "#9 does not exist in this repository"


@pytest.mark.parametrize(
    ("known", "message"),
    [
        (
            issues(issue(5, "Depends on #3"), issue(3, "Depends on #4"), issue(4, "After #3")),
            "#3 → #4 → #3 form a cycle: a chain needs an order",
        ),
        (
            issues(issue(5, "Depends on #3"), issue(3, "Depends on #5")),
            "#3 → #5 → #3 form a cycle: a chain needs an order",
        ),
        (issues(issue(5, "Depends on #5")), "#5 → #5 form a cycle: a chain needs an order"),
    ],
)
def test_a_cycle_is_refused_and_named(known: dict[int, IssueFacts], message: str) -> None:
    with pytest.raises(ChainRefused) as refused:
        chain_from_dependencies(5, known, REPO)
    assert str(refused.value) == message


# --- preflight() ---------------------------------------------------------------------------------


def test_a_clean_list_runs_as_listed() -> None:
    known = issues(issue(12), issue(13, "Depends on #12"), issue(14, "After #13"))
    assert preflight([12, 13, 14], known, REPO, strict=True) == preflight(
        [12, 13, 14], known, REPO, strict=False
    )
    result = preflight([12, 13, 14], known, REPO, strict=False)
    assert (result.order, result.warnings) == ((12, 13, 14), ())


def test_an_empty_list_is_an_empty_chain() -> None:
    result = preflight([], {}, REPO, strict=True)
    assert (result.order, result.warnings) == ((), ())


def test_a_listed_issue_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ChainRefused) as refused:
        preflight([12, 9], issues(issue(12)), REPO, strict=False)
    assert str(refused.value) == "#9 does not exist in this repository"


def test_a_closed_issue_is_dropped_with_a_warning() -> None:
    known = issues(issue(11), issue(12, open=False), issue(13, "Depends on #12"))
    result = preflight([11, 12, 13], known, REPO, strict=False)
    assert result.order == (11, 13)
    assert result.warnings == ("#12 is already closed; it is left out of the chain",)


def test_a_dependency_listed_later_runs_first() -> None:
    known = issues(issue(12), issue(13, "Depends on #14"), issue(14), issue(15))
    result = preflight([12, 13, 14, 15], known, REPO, strict=False)
    assert result.order == (12, 14, 13, 15)
    assert result.warnings == ("#13 depends on #14, which is listed after it; #14 runs first",)


def test_reordering_keeps_the_listed_order_otherwise() -> None:
    known = issues(issue(1, "Depends on #4"), issue(2), issue(3), issue(4, "Depends on #3"))
    result = preflight([1, 2, 3, 4], known, REPO, strict=False)
    assert result.order == (2, 3, 4, 1)
    assert result.warnings == ("#1 depends on #4, which is listed after it; #4 runs first",)


def test_a_dependency_outside_the_list_is_warned_about() -> None:
    known = issues(issue(12), issue(13, "Depends on #12, #9"))
    result = preflight([12, 13], known, REPO, strict=False)
    assert result.order == (12, 13)
    assert result.warnings == ("#13 depends on #9, which is not in this chain",)


def test_a_dependency_known_to_be_closed_needs_no_warning() -> None:
    known = issues(issue(12), issue(13, "Depends on #9"), issue(9, open=False))
    assert preflight([12, 13], known, REPO, strict=False).warnings == ()


def test_a_dependency_on_a_closed_listed_issue_is_only_the_closed_warning() -> None:
    known = issues(issue(12, open=False), issue(13, "Depends on #12"))
    result = preflight([12, 13], known, REPO, strict=False)
    assert result.warnings == ("#12 is already closed; it is left out of the chain",)


def test_a_cycle_among_the_listed_is_refused() -> None:
    known = issues(issue(12, "Depends on #13"), issue(13, "Depends on #12"), issue(14))
    with pytest.raises(ChainRefused) as refused:
        preflight([14, 12, 13], known, REPO, strict=False)
    assert str(refused.value) == "#12 → #13 → #12 form a cycle: a chain needs an order"


def test_a_cycle_through_a_closed_issue_is_broken() -> None:
    known = issues(issue(12, "Depends on #13", open=False), issue(13, "Depends on #12"))
    assert preflight([12, 13], known, REPO, strict=False).order == (13,)


def test_a_foreign_dependency_of_a_listed_issue_is_refused() -> None:
    with pytest.raises(ChainRefused, match="another repository"):
        preflight([12], issues(issue(12, "Depends on other/repo#1")), REPO, strict=False)


@pytest.mark.parametrize(
    ("first", "second", "paths"),
    [
        ("Change `src/app.py`.", "Also src/app.py.", ["src/app.py"]),
        ("Edit README.md, please", "README.md needs a line", ["README.md"]),
        ("Fix (`./src/app.py`)!", "src/app.py:12 breaks", ["src/app.py"]),
        ("**docs/guide/**", "see docs/guide/ too", ["docs/guide/"]),
        (
            "pyproject.toml and config.yml",
            "config.yml, pyproject.toml",
            ["config.yml", "pyproject.toml"],
        ),
        (
            "[src/app.py](https://github.com/owner/name/blob/main/src/app.py)",
            "src/app.py",
            ["src/app.py"],
        ),
        ("src/app.py", "src/App.py", []),
    ],
)
def test_links_mentioning_the_same_file_are_warned_about(
    first: str, second: str, paths: list[str]
) -> None:
    known = issues(issue(12, first), issue(14, second))
    assert list(preflight([12, 14], known, REPO, strict=False).warnings) == [
        f"#12 and #14 both mention `{path}`; they may conflict" for path in paths
    ]


def test_a_title_mention_counts() -> None:
    known = issues(issue(12, title="Speed up bot/store.py"), issue(14, "Touches bot/store.py"))
    assert preflight([12, 14], known, REPO, strict=False).warnings == (
        "#12 and #14 both mention `bot/store.py`; they may conflict",
    )


def test_file_warnings_go_pair_by_pair() -> None:
    known = issues(issue(1, "a.py b.py"), issue(2, "a.py"), issue(3, "b.py a.py"))
    assert preflight([1, 2, 3], known, REPO, strict=False).warnings == (
        "#1 and #2 both mention `a.py`; they may conflict",
        "#1 and #3 both mention `a.py`; they may conflict",
        "#1 and #3 both mention `b.py`; they may conflict",
        "#2 and #3 both mention `a.py`; they may conflict",
    )


@pytest.mark.parametrize(
    "text",
    [
        "See https://github.com/owner/name/blob/main/src/app.py",
        "and/or",
        "Node.js",
        "e.g. i.e.",
        "1/2 of 2026/05/01",
        "owner/name",
        "owner/name#3",
        "version 1.2.3",
        "a plain sentence.",
        "```\nsrc/app.py\n```",
    ],
)
def test_what_is_not_a_path_gives_no_warning(text: str) -> None:
    known = issues(issue(12, text), issue(14, text))
    assert preflight([12, 14], known, REPO, strict=False).warnings == ()


def test_closed_links_are_not_compared_for_files() -> None:
    known = issues(issue(12, "src/app.py", open=False), issue(14, "src/app.py"))
    assert preflight([12, 14], known, REPO, strict=False).warnings == (
        "#12 is already closed; it is left out of the chain",
    )


def test_strict_refuses_on_any_warning_with_every_warning() -> None:
    known = issues(issue(11, open=False), issue(12, "Depends on #13, #9"), issue(13))
    lenient = preflight([11, 12, 13], known, REPO, strict=False)
    assert lenient.warnings == (
        "#11 is already closed; it is left out of the chain",
        "#12 depends on #13, which is listed after it; #13 runs first",
        "#12 depends on #9, which is not in this chain",
    )
    with pytest.raises(ChainRefused) as refused:
        preflight([11, 12, 13], known, REPO, strict=True)
    assert str(refused.value) == "strict pre-flight refused the chain: " + "; ".join(
        lenient.warnings
    )


def test_duplicates_in_the_list_run_once() -> None:
    known = issues(issue(12), issue(13))
    assert preflight([12, 13, 12], known, REPO, strict=False).order == (12, 13)


# --- link_status() -------------------------------------------------------------------------------


def a_run(state: RunState, recovery: Recovery | None = None, escalated: bool = False) -> Run:
    ref = IssueRef(installation_id=1, repo=REPO, number=12)
    run = Run.claimed(ref, 1, "baton/issue-12", AT)
    if state is not RunState.CLAIMED:
        run = run.moved(state, AT)
    update: dict[str, object] = {"escalated": escalated}
    if recovery is not None:
        update["classification"] = Classification(
            failure_class=FailureClass.ADMIN_KILL,
            recovery=recovery,
            charged_to=Budget.NOTHING,
            evidence="test",
        )
    return run.model_copy(update=update)


@pytest.mark.parametrize(
    ("run", "issue_open", "expected"),
    [
        (a_run(RunState.MERGED), True, S.MERGED),
        (a_run(RunState.MERGED), False, S.MERGED),
        (a_run(RunState.MERGED, escalated=True), True, S.MERGED),
        (None, False, S.CLOSED),
        (a_run(RunState.PUSHED_GREEN), False, S.CLOSED),
        (a_run(RunState.RUNNING), False, S.CLOSED),
        (None, True, S.NOT_STARTED),
        (a_run(RunState.FAILED, Recovery.RETRY, escalated=True), True, S.STOPPED),
        (a_run(RunState.PUSHED_GREEN, escalated=True), True, S.STOPPED),
        (a_run(RunState.PUSHED_GREEN), True, S.GREEN),
        (a_run(RunState.CLOSED), True, S.STOPPED),
        (a_run(RunState.KILLED), True, S.STOPPED),
        (a_run(RunState.KILLED, Recovery.NONE), True, S.STOPPED),
        (a_run(RunState.KILLED, Recovery.REQUEUE), True, S.IN_PROGRESS),
        (a_run(RunState.CLAIMED), True, S.IN_PROGRESS),
        (a_run(RunState.PROVISIONING), True, S.IN_PROGRESS),
        (a_run(RunState.RUNNING), True, S.IN_PROGRESS),
        (a_run(RunState.PUSHED_PENDING), True, S.IN_PROGRESS),
        (a_run(RunState.HALTED, Recovery.HALT), True, S.IN_PROGRESS),
        (a_run(RunState.FAILED, Recovery.CONTINUE), True, S.IN_PROGRESS),
        (a_run(RunState.NO_CHANGE), True, S.IN_PROGRESS),
    ],
)
def test_link_status(run: Run | None, issue_open: bool, expected: LinkStatus) -> None:
    assert link_status(run, issue_open) is expected


# --- next_step(), predecessor_of(), successors() -------------------------------------------------


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ({}, ChainStep(action="start", link=1)),
        ({1: S.NOT_STARTED}, ChainStep(action="start", link=1)),
        ({1: S.IN_PROGRESS}, ChainStep(action="wait", link=1)),
        ({1: S.GREEN}, ChainStep(action="start", link=2, predecessor=1)),
        ({1: S.GREEN, 2: S.IN_PROGRESS}, ChainStep(action="wait", link=2)),
        ({1: S.GREEN, 2: S.GREEN}, ChainStep(action="start", link=3, predecessor=2)),
        ({1: S.MERGED}, ChainStep(action="start", link=2)),
        ({1: S.MERGED, 2: S.GREEN}, ChainStep(action="start", link=3, predecessor=2)),
        ({1: S.GREEN, 2: S.MERGED}, ChainStep(action="start", link=3)),
        ({1: S.CLOSED}, ChainStep(action="start", link=2)),
        ({1: S.GREEN, 2: S.CLOSED}, ChainStep(action="start", link=3, predecessor=1)),
        ({1: S.MERGED, 2: S.CLOSED}, ChainStep(action="start", link=3)),
        ({1: S.STOPPED}, ChainStep(action="held", held_by=1)),
        ({1: S.GREEN, 2: S.STOPPED, 3: S.IN_PROGRESS}, ChainStep(action="held", held_by=2)),
        ({1: S.GREEN, 2: S.GREEN, 3: S.GREEN}, ChainStep(action="complete")),
        ({1: S.MERGED, 2: S.CLOSED, 3: S.GREEN}, ChainStep(action="complete")),
        ({1: S.MERGED, 2: S.MERGED, 3: S.MERGED}, ChainStep(action="complete")),
    ],
)
def test_next_step(statuses: dict[int, LinkStatus], expected: ChainStep) -> None:
    assert next_step([1, 2, 3], statuses) == expected


def test_an_empty_chain_is_complete() -> None:
    assert next_step([], {}) == ChainStep(action="complete")


@pytest.mark.parametrize(
    ("statuses", "link", "expected"),
    [
        ({}, 1, None),
        ({1: S.GREEN}, 2, 1),
        ({1: S.IN_PROGRESS}, 2, 1),
        ({1: S.STOPPED, 2: S.GREEN}, 2, 1),
        ({1: S.MERGED}, 2, None),
        ({1: S.GREEN, 2: S.CLOSED}, 3, 1),
        ({1: S.GREEN, 2: S.CLOSED, 3: S.CLOSED}, 4, 1),
        ({1: S.CLOSED, 2: S.CLOSED}, 3, None),
        ({1: S.GREEN, 2: S.MERGED, 3: S.CLOSED}, 4, None),
        ({1: S.MERGED, 2: S.GREEN, 3: S.GREEN}, 3, 2),
    ],
)
def test_predecessor_of(statuses: dict[int, LinkStatus], link: int, expected: int | None) -> None:
    assert predecessor_of([1, 2, 3, 4], statuses, link) == expected


def test_predecessor_of_a_link_outside_the_chain_is_an_error() -> None:
    with pytest.raises(ValueError):
        predecessor_of([1, 2], {}, 3)


def test_successors() -> None:
    assert successors([5, 3, 8, 2], 3) == (8, 2)
    assert successors([5, 3, 8, 2], 2) == ()
    with pytest.raises(ValueError):
        successors([5, 3], 7)


@pytest.mark.parametrize(
    "fields",
    [{"action": "start"}, {"action": "wait"}, {"action": "held"}, {"action": "held", "link": 1}],
)
def test_a_step_names_its_link(fields: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        ChainStep.model_validate(fields)


# --- stack_manifest(), chain_status_comment(), held_comment() ------------------------------------

LINKS = [
    ManifestLink(number=12, title="Parser", status=S.MERGED, pr_number=20, pr_url="https://x/20"),
    ManifestLink(number=13, title="Checker", status=S.GREEN, pr_number=21, pr_url="https://x/21"),
    ManifestLink(number=14, title="Docs", status=S.NOT_STARTED),
]


def test_stack_manifest() -> None:
    assert stack_manifest(LINKS, 13) == "\n".join(
        [
            STACK_MARKER,
            "**Stack** — link 2 of 3",
            "",
            "1. #12 Parser — #20 (merged)",
            "2. #13 Checker — #21 (green) ← this pull request",
            "3. #14 Docs — not started",
        ]
    )


def test_stack_manifest_marks_only_the_current_link() -> None:
    manifest = stack_manifest(LINKS, 12)
    assert "link 1 of 3" in manifest
    assert [line for line in manifest.splitlines() if "← this pull request" in line] == [
        "1. #12 Parser — #20 (merged) ← this pull request"
    ]


def test_a_link_with_only_a_pr_url_shows_the_url() -> None:
    link = ManifestLink(number=1, title="T", status=S.IN_PROGRESS, pr_url="https://x/9")
    assert stack_manifest([link], 1).endswith(
        "1. #1 T — https://x/9 (in progress) ← this pull request"
    )


def test_a_hostile_title_stays_on_its_line() -> None:
    hostile = "Evil\n\n## Heading\r\n<!-- baton:stack --><script>x</script>\u2028end"
    links = [ManifestLink(number=1, title=hostile, status=S.NOT_STARTED)]
    manifest = stack_manifest(links, 1)
    lines = manifest.splitlines()
    assert len(lines) == 4
    assert manifest.count(STACK_MARKER) == 1
    assert "<" not in lines[3] and ">" not in lines[3]
    assert lines[3] == (
        "1. #1 Evil ## Heading &lt;!-- baton:stack --&gt;&lt;script&gt;x&lt;/script&gt; end "
        "— not started ← this pull request"
    )


def test_stack_manifest_needs_the_current_link() -> None:
    with pytest.raises(ValueError):
        stack_manifest(LINKS, 99)


@pytest.mark.parametrize(
    ("step", "line"),
    [
        (ChainStep(action="start", link=14, predecessor=13), "Next: starting #14 on #13's branch"),
        (ChainStep(action="start", link=12), "Next: starting #12 on the base branch"),
        (ChainStep(action="wait", link=13), "Next: waiting for #13"),
        (
            ChainStep(action="held", held_by=13),
            "Next: held: #13 stopped; its successors wait until it recovers",
        ),
        (ChainStep(action="complete"), "Next: nothing: every link is done"),
    ],
)
def test_chain_status_comment_says_what_is_next(step: ChainStep, line: str) -> None:
    comment = chain_status_comment(11, LINKS, step, [])
    lines = comment.splitlines()
    assert lines[0] == STATUS_MARKER
    assert lines[1] == "**Baton** · chain of 3 links"
    assert line in lines
    assert "1. #12 Parser — #20 (merged)" in lines
    assert "2. #13 Checker — #21 (green)" in lines
    assert "3. #14 Docs — not started" in lines
    assert "Pre-flight:" not in comment
    assert "← this pull request" not in comment


def test_chain_status_comment_lists_the_warnings() -> None:
    warnings = ["#12 is already closed; it is left out of the chain", "#13 depends on #9, x"]
    comment = chain_status_comment(11, LINKS, ChainStep(action="complete"), warnings)
    lines = comment.splitlines()
    assert lines[-4:] == ["Pre-flight:", "", f"- {warnings[0]}", f"- {warnings[1]}"]


def test_chain_status_comment_for_a_dependency_chain() -> None:
    comment = chain_status_comment(None, LINKS[:1], ChainStep(action="complete"), [])
    assert "**Baton** · chain of 1 link\n" in comment
    assert "This issue and the issues it depends on" in comment
    assert "task list" in chain_status_comment(11, LINKS, ChainStep(action="complete"), [])


def test_held_comment() -> None:
    comment = held_comment(14, 13)
    lines = comment.splitlines()
    assert lines[:2] == [STATUS_MARKER, "**Baton** · held by #13"]
    assert "#14 waits until #13 recovers" in comment
    assert "re-queues the chain" in comment


@pytest.mark.parametrize(
    "body",
    [
        "Depends on" + " " * 20000 + "x",
        "**After**:" + " \t" * 10000 + "x",
        "Depends on #1" + ", " * 10000 + "x",
        "- [ ]" + " " * 20000 + "x",
        "> " * 10000 + "x",
    ],
)
def test_long_lines_parse_in_linear_time(body: str) -> None:
    # A pattern that backtracks on these would hang the suite rather than fail it.
    assert dependencies(body, REPO) in ((), (1,))
    assert task_list(body, REPO) == ()
