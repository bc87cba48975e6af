"""Notes from a running tool's notify file: each complete line one note, wake-ups delivered once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import python_tool

from zagent_core import Engine
from zagent_core.tools.notes import MAX_NOTE_BYTES, parse_line, read_notes

# The store's promises hold for the engine on each of them: run on SQLite and PostgreSQL.
pytestmark = pytest.mark.stores

NOTE = "import os\ndef note(line):\n    with open(os.environ['ZAGENT_NOTIFY_FILE'], 'a') as f:\n        f.write(line)\n"


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"indexing 40% done", ("indexing 40% done", False)),
        (b'{"text": "need your decision on X", "wake": true}', ("need your decision on X", True)),
        (b'{"text": "fyi", "wake": "yes"}', ("fyi", False)),  # only true wakes
        (b'{"msg": "not a note object"}', ('{"msg": "not a note object"}', False)),
        (b"{broken json", ("{broken json", False)),
        (b"   ", None),
        (b'{"text": ""}', None),
        (b"\xff\xfe bytes", ("\ufffd\ufffd bytes", False)),
    ],
)
def test_a_line_is_plain_text_or_a_json_note(line: bytes, expected) -> None:
    assert parse_line(line) == expected


def test_only_complete_lines_are_read_and_offsets_point_past_them(tmp_path: Path) -> None:
    notify = tmp_path / "notify"
    notify.write_bytes(b"one\n\ntwo\nthree, still being writ")
    notes = read_notes(notify, 0).notes
    assert [(n.text, n.offset) for n in notes] == [("one", 4), ("two", 9)]
    with notify.open("ab") as handle:
        handle.write(b"ten\n")
    assert [(n.text, n.offset) for n in read_notes(notify, 9).notes] == [("three, still being written", 36)]
    assert read_notes(notify, 36).notes == []
    assert read_notes(tmp_path / "missing", 0).notes == []


def test_an_overlong_line_is_cut_and_marked(tmp_path: Path) -> None:
    notify = tmp_path / "notify"
    notify.write_bytes(b"x" * (MAX_NOTE_BYTES * 3) + b"\nnext\n")
    notes = read_notes(notify, 0).notes
    assert notes[0].text.endswith(f"[note cut at {MAX_NOTE_BYTES} bytes]")
    assert notes[1].text == "next"


def test_notes_of_a_foreground_call_are_journaled_with_their_offsets(home_dir: Path, engine: Engine) -> None:
    code = NOTE + (
        "import time, json\n"
        "note('step 1\\n'); time.sleep(0.25)\n"
        "note(json.dumps({'text': 'pick a colour', 'wake': True}) + '\\n')\n"
        "note('partial line, never finished')\n"
        "print('done')\n"
    )
    python_tool(home_dir, "noisy", code)
    seen: list[str] = []
    with engine.start_session("test") as session:
        session.subscribe(lambda stored: seen.append(stored.event.type))
        result = session.call("noisy", {})
        delivery = session.deliver()
        again = session.deliver()
    assert result.output == "done"
    events = [e.event for e in engine.journal.read(session.session_id)]
    notes = [e for e in events if e.type == "note_received"]
    assert [(n.text, n.wake) for n in notes] == [("step 1", False), ("pick a colour", True)]
    assert notes[0].offset == len("step 1\n")
    assert notes[1].offset == len("step 1\n") + len(json.dumps({"text": "pick a colour", "wake": True})) + 1
    # the first note was journaled while the tool still ran, before its result
    assert seen.index("note_received") < seen.index("tool_call_finished")
    assert [w.text for w in delivery.wakes] == ["pick a colour"]
    assert delivery.lines() == ["[info: step 1]", "[info: pick a colour]"]
    assert again.notes == [] and again.wakes == []
    assert engine.session_state(session.session_id) == session.state


def test_a_flood_of_ten_thousand_notes_becomes_ten_thousand_events(home_dir: Path, engine: Engine) -> None:
    code = NOTE + "note(''.join(f'line {i}\\n' for i in range(10_000)))\nprint('flooded')\n"
    python_tool(home_dir, "flood", code)
    with engine.start_session("test") as session:
        result = session.call("flood", {})
    assert result.output == "flooded"
    texts = [e.event.text for e in engine.journal.read(session.session_id) if e.event.type == "note_received"]
    assert texts == [f"line {i}" for i in range(10_000)]
    assert session.state.notes_received == 10_000


def test_more_notes_than_one_read_are_all_journaled(home_dir: Path, engine: Engine) -> None:
    # ~360 KB of notes: more than one read of the notify file, all written before the tool exits.
    code = NOTE + "note(''.join(f'{i:04d} ' + 'x' * 595 + '\\n' for i in range(600)))\n"
    python_tool(home_dir, "wordy", code)
    with engine.start_session("test") as session:
        session.call("wordy", {})
    texts = [e.event.text for e in engine.journal.read(session.session_id) if e.event.type == "note_received"]
    assert [t[:4] for t in texts] == [f"{i:04d}" for i in range(600)]


def test_a_line_longer_than_a_read_is_one_cut_note(tmp_path: Path) -> None:
    notify = tmp_path / "notify"
    notify.write_bytes(b"y" * 600_000 + b"\nafter\n")
    first, after = read_notes(notify, 0).notes
    assert first.text == "y" * MAX_NOTE_BYTES + f" [note cut at {MAX_NOTE_BYTES} bytes]"
    assert (first.offset, after.text, after.offset) == (600_001, "after", 600_007)


def test_a_long_json_note_keeps_its_wake(tmp_path: Path) -> None:
    notify = tmp_path / "notify"
    notify.write_text(json.dumps({"text": "z" * (MAX_NOTE_BYTES * 2), "wake": True}) + "\n")
    (note,) = read_notes(notify, 0).notes
    assert note.wake and note.text.endswith(f"[note cut at {MAX_NOTE_BYTES} bytes]")
