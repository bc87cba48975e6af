"""Tool calls end to end: Engine.start_session() -> session.call() -> ToolResult, and the journal.

Real processes, no mocks. Covers the manifest reference's input and output modes, the
environment a tool receives (and what it must not receive), placeholders, cwd, output
files and media, refusals, and the journal's ordering promises. Timeouts, process-tree
cleanup, the output cap and hostile tools are in ``test_runner.py``.
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from conftest import PYTHON, python_tool, sql, write_tool

from zagent_core import Engine, Home
from zagent_core.config import CapabilitiesConfig, Config, LimitsConfig, ToolsConfig
from zagent_core.journal.events import Coercion

# The store's promises hold for the engine on each of them: run on SQLite and PostgreSQL.
pytestmark = pytest.mark.stores

# -- helpers ----------------------------------------------------------------------------


def events_of(engine: Engine, session_id: str) -> list[Any]:
    return [stored.event for stored in engine.journal.read(session_id)]


def of_type(engine: Engine, session_id: str, type_: str) -> list[Any]:
    return [e for e in events_of(engine, session_id) if e.type == type_]


def calls_dir(home_dir: Path, session_id: str) -> Path:
    return Home(home_dir).session_dir(session_id) / "calls"


@pytest.fixture
def make_engine(home_dir: Path, journal, workspace: Path):
    """An engine with a custom config (kill grace kept short)."""

    def make(*, limits: dict[str, Any] | None = None, capabilities: dict[str, Any] | None = None,
             disabled: list[str] | None = None) -> Engine:
        config = Config(
            limits=LimitsConfig(**{"kill_grace_seconds": 0.3, **(limits or {})}),
            capabilities=CapabilitiesConfig(**(capabilities or {})),
            tools=ToolsConfig(disabled=disabled or []),
        )
        return Engine(Home(home_dir), journal, workspace=workspace, config=config)

    return make


def tiny_png() -> bytes:
    """A valid 1x1 PNG, no dependency."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    pixels = zlib.compress(b"\x00\xff\x00\x00")
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


PNG_WRITER = f"""
import os
with open(os.path.join(os.environ["ZAGENT_OUTPUT_DIR"], "chart.png"), "wb") as f:
    f.write({tiny_png()!r})
print("drew a chart")
"""

ECHO_ENV = """
import json, os, sys
print(json.dumps({"env": dict(os.environ), "argv": sys.argv, "cwd": os.getcwd(), "stdin": sys.stdin.read()}))
"""

TEXT_SCHEMA = {
    "type": "object",
    "properties": {"text": {"type": "string"}, "top": {"type": "integer", "minimum": 1}},
    "required": ["text"],
    "additionalProperties": False,
}


# -- input modes ------------------------------------------------------------------------


def test_stdin_json_delivers_the_arguments_on_stdin(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "echo_in", "import sys; print('got ' + sys.stdin.read())")
    args = {"text": "héllo \"world\"", "n": 3, "nested": {"a": [1, None, True]}}
    with engine.start_session("test") as session:
        result = session.call("echo_in", args)
    assert not result.is_error, result.output
    assert result.output.startswith("got ")
    assert json.loads(result.output[len("got "):]) == args


def test_args_json_is_the_last_argument_and_stdin_is_closed(home_dir: Path, engine: Engine) -> None:
    code = """
    import json, sys
    data = sys.stdin.read()  # must hit EOF at once, not wait for the timeout
    print(json.dumps({"argv": sys.argv[1:], "stdin": data}))
    """
    python_tool(home_dir, "by_arg", code, command=[PYTHON, "main.py", "--flag"], input="args_json",
                timeout_seconds=5)
    with engine.start_session("test") as session:
        result = session.call("by_arg", {"text": "a b", "top": 2})
    assert not result.is_error, result.output
    assert not result.timed_out and result.duration_ms < 4000
    seen = json.loads(result.output)
    assert seen["stdin"] == ""
    assert seen["argv"][0] == "--flag"
    assert json.loads(seen["argv"][-1]) == {"text": "a b", "top": 2}


def test_env_mode_sets_one_variable_per_argument_and_closes_stdin(home_dir: Path, engine: Engine) -> None:
    code = """
    import json, os, sys
    data = sys.stdin.read()
    print(json.dumps({k: v for k, v in os.environ.items() if k.startswith("ZAGENT_ARG")} | {"stdin": data}))
    """
    schema = {"type": "object", "properties": {
        "name": {"type": "string"}, "count": {"type": "integer"}, "ratio": {"type": "number"},
        "flag": {"type": "boolean"}, "tags": {"type": "array"}, "opts": {"type": "object"},
        "nothing": {"type": "null"},
    }}
    python_tool(home_dir, "by_env", code, input="env", parameters=schema, timeout_seconds=5)
    args = {"name": "Ada Lovelace", "count": 3, "ratio": 0.5, "flag": True, "tags": ["a", "b"],
            "opts": {"k": "v"}, "nothing": None}
    with engine.start_session("test") as session:
        result = session.call("by_env", args)
    assert not result.is_error, result.output
    assert not result.timed_out
    seen = json.loads(result.output)
    assert seen.pop("stdin") == ""
    assert seen["ZAGENT_ARG_NAME"] == "Ada Lovelace"  # a string as is, not JSON-quoted
    assert json.loads(seen["ZAGENT_ARG_COUNT"]) == 3
    assert json.loads(seen["ZAGENT_ARG_RATIO"]) == 0.5
    assert seen["ZAGENT_ARG_FLAG"] == "true"
    assert json.loads(seen["ZAGENT_ARG_TAGS"]) == ["a", "b"]
    assert json.loads(seen["ZAGENT_ARG_OPTS"]) == {"k": "v"}
    assert seen["ZAGENT_ARG_NOTHING"] == "null"
    assert json.loads(seen["ZAGENT_ARGS_JSON"]) == args


def test_env_mode_argument_with_a_nul_character_gets_a_clear_error(home_dir: Path, engine: Engine) -> None:
    """A NUL cannot be put in an environment variable; the model must be told which argument, in its terms."""
    python_tool(home_dir, "by_env", "print('ran')", input="env")
    with engine.start_session("test") as session:
        result = session.call("by_env", {"text": "a\x00b"})
        after = session.call("by_env", {"text": "fine"})
    assert result.is_error
    assert '"text"' in result.output, result.output
    assert "zagent failed" not in result.output, result.output  # not an internal failure
    assert not after.is_error  # the session goes on
    assert engine.session_state(session.session_id) == session.state


# -- output modes -----------------------------------------------------------------------


def test_text_output_is_stdout_and_stderr_in_order(home_dir: Path, engine: Engine) -> None:
    code = """
    import sys
    for stream, text in [(sys.stdout, "out1"), (sys.stderr, "err1"), (sys.stdout, "out2"), (sys.stderr, "err2")]:
        stream.write(text + "\\n"); stream.flush()
    """
    python_tool(home_dir, "talk", code)
    with engine.start_session("test") as session:
        result = session.call("talk", {})
    assert not result.is_error
    assert result.exit_code == 0
    assert result.output.splitlines()[:4] == ["out1", "err1", "out2", "err2"]


def test_text_nonzero_exit_is_an_error_with_the_exit_code(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "fails", "import sys\nprint('no such file: report.csv', flush=True)\nsys.exit(3)")
    with engine.start_session("test") as session:
        result = session.call("fails", {})
    assert result.is_error
    assert result.exit_code == 3
    assert "no such file: report.csv" in result.output
    assert "exit code 3" in result.output
    assert result.output.index("report.csv") < result.output.index("exit code 3")
    finished = of_type(engine, session.session_id, "tool_call_finished")[0]
    assert finished.exit_code == 3 and finished.is_error


def test_json_output_is_the_result(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "ok_json", "import json\nprint(json.dumps({'output': 'Hello, Ada!'}))", output="json")
    python_tool(home_dir, "err_json", "import json\nprint(json.dumps({'output': 'bad input', 'is_error': True}))",
                output="json")
    with engine.start_session("test") as session:
        ok = session.call("ok_json", {})
        err = session.call("err_json", {})
    assert not ok.is_error
    assert ok.output == "Hello, Ada!"
    assert err.is_error
    assert err.output.startswith("bad input")
    assert err.exit_code == 0


@pytest.mark.parametrize(
    ("printed", "expect"),
    [
        ("not json {", "invalid JSON"),
        ("[1, 2, 3]", "not an object"),
        ('"just a string"', "not an object"),
    ],
)
def test_json_output_that_is_not_an_object_is_an_error_quoting_it(home_dir: Path, engine: Engine,
                                                                  printed: str, expect: str) -> None:
    python_tool(home_dir, "bad_json", f"print({printed!r})", output="json")
    with engine.start_session("test") as session:
        result = session.call("bad_json", {})
    assert result.is_error
    assert printed in result.output
    assert expect in result.output


def test_json_tool_that_prints_nothing_is_an_error(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "mute", "pass", output="json")
    with engine.start_session("test") as session:
        result = session.call("mute", {})
    assert result.is_error
    assert "printed nothing" in result.output


@pytest.mark.parametrize("mode", ["json", "text"])
def test_crash_before_printing_gives_stderr_then_exit_code(home_dir: Path, engine: Engine, mode: str) -> None:
    python_tool(home_dir, "crash", "import sys\nsys.stderr.write('fatal: config missing\\n')\nsys.exit(7)",
                output=mode)
    with engine.start_session("test") as session:
        result = session.call("crash", {})
    assert result.is_error
    assert result.exit_code == 7
    assert "fatal: config missing" in result.output
    assert "exit code 7" in result.output
    assert result.output.index("fatal: config missing") < result.output.index("exit code 7")


def test_json_tool_traceback_reaches_the_model(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "raises", "raise RuntimeError('boom in tool')", output="json")
    with engine.start_session("test") as session:
        result = session.call("raises", {})
    assert result.is_error
    assert "RuntimeError: boom in tool" in result.output
    assert "exit code 1" in result.output


# -- environment ------------------------------------------------------------------------


def test_the_tool_receives_the_seed_environment(home_dir: Path, workspace: Path, engine: Engine,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MACHINE_VARIABLE", "inherited-value")
    monkeypatch.setenv("ZAGENT_WORKSPACE", "/bogus/engine/value")  # the engine's own is replaced
    tool_dir = python_tool(home_dir, "env_dump", ECHO_ENV, output="text")
    with engine.start_session("test") as session:
        first = json.loads(session.call("env_dump", {}).output)
        second = json.loads(session.call("env_dump", {}).output)
    env = first["env"]
    home = Home(home_dir)
    assert env["ZAGENT_WORKSPACE"] == str(workspace.resolve())
    assert env["ZAGENT_HOME"] == str(home.root)
    assert env["ZAGENT_SCRATCH"] == str(home.scratch_dir(session.session_id))
    assert Path(env["ZAGENT_SCRATCH"]).is_dir()
    assert env["ZAGENT_SESSION"] == session.session_id
    assert env["ZAGENT_TOOL_NAME"] == "env_dump"
    assert env["ZAGENT_TOOL_DIR"] == str(tool_dir.resolve())
    assert env["ZAGENT_CAPS"] == "vision=true,audio=false,pdf=true,video=false"
    assert env["MACHINE_VARIABLE"] == "inherited-value"
    assert env["PATH"] == os.environ["PATH"]
    # A private output folder per call, inside the home, and a notify file.
    out1, out2 = Path(env["ZAGENT_OUTPUT_DIR"]), Path(second["env"]["ZAGENT_OUTPUT_DIR"])
    assert out1 != out2
    assert out1.is_dir() and out2.is_dir()
    assert out1.is_relative_to(home.session_dir(session.session_id))
    assert Path(env["ZAGENT_NOTIFY_FILE"]).is_file()
    assert env["ZAGENT_NOTIFY_FILE"] != second["env"]["ZAGENT_NOTIFY_FILE"]
    assert second["env"]["ZAGENT_SCRATCH"] == env["ZAGENT_SCRATCH"]  # scratch is per session


def test_engine_zagent_variables_are_scrubbed(home_dir: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ZAGENT_API_KEY", "sk-engine-secret")
    monkeypatch.setenv("ZAGENT_OTHER_TOKEN", "tok-engine-secret")
    monkeypatch.setenv("ZAGENT_ARG_INJECTED", "from-engine")
    python_tool(home_dir, "env_dump", ECHO_ENV)
    with engine.start_session("test") as session:
        result = session.call("env_dump", {})
    env = json.loads(result.output)["env"]
    assert "ZAGENT_API_KEY" not in env
    assert "ZAGENT_OTHER_TOKEN" not in env
    assert "ZAGENT_ARG_INJECTED" not in env
    assert "sk-engine-secret" not in result.output and "tok-engine-secret" not in result.output
    started = of_type(engine, session.session_id, "tool_call_started")[0]
    assert "ZAGENT_API_KEY" not in started.env_names


def test_manifest_env_is_set_with_placeholders_expanded(home_dir: Path, workspace: Path, engine: Engine) -> None:
    env = {"TOOL_DATA": "{dir}/data", "TOOL_WS": "{workspace}", "TOOL_HOME": "{home}", "TOOL_SCRATCH": "{scratch}",
           "TOOL_OUT": "{output_dir}/x.txt", "TOOL_PLAIN": "literal {not_a_placeholder}"}
    tool_dir = python_tool(home_dir, "env_dump", ECHO_ENV, env=env)
    with engine.start_session("test") as session:
        seen = json.loads(session.call("env_dump", {}).output)["env"]
    assert seen["TOOL_DATA"] == f"{tool_dir.resolve()}/data"
    assert seen["TOOL_WS"] == str(workspace.resolve())
    assert seen["TOOL_HOME"] == str(home_dir.resolve())
    assert seen["TOOL_SCRATCH"] == seen["ZAGENT_SCRATCH"]
    assert seen["TOOL_OUT"] == seen["ZAGENT_OUTPUT_DIR"] + "/x.txt"
    assert seen["TOOL_PLAIN"] == "literal {not_a_placeholder}"


def test_no_environment_value_enters_the_journal(home_dir: Path, engine: Engine, monkeypatch: pytest.MonkeyPatch,
                                                journal_url: str, store: str) -> None:
    manifest_secret = "manifest-secret-7d1f0c"
    engine_secret = "sk-engine-secret-93ab2e"
    machine_secret = "machine-secret-5c4410"
    monkeypatch.setenv("ZAGENT_API_KEY", engine_secret)
    monkeypatch.setenv("SOME_MACHINE_TOKEN", machine_secret)
    code = f"""
    import os
    ok = os.environ.get("IMAGE_API_KEY") == {manifest_secret!r} + "-" + os.environ["ZAGENT_TOOL_DIR"]
    print("manifest key ok" if ok else "manifest key WRONG")
    print("machine var ok" if os.environ.get("SOME_MACHINE_TOKEN") == {machine_secret!r} else "machine var WRONG")
    print("engine key leaked" if "ZAGENT_API_KEY" in os.environ else "engine key scrubbed")
    """
    python_tool(home_dir, "keyed", code, env={"IMAGE_API_KEY": manifest_secret + "-{dir}"})
    python_tool(home_dir, "keyed_env", "print('ran')", input="env", env={"IMAGE_API_KEY": manifest_secret})
    with engine.start_session("test") as session:
        result = session.call("keyed", {})
        session.call("keyed_env", {"x": 1})
    assert result.output.splitlines()[:3] == ["manifest key ok", "machine var ok", "engine key scrubbed"]

    started = of_type(engine, session.session_id, "tool_call_started")
    assert "IMAGE_API_KEY" in started[0].env_names
    assert {"ZAGENT_WORKSPACE", "ZAGENT_OUTPUT_DIR", "ZAGENT_SESSION"} <= set(started[0].env_names)
    assert "ZAGENT_ARG_X" in started[1].env_names and "ZAGENT_ARGS_JSON" in started[1].env_names

    engine.journal.close()  # flush everything to the files before reading their bytes
    if store == "sqlite":
        raw = b"".join(p.read_bytes() for p in home_dir.glob("journal.db*"))
        for secret in (manifest_secret, engine_secret, machine_secret):
            assert secret.encode() not in raw
    rows = sql(journal_url, "SELECT CAST(data AS TEXT) AS data FROM events UNION ALL SELECT data FROM snapshots")
    assert rows
    for row in rows:
        for secret in (manifest_secret, engine_secret, machine_secret):
            assert secret not in row["data"]


# -- placeholders, paths, cwd -------------------------------------------------------------


def test_placeholders_in_command_are_expanded(home_dir: Path, workspace: Path, engine: Engine) -> None:
    command = [PYTHON, "main.py", "{dir}", "{workspace}", "{home}", "{scratch}", "{output_dir}",
               "--out={output_dir}/result.txt", "{unknown}"]
    tool_dir = python_tool(home_dir, "places", ECHO_ENV, command=command)
    with engine.start_session("test") as session:
        result = session.call("places", {})
    seen = json.loads(result.output)
    env = seen["env"]
    assert seen["argv"][1:] == [
        str(tool_dir.resolve()), str(workspace.resolve()), str(home_dir.resolve()), env["ZAGENT_SCRATCH"],
        env["ZAGENT_OUTPUT_DIR"], f"--out={env['ZAGENT_OUTPUT_DIR']}/result.txt", "{unknown}",
    ]
    started = of_type(engine, session.session_id, "tool_call_started")[0]
    assert started.argv[-3] == env["ZAGENT_OUTPUT_DIR"]


def test_relative_argument_naming_a_tool_file_is_resolved_in_the_tool_folder(home_dir: Path, workspace: Path,
                                                                             engine: Engine) -> None:
    code = """
    import os, sys
    print(open(sys.argv[1]).read().strip())
    print(sys.argv[2])
    print(os.getcwd())
    """
    tool_dir = python_tool(home_dir, "reader", code, command=[PYTHON, "main.py", "data.txt", "not_a_file.txt"])
    (tool_dir / "data.txt").write_text("data from the tool folder\n")
    (workspace / "data.txt").write_text("data from the workspace\n")
    with engine.start_session("test") as session:
        result = session.call("reader", {})
    assert not result.is_error, result.output
    lines = result.output.splitlines()
    assert lines[0] == "data from the tool folder"
    assert lines[1] == "not_a_file.txt"  # not a tool file: left as given
    assert Path(lines[2]) == workspace.resolve()  # the script was found although cwd is the workspace


@pytest.mark.parametrize("cwd", ["workspace", "tool_dir"])
def test_cwd(home_dir: Path, workspace: Path, engine: Engine, cwd: str) -> None:
    tool_dir = python_tool(home_dir, "where", "import os; print(os.getcwd())", cwd=cwd)
    with engine.start_session("test") as session:
        result = session.call("where", {})
    expected = workspace.resolve() if cwd == "workspace" else tool_dir.resolve()
    assert Path(result.output.strip()) == expected
    started = of_type(engine, session.session_id, "tool_call_started")[0]
    assert Path(started.cwd) == expected


# -- output files and media ------------------------------------------------------------


def test_every_file_in_the_output_dir_is_listed(home_dir: Path, engine: Engine) -> None:
    code = """
    import os
    out = os.environ["ZAGENT_OUTPUT_DIR"]
    open(os.path.join(out, "report.csv"), "w").write("a,b\\n1,2\\n")
    os.makedirs(os.path.join(out, "sub"))
    open(os.path.join(out, "sub", "data.bin"), "wb").write(b"\\0" * 100)
    print("wrote two files")
    """
    python_tool(home_dir, "writer", code)
    with engine.start_session("test") as session:
        result = session.call("writer", {})
        again = session.call("writer", {})
    assert not result.is_error and not again.is_error
    # each call has its own folder: the second lists its own two files, not four
    assert len(again.files) == 2
    assert not {f.path for f in again.files} & {f.path for f in result.files}
    by_name = {Path(f.path).name: f for f in result.files}
    assert set(by_name) == {"report.csv", "data.bin"}
    assert by_name["report.csv"].size == 8
    assert by_name["data.bin"].size == 100
    for f in result.files:
        assert Path(f.path).is_file()
        assert f.path in result.output  # the model is told where each file is
    assert result.media == []  # attach_outputs is off
    finished = of_type(engine, session.session_id, "tool_call_finished")[0]
    assert finished.files == result.files


def test_attach_outputs_attaches_an_image_when_the_model_has_vision(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "painter", PNG_WRITER, attach_outputs=True)
    with engine.start_session("test") as session:
        result = session.call("painter", {})
    assert not result.is_error
    assert len(result.media) == 1
    media = result.media[0]
    assert media.mime == "image/png"
    assert Path(media.path).name == "chart.png"
    assert Path(media.path).read_bytes() == tiny_png()
    assert [(Path(f.path).name, f.attached) for f in result.files] == [("chart.png", True)]
    assert of_type(engine, session.session_id, "tool_call_finished")[0].media == result.media


def test_attach_outputs_without_vision_explains_and_still_lists(home_dir: Path, make_engine) -> None:
    engine = make_engine(capabilities={"vision": False})
    python_tool(home_dir, "painter", PNG_WRITER + "\nimport os\nprint(os.environ['ZAGENT_CAPS'])", attach_outputs=True)
    with engine.start_session("test") as session:
        result = session.call("painter", {})
    assert "vision=false" in result.output
    assert result.media == []
    assert len(result.files) == 1 and not result.files[0].attached
    assert "vision" in (result.files[0].note or "")
    assert "not attached" in result.output and "chart.png" in result.output
    assert "drew a chart" in result.output  # the rest of the result still arrives


def test_what_a_call_attaches_follows_the_model_of_the_turn_unless_config_says(home_dir: Path, make_engine) -> None:
    python_tool(home_dir, "painter", PNG_WRITER + "\nimport os\nprint(os.environ['ZAGENT_CAPS'])", attach_outputs=True)
    with make_engine().start_session("test") as session:
        session.deliver(turn="user", model="openai:llama3.1")  # a text-only model behind an OpenAI endpoint
        text_only = session.call("painter", {})
        session.deliver(turn="user", model="anthropic:claude-sonnet-4-5")
        sees = session.call("painter", {})
    assert text_only.media == [] and "vision=false,audio=false,pdf=false" in text_only.output
    assert "the model cannot take vision" in text_only.output and "drew a chart" in text_only.output
    assert len(sees.media) == 1 and "vision=true,audio=false,pdf=true" in sees.output
    with make_engine(capabilities={"vision": True}).start_session("test") as session:  # config.json wins
        session.deliver(turn="user", model="openai:llama3.1")
        assert len(session.call("painter", {}).media) == 1


def test_attach_outputs_over_the_media_limit_explains_and_still_lists(home_dir: Path, make_engine) -> None:
    engine = make_engine(limits={"media_max_bytes": 10})
    python_tool(home_dir, "painter", PNG_WRITER, attach_outputs=True)
    with engine.start_session("test") as session:
        result = session.call("painter", {})
    assert result.media == []
    assert len(result.files) == 1 and not result.files[0].attached
    assert "limit" in (result.files[0].note or "")
    assert "not attached" in result.output and "chart.png" in result.output
    assert "drew a chart" in result.output


def test_json_media_entries_are_attached(home_dir: Path, workspace: Path, engine: Engine) -> None:
    (workspace / "photo.png").write_bytes(tiny_png())
    code = PNG_WRITER.replace('print("drew a chart")', "") + """
import json
chart = os.path.join(os.environ["ZAGENT_OUTPUT_DIR"], "chart.png")
print(json.dumps({"output": "here are two images", "media": [
    {"path": chart, "mime": "image/png"}, {"path": "photo.png"}]}))
"""
    python_tool(home_dir, "pics", code, output="json")  # no attach_outputs: naming them is enough
    with engine.start_session("test") as session:
        result = session.call("pics", {})
    assert not result.is_error, result.output
    assert result.output.startswith("here are two images")
    assert sorted(Path(m.path).name for m in result.media) == ["chart.png", "photo.png"]
    assert all(m.mime == "image/png" for m in result.media)
    # the chart is listed once, though it is both in the output folder and named
    assert sorted(Path(f.path).name for f in result.files) == ["chart.png", "photo.png"]


def test_json_media_entry_naming_a_missing_file_is_explained(home_dir: Path, engine: Engine) -> None:
    code = """
    import json
    print(json.dumps({"output": "rendered", "media": [{"path": "/nonexistent/zagent/plot.png"}]}))
    """
    python_tool(home_dir, "ghost", code, output="json")
    with engine.start_session("test") as session:
        result = session.call("ghost", {})
    assert "rendered" in result.output
    assert "/nonexistent/zagent/plot.png" in result.output
    assert "does not exist" in result.output
    assert result.media == []


# -- refusals ---------------------------------------------------------------------------

MARKER_TOOL = """
import os
open(os.path.join(os.environ["ZAGENT_WORKSPACE"], "ran.marker"), "w").write("ran")
open(os.path.join(os.environ["ZAGENT_OUTPUT_DIR"], "out.txt"), "w").write("x")
print("ran")
"""


def assert_refused(engine: Engine, home_dir: Path, workspace: Path, session_id: str, reason: str) -> Any:
    events = events_of(engine, session_id)
    types = [e.type for e in events]
    assert "tool_call_started" not in types and "tool_call_finished" not in types
    assert types.count("tool_call_requested") == types.count("tool_call_rejected") >= 1
    rejected = [e for e in events if e.type == "tool_call_rejected"]
    assert all(r.reason == reason for r in rejected)
    assert not (workspace / "ran.marker").exists()  # no process was started
    folder = calls_dir(home_dir, session_id)
    assert not folder.exists() or not any(folder.rglob("out.txt"))
    return rejected[-1]


def test_disabled_tool_is_refused_with_its_reason(home_dir: Path, workspace: Path, make_engine) -> None:
    engine = make_engine(disabled=["off_tool"])
    python_tool(home_dir, "off_tool", MARKER_TOOL)
    with engine.start_session("test") as session:
        assert "off_tool" not in [t.name for t in session.state.tools]  # not offered
        result = session.call("off_tool", {})
    assert result.is_error
    assert "disabled" in result.output and "config.json" in result.output
    assert_refused(engine, home_dir, workspace, session.session_id, "disabled")


def test_unknown_tool_names_the_closest_match(home_dir: Path, workspace: Path, engine: Engine) -> None:
    python_tool(home_dir, "word_count", MARKER_TOOL)
    python_tool(home_dir, "zebra", MARKER_TOOL)
    with engine.start_session("test") as session:
        result = session.call("word_cuont", {"text": "x"})
    assert result.is_error
    assert 'unknown tool "word_cuont"' in result.output
    assert '"word_count"' in result.output and "did you mean" in result.output
    assert_refused(engine, home_dir, workspace, session.session_id, "unknown_tool")


def test_invalid_arguments_list_every_problem(home_dir: Path, workspace: Path, engine: Engine) -> None:
    python_tool(home_dir, "counter", MARKER_TOOL, parameters=TEXT_SCHEMA)
    with engine.start_session("test") as session:
        first = session.call("counter", {"pth": "notes.txt", "top": 0})
        second = session.call("counter", {"text": 5, "top": "many"})
        third = session.call("counter", ["not", "an", "object"])
    expected_first = ['unknown argument "pth" (allowed: text, top)', 'missing argument "text"',
                      'argument "top": must be >= 1']
    for problem in expected_first:
        assert problem in first.output
    assert 'argument "text": expected string, got integer' in second.output
    assert 'argument "top": expected integer, got string' in second.output
    assert "object" in third.output
    assert first.is_error and second.is_error and third.is_error
    rejected = assert_refused(engine, home_dir, workspace, session.session_id, "invalid_arguments")
    assert rejected.message == third.output
    first_rejected = of_type(engine, session.session_id, "tool_call_rejected")[0]
    assert len(first_rejected.problems) == 3
    for problem in expected_first:
        assert any(problem in p for p in first_rejected.problems)
    # one problem per line
    assert all(any(line.startswith(p[:20]) for line in first.output.splitlines()) for p in expected_first)


def test_loose_types_are_coerced_and_recorded(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "counter", "import sys; print(sys.stdin.read())", parameters=TEXT_SCHEMA)
    with engine.start_session("test") as session:
        result = session.call("counter", {"text": "a b c", "top": "3"})
    assert not result.is_error, result.output
    assert json.loads(result.output) == {"text": "a b c", "top": 3}  # the tool got an integer
    requested = of_type(engine, session.session_id, "tool_call_requested")[0]
    started = of_type(engine, session.session_id, "tool_call_started")[0]
    assert requested.arguments == {"text": "a b c", "top": "3"}  # as asked
    assert started.arguments == {"text": "a b c", "top": 3}  # as run
    assert started.coercions == [Coercion(path="top", before="3", after=3)]


# -- the journal ----------------------------------------------------------------------------


def test_tool_call_started_is_committed_before_the_process_starts(home_dir: Path, engine: Engine,
                                                                 journal_url: str) -> None:
    code = """
    import json, os
    url, query = os.environ["PEEK_JOURNAL"], "SELECT type, call_id FROM events WHERE session_id = %s ORDER BY version"
    if url.startswith("sqlite:///"):
        import sqlite3
        db = sqlite3.connect("file:" + url.removeprefix("sqlite:///") + "?mode=ro", uri=True)
        rows = db.execute(query.replace("%s", "?"), (os.environ["ZAGENT_SESSION"],)).fetchall()
    else:
        import psycopg
        with psycopg.connect(url) as db:
            rows = db.execute(query, (os.environ["ZAGENT_SESSION"],)).fetchall()
    print(json.dumps(rows))
    """
    python_tool(home_dir, "peek", code, env={"PEEK_JOURNAL": journal_url})
    with engine.start_session("test") as session:
        first = session.call("peek", {})
        second = session.call("peek", {})
    assert not first.is_error, first.output
    rows = json.loads(second.output)
    types = [row[0] for row in rows]
    assert types == ["session_started", "tool_call_requested", "tool_call_started", "tool_call_finished",
                     "tool_call_requested", "tool_call_started"]
    started = of_type(engine, session.session_id, "tool_call_started")
    assert rows[-1][1] == started[1].call_id
    assert [row[0] for row in json.loads(first.output)][-1] == "tool_call_started"


def test_every_started_call_finishes_once_and_state_matches_the_journal(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "ok", "print('fine')")
    python_tool(home_dir, "bad_exit", "import sys; sys.exit(2)")
    python_tool(home_dir, "bad_json", "print('nope')", output="json")
    python_tool(home_dir, "slow", "import time; print('zz', flush=True); time.sleep(30)", timeout_seconds=0.5)
    python_tool(home_dir, "typed", "print('typed')", parameters=TEXT_SCHEMA)
    with engine.start_session("test") as session:
        results = [
            session.call("ok", {}),
            session.call("bad_exit", {}),
            session.call("typed", {"text": 1}),
            session.call("bad_json", {}),
            session.call("nope", {}),
            session.call("slow", {}),
            session.call("typed", {"text": "t", "top": "2"}),
            session.call("ok", {}, call_id="my-call-id"),
        ]
    assert [r.is_error for r in results] == [False, True, True, True, True, True, False, False]
    assert results[5].timed_out
    events = events_of(engine, session.session_id)
    started = [e.call_id for e in events if e.type == "tool_call_started"]
    finished = [e.call_id for e in events if e.type == "tool_call_finished"]
    rejected = [e.call_id for e in events if e.type == "tool_call_rejected"]
    requested = [e.call_id for e in events if e.type == "tool_call_requested"]
    assert len(started) == 6 and sorted(started) == sorted(finished)
    assert len(set(finished)) == len(finished)
    assert len(rejected) == 2 and not set(rejected) & set(started)
    assert sorted(requested) == sorted(started + rejected)
    assert "my-call-id" in finished
    # each call's events are in order: requested, started, finished
    for call_id in started:
        kinds = [e.type for e in events if getattr(e, "call_id", None) == call_id]
        assert kinds == ["tool_call_requested", "tool_call_started", "tool_call_finished"]
    assert session.state.status == "ended"
    assert engine.session_state(session.session_id) == session.state
    assert session.state.calls == {} and session.state.calls_requested == 8  # every call closed
    assert [e.output for e in events if e.type == "tool_call_finished"][-1] == results[-1].output


def test_no_timeout_is_recorded_as_none(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "forever", "print('quick anyway')", timeout_seconds=-1)
    python_tool(home_dir, "default", "print('quick')")
    python_tool(home_dir, "short", "print('quick')", timeout_seconds=7)
    with engine.start_session("test") as session:
        assert not session.call("forever", {}).is_error
        session.call("default", {})
        session.call("short", {})
    started = of_type(engine, session.session_id, "tool_call_started")
    assert started[0].timeout_seconds is None
    assert started[1].timeout_seconds == engine.config.limits.default_timeout_seconds
    assert started[2].timeout_seconds == 7


def test_a_json_is_error_that_is_not_a_boolean_is_reported(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "stringly", "import json\nprint(json.dumps({'output': 'done', 'is_error': 'false'}))",
                output="json")
    with engine.start_session("test") as session:
        result = session.call("stringly", {})
    assert result.is_error
    assert result.output.startswith("done")
    assert '"is_error" must be true or false, not "false"' in result.output


@pytest.mark.parametrize("call_id", ["../escape", "/tmp/abs", ".hidden", "a/b", "x" * 200])
def test_a_call_id_that_could_name_a_folder_outside_the_home_is_refused(engine: Engine, call_id: str) -> None:
    with engine.start_session("test") as session:
        with pytest.raises(ValueError, match="call id"):
            session.call("anything", {}, call_id=call_id)


def test_a_call_id_cannot_be_used_twice(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "ok", "print('ok')")
    with engine.start_session("test") as session:
        session.call("ok", {}, call_id="call_1")
        with pytest.raises(ValueError, match="already used"):
            session.call("ok", {}, call_id="call_1")


def test_a_failing_listener_does_not_break_the_call(home_dir: Path, engine: Engine) -> None:
    python_tool(home_dir, "ok", "print('ok')")
    with engine.start_session("test") as session:
        session.subscribe(lambda stored: 1 / 0)
        result = session.call("ok", {})
    assert result.output == "ok"
    assert session.state.status == "ended" and session.state.running_calls == []


def test_media_outside_the_output_folder_and_workspace_is_not_attached(home_dir: Path, tmp_path: Path,
                                                                      engine: Engine) -> None:
    secret = tmp_path / "elsewhere" / "secret.png"
    secret.parent.mkdir()
    secret.write_bytes(b"\x89PNG\r\n\x1a\n")
    code = f"import json\nprint(json.dumps({{'output': 'look', 'media': [{{'path': {str(secret)!r}}}]}}))"
    python_tool(home_dir, "leaky", code, output="json")
    with engine.start_session("test") as session:
        result = session.call("leaky", {})
    assert result.media == []
    assert "is outside the output folder and the working folder; not attached" in result.output


def test_a_tool_without_parameters_refuses_arguments(home_dir: Path, engine: Engine) -> None:
    write_tool(home_dir, "bare", {"description": "no parameters", "command": [PYTHON, "-c", "print('ran')"]})
    with engine.start_session("test") as session:
        result = session.call("bare", {"pth": 1})
    assert result.is_error and 'unknown argument "pth" (this tool takes no arguments)' in result.output


def test_arguments_too_deep_or_too_long_to_check_are_refused_not_raised(home_dir: Path, engine: Engine) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "deep": {}}}
    python_tool(home_dir, "t", "print('ran')", parameters=schema)
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    with engine.start_session("test") as session:
        assert session.call("t", {"n": "1" * 5000}).is_error
        assert "nested too deeply" in session.call("t", {"deep": deep}).output
        assert "NaN or Infinity" in session.call("t", {"n": float("nan")}).output
        assert session.call("t", {"n": 1}).output == "ran"
    assert engine.session_state(session.session_id) == session.state
