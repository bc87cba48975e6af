"""Ctrl-C in the middle of a note flood (issue 8, item 4): the run stops with exit 130, no
traceback, and the session is closed, whatever append the signal fell into."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import PYTHON, python_tool

from zagent_store import SQLiteJournal

FLOOD = ("import os\nwith open(os.environ['ZAGENT_NOTIFY_FILE'], 'a') as notes:\n"
         "    for n in range(10**7):\n        notes.write(f'note {n}\\n'); notes.flush()\n")


@pytest.mark.parametrize("notes_first", [50, 400, 2000])
def test_ctrl_c_during_a_note_flood_ends_the_session_cleanly(tmp_path: Path, notes_first: int) -> None:
    home = tmp_path / "home"
    python_tool(home, "flood", FLOOD, timeout_seconds=60)
    proc = subprocess.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home), "tools", "run", "flood"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while True:  # wait until the flood is being journaled
        assert time.monotonic() < deadline, "the flood was never journaled"
        if (home / "journal.db").exists():
            with SQLiteJournal(home / "journal.db") as journal:
                listed = journal.sessions()
            if listed and listed[0].events > notes_first:
                break
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "ConcurrencyError" not in err
    with SQLiteJournal(home / "journal.db") as journal:
        (summary,) = journal.sessions()
        kinds = [e.event.type for e in journal.read(summary.session_id)]
    assert summary.ended and kinds[-2:] == ["tool_call_interrupted", "session_ended"]
