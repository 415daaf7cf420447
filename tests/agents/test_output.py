"""What an agent wrote is read bounded, as a regular file, inside its directories: real files."""

from __future__ import annotations

import os
import re
import shlex
import signal
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest

from bot.agents import claude, codex, process
from bot.agents.base import AgentRequest
from bot.agents.command import RESULT_LIMIT, CommandAdapter
from bot.agents.output import Unreadable, find_file, read_capped
from bot.agents.process import Cap, Capture, cut_marker, run_process
from bot.domain.model import utcnow
from tests.agents.test_command import python, request_for

MARKER = re.compile(rb"\[baton: (\d+) bytes of output cut here\]\n")


@contextmanager
def at_most(seconds: int) -> Iterator[None]:
    """Fail, rather than hang, a block that blocks longer than seconds."""

    def expired(signum: int, frame: object) -> None:
        raise TimeoutError(f"blocked for more than {seconds}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# --- read_capped ---------------------------------------------------------------------------


def test_a_normal_file_is_read_whole(tmp_path: Path) -> None:
    (tmp_path / "io").mkdir()
    (tmp_path / "io" / "result.json").write_bytes(b'{"status": "success"}')
    found = read_capped(tmp_path / "io" / "result.json", 100, within=tmp_path)
    assert found is not None
    assert (found.text(), found.cut, found.size) == ('{"status": "success"}', False, 21)


def test_nothing_there_is_none(tmp_path: Path) -> None:
    assert read_capped(tmp_path / "missing.json", 100, within=tmp_path) is None
    assert read_capped(tmp_path / "no-dir" / "missing.json", 100, within=tmp_path) is None


def test_an_oversize_file_is_read_only_to_its_cap(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 10_000 + b"END")
    found = read_capped(tmp_path / "big", 1000, within=tmp_path)
    assert found is not None
    assert found.data == b"x" * 1000 and found.cut and found.size == 10_003


def test_a_symlink_to_dev_zero_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / "result.json").symlink_to("/dev/zero")
    with at_most(5), pytest.raises(Unreadable, match="symbolic link"):
        read_capped(tmp_path / "result.json", 1 << 40, within=tmp_path)


def test_a_symlink_out_of_the_directory_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("the App's private key")
    run = tmp_path / "run"
    run.mkdir()
    (run / "file").symlink_to(outside / "secret")
    (run / "dir").symlink_to(outside)
    with pytest.raises(Unreadable, match="symbolic link"):
        read_capped(run / "file", 100, within=run)
    with pytest.raises(Unreadable, match="'dir' below it is a symbolic link"):
        read_capped(run / "dir" / "secret", 100, within=run)
    with pytest.raises(Unreadable, match="not inside"):
        read_capped(outside / "secret", 100, within=run)
    with pytest.raises(Unreadable, match="not inside"):
        read_capped(run / ".." / "outside" / "secret", 100, within=run)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "result.json")
    with at_most(5), pytest.raises(Unreadable, match="a FIFO, not a regular file"):
        read_capped(tmp_path / "result.json", 100, within=tmp_path)


def test_a_directory_or_a_hard_link_is_refused(tmp_path: Path) -> None:
    (tmp_path / "result.json").mkdir()
    with pytest.raises(Unreadable, match="a directory"):
        read_capped(tmp_path / "result.json", 100, within=tmp_path)
    (tmp_path / "secret").write_text("key")
    os.link(tmp_path / "secret", tmp_path / "linked")
    with pytest.raises(Unreadable, match="hard link"):
        read_capped(tmp_path / "linked", 100, within=tmp_path)


# --- find_file -----------------------------------------------------------------------------


def test_find_file_finds_a_dated_file_and_follows_no_symlink(tmp_path: Path) -> None:
    home = tmp_path / "home"
    day = home / "codex" / "sessions" / "2026" / "09" / "14"
    day.mkdir(parents=True)
    (day / "rollout-1-abc.jsonl").write_text("{}\n")
    sessions = home / "codex" / "sessions"
    assert find_file(sessions, lambda n: n.endswith("abc.jsonl"), within=home) == (
        day / "rollout-1-abc.jsonl"
    )

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "rollout-2-def.jsonl").write_text("{}\n")
    (sessions / "2027").symlink_to(elsewhere)
    (day / "rollout-3-def.jsonl").symlink_to(elsewhere / "rollout-2-def.jsonl")
    assert find_file(sessions, lambda n: n.endswith("def.jsonl"), within=home) is None


def test_find_file_stops_at_its_depth_and_its_count_of_entries(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    (deep / "target").write_text("")
    assert find_file(tmp_path, lambda n: n == "target", within=tmp_path, max_depth=4)
    assert find_file(tmp_path, lambda n: n == "target", within=tmp_path, max_depth=3) is None
    wide = tmp_path / "wide"
    wide.mkdir()
    for n in range(200):
        (wide / f"f{n:03d}").write_text("")
    (wide / "target").write_text("")
    assert find_file(wide, lambda n: n == "target", within=tmp_path, max_entries=500)
    assert find_file(wide, lambda n: n == "target", within=tmp_path, max_entries=100) is None


def test_codex_finds_no_session_through_a_symlinked_sessions_directory(tmp_path: Path) -> None:
    thread = "0199b8e2-4c6a-7d10-9e3f-5a7c9e1b3d50"
    request = request_for(tmp_path, resume_session_id=thread)
    elsewhere = tmp_path / "elsewhere" / "2026" / "09" / "14"
    elsewhere.mkdir(parents=True)
    (elsewhere / f"rollout-x-{thread}.jsonl").write_text("{}\n")
    codex.codex_home(request).mkdir(parents=True)
    (codex.codex_home(request) / "sessions").symlink_to(tmp_path / "elsewhere")
    assert not codex.session_exists(request)
    (codex.codex_home(request) / "sessions").unlink()
    (codex.codex_home(request) / "sessions").symlink_to("/")
    with at_most(10):
        assert not codex.session_exists(request)


# --- the capture of a process's output -----------------------------------------------------


def test_capture_keeps_whole_lines_of_head_and_tail_around_one_marker() -> None:
    capture = Capture(Cap(head=20, tail=20))
    lines = [f"line {n:02d}\n".encode() for n in range(10)]  # 8 bytes each
    written = b"".join(capture.feed(line) for line in lines)
    assert written == lines[0] + lines[1]  # the third would pass the head's 20 bytes
    on_disk = written + capture.close()
    assert on_disk == lines[0] + lines[1] + cut_marker(80 - 16 - 16) + lines[8] + lines[9]


def test_capture_of_short_output_is_the_output() -> None:
    capture = Capture(Cap(head=100, tail=10))
    assert capture.feed(b"one\n") + capture.feed(b"two") + capture.close() == b"one\ntwo"


def test_capture_of_many_tiny_lines_stays_within_its_cap() -> None:
    capture = Capture(Cap(head=10, tail=100))
    for _ in range(100_000):
        capture.feed(b"\n")
        assert len(capture.tail) <= 2 * 100 + 1
    closed = capture.close()
    assert closed == cut_marker(100_000 - 10 - 100) + b"\n" * 100


async def test_run_process_keeps_head_marker_and_the_final_line_of_both_streams(
    tmp_path: Path,
) -> None:
    code = (
        "import sys\n"
        "for n in range(20000):\n"
        "    print(f'out {n}')\n"
        "    print(f'err {n}', file=sys.stderr)\n"
        "print('the final result line')\n"
        "print('the final stderr line', file=sys.stderr)\n"
    )
    (tmp_path / "brief").write_text("")
    outcome = await run_process(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={"PATH": os.environ["PATH"]},
        stdin=tmp_path / "brief",
        transcript=tmp_path / "run" / "transcript.log",
        stderr=tmp_path / "run" / "stderr.log",
        deadline=utcnow() + timedelta(seconds=60),
        stdout_cap=Cap(head=10_000, tail=5_000),
        stderr_cap=Cap(head=2_000, tail=1_000),
    )
    assert outcome.exit_code == 0
    for name, cap, word, final in (
        ("transcript.log", Cap(10_000, 5_000), b"out", b"the final result line\n"),
        ("stderr.log", Cap(2_000, 1_000), b"err", b"the final stderr line\n"),
    ):
        data = (tmp_path / "run" / name).read_bytes()
        total = sum(len(f"{word.decode()} {n}\n") for n in range(20000)) + len(final)
        assert len(data) <= cap.on_disk
        assert data.startswith(word + b" 0\n" + word + b" 1\n")
        assert data.endswith(final)
        assert len(MARKER.findall(data)) == 1
        marker = MARKER.search(data)
        assert marker is not None
        head, tail = data[: marker.start()], data[marker.end() :]
        assert int(marker[1]) == total - len(head) - len(tail)  # exactly what was cut
        assert head.endswith(b"\n") and re.match(rb"^" + word + rb" \d+\n", tail)
    assert outcome.tail[-1] == "stderr: the final stderr line"
    assert len(outcome.tail) == process.EVIDENCE_LINES


async def test_caps_come_from_the_module_constants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process, "STDOUT_CAP", Cap(head=1_000, tail=500))
    command = python("for n in range(5000): print(n)\nprint('done')")
    request = request_for(tmp_path)
    await CommandAdapter(command).run(request)
    data = request.transcript_path.read_bytes()
    assert len(data) <= Cap(1_000, 500).on_disk
    assert MARKER.search(data) and data.endswith(b"done\n")


async def test_a_line_longer_than_max_line_breaks_nothing_and_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process, "MAX_LINE", 1000)
    command = python("print('a' * 25_000); print('after')")
    request = request_for(tmp_path)
    result = await CommandAdapter(command).run(request)
    assert result.status == "success"
    assert request.transcript_path.read_bytes() == b"a" * 25_000 + b"\nafter\n"
    assert result.evidence[-1] == "after"
    assert all(len(line) <= process.EVIDENCE_LINE_CHARS for line in result.evidence)


async def test_a_child_left_holding_stderr_does_not_hold_up_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(process, "STDERR_GRACE_S", 0.5)
    pid_file = tmp_path / "child.pid"
    # The shell exits at once; its child holds the stderr pipe, not stdout.
    command = f"sleep 30 >/dev/null & echo $! > {shlex.quote(str(pid_file))}; echo done"
    started = utcnow()
    try:
        result = await CommandAdapter(command).run(request_for(tmp_path))
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert result.status == "success" and result.evidence == ["done"]
    assert utcnow() - started < timedelta(seconds=10)


async def test_files_planted_where_the_logs_go_are_replaced_not_written_through(
    tmp_path: Path,
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    request = request_for(tmp_path)
    request.run_dir.mkdir(parents=True, exist_ok=True)
    request.transcript_path.symlink_to(victim)
    os.link(victim, request.stderr_path)
    command = python("import sys; print('out'); print('err', file=sys.stderr)")
    await CommandAdapter(command).run(request)
    assert victim.read_text() == "keep me"
    assert not request.transcript_path.is_symlink()
    assert request.transcript_path.read_text() == "out\n"
    assert request.stderr_path.read_text() == "err\n"


async def test_an_agent_that_points_its_stderr_log_at_dev_zero_changes_nothing(
    tmp_path: Path,
) -> None:
    request = request_for(tmp_path)
    log = shlex.quote(str(request.stderr_path))
    command = f"rm -f {log}; ln -s /dev/zero {log}; echo oops >&2; exit 3"
    with at_most(20):
        result = await CommandAdapter(command).run(request)
    assert result.failure_class == "agent-error"
    assert "stderr: oops" in result.evidence


# --- the agent's own files, read by the adapters --------------------------------------------


def result_request(tmp_path: Path) -> AgentRequest:
    request = request_for(tmp_path)
    request.result_path.parent.mkdir(parents=True, exist_ok=True)
    return request


async def test_a_result_file_symlinked_to_dev_zero_is_set_aside_unread(tmp_path: Path) -> None:
    request = result_request(tmp_path)
    command = python("import os; os.symlink('/dev/zero', os.environ['BATON_RESULT'])")
    with at_most(20):
        result = await CommandAdapter(command).run(request)
    # Not the agent's report: the exit code decides, and the evidence says why.
    assert (result.status, result.stop_reason) == ("success", "completed")
    assert any("result file was not read" in e and "symbolic link" in e for e in result.evidence)


async def test_a_result_file_that_is_a_fifo_is_set_aside_without_hanging(tmp_path: Path) -> None:
    request = result_request(tmp_path)
    command = python("import os, sys; os.mkfifo(os.environ['BATON_RESULT']); sys.exit(3)")
    with at_most(20):
        result = await CommandAdapter(command).run(request)
    assert (result.status, result.failure_class) == ("failed", "agent-error")
    assert result.result_text == "the agent command exited 3"
    assert any("FIFO" in e for e in result.evidence)


async def test_an_oversize_result_file_is_not_read(tmp_path: Path) -> None:
    request = result_request(tmp_path)
    padding = RESULT_LIMIT  # valid JSON, but larger than any result Baton reads
    command = python(
        "import json, os, sys\n"
        "report = {'status': 'success', 'stop_reason': 'completed', 'result_text': 'x' * "
        f"{padding}}}\n"
        "open(os.environ['BATON_RESULT'], 'w').write(json.dumps(report))\n"
        "sys.exit(1)"
    )
    result = await CommandAdapter(command).run(request)
    assert (result.status, result.failure_class) == ("failed", "agent-error")
    assert any(f"over {RESULT_LIMIT} bytes" in e for e in result.evidence)


async def test_a_valid_result_file_within_the_cap_is_still_authoritative(tmp_path: Path) -> None:
    request = result_request(tmp_path)
    report = '{"status": "failed", "stop_reason": "max_turns", "turns": 9}'
    command = python(f"import os; open(os.environ['BATON_RESULT'], 'w').write({report!r})")
    result = await CommandAdapter(command).run(request)
    assert (result.stop_reason, result.turns) == ("max_turns", 9)


async def test_a_transcript_swapped_for_dev_zero_is_not_read(tmp_path: Path) -> None:
    request = request_for(tmp_path)
    script = tmp_path / "fake-claude"
    success = '{"type": "result", "subtype": "success", "is_error": false, "result": "done"}'
    script.write_text(
        f"#!{sys.executable}\n"
        "import os, sys\n"
        f"print({success!r}, flush=True)\n"
        f"path = {str(request.transcript_path)!r}\n"
        "os.unlink(path)\n"
        "os.symlink('/dev/zero', path)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    with at_most(20):
        result = await claude.ClaudeAdapter(str(script)).run(request)
    assert result.status == "failed" and result.stop_reason == "no_result"
    assert any("the transcript was not read" in line for line in result.evidence)
