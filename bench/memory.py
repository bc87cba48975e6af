"""Peak memory (``VmHWM``) of the three floods issue 23's hostile run measured, each in a fresh process.

- ``notes``: a foreground tool writes N notes (default 1,000,000) that the engine journals;
  then, in a second process, the session is resumed and an agent turn (a scripted model)
  delivers them. The peak of each process.
- ``grep``: the ``grep`` built-in's Python search (``ZAGENT_RG=none``) for a word at the end
  of a file of M MiB of 100-byte lines, through a session: the peak of the engine's process;
  and, where the search has a process of its own, that process's peak run alone.
- ``import``: ``zagent sessions import`` of an export of N events (default 1,000,000: user
  messages of 200 bytes, 270 MB). The peak of the CLI's process.

Run it once with the zagent to measure importable (``PYTHONPATH=/path/to/checkout``) and once
with the one to compare with; each line gives the peak and the peak less a bare engine's
(the same process having only imported zagent and opened a journal).

    python bench/memory.py [--notes N] [--grep-mib M] [--events N] [--only notes,grep,import]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path


def peak_kib() -> int:
    """This process's peak resident memory (``VmHWM``), in KiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def engine(home: Path, workspace: Path):  # -> (journal, Engine): zagent imported only here, in the measured process
    from zagent_core import Engine, Home
    from zagent_store import SQLiteJournal

    journal = SQLiteJournal(home / "journal.db")
    return journal, Engine(Home(home), journal, workspace=workspace)


# -- what runs in the measured processes -----------------------------------------------------


def notes_write(folder: Path, notes: int) -> dict[str, int]:
    home, workspace = folder / "home", folder / "ws"
    tool = home / "tools" / "flood"
    tool.mkdir(parents=True)
    workspace.mkdir()
    (tool / "flood.json").write_text(json.dumps({"description": "floods notes", "command": [sys.executable, "flood.py"]}))
    (tool / "flood.py").write_text("import os\nwith open(os.environ['ZAGENT_NOTIFY_FILE'], 'a') as f:\n"
                                   f"    f.write(''.join(f'note {{i}}\\n' for i in range({notes})))\n")
    journal, built = engine(home, workspace)
    base = peak_kib()
    session = built.start_session("bench")
    session.call("flood", {})
    (folder / "session").write_text(session.session_id)
    session.release()
    journal.close()
    return {"base": base, "peak": peak_kib()}


def notes_deliver(folder: Path) -> dict[str, int]:
    from zagent_core.agent.loop import Agent
    from zagent_core.agent.models import ModelReply
    from zagent_core.agent.models.scripted import ScriptedModel

    journal, built = engine(folder / "home", folder / "ws")
    base = peak_kib()
    session = built.resume((folder / "session").read_text())
    Agent(session, ScriptedModel([ModelReply(text="ok")])).run("go on")
    session.end()
    journal.close()
    return {"base": base, "peak": peak_kib()}


def grep_search(folder: Path) -> dict[str, int]:
    os.environ["ZAGENT_RG"] = "none"
    journal, built = engine(folder / "home", folder / "ws")
    base = peak_kib()
    with built.start_session("bench") as session:
        result = session.call("grep", {"pattern": "needle", "output_mode": "count"})
    assert result.output == "huge.log:1", result.output
    journal.close()
    return {"base": base, "peak": peak_kib()}


#: ``python -c PROBE -m MODULE ARGS...`` (or ``-c CODE``) runs it, then prints its peak (KiB) last on stderr.
PROBE = """import runpy, sys
how, what, *sys.argv[1:] = sys.argv[1:]
try:
    runpy.run_module(what, run_name="__main__") if how == "-m" else exec(what)
finally:
    print(open("/proc/self/status").read().split("VmHWM:")[1].split()[0], file=sys.stderr)
"""


def peak_of(done: subprocess.CompletedProcess[str]) -> int:
    if done.returncode != 0:
        sys.exit(f"{done.args} failed:\n{done.stderr[-3000:]}")
    return int(done.stderr.strip().splitlines()[-1])


def measured(scenario: str, folder: Path, *args: str) -> dict[str, int]:
    """Run ``scenario`` in a fresh interpreter; its figures."""
    done = subprocess.run([sys.executable, __file__, "--in", scenario, str(folder), *args], capture_output=True,
                          text=True)
    if done.returncode != 0:
        sys.exit(f"{scenario} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.splitlines()[-1])


# -- the scenarios ----------------------------------------------------------------------------


def mib(kib: int) -> str:
    return f"{kib / 1024:,.0f} MiB"


def show(what: str, figures: dict[str, int], per: int = 0, unit: str = "") -> None:
    extra = figures["peak"] - figures["base"]
    each = f", {extra * 1024 / per:,.0f} bytes per {unit}" if per else ""
    print(f"| {what} | {mib(figures['peak'])} | {mib(extra)} above a bare engine{each} |")


def bench_notes(notes: int) -> None:
    with tempfile.TemporaryDirectory() as temp:
        show(f"{notes:,} notes journaled", measured("notes_write", Path(temp), str(notes)), notes, "note")
        show(f"{notes:,} notes: resume and one turn", measured("notes_deliver", Path(temp)), notes, "note")


def bench_grep(size_mib: int) -> None:
    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        (folder / "home" / "tools").mkdir(parents=True)
        (folder / "ws").mkdir()
        with open(folder / "ws" / "huge.log", "wb") as handle:
            for _ in range(size_mib):
                handle.write((b"x" * 99 + b"\n") * 10_486)
            handle.write(b"the needle\n")
        show(f"grep (Python search), one file of {size_mib:,} MiB", measured("grep_search", folder))
        try:
            from zagent_core.builtins.grep_python import Query
        except ImportError:  # a zagent whose Python search runs in the engine
            return
        searched = os.open(folder / "ws", os.O_RDONLY | os.O_DIRECTORY)
        query = Query(pattern="needle", root=str(folder / "ws"), root_is_file=False, folder=searched, mode="count")
        done = subprocess.run([sys.executable, "-c", PROBE, "-m", "zagent_core.builtins.grep_python"],
                              input=query.to_json(), capture_output=True, text=True, pass_fds=(searched,))
        os.close(searched)
        alone = subprocess.run([sys.executable, "-c", PROBE, "-c", "import zagent_core.builtins.grep_python"],
                               capture_output=True, text=True)
        show("  its search process, run alone", {"peak": peak_of(done), "base": peak_of(alone)})


def bench_import(events: int) -> None:
    from zagent_core.history.exports import export_lines
    from zagent_core.journal.events import SessionStarted, UserMessage
    from zagent_core.journal.protocol import StoredEvent

    with tempfile.TemporaryDirectory() as temp:
        folder = Path(temp)
        now = datetime.now(timezone.utc)
        made = (SessionStarted(origin="bench", workspace="/w", zagent_version="0") if version == 1 else
                UserMessage(text=f"message {version} " + "." * 200) for version in range(1, events + 1))
        with open(folder / "long.jsonl", "w", encoding="utf-8") as handle:
            for line in export_lines(StoredEvent(0, "s1", version, now, event)
                                     for version, event in enumerate(made, start=1)):
                handle.write(line + "\n")
        size = (folder / "long.jsonl").stat().st_size
        cli = [sys.executable, "-c", PROBE, "-m", "zagent_cli", "--home"]
        done = subprocess.run([*cli, str(folder / "home"), "sessions", "import", str(folder / "long.jsonl")],
                              capture_output=True, text=True)
        bare = subprocess.run([*cli, str(folder / "empty"), "sessions", "list"], capture_output=True, text=True)
        show(f"sessions import, {events:,} events ({size / 1e6:,.0f} MB)", {"base": peak_of(bare),
                                                                            "peak": peak_of(done)}, events, "event")


def main() -> None:
    if sys.argv[1:2] == ["--in"]:  # one measured process
        scenario, folder, *rest = sys.argv[2:]
        print(json.dumps(globals()[scenario](Path(folder), *map(int, rest))))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--notes", type=int, default=1_000_000)
    parser.add_argument("--grep-mib", type=int, default=1024)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--only", default="notes,grep,import")
    args = parser.parse_args()
    print("| flood | peak (VmHWM) | |\n| --- | ---: | --- |")
    for name in args.only.split(","):
        {"notes": lambda: bench_notes(args.notes), "grep": lambda: bench_grep(args.grep_mib),
         "import": lambda: bench_import(args.events)}[name]()


if __name__ == "__main__":
    main()
