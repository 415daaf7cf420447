"""The settlement audit as a pure function over a pull request's diff (no I/O but the corpus)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bench.audit_precision import Case, corpus
from bot.domain.audit import FILES_CAP, DiffFile, audit, files_of_unified_diff, unreadable
from bot.domain.classify import RunFacts, classify
from bot.domain.model import (
    AuditFinding,
    AuditKind,
    FailureClass,
    IssueRef,
    Recovery,
    Run,
    RunState,
)
from bot.domain.render import AUDIT_HEADING, audit_reason, pull_comment_due, status_comment

K = AuditKind
WEAKENING = corpus("weakening")
CLEAN = corpus("clean")


def kinds(files: list[DiffFile], issue: str = "", scope: bool = False) -> list[AuditKind]:
    return [finding.kind for finding in audit(files, issue, scope=scope)]


def modified(path: str, patch: str) -> DiffFile:
    return DiffFile(filename=path, status="modified", additions=1, deletions=1, patch=patch)


# ------------------------------------------------------------------ the corpus


def test_the_corpus_is_big_enough_in_every_language() -> None:
    for cases in (WEAKENING, CLEAN):
        assert len(cases) >= 15
        for prefix in ("py_", "js_", "go_", "rust_"):
            assert any(c.name.startswith(prefix) or c.name.startswith("ts_") for c in cases)


@pytest.mark.parametrize("case", WEAKENING, ids=lambda c: c.name)
def test_every_diff_that_weakens_its_tests_is_flagged(case: Case) -> None:
    assert case.findings(), f"{case.name} weakens its tests and was not flagged"


@pytest.mark.parametrize("case", CLEAN, ids=lambda c: c.name)
def test_no_clean_diff_is_flagged(case: Case) -> None:
    assert case.findings() == []


EXPECTED = {
    "py_failing_test_deleted": K.TEST_FILE_DELETED,
    "py_test_file_emptied": K.TEST_FILE_DELETED,
    "rust_integration_tests_renamed_away": K.TEST_FILE_DELETED,
    "go_test_func_removed": K.TEST_REMOVED,
    "ts_test_case_removed": K.TEST_REMOVED,
    "rust_test_removed": K.TEST_REMOVED,
    "py_skip_added": K.SKIP_ADDED,
    "py_xfail_added": K.SKIP_ADDED,
    "py_unittest_skip_decorator": K.SKIP_ADDED,
    "ts_it_skip": K.SKIP_ADDED,
    "js_only_added": K.SKIP_ADDED,
    "go_t_skip_added": K.SKIP_ADDED,
    "rust_ignore_added": K.SKIP_ADDED,
    "py_assert_removed": K.ASSERTION_REMOVED,
    "go_errorf_removed": K.ASSERTION_REMOVED,
    "py_assert_equal_to_assert_true": K.ASSERTION_WEAKENED,
    "ts_toBe_to_toBeDefined": K.ASSERTION_WEAKENED,
    "go_assert_equal_to_not_nil": K.ASSERTION_WEAKENED,
    "rust_assert_eq_to_is_ok": K.ASSERTION_WEAKENED,
    "js_toThrow_broadened": K.ASSERTION_WEAKENED,
    "py_tolerance_widened": K.ASSERTION_WEAKENED,
    "js_close_to_digits_loosened": K.ASSERTION_WEAKENED,
    "go_tolerance_widened": K.ASSERTION_WEAKENED,
    "ci_workflow_test_step_dropped": K.CI_CHANGED,
    "sandbox_ci_short_circuited": K.CI_CHANGED,
    "baton_required_check_dropped": K.CI_CHANGED,
    "py_coverage_lowered": K.THRESHOLD_LOWERED,
    "py_ruff_ignores_added": K.THRESHOLD_LOWERED,
    "js_coverage_threshold_lowered": K.THRESHOLD_LOWERED,
    "js_eslint_max_warnings_raised": K.THRESHOLD_LOWERED,
}


@pytest.mark.parametrize(("name", "kind"), sorted(EXPECTED.items()))
def test_each_weakening_gets_the_flag_that_names_it(name: str, kind: AuditKind) -> None:
    [case] = [c for c in WEAKENING if c.name == name]
    assert kind in [f.kind for f in case.findings()]


def test_a_flag_names_the_file_the_line_and_what_was_seen() -> None:
    [case] = [c for c in WEAKENING if c.name == "py_skip_added"]
    [finding] = case.findings()
    assert (finding.path, finding.line, finding.side) == ("tests/test_calc.py", 14, "head")
    assert finding.text == '@pytest.mark.skip(reason="flaky on CI")'
    [case] = [c for c in WEAKENING if c.name == "py_assert_equal_to_assert_true"]
    [finding] = case.findings()
    assert finding.was == "self.assertEqual(self.inventory.total(), 5)"
    assert finding.text == "self.assertTrue(self.inventory.total())"
    [case] = [c for c in WEAKENING if c.name == "py_assert_removed"]
    [finding] = case.findings()
    assert (finding.line, finding.side) == (11, "base")  # a removed line: the base's numbering


# ------------------------------------------------------------------ diffs GitHub cannot show


def test_a_text_file_without_its_patch_could_not_be_read() -> None:
    big = DiffFile(filename="data/big.txt", status="added", additions=25_000, patch=None)
    [finding] = audit([big], "")
    assert finding.kind is K.DIFF_UNREADABLE and finding.path == "data/big.txt"


def test_a_binary_test_file_is_unreadable_and_a_binary_asset_is_not() -> None:
    asset = DiffFile(filename="assets/logo.png", status="added", patch=None)
    fixture = DiffFile(filename="tests/test_image.py", status="modified", patch=None)
    assert kinds([asset]) == []
    assert kinds([fixture]) == [K.DIFF_UNREADABLE]


def test_a_list_at_githubs_cap_was_cut_short() -> None:
    # GitHub ("List pull requests files"): "Responses include a maximum of 3000 files."
    patch = "@@ -0,0 +1 @@\n+x"
    files = [
        DiffFile(filename=f"src/f{n}.txt", status="added", patch=patch) for n in range(FILES_CAP)
    ]
    assert kinds(files) == [K.DIFF_TRUNCATED]
    assert kinds(files[:-1]) == []


def test_a_diff_that_could_not_be_read_at_all_is_a_flag() -> None:
    finding = unreadable("GitHub answered 502 to the pull request's files")
    assert finding.kind is K.DIFF_UNREADABLE and finding.path == ""


def test_binary_files_in_a_unified_diff_have_no_patch() -> None:
    [case] = [c for c in CLEAN if c.name == "binary_asset_added"]
    files = {f.filename: f for f in files_of_unified_diff(case.diff)}
    assert files["assets/logo.png"].patch is None
    assert files["assets/logo.png"].status == "added"


# ------------------------------------------------------------------ renames


def test_a_pure_rename_of_a_test_file_is_clean_and_one_out_of_the_tests_is_not() -> None:
    kept = DiffFile(filename="test/b.test.ts", status="renamed", previous_filename="test/a.test.ts")
    away = DiffFile(filename="notes/a.ts.txt", status="renamed", previous_filename="test/a.test.ts")
    assert kinds([kept]) == []
    assert kinds([away]) == [K.TEST_FILE_DELETED]


def test_a_test_moved_to_another_file_was_not_removed() -> None:
    [case] = [c for c in CLEAN if c.name == "py_test_moved_between_files"]
    assert case.findings() == []
    removed_only = [
        f for f in files_of_unified_diff(case.diff) if f.filename == "tests/test_calc.py"
    ]
    assert K.TEST_REMOVED in kinds(removed_only)


# ------------------------------------------------------------------ languages, line by line


@pytest.mark.parametrize(
    ("path", "patch", "kind"),
    [
        (
            "tests/test_a.py",
            (
                "@@ -1,2 +1,3 @@\n"
                "+@pytest.mark.skipif(sys.platform == 'linux', reason='x')\n"
                " def test_a():\n"
                "     assert f() == 1"
            ),
            K.SKIP_ADDED,
        ),
        (
            "tests/test_a.py",
            "@@ -1,2 +1,2 @@\n def test_a():\n-    assert f() == 1\n+    assert f() is not None",
            K.ASSERTION_WEAKENED,
        ),
        (
            "tests/test_a.py",
            "@@ -1,2 +1,2 @@\n def test_a():\n-    assert f() == 1\n+    # assert f() == 1",
            K.ASSERTION_REMOVED,
        ),
        (
            "tests/test_a.py",
            (
                "@@ -1,3 +1,3 @@\n"
                " def test_a(self):\n"
                "-    self.assertEqual(f(), 1)\n"
                "+    self.assertIsNotNone(f())"
            ),
            K.ASSERTION_WEAKENED,
        ),
        (
            "tests/test_a.py",
            (
                "@@ -1,2 +1,2 @@\n"
                " def test_a():\n"
                "-    with pytest.raises(ValueError):\n"
                "+    with pytest.raises(Exception):"
            ),
            K.ASSERTION_WEAKENED,
        ),
        (
            "tests/test_a.py",
            "@@ -1,2 +1,3 @@\n def test_a():\n+    pytest.skip('later')\n     assert f() == 1",
            K.SKIP_ADDED,
        ),
        (
            "src/a.test.ts",
            (
                "@@ -1,3 +1,3 @@\n"
                "-it('adds', () => {\n"
                "+xit('adds', () => {\n"
                "   expect(add(1, 2)).toBe(3);"
            ),
            K.SKIP_ADDED,
        ),
        (
            "src/a.spec.js",
            (
                "@@ -1,3 +1,3 @@\n"
                "-describe('adds', () => {\n"
                "+describe.skip('adds', () => {\n"
                "   it('x', () => {});"
            ),
            K.SKIP_ADDED,
        ),
        (
            "src/a.test.ts",
            (
                "@@ -1,3 +1,3 @@\n"
                " test('adds', () => {\n"
                "-  expect(add(1, 2)).toBe(3);\n"
                "+  expect(add(1, 2)).toBeTruthy();"
            ),
            K.ASSERTION_WEAKENED,
        ),
        (
            "src/a.test.ts",
            (
                "@@ -1,3 +1,3 @@\n"
                " test('adds', () => {\n"
                "-  expect(add(1, 2)).toEqual(3);\n"
                "+  expect(add(1, 2)).toBeGreaterThan(0);"
            ),
            K.ASSERTION_WEAKENED,
        ),
        (
            "src/a.test.ts",
            "@@ -1,3 +1,2 @@\n test('adds', () => {\n-  expect(add(1, 2)).toEqual(3);\n });",
            K.ASSERTION_REMOVED,
        ),
        (
            "a_test.go",
            (
                "@@ -1,3 +1,4 @@\n"
                " func TestA(t *testing.T) {\n"
                '+\tt.Skipf("later: %d", 1)\n'
                " \tif A() != 1 {"
            ),
            K.SKIP_ADDED,
        ),
        (
            "a_test.go",
            "@@ -1,4 +1,3 @@\n-func TestB(t *testing.T) {\n-}\n-\n func TestA(t *testing.T) {",
            K.TEST_REMOVED,
        ),
        (
            "a_test.go",
            (
                "@@ -1,3 +1,3 @@\n"
                " func TestA(t *testing.T) {\n"
                "-\trequire.Equal(t, 1, A())\n"
                "+\trequire.NotEmpty(t, A())"
            ),
            K.ASSERTION_WEAKENED,
        ),
        (
            "src/lib.rs",
            (
                "@@ -1,3 +1,3 @@\n"
                " #[test]\n"
                " fn adds() {\n"
                "-    assert_eq!(add(1, 2), 3);\n"
                "+    assert!(add(1, 2) > 0);"
            ),
            K.ASSERTION_WEAKENED,
        ),
        (
            "tests/it.rs",
            '@@ -1,2 +1,3 @@\n #[test]\n+#[ignore = "slow"]\n fn adds() {',
            K.SKIP_ADDED,
        ),
        (
            "tests/it.rs",
            (
                "@@ -1,4 +1,1 @@\n"
                "-#[test]\n"
                "-fn subtracts() {\n"
                "-    assert_eq!(sub(2, 1), 1);\n"
                "-}\n"
                " use super::*;"
            ),
            K.TEST_REMOVED,
        ),
        (
            ".github/workflows/test.yml",
            "@@ -1,2 +1,2 @@\n jobs:\n-  test:\n+  tests:",
            K.CI_CHANGED,
        ),
        (".sandbox/checks", "@@ -1 +1 @@\n-lint\n+lint-lenient", K.CI_CHANGED),
        (
            "setup.cfg",
            "@@ -1,2 +1,2 @@\n [coverage:report]\n-fail_under = 95\n+fail_under = 50",
            K.THRESHOLD_LOWERED,
        ),
        (
            ".flake8",
            "@@ -1,2 +1,2 @@\n [flake8]\n-extend-ignore = E203\n+extend-ignore = E203,W503,F841",
            K.THRESHOLD_LOWERED,
        ),
        (
            "pyproject.toml",
            "@@ -1,3 +1,2 @@\n [tool.coverage.report]\n-fail_under = 90\n show_missing = true",
            K.THRESHOLD_LOWERED,
        ),
        (
            ".eslintrc.json",
            '@@ -1,3 +1,3 @@\n   "rules": {\n-    "eqeqeq": "error"\n+    "eqeqeq": "off"',
            K.THRESHOLD_LOWERED,
        ),
    ],
)
def test_each_language_and_config_gets_its_flag(path: str, patch: str, kind: AuditKind) -> None:
    assert kind in kinds([modified(path, patch)])


@pytest.mark.parametrize(
    ("path", "patch"),
    [
        ("src/app.py", "@@ -1,2 +1,1 @@\n def f(x):\n-    assert x > 0"),  # not a test file
        (
            "tests/test_a.py",
            "@@ -1,2 +1,2 @@\n def test_a():\n-    assert f() == 1\n+    assert f() == 2",
        ),
        (
            "tests/test_a.py",
            "@@ -1,2 +1,2 @@\n def test_a():\n-    assert f()\n+    assert f() == 2",
        ),
        (
            "src/a.test.ts",
            (
                "@@ -1,3 +1,3 @@\n"
                "-it.skip('adds', () => {\n"
                "+it('adds', () => {\n"
                "   expect(add(1, 2)).toBe(3);"
            ),
        ),
        (
            "a_test.go",
            (
                "@@ -1,3 +1,3 @@\n"
                " func TestA(t *testing.T) {\n"
                '-\tt.Errorf("bad")\n'
                '+\tt.Errorf("A() = %d", A())'
            ),
        ),
        (
            "src/lib.rs",
            "@@ -1,2 +1,2 @@\n pub fn add(a: u32, b: u32) -> u32 {\n-    a - b\n+    a + b",
        ),
        ("README.md", "@@ -1 +1 @@\n-# old\n+# new"),
        ("setup.cfg", "@@ -1,2 +1,2 @@\n [coverage:report]\n-fail_under = 50\n+fail_under = 95"),
    ],
)
def test_what_does_not_weaken_is_not_flagged(path: str, patch: str) -> None:
    assert kinds([modified(path, patch)]) == []


# ------------------------------------------------------------------ scope


def test_scope_flags_the_files_the_issue_does_not_mention_when_asked() -> None:
    issue = "Fix the rounding in `src/money.py` and document it in docs/."
    files = [
        modified(path, "@@ -1 +1 @@\n-a\n+b")
        for path in ("src/money.py", "tests/test_money.py", "docs/money.md", "src/auth.py")
    ]
    assert kinds(files, issue) == []
    flagged = audit(files, issue, scope=True)
    assert [(f.kind, f.path) for f in flagged] == [(K.OUT_OF_SCOPE, "src/auth.py")]


# ------------------------------------------------------------------ what the audit leads to


def _run(findings: list[AuditFinding], failure_class: str | None = None) -> Run:
    at = datetime(2025, 1, 1, tzinfo=UTC)
    issue = IssueRef(installation_id=1, repo="o/r", number=3)
    run = Run.claimed(issue, 1, "baton/issue-3", at).moved(RunState.PUSHED_GREEN, at)
    return run.model_copy(
        update={"audit": findings, "pr_number": 4, "failure_class": failure_class}
    )


def test_the_status_comment_lists_each_flag_under_a_heading_and_keeps_it_inert() -> None:
    finding = AuditFinding(
        kind=K.SKIP_ADDED,
        path="tests/test_a.py",
        line=3,
        note="skip added",
        text="@pytest.mark.skip(reason='fixes #12, cc @octocat')",
    )
    body = status_comment(_run([finding]), datetime(2025, 1, 1, tzinfo=UTC))
    assert AUDIT_HEADING in body
    assert "**skip-added** · `tests/test_a.py` line 3: skip added:" in body
    assert "@octocat" not in body  # the diff's text notifies nobody
    assert "advisory" in body
    assert AUDIT_HEADING not in status_comment(_run([]), datetime(2025, 1, 1, tzinfo=UTC))


def test_a_flagged_pr_gets_a_status_comment_of_its_own() -> None:
    finding = unreadable("no files")
    assert pull_comment_due([_run([finding])], has_comment=False)
    assert not pull_comment_due([_run([])], has_comment=False)


def test_a_held_pr_is_an_escalation_charged_to_nothing_with_the_flags_as_its_reason() -> None:
    got = classify(RunFacts(ending="audit-flagged"))
    assert (got.failure_class, got.recovery) == (FailureClass.AUDIT_FLAGGED, Recovery.ESCALATE)
    findings = [
        AuditFinding(kind=K.TEST_FILE_DELETED, path=f"tests/test_{n}.py", note="deleted")
        for n in range(7)
    ]
    reason = audit_reason(findings)
    assert "test-file-deleted in tests/test_0.py" in reason and "and 2 more" in reason
    held = status_comment(_run(findings, "audit-flagged"), datetime(2025, 1, 1, tzinfo=UTC))
    assert "held from review" in held
