"""The settlement audit's precision on a corpus of real diffs: what it flags, and how often.

`tests/fixtures/audit/weakening/` holds diffs that weaken their tests (a test deleted,
skipped, an assertion loosened, CI or a threshold turned down); `clean/` holds fixes
that do not. Each diff sits beside the issue text it answers (`NAME.issue.md`). Prints
every flag raised, then the true-positive rate on the weakening corpus and the
false-positive rate on the clean one.

    .venv/bin/python -m bench.audit_precision
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from bot.domain.audit import audit, files_of_unified_diff
from bot.domain.model import AuditFinding

CORPUS = Path(__file__).parents[1] / "tests" / "fixtures" / "audit"


@dataclass(frozen=True)
class Case:
    """One diff of the corpus and the issue it answers."""

    name: str
    diff: str
    issue: str

    def findings(self) -> list[AuditFinding]:
        """Return what the audit flags in the diff."""
        return audit(files_of_unified_diff(self.diff), self.issue)


def corpus(kind: str) -> list[Case]:
    """Return the cases of one corpus (`weakening` or `clean`), by name."""
    folder = CORPUS / kind
    return [
        Case(path.stem, path.read_text(), path.with_suffix(".issue.md").read_text())
        for path in sorted(folder.glob("*.diff"))
    ]


def main() -> None:
    """Print the flags raised on each corpus and both rates."""
    rates = {}
    for kind in ("weakening", "clean"):
        cases = corpus(kind)
        flagged = 0
        print(f"## {kind} ({len(cases)} diffs)")
        for case in cases:
            found = case.findings()
            flagged += bool(found)
            summary = ", ".join(f"{f.kind.value} {f.path}:{f.line or '-'}" for f in found)
            print(f"{'FLAGGED' if found else 'clean  '}  {case.name}: {summary or '-'}")
        rates[kind] = flagged / len(cases)
        print()
    print(f"true-positive rate (weakening diffs flagged): {rates['weakening']:.0%}")
    print(f"false-positive rate (clean diffs flagged):    {rates['clean']:.0%}")


if __name__ == "__main__":
    main()
