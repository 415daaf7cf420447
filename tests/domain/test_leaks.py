"""What an agent's push must not carry, found in the lines its commits add (pure)."""

from __future__ import annotations

from bot.domain.leaks import AddedLine, Leak, find_leaks, masked, parse_added_lines, passed_values

# `git log --patch --unified=0 --format=` of two commits: a key added, then deleted again.
HISTORY = """\
diff --git a/deploy/settings.py b/deploy/settings.py
new file mode 100644
index 0000000..1111111
--- /dev/null
+++ b/deploy/settings.py
@@ -0,0 +1,2 @@
+DEBUG = False
+KEY = "AKIAIOSFODNN7EXAMPLE"
diff --git a/deploy/settings.py b/deploy/settings.py
index 1111111..2222222 100644
--- a/deploy/settings.py
+++ b/deploy/settings.py
@@ -2 +1,0 @@
-KEY = "AKIAIOSFODNN7EXAMPLE"
diff --git a/README.md b/README.md
index 3333333..4444444 100644
--- a/README.md
+++ b/README.md
@@ -10,0 +11,2 @@ Usage
+Set PROVIDER to sk-provider-value-0123456789.
+++ a line that only starts like a header
diff --git "a/we\\342\\200\\213ird" "b/we\\342\\200\\213ird"
new file mode 100644
--- /dev/null
+++ "b/we\\342\\200\\213ird"
@@ -0,0 +1 @@
+token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"
diff --git a/old.txt b/old.txt
deleted file mode 100644
--- a/old.txt
+++ /dev/null
@@ -1 +0,0 @@
-gone
"""
PROVIDER_KEY = "sk-provider-value-0123456789"


def test_every_line_each_commit_adds_is_read_where_it_stands() -> None:
    assert parse_added_lines(HISTORY) == [
        AddedLine("deploy/settings.py", 1, "DEBUG = False"),
        AddedLine("deploy/settings.py", 2, 'KEY = "AKIAIOSFODNN7EXAMPLE"'),
        AddedLine("README.md", 11, "Set PROVIDER to sk-provider-value-0123456789."),
        AddedLine("README.md", 12, "++ a line that only starts like a header"),
        AddedLine("we\\342\\200\\213ird", 1, 'token = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"'),
    ]


def test_a_credential_added_and_deleted_again_is_still_a_leak_named_without_its_value() -> None:
    leaks = find_leaks(parse_added_lines(HISTORY), [PROVIDER_KEY, "short"])
    assert leaks == [
        Leak("deploy/settings.py", 2, "AWS Access Key"),
        Leak("README.md", 11, "a value passed to the agent"),
        Leak("we\\342\\200\\213ird", 1, "GitHub Token"),
    ]
    assert all(PROVIDER_KEY not in str(leak) and "AKIA" not in str(leak) for leak in leaks)


def test_hashes_and_ordinary_code_are_no_leak() -> None:
    lockfile = '"integrity": "sha512-z4PhNX7vuL3xVChQ1m2AB9Yg5AULVxXcg/SpIdNs6c5H0NE8XYXysP+DGNKH"'
    ordinary = [
        AddedLine("package-lock.json", 40, lockfile),
        AddedLine("src/app.py", 3, 'password = input("Password: ")'),
        AddedLine("src/app.py", 4, f"HEAD = '{'a' * 40}'"),
    ]
    assert find_leaks(ordinary, []) == []


def test_the_values_passed_are_those_the_worker_holds() -> None:
    environ = {"ANTHROPIC_API_KEY": PROVIDER_KEY, "EMPTY": ""}
    assert passed_values(["ANTHROPIC_API_KEY", "EMPTY", "UNSET"], environ) == [PROVIDER_KEY]


def test_the_agents_report_is_shown_with_its_credentials_masked() -> None:
    report = f"Done.\nI used AKIAIOSFODNN7EXAMPLE and {PROVIDER_KEY} to check.\nAll green."
    assert masked(report, [PROVIDER_KEY]) == "Done.\nI used *** and *** to check.\nAll green."
    assert masked("Nothing secret here.", [PROVIDER_KEY]) == "Nothing secret here."
