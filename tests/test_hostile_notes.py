"""Hostile notify files: bad Unicode, FIFOs and devices, blank-line walls, floods."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import python_tool

from zagent_core import Engine, Home
from zagent_core.config import Config, LimitsConfig
from zagent_core.tools.notes import BATCH_NOTES, STOPPED, read_notes

NOTIFY = "import os\nNOTIFY = os.environ['ZAGENT_NOTIFY_FILE']\n"


def finishes(action: Callable[[], Any], seconds: float = 60.0) -> Any:
    """``action()``'s value; fails (instead of hanging the suite) if it takes longer than ``seconds``."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = action()
        except BaseException as exc:  # noqa: BLE001 - handed to the test below
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s: it hangs"
    if "error" in box:
        raise box["error"]
    return box["value"]


def notes_of(engine: Engine, session_id: str) -> list[Any]:
    return [e.event for e in engine.journal.read(session_id) if e.event.type == "note_received"]


# -- invalid Unicode ----------------------------------------------------------------------

SURROGATE_NOTE = NOTIFY + (
    "with open(NOTIFY, 'a') as f:\n"
    "    f.write('{\"text\": \"half a pair \\\\ud800 here\", \"wake\": true}\\n')\n"
    "print('the real result')\n"
)


def test_a_lone_surrogate_in_a_note_keeps_the_result_and_resume_works(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "surrogate_note", SURROGATE_NOTE)
    session = engine.start_session("test")
    result = session.call("surrogate_note", {})
    assert (result.output, result.is_error) == ("the real result", False)
    (note,) = notes_of(engine, session.session_id)
    assert note.text == "half a pair \ufffd here" and note.wake
    resumed = engine.resume(session.session_id)
    assert resumed.state == engine.session_state(session.session_id)
    resumed.end()


def test_a_lone_surrogate_in_a_background_note_does_not_stop_the_watcher(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "surrogate_task", SURROGATE_NOTE, background=True)
    with engine.start_session("test") as session:
        session.call("surrogate_task", {})
        task = session.wait_task("1", 10)
        assert task.status == "exited" and task.output == "the real result"
        assert engine.status(session.session_id) != "waiting on tasks"
    assert [n.text for n in notes_of(engine, session.session_id)] == ["half a pair \ufffd here"]


# -- notify files that are not regular files ----------------------------------------------

FIFO = NOTIFY + "os.remove(NOTIFY)\nos.mkfifo(NOTIFY)\nprint('swapped')\n"
FIFO_LINK = NOTIFY + (
    "fifo = os.path.join(os.path.dirname(NOTIFY), 'elsewhere')\nos.mkfifo(fifo)\n"
    "os.remove(NOTIFY)\nos.symlink(fifo, NOTIFY)\nprint('swapped')\n"
)
DEVICE = NOTIFY + "os.remove(NOTIFY)\nos.symlink('/dev/zero', NOTIFY)\nprint('swapped')\n"


@pytest.mark.parametrize(("code", "kind"), [(FIFO, "a FIFO"), (FIFO_LINK, "a FIFO"), (DEVICE, "a character device")])
def test_a_notify_file_that_is_not_a_regular_file_is_refused_once(home_dir: Path, engine: Engine, code: str,
                                                                   kind: str) -> None:
    python_tool(home_dir, "swapper", code, timeout_seconds=5)
    session = engine.start_session("test")
    result = finishes(lambda: session.call("swapper", {}))
    assert result.output == "swapped" and not result.timed_out
    (note,) = notes_of(engine, session.session_id)
    assert f"is {kind}, not a regular file" in note.text and note.offset == STOPPED
    resumed = finishes(lambda: engine.resume(session.session_id))
    assert resumed.collect_notes(resumed.state.last_call_id or "") == 0
    assert len(notes_of(engine, session.session_id)) == 1
    resumed.end()


def test_a_background_task_whose_notify_file_becomes_a_fifo_still_ends(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "swapper", FIFO, background=True)
    with engine.start_session("test") as session:
        session.call("swapper", {})
        task = finishes(lambda: session.wait_task("1", 10))
    assert task.status == "exited" and task.output == "swapped"
    assert "is a FIFO" in notes_of(engine, session.session_id)[0].text


def test_a_fifo_is_refused_without_opening_it(tmp_path: Path) -> None:
    fifo = tmp_path / "notify"
    os.mkfifo(fifo)
    read = finishes(lambda: read_notes(fifo, 0), 10)
    assert read.notes == [] and read.stop is not None and "a FIFO" in read.stop


# -- blank lines --------------------------------------------------------------------------


def test_a_note_after_more_blank_lines_than_one_read_is_not_lost(home_dir: Path, engine: Engine) -> None:
    code = NOTIFY + "with open(NOTIFY, 'a') as f:\n    f.write('\\n' * 300_000 + '  \\n' * 50_000 + 'finally\\n')\n"
    python_tool(home_dir, "blank_wall", code)
    with engine.start_session("test") as session:
        session.call("blank_wall", {})
    (note,) = notes_of(engine, session.session_id)
    assert note.text == "finally" and note.offset == 300_000 + 150_000 + len("finally\n")


def test_blank_lines_written_while_the_tool_runs_are_skipped_once(tmp_path: Path) -> None:
    notify = tmp_path / "notify"
    notify.write_bytes(b"\n" * 5_000_000)
    assert read_notes(notify, 0).notes == []
    with notify.open("ab") as handle:
        handle.write(b"at last\n")
    (note,) = read_notes(notify, 0).notes
    assert (note.text, note.offset) == ("at last", 5_000_008)


# -- floods -------------------------------------------------------------------------------


def test_a_million_lines_are_read_in_bounded_batches_each_byte_once(tmp_path: Path) -> None:
    notify = tmp_path / "notify"
    notify.write_bytes(b"".join(b"%d\n" % i for i in range(1_000_000)))
    offset, seen, batches = 0, 0, 0
    while (batch := read_notes(notify, offset)).notes:
        assert len(batch.notes) <= BATCH_NOTES
        assert batch.notes[0].text == str(seen)
        seen += len(batch.notes)
        batches += 1
        offset = batch.notes[-1].offset
    assert seen == 1_000_000 and offset == notify.stat().st_size
    assert batches == -(-1_000_000 // BATCH_NOTES)


def test_a_tool_flooding_notes_is_still_stopped_at_its_timeout(home_dir: Path, journal, workspace: Path) -> None:
    # Lines of 1000 bytes, as fast as it can, then it waits: only the timeout ends it.
    code = NOTIFY + (
        "import time\nline = 'x' * 999 + '\\n'\n"
        "with open(NOTIFY, 'a') as f:\n"
        "    for _ in range(200_000):\n        f.write(line)\n"
        "print('flooded', flush=True)\ntime.sleep(600)\n"
    )
    python_tool(home_dir, "flooder", code, timeout_seconds=1)
    config = Config(limits=LimitsConfig(kill_grace_seconds=0.3, notify_max_bytes=1_000_000))
    engine = Engine(Home(home_dir), journal, workspace=workspace, config=config)
    with engine.start_session("test") as session:
        result = finishes(lambda: session.call("flooder", {}), 120)
    assert result.timed_out and result.is_error
    notes = notes_of(engine, session.session_id)
    assert len(notes) == 1001  # every line before the limit, then one saying where reading stopped
    assert notes[-1].offset == STOPPED and "passed 1000000 bytes" in notes[-1].text
