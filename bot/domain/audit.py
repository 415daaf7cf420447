"""The settlement audit: what a green pull request's own diff shows that a reviewer must see.

Pure: the pull request's files as GitHub lists them (`GET /repos/{o}/{r}/pulls/{n}/files`,
every page) and the issue's text come in, findings go out. It never takes the agent's
word for its run: it reads what the diff removes and adds. A diff it cannot read whole
is a finding of its own, never a clean bill.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from bot.domain.model import AuditFinding, AuditKind
from bot.domain.resources import DiffFile, DiffStatus

FILES_CAP = 3000  # GitHub: "Responses include a maximum of 3000 files."
SEEN_LIMIT = 120  # characters of a diff's line kept with a finding


def audit(files: Sequence[DiffFile], issue_text: str, *, scope: bool = False) -> list[AuditFinding]:
    """Return what the diff's files show a reviewer must see, file by file, in diff order.

    scope also flags each file the issue's text does not mention. A list of files at
    GitHub's cap may have been cut short, which is flagged too.
    """
    parsed = [_Parsed.of(file) for file in files]
    # A test that moved to another file, or an assertion that moved, was not removed.
    added_tests = Counter(name for p in parsed for _, name in p.tests(added=True))
    added_asserts = Counter(p.normal(text) for p in parsed for _, text in p.assertions(added=True))
    findings: list[AuditFinding] = []
    if len(files) >= FILES_CAP:
        note = f"GitHub lists at most {FILES_CAP} files; the rest of the diff was not read"
        findings.append(AuditFinding(kind=AuditKind.DIFF_TRUNCATED, path="", note=note))
    for p in parsed:
        findings += _file_findings(p, added_tests, added_asserts)
        if scope and not _mentioned(p.file.filename, issue_text):
            note = "a file the issue does not mention"
            findings.append(
                AuditFinding(kind=AuditKind.OUT_OF_SCOPE, path=p.file.filename, note=note)
            )
    return findings


def unreadable(why: str) -> AuditFinding:
    """Return the finding of a diff that could not be read at all, and why."""
    return AuditFinding(kind=AuditKind.DIFF_UNREADABLE, path="", note=_cut(why))


def files_of_unified_diff(text: str) -> list[DiffFile]:
    """Return the files of a `git diff` as GitHub would list them (status, counts, patch).

    Binary files (`Binary files ... differ`) have no patch, as on GitHub.
    """
    files: list[DiffFile] = []
    for section in re.split(r"^(?=diff --git )", text, flags=re.MULTILINE):
        if not section.startswith("diff --git "):
            continue
        header, _, body = section.partition("\n@@")
        patch = ("@@" + body).rstrip("\n") if body else None
        old = re.search(r"^--- (?:a/)?(.+)$", header, re.MULTILINE)
        new = re.search(r"^\+\+\+ (?:b/)?(.+)$", header, re.MULTILINE)
        git_paths = re.match(r"diff --git a/(\S+) b/(\S+)", header)
        assert git_paths is not None, "a diff section names its files"
        rename_from = re.search(r"^rename from (.+)$", header, re.MULTILINE)
        rename_to = re.search(r"^rename to (.+)$", header, re.MULTILINE)
        status: DiffStatus = "modified"
        name, previous = git_paths[2], None
        if rename_from and rename_to:
            status, name, previous = "renamed", rename_to[1], rename_from[1]
        elif re.search(r"^new file mode", header, re.MULTILINE) or (old and old[1] == "/dev/null"):
            status = "added"
        elif re.search(r"^deleted file mode", header, re.MULTILINE) or (
            new and new[1] == "/dev/null"
        ):
            status, name = "removed", git_paths[1]
        lines = patch.splitlines() if patch else []
        files.append(
            DiffFile(
                filename=name,
                status=status,
                previous_filename=previous,
                additions=sum(1 for ln in lines if ln.startswith("+")),
                deletions=sum(1 for ln in lines if ln.startswith("-")),
                patch=patch,
            )
        )
    return files


# Reading a patch --------------------------------------------------------------


@dataclass(frozen=True)
class _Line:
    number: int
    text: str


@dataclass
class _Block:
    """Lines removed and the lines added in their place, with no context between them."""

    removed: list[_Line] = field(default_factory=list)
    added: list[_Line] = field(default_factory=list)


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


@dataclass
class _Parsed:
    file: DiffFile
    language: str
    blocks: list[_Block]
    emptied: bool  # the head's file has no lines left
    context: list[str]  # every line the patch shows of the head's file, changed or not

    @classmethod
    def of(cls, file: DiffFile) -> _Parsed:
        blocks: list[_Block] = []
        emptied = False
        context: list[str] = []
        old = new = 0
        current: _Block | None = None
        for text in (file.patch or "").splitlines():
            if match := _HUNK.match(text):
                old, new = int(match[1]), int(match[3])
                emptied = match[4] == "0" and new == 0
                context.append(text)
                current = None
                continue
            if text.startswith("\\"):
                continue
            if text.startswith("-"):
                if current is None or current.added:
                    current = _Block()
                    blocks.append(current)
                current.removed.append(_Line(old, text[1:]))
                old += 1
            elif text.startswith("+"):
                if current is None:
                    current = _Block()
                    blocks.append(current)
                current.added.append(_Line(new, text[1:]))
                context.append(text[1:])
                new += 1
            else:
                current = None
                context.append(text[1:])
                old += 1
                new += 1
        return cls(file, _language(file.filename), blocks, emptied, context)

    def lines(self, *, added: bool) -> Iterator[_Line]:
        for block in self.blocks:
            yield from block.added if added else block.removed

    def code(self, *, added: bool) -> Iterator[_Line]:
        """Yield the changed lines that are code, not comments."""
        return (line for line in self.lines(added=added) if not _comment(line.text))

    @property
    def is_test(self) -> bool:
        """Tell whether the file holds tests: by its name, or (Rust) by its test module."""
        if _test_path(self.file.filename):
            return True
        shown = [*self.context, *(line.text for line in self.lines(added=False))]
        return self.language == "rust" and any(_RUST_TEST_CONTEXT.search(t) for t in shown)

    def tests(self, *, added: bool) -> Iterator[tuple[_Line, str]]:
        """Yield the changed lines that define tests, with each test's name."""
        lines = list(self.code(added=added))
        for index, line in enumerate(lines):
            for pattern in _TEST_DEFS.get(self.language, ()):
                if match := pattern.search(line.text):
                    yield line, f"{self.language}:{match[1]}"
            if self.language == "rust" and _RUST_TEST_ATTR.search(line.text):
                following = (later.text for later in lines[index + 1 : index + 4])
                name = next((m[1] for t in following if (m := _RUST_FN.search(t))), "")
                yield line, f"rust:{name}"

    def assertions(self, *, added: bool) -> Iterator[tuple[_Line, str]]:
        for line in self.code(added=added):
            if _ASSERTS[self.language].search(line.text):
                yield line, line.text

    def normal(self, text: str) -> str:
        return f"{self.language}:{' '.join(text.split())}"


def _comment(text: str) -> bool:
    stripped = text.strip()
    return stripped.startswith(("#", "//", "/*", "*")) and not stripped.startswith("#[")


def _language(path: str) -> str:
    suffix = PurePosixPath(path).suffix
    if suffix in (".py", ".pyi"):
        return "python"
    if suffix in (".js", ".jsx", ".ts", ".tsx", ".mjs", ".cjs", ".mts", ".cts"):
        return "js"
    if suffix == ".go":
        return "go"
    if suffix == ".rs":
        return "rust"
    return "other"


_TEST_NAME = re.compile(
    r"(^|/)(test_[^/]*\.py|[^/]*_test\.py|conftest\.py|[^/]*_test\.go"
    r"|[^/]*\.(test|spec)\.[cm]?[jt]sx?)$"
)
_TEST_DIR = re.compile(r"(^|/)(tests?|__tests__|spec|testing)/")


def _test_path(path: str) -> bool:
    if _language(path) == "other":
        return False
    return bool(_TEST_NAME.search(path) or _TEST_DIR.search(path))


_RUST_TEST_CONTEXT = re.compile(r"#\[(cfg\(test\)|test|tokio::test)\]|\bmod tests\b")
_RUST_TEST_ATTR = re.compile(r"^\s*#\[(\w+::)?test\b")
_RUST_FN = re.compile(r"\bfn\s+(\w+)")
_TEST_DEFS: dict[str, tuple[re.Pattern[str], ...]] = {
    "python": (
        re.compile(r"^\s*(?:async\s+)?def\s+(test\w*)\s*\("),
        re.compile(r"^\s*class\s+(Test\w*)\b"),
    ),
    "js": (
        re.compile(r"^\s*[xf]?(?:it|test|describe|context)(?:\.\w+)*\s*\(\s*(['\"`].*?['\"`])"),
    ),
    "go": (
        re.compile(r"^\s*func\s+((?:Test|Benchmark|Fuzz|Example)\w*)\s*\("),
        re.compile(r"\bt\.Run\(\s*(\".*?\")"),
    ),
    "rust": (),
}

_ASSERTS: dict[str, re.Pattern[str]] = {
    "python": re.compile(
        r"^\s*assert\b|\bself\.assert\w+\s*\(|\bself\.fail\w*\s*\(|\bpytest\.(raises|approx)\b"
        r"|\bassert_\w+\s*\("
    ),
    "js": re.compile(r"\bexpect\s*\(|\bassert(\.\w+)?\s*\(|\.should\b|\bexpectTypeOf\s*\("),
    "go": re.compile(
        r"\bt\.(Error|Errorf|Fatal|Fatalf|Fail|FailNow)\s*\(|\b(assert|require)\.\w+\s*\("
        r"|\bif\s+.*(!=|==|DeepEqual|Equal\(|\bAbs\().*\{\s*$"
    ),
    "rust": re.compile(r"\b(debug_)?assert(_eq|_ne|_matches)?!\s*\(|\bprop_assert\w*!\s*\("),
    "other": re.compile(r"$^"),
}

# How much an assertion pins down: 3 an exact value, 2 a relation or a part, 1 that
# something is there at all. An assertion replaced by a weaker one loosens the test.
_EXACT = re.compile(
    r"==|\bassert(Equals?|ListEqual|DictEqual|TupleEqual|SetEqual|SequenceEqual"
    r"|MultiLineEqual|CountEqual|Is)\s*\(|\.toBe\(|\.toEqual\(|\.toStrictEqual\(|\.toHaveLength\("
    r"|\.toMatchObject\(|\.toHaveBeenCalledWith\(|\.toHaveBeenCalledTimes\(|\.toMatchSnapshot\("
    r"|\bassert\.(equal|strictEqual|deepEqual|deepStrictEqual)\s*\(|\bassert_eq!|\bEqual(Values)?\("
    r"|\bDeepEqual\(|\bJSONEq\(|\bLen\(|\bErrorIs\(|\bErrorContains\(|\bassert_matches!"
)
_PARTIAL = re.compile(
    r"!=|<|>|\bin\b|\bnot in\b|\bassert(NotEqual|In|NotIn|Greater|GreaterEqual|Less|LessEqual"
    r"|AlmostEqual|NotAlmostEqual|IsInstance|Regex|RaisesRegex|Warns)\s*\("
    r"|\.to(Contain|ContainEqual|Match|HaveProperty|BeGreaterThan|BeGreaterThanOrEqual"
    r"|BeLessThan|BeLessThanOrEqual|BeCloseTo|BeInstanceOf|HaveBeenCalled)\("
    r"|\bapprox\(|\b(Contains|Greater|GreaterOrEqual|Less|LessOrEqual|InDelta|InEpsilon|Subset"
    r"|ElementsMatch|Regexp|IsType|ErrorAs)\(|\bassert_ne!|\bstartswith\(|\bendswith\("
    r"|\bisinstance\(|\bstarts_with\(|\bends_with\(|\bcontains\("
)
_RAISES = re.compile(r"\b(raises|assertRaises|toThrow|toThrowError|rejects\.toThrow)\s*\(([^)]*)\)")
_BROAD_RAISES = re.compile(r"^\s*(Exception|BaseException)?\s*$")


def _strength(text: str) -> int:
    if raised := _RAISES.search(text):
        return 1 if _BROAD_RAISES.match(raised[2]) else 3
    strength = 3 if _EXACT.search(text) else 2 if _PARTIAL.search(text) else 1
    if ".not." in text or re.search(r"\bNot(Equal|Contains)\(", text):
        strength = min(strength, 2)
    return strength


_TOLERANCE = re.compile(
    r"\b(abs|rel|atol|rtol|delta|places|epsilon|eps|tol|tolerance|max_relative|ulps)\s*[=:]\s*"
    r"([0-9][0-9_.eE+-]*)"
    r"|\b(toBeCloseTo)\([^,]+,\s*([0-9][0-9.eE+-]*)\s*\)"
    r"|\b(InDelta|InEpsilon|WithinDuration)\((?:[^,]+,){3}\s*([0-9][0-9.eE+-]*)\s*\)"
    r"|\b(Abs|abs)\(.*?\)\s*(?:<=?|>=?)\s*([0-9][0-9.eE+-]*)"
)
_TIGHTER_WHEN_HIGHER = frozenset({"places", "toBeCloseTo"})  # digits, not a margin


def _tolerances(text: str) -> list[tuple[str, float]]:
    found = []
    for match in _TOLERANCE.finditer(text):
        groups = [g for g in match.groups() if g is not None]
        try:
            found.append((groups[0], float(groups[1].replace("_", ""))))
        except ValueError:
            continue
    return found


def _loosened(old: str, new: str) -> str | None:
    """Return how the new assertion is looser than the old one, or None if it is not."""
    if _strength(new) < _strength(old):
        return "assertion loosened"
    old_tolerance, new_tolerance = _tolerances(old), _tolerances(new)
    if old_tolerance and [k for k, _ in old_tolerance] == [k for k, _ in new_tolerance]:
        wider = [
            (key, a, b)
            for (key, a), (_, b) in zip(old_tolerance, new_tolerance, strict=True)
            if (b < a if key in _TIGHTER_WHEN_HIGHER else b > a)
        ]
        if wider:
            key, a, b = wider[0]
            return f"tolerance {key} widened from {a:g} to {b:g}"
    return None


# What a file's changes show ---------------------------------------------------------


_SKIPS: dict[str, re.Pattern[str]] = {
    "python": re.compile(
        r"\bpytest\.mark\.(skip|skipif|xfail)\b|\bpytest\.(skip|xfail|importorskip)\s*\("
        r"|\bunittest\.(skip|skipIf|skipUnless|expectedFailure)\b|@(skip|skipIf|skipUnless"
        r"|expectedFailure)\b|\bself\.skipTest\s*\(|\braise\s+(unittest\.)?SkipTest\b"
    ),
    "js": re.compile(
        r"\b(it|test|describe|context|suite)\.(skip|todo|failing|only)\b"
        r"|(^|[^.\w])(xit|xtest|xdescribe|xcontext|fit|fdescribe)\s*\(|\bthis\.skip\s*\("
    ),
    "go": re.compile(r"\bt\.(Skip|Skipf|SkipNow)\s*\(|^//\s*(go:build|\+build)\s+ignore\b"),
    "rust": re.compile(r"#\[\s*ignore\b|#\[\s*cfg\(\s*(any\(\s*\)|FALSE|ignore)"),
}

_CI_PATHS = re.compile(
    r"^(\.github/workflows/|\.sandbox/(ci|checks)(/|$)|\.ci/|\.circleci/|\.gitlab-ci\.yml$"
    r"|\.buildkite/|Jenkinsfile$|azure-pipelines\.yml$|\.travis\.yml$)"
)
REPO_FILE = ".github/baton.yml"

# (pattern, whether a higher number is the looser one)
_THRESHOLDS: tuple[tuple[re.Pattern[str], bool], ...] = (
    (
        re.compile(
            r"(--cov-fail-under|--fail-under|fail_under|fail-under|min_coverage"
            r"|minimum_coverage|coverage_threshold|COVERAGE_THRESHOLD|--min-coverage)"
            r"[\"']?\s*[=: ]\s*[\"']?([0-9.]+)"
        ),
        False,
    ),
    (re.compile(r"[\"']?(branches|functions|lines|statements)[\"']?\s*:\s*(-?[0-9.]+)"), False),
    (
        re.compile(
            r"(--max-warnings|max-warnings|max_warnings|max-line-length|max_line_length"
            r"|max-complexity|max_complexity|line-length|line_length)[\"']?\s*[=: ]\s*"
            r"[\"']?([0-9]+)"
        ),
        True,
    ),
)
_LINT_FILES = re.compile(
    r"(^|/)(pyproject\.toml|ruff\.toml|\.ruff\.toml|setup\.cfg|\.flake8|tox\.ini|\.pylintrc"
    r"|\.eslintrc(\.\w+)?|eslint\.config\.[cm]?[jt]s|package\.json|\.golangci\.ya?ml"
    r"|clippy\.toml|jest\.config\.[cm]?[jt]s|vitest\.config\.[cm]?[jt]s|\.coveragerc"
    r"|codecov\.ya?ml|Makefile|\.nycrc(\.json)?|Cargo\.toml|\.cargo/config\.toml)$"
)
_IGNORED_CODES = re.compile(r"\b([A-Z]{1,4}[0-9]{1,4})\b")
_ESLINT_OFF = re.compile(r"[\"']?([\w@/-]+)[\"']?\s*:\s*\[?\s*[\"']?(off|warn|0|1)\b")
_ESLINT_ERROR = re.compile(r"[\"']?([\w@/-]+)[\"']?\s*:\s*\[?\s*[\"']?(error|2)\b")


def _finding(
    kind: AuditKind,
    file: DiffFile,
    line: _Line | None,
    note: str,
    side: str,
    was: str = "",
) -> AuditFinding:
    return AuditFinding(
        kind=kind,
        path=file.filename,
        line=None if line is None else line.number,
        side="base" if side == "base" else "head",
        note=note,
        text="" if line is None else _cut(line.text),
        was=_cut(was),
    )


def _cut(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SEEN_LIMIT else text[: SEEN_LIMIT - 1] + "…"


def _file_findings(
    p: _Parsed, added_tests: Counter[str], added_asserts: Counter[str]
) -> list[AuditFinding]:
    file = p.file
    findings: list[AuditFinding] = []
    was_test = _test_path(file.previous_filename or file.filename)
    if file.patch is None and file.additions + file.deletions > 0:
        seen = (
            f"GitHub gave no patch for {file.additions + file.deletions} changed lines "
            "(a diff too large to show): not checked"
        )
        findings.append(_finding(AuditKind.DIFF_UNREADABLE, file, None, seen, "head"))
    elif (
        file.patch is None
        and file.status not in ("removed", "renamed", "copied")  # a pure rename has no patch
        and (p.is_test or _ci_file(file))
    ):
        seen = "GitHub gave no patch (binary content): not checked"
        findings.append(_finding(AuditKind.DIFF_UNREADABLE, file, None, seen, "head"))
    if was_test and file.status == "removed":
        seen = "test file deleted"
        return [*findings, _finding(AuditKind.TEST_FILE_DELETED, file, None, seen, "base")]
    if was_test and file.status == "renamed" and not _test_path(file.filename):
        seen = f"test file renamed out of the tests, from {file.previous_filename}"
        findings.append(_finding(AuditKind.TEST_FILE_DELETED, file, None, seen, "head"))
    elif was_test and p.emptied:
        seen = "test file emptied"
        return [*findings, _finding(AuditKind.TEST_FILE_DELETED, file, None, seen, "head")]
    if _ci_file(file):
        first = next(iter(p.lines(added=True)), None) or next(iter(p.lines(added=False)), None)
        seen = "CI configuration changed"
        findings.append(_finding(AuditKind.CI_CHANGED, file, first, seen, "head"))
    elif file.filename == REPO_FILE or file.previous_filename == REPO_FILE:
        findings += _required_checks(p)
    if p.language != "other" and p.is_test:
        findings += _test_findings(p, added_tests, added_asserts)
    if _LINT_FILES.search(file.filename):
        findings += _threshold_findings(p)
    return findings


def _ci_file(file: DiffFile) -> bool:
    return any(_CI_PATHS.search(path) for path in (file.filename, file.previous_filename) if path)


def _required_checks(p: _Parsed) -> list[AuditFinding]:
    """Flag changes to the repository file's `required_checks`: which checks decide green."""
    if p.file.status == "removed":
        return [_finding(AuditKind.CI_CHANGED, p.file, None, "required checks deleted", "base")]
    under = _keys_above(p)
    changed = [
        (line, side)
        for block in p.blocks
        for line, side in [(x, "base") for x in block.removed] + [(x, "head") for x in block.added]
        if under.get((side, line.number)) == "required_checks"
    ]
    if not changed:
        return []
    line, side = changed[0]
    seen = "required checks changed"
    return [_finding(AuditKind.CI_CHANGED, p.file, line, seen, side)]


def _keys_above(p: _Parsed) -> dict[tuple[str, int], str]:
    """Return, for each changed line of a YAML file, the top-level key it sits under."""
    under: dict[tuple[str, int], str] = {}
    old_key = new_key = ""
    old = new = 0
    for text in (p.file.patch or "").splitlines():
        if match := _HUNK.match(text):
            old, new = int(match[1]), int(match[3])
            section = text[match.end() :].strip()
            top = re.match(r"^([A-Za-z_]\w*)\s*:", section)
            old_key = new_key = top[1] if top else ""
            continue
        if text.startswith("\\"):
            continue
        body = text[1:]
        top = re.match(r"^([A-Za-z_]\w*)\s*:", body)
        if text.startswith("-"):
            old_key = top[1] if top else old_key
            under[("base", old)] = old_key
            old += 1
        elif text.startswith("+"):
            new_key = top[1] if top else new_key
            under[("head", new)] = new_key
            new += 1
        else:
            old_key = new_key = top[1] if top else old_key
            old += 1
            new += 1
    return under


def _test_findings(
    p: _Parsed, added_tests: Counter[str], added_asserts: Counter[str]
) -> list[AuditFinding]:
    file = p.file
    findings: list[AuditFinding] = []
    if file.status != "removed":
        kept = Counter(added_tests)
        for line, name in p.tests(added=False):
            if kept[name] > 0:
                kept[name] -= 1
                continue
            seen = "test removed"
            findings.append(_finding(AuditKind.TEST_REMOVED, file, line, seen, "base"))
    removed_skips = Counter(
        " ".join(line.text.split()) for line in p.code(added=False) if _skip(p, line.text)
    )
    for line in p.lines(added=True):
        if _comment(line.text) and not (p.language == "go" and line.text.startswith("//")):
            continue
        if not _skip(p, line.text):
            continue
        normal = " ".join(line.text.split())
        if removed_skips[normal] > 0:
            removed_skips[normal] -= 1  # moved, not added
            continue
        seen = "skip added"
        findings.append(_finding(AuditKind.SKIP_ADDED, file, line, seen, "head"))
    findings += _assertion_findings(p, added_asserts)
    return findings


def _skip(p: _Parsed, text: str) -> bool:
    pattern = _SKIPS.get(p.language)
    return bool(pattern and pattern.search(text))


def _assertion_findings(p: _Parsed, added_asserts: Counter[str]) -> list[AuditFinding]:
    pattern = _ASSERTS[p.language]
    findings: list[AuditFinding] = []
    moved = Counter(added_asserts)
    defined = {line.number for line, _ in p.tests(added=False)}
    for block in p.blocks:
        if any(line.number in defined for line in block.removed):
            continue  # a test taken out whole: flagged as such, or moved with its assertions
        removed = [
            line for line in block.removed if not _comment(line.text) and pattern.search(line.text)
        ]
        added = [
            line for line in block.added if not _comment(line.text) and pattern.search(line.text)
        ]
        same = Counter(p.normal(line.text) for line in added)
        for line in removed:
            normal = p.normal(line.text)
            if same[normal] > 0:
                same[normal] -= 1
                moved[normal] -= 1  # kept in place: not a move from elsewhere either
                added = [a for a in added if p.normal(a.text) != normal] + [
                    a for a in added if p.normal(a.text) == normal
                ][1:]
                continue
            if added:
                replacement = added.pop(0)
                how = _loosened(line.text, replacement.text)
                if how is not None:
                    findings.append(
                        _finding(
                            AuditKind.ASSERTION_WEAKENED,
                            p.file,
                            replacement,
                            how,
                            "head",
                            was=line.text,
                        )
                    )
                continue
            if moved[normal] > 0:
                moved[normal] -= 1
                continue
            seen = "assertion removed"
            findings.append(_finding(AuditKind.ASSERTION_REMOVED, p.file, line, seen, "base"))
    return findings


def _threshold_findings(p: _Parsed) -> list[AuditFinding]:
    findings: list[AuditFinding] = []
    for block in p.blocks:
        findings += _thresholds_lowered(p.file, block)
        findings += _ignores_added(p, block)
    return findings


def _thresholds_lowered(file: DiffFile, block: _Block) -> list[AuditFinding]:
    findings = []
    for pattern, higher_is_looser in _THRESHOLDS:
        before = {m[1]: float(m[2]) for line in block.removed for m in pattern.finditer(line.text)}
        for line in block.added:
            for match in pattern.finditer(line.text):
                name, value = match[1], float(match[2])
                old = before.pop(name, None)
                if old is not None and (value > old if higher_is_looser else value < old):
                    verb = "loosened" if higher_is_looser else "lowered"
                    seen = f"{name} {verb} from {old:g} to {value:g}"
                    findings.append(_finding(AuditKind.THRESHOLD_LOWERED, file, line, seen, "head"))
        # A threshold taken out with nothing in its place is lowered to nothing.
        for line in block.removed:
            for match in pattern.finditer(line.text):
                if match[1] in before and not higher_is_looser:
                    seen = f"{match[1]} threshold removed"
                    findings.append(_finding(AuditKind.THRESHOLD_LOWERED, file, line, seen, "base"))
                    before.pop(match[1])
    return findings


def _ignores_added(p: _Parsed, block: _Block) -> list[AuditFinding]:
    """Flag lint rules newly ignored (ruff, flake8, pylint) or turned down (eslint)."""
    findings = []
    ignoring = any("ignore" in line.text or "disable" in line.text for line in block.added) or any(
        "ignore" in text or "disable" in text for text in p.context
    )
    if ignoring and not p.file.filename.endswith(("package.json", ".eslintrc", ".eslintrc.json")):
        before = {code for line in block.removed for code in _IGNORED_CODES.findall(line.text)}
        for line in block.added:
            if _comment(line.text):
                continue
            new = [code for code in _IGNORED_CODES.findall(line.text) if code not in before]
            if new and _in_ignore_list(p, line):
                seen = f"lint rules ignored: {', '.join(new)}"
                findings.append(_finding(AuditKind.THRESHOLD_LOWERED, p.file, line, seen, "head"))
    errors = {m[1] for line in block.removed if (m := _ESLINT_ERROR.search(line.text))}
    for line in block.added:
        if (m := _ESLINT_OFF.search(line.text)) and m[1] in errors:
            seen = f"lint rule {m[1]} turned down to {m[2]}"
            findings.append(_finding(AuditKind.THRESHOLD_LOWERED, p.file, line, seen, "head"))
    return findings


def _in_ignore_list(p: _Parsed, line: _Line) -> bool:
    """Tell whether an added line sits in an ignore list: on its key's line, or below it."""
    if re.search(r"ignore|disable", line.text):
        return True
    index = p.context.index(line.text)
    keys = [text for text in p.context[:index] if re.match(r"^\s*[\w.\-\"']+\s*[=:]", text)]
    return bool(keys) and bool(re.search(r"ignore|disable", keys[-1]))


# Scope ---------------------------------------------------------------------------


_AFFIXES = re.compile(r"^test_|_test(?=\.)|\.(test|spec)(?=\.)")


def _mentioned(path: str, issue_text: str) -> bool:
    """Tell whether the issue names the file: its path, name, a folder, or (tests) its subject."""
    text = issue_text
    posix = PurePosixPath(path)
    names = {path, posix.name, _AFFIXES.sub("", posix.name)}
    if any(name and _word_in(name, text) for name in names):
        return True
    return any(_word_in(f"{parent}/", text) for parent in map(str, posix.parents) if parent != ".")


def _word_in(name: str, text: str) -> bool:
    return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", text) is not None


def kinds(findings: Iterable[AuditFinding]) -> Counter[str]:
    """Return how many findings there are of each kind."""
    return Counter(finding.kind.value for finding in findings)
