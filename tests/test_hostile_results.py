"""Hostile results: bad Unicode, JSON that Python reads but JSON has no value for, and lists
big enough to burst the output cap if zagent added them whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import python_tool
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from zagent_core import Engine, Home
from zagent_core.journal.views import status_of
from zagent_core.config import Config, LimitsConfig
from zagent_core.tools.results import MAX_RECORDED_FILES


def finished(engine: Engine, session_id: str) -> list[Any]:
    return [e.event for e in engine.journal.read(session_id) if e.event.type in ("tool_call_finished", "task_exited")]


def settle(engine: Engine, session_id: str) -> None:
    """Resume works and finds the session in the state it was left."""
    resumed = engine.resume(session_id)
    assert resumed.state == engine.session_state(session_id)
    resumed.end()


SURROGATE_OUTPUT = 'print(\'{"output": "half a pair \\\\ud800 here"}\')\n'
BAD_NAMES = (
    "import json, os\nout = os.environb[b'ZAGENT_OUTPUT_DIR']\n"
    "open(os.path.join(out, b'caf\\xe9.png'), 'wb').write(b'x')\n"
    "print(json.dumps({'output': 'made files', 'media': [{'path': 'caf\\udce9.png'}, {'path': 'x\\ud800.png'}]}))\n"
)


@pytest.mark.parametrize("background", [False, True])
def test_a_lone_surrogate_in_a_json_output_is_replaced(home_dir: Path, engine: Engine, background: bool) -> None:
    python_tool(home_dir, "surrogate_out", SURROGATE_OUTPUT, output="json", background=background)
    session = engine.start_session("test")
    result = session.call("surrogate_out", {})
    if background:
        result = session.wait_task("1", 10)
        assert result.status == "exited"
    assert result.output == "half a pair \ufffd here" and not result.is_error
    assert finished(engine, session.session_id)[-1].output == "half a pair \ufffd here"
    settle(engine, session.session_id)


@pytest.mark.parametrize("background", [False, True])
def test_file_names_that_are_not_utf8_are_listed_and_never_attached(home_dir: Path, engine: Engine,
                                                                     background: bool) -> None:
    python_tool(home_dir, "bad_names", BAD_NAMES, output="json", background=background, attach_outputs=True)
    session = engine.start_session("test")
    result = session.call("bad_names", {})
    if background:
        result = session.wait_task("1", 10)
        assert status_of(session.state) == "idle"  # not stuck waiting on a task whose watcher died
    assert result.output.startswith("made files\n")
    assert "caf\ufffd.png (image/png, 1 bytes, not attached: its name is not valid UTF-8)" in result.output
    assert "x\ufffd.png does not exist; not attached" in result.output
    assert result.media == []
    settle(engine, session.session_id)


@pytest.mark.parametrize(("stdout", "message"), [
    ('{"output": NaN}', "NaN is not a JSON number"),
    ('{"output": "ok", "score": -Infinity}', "-Infinity is not a JSON number"),
    ('{"output": 1e999}', "1e999 is too large for a JSON number"),
])
def test_json_that_json_has_no_value_for_is_refused(home_dir: Path, engine: Engine, stdout: str,
                                                    message: str) -> None:
    python_tool(home_dir, "nan", f"print({stdout!r})\n", output="json")
    with engine.start_session("test") as session:
        result = session.call("nan", {})
    assert result.is_error and message in result.output and "print finite numbers" in result.output


def test_json_nested_too_deeply_is_a_clear_error(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "deep", "print('[' * 100_000 + ']' * 100_000)\n", output="json")
    with engine.start_session("test") as session:
        result = session.call("deep", {})
    assert result.is_error and "nested too deeply to read; print a flatter object" in result.output
    assert len(result.output) < 400


def test_a_hundred_thousand_bad_media_entries_stay_within_the_cap(home_dir: Path, engine: Engine) -> None:
    code = ("import json\nprint(json.dumps({'output': 'done', "
            "'media': [{'path': f'missing_{i}.png'} for i in range(100_000)] + [7] * 100}))\n")
    python_tool(home_dir, "media_flood", code, output="json")
    with engine.start_session("test") as session:
        result = session.call("media_flood", {})
    cap = engine.config.limits.output_cap_bytes
    assert len(result.output.encode()) <= cap
    assert result.output.startswith("done\nmedia file ")
    assert "[100090 more media entries not checked or listed" in result.output


def test_ten_thousand_output_files_are_summarised_and_attached_within_limits(home_dir: Path, engine: Engine) -> None:
    code = ("import os\nout = os.environ['ZAGENT_OUTPUT_DIR']\n"
            "for i in range(10_000):\n    open(os.path.join(out, f'{i:05d}.png'), 'wb').write(b'p' * 10)\n"
            "print('drew them')\n")
    python_tool(home_dir, "painter", code, attach_outputs=True)
    with engine.start_session("test") as session:
        result = session.call("painter", {})
    limits = engine.config.limits
    assert len(result.output.encode()) <= limits.output_cap_bytes
    assert result.output.startswith("drew them\nFiles:\n- ")
    last = result.output.splitlines()[-1]
    assert last.startswith("- ... and ") and "more files" in last
    shown = result.output.count(".png (image/png")
    assert last.startswith(f"- ... and {10_000 - shown} more files ({(10_000 - shown) * 10} bytes in all) in ")
    assert len(result.media) == limits.max_attachments
    assert len(result.files) == MAX_RECORDED_FILES
    assert "not attached: a result attaches at most 10 files" in result.output


def test_attachments_stop_at_their_total_size(home_dir: Path, journal, workspace: Path) -> None:
    code = ("import os\nout = os.environ['ZAGENT_OUTPUT_DIR']\n"
            "for name in 'abc':\n    open(os.path.join(out, name + '.png'), 'wb').write(b'p' * 400_000)\n")
    python_tool(home_dir, "big_pictures", code, attach_outputs=True)
    config = Config(limits=LimitsConfig(attachments_max_bytes=1_000_000))
    engine = Engine(Home(home_dir), journal, workspace=workspace, config=config)
    with engine.start_session("test") as session:
        result = session.call("big_pictures", {})
    assert [Path(m.path).name for m in result.media] == ["a.png", "b.png"]
    assert "c.png (image/png, 400000 bytes, not attached: the attachments of a result total at most 1000000 bytes)" \
        in result.output


# -- any bytes --------------------------------------------------------------------------

ANY_BYTES = (
    "import json, os\nfrom pathlib import Path\n"
    "given = json.loads(Path(os.environ['ZAGENT_TOOL_DIR'], 'given.json').read_text())\n"
    "with open(os.environ['ZAGENT_NOTIFY_FILE'], 'ab') as f:\n    f.write(bytes.fromhex(given['notify']))\n"
    "for name in given['names']:\n"
    "    open(os.path.join(os.environb[b'ZAGENT_OUTPUT_DIR'], bytes.fromhex(name)), 'wb').write(b'1')\n"
    "os.write(1, bytes.fromhex(given['stdout']))\n"
)
names = st.binary(min_size=1, max_size=12).filter(lambda b: b"/" not in b and b"\0" not in b and b not in (b".", b".."))
json_text = st.text(st.one_of(st.characters(), st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF,
                                                                exclude_categories=[])), max_size=20)
stdouts = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda output, media: json.dumps({"output": output, "media": media}).encode(),
              st.one_of(json_text, st.lists(json_text, max_size=3)),
              st.lists(st.one_of(json_text, st.fixed_dictionaries({"path": json_text, "mime": json_text})), max_size=3)),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(notify=st.binary(max_size=300), stdout=stdouts, file_names=st.lists(names, max_size=3, unique=True),
       output=st.sampled_from(["text", "json"]), background=st.booleans())
def test_any_bytes_a_tool_writes_never_break_a_session(home_dir: Path, engine: Engine, notify: bytes, stdout: bytes,
                                                       file_names: list[bytes], output: str, background: bool) -> None:
    tool = python_tool(home_dir, "anything", ANY_BYTES, output=output, background=background, attach_outputs=True)
    (tool / "given.json").write_text(json.dumps({"notify": notify.hex(), "stdout": stdout.hex(),
                                                 "names": [n.hex() for n in file_names]}))
    session = engine.start_session("test")
    session.call("anything", {})
    if background:
        task = session.wait_task("1", 20)
        assert task.status == "exited", task
    (last,) = [e for e in finished(engine, session.session_id) if e.type == ("task_exited" if background else
                                                                                 "tool_call_finished")]
    last.output.encode()  # storable: the journal took it
    settle(engine, session.session_id)
    assert engine.status(session.session_id) == "ended"


@pytest.mark.parametrize("output", ["text", "json"])
def test_a_fifo_planted_where_the_full_output_goes_does_not_hang_the_call(home_dir: Path, engine: Engine,
                                                                          output: str) -> None:
    code = ("import json, os\ncall = os.path.dirname(os.environ['ZAGENT_OUTPUT_DIR'])\n"
            "for name in ('full_output.txt', 'stdout.txt'):\n    os.mkfifo(os.path.join(call, name))\n"
            "print(json.dumps({'output': 'y' * 100_000}) if os.environ.get('JSON') else 'x' * 100_000)\n")
    python_tool(home_dir, "planter", code, output=output, env={"JSON": "1"} if output == "json" else {})
    with engine.start_session("test") as session:
        result = session.call("planter", {})
    assert result.truncated_bytes > 0 and result.full_output_path is not None
    assert Path(result.full_output_path).stat().st_size >= 100_000
