"""The demo's scripted agent: fixes the demo project's bug the way a coding agent would.

Run by the `command` adapter as `python -m bot.devkit.demo_agent` in the worktree; it
reads the brief Baton wrote, edits the code, checks the tests, and reports.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

BUGGY = "return a - b"
FIXED = "return a + b"


def main() -> int:
    """Fix calc.add, run the tests, print a report for the pull request."""
    brief = Path(os.environ["BATON_BRIEF"]).read_text()
    print(
        f"Read the brief ({len(brief.splitlines())} lines) for issue #{os.environ['BATON_ISSUE']}."
    )
    source = Path("calc.py")
    code = source.read_text()
    if BUGGY not in code:
        print("calc.add already adds; nothing to fix.")
        return 0
    source.write_text(code.replace(BUGGY, FIXED, 1))
    tests = subprocess.run(
        [sys.executable, "-m", "unittest", "-q"], capture_output=True, text=True, check=False
    )
    print(tests.stderr.strip().splitlines()[-1] if tests.stderr.strip() else "tests ran")
    print(
        "Fixed `add()` in `calc.py`: it subtracted its second argument instead of adding it. "
        "The existing tests in `test_calc.py` now pass."
    )
    return tests.returncode


if __name__ == "__main__":
    sys.exit(main())
