"""Skills (issue 24): ``<home>/skills/NAME/SKILL.md``, offered through ``skills_use``,
``skills_read`` and ``skills_run_script``, activations journaled and folded, listed by
``zagent skills list`` and ``zagent doctor``.

Real ``zagent`` processes on a real SQLite journal, with scripted models; a real SIGKILL
of a run after an activation, then a resume.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import forked
import pytest
from conftest import PYTHON, wait_for
from crashcheck import check_invariants

from zagent_core import Engine, Home
from zagent_core.builtins import registry, skills
from zagent_core.config import Config
from zagent_core.journal.events import SkillActivated, ToolCallFinished, ToolCallInterrupted, ToolCallStarted
from zagent_core.journal.fold import rebuild
from zagent_core.journal.protocol import Journal
from zagent_core.tools import sandbox
from zagent_core.tools.skills import MAX_DESCRIPTION_CHARS, MAX_LISTING_CHARS, listing, load_skills, parse
from zagent_store import SQLiteJournal

SKILL = """---
name: pdf-tools
description: Count the pages of PDF files. Use when asked about PDFs.
allowed-tools: Read, Bash
---
# PDF tools

Run scripts/count.py with the file's name. reference.md says more.
"""


def make_skill(home: Path, name: str = "pdf-tools", text: str = SKILL) -> Path:
    folder = home / "skills" / name
    (folder / "scripts").mkdir(parents=True, exist_ok=True)
    (folder / "SKILL.md").write_text(text)
    (folder / "reference.md").write_text("Pages are counted from 1.\n")
    (folder / "scripts" / "count.py").write_text(
        "import os, sys\nprint('pages of', ' '.join(sys.argv[1:]), 3, 'in', os.getcwd())\n")
    return folder


def call(tool: str, **arguments: Any) -> dict[str, Any]:
    return {"name": tool, "arguments": arguments}


def reply(*calls: dict[str, Any], text: str = "") -> dict[str, Any]:
    return {"text": text, "tool_calls": list(calls)}


def zagent(home: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return forked.run([PYTHON, "-m", "zagent_cli", "--home", str(home), *args], capture_output=True, text=True,
                      cwd=cwd, timeout=120)


def run_script(home: Path, workspace: Path, *replies: dict[str, Any]) -> tuple[str, list[Any]]:
    """Run a session of ``replies`` (then a last "done"); its id and its events."""
    script = workspace.parent / "script.json"
    script.write_text(json.dumps([*replies, reply(text="done")]))
    result = zagent(home, "run", "--model", f"scripted:{script}", "go", cwd=workspace)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    session_id = result.stderr.rsplit("session ", 1)[1].split("]")[0]
    with SQLiteJournal(home / "journal.db") as journal:
        return session_id, list(journal.read(session_id))


def results(events: list[Any]) -> list[ToolCallFinished]:
    return [stored.event for stored in events if isinstance(stored.event, ToolCallFinished)]


def said_by(events: list[Any], key: str) -> dict[str, tuple[bool, str]]:
    """What each call was told, by its argument ``key`` (calls of one reply may end in any order)."""
    asked = {stored.event.call_id: stored.event.arguments[key] for stored in events
             if isinstance(stored.event, ToolCallStarted) and key in stored.event.arguments}
    return {asked[r.call_id]: (r.is_error, r.output) for r in results(events) if r.call_id in asked}


# -- the catalog -------------------------------------------------------------------------------


def test_a_skill_with_front_matter_loads_with_its_name_description_and_allowed_tools(home_dir: Path) -> None:
    folder = make_skill(home_dir)
    catalog = load_skills(Home(home_dir))
    assert catalog.problems == []
    (skill,) = catalog.skills.values()
    assert (skill.name, skill.folder, skill.allowed_tools) == ("pdf-tools", folder.resolve(), ("Read", "Bash"))
    assert skill.description == "Count the pages of PDF files. Use when asked about PDFs."


def test_broken_skills_are_left_out_each_with_what_to_change(home_dir: Path) -> None:
    make_skill(home_dir)
    make_skill(home_dir, "bad-yaml", "---\nname: bad-yaml\ndescription: [unclosed\n---\nbody\n")
    make_skill(home_dir, "no-description", "---\nname: no-description\n---\nbody\n")
    make_skill(home_dir, "other-folder", "---\nname: elsewhere\ndescription: d\n---\nbody\n")
    make_skill(home_dir, "no-front-matter", "# just text\n")
    (home_dir / "skills" / "empty").mkdir()
    catalog = load_skills(Home(home_dir))
    assert list(catalog.skills) == ["pdf-tools"]
    said = {problem.source: problem.message for problem in catalog.problems}
    assert said["skills/bad-yaml/SKILL.md"].startswith("not loaded: its front matter is not valid YAML (line 4)")
    assert said["skills/no-description/SKILL.md"] == 'not loaded: the front matter has no "description"; add ' \
                                                     "description: ..."
    assert said["skills/other-folder/SKILL.md"] == ('not loaded: its name "elsewhere" is not its folder\'s '
                                                    '("other-folder"): rename one so they match')
    assert said["skills/no-front-matter/SKILL.md"].startswith("not loaded: does not start with YAML front matter")
    assert said["skills/empty"] == "not loaded: it has no SKILL.md; add one"


def test_a_description_over_the_agent_skills_limit_is_refused() -> None:
    long = "x" * (MAX_DESCRIPTION_CHARS + 1)
    skill, _, problems = parse(f"---\nname: big\ndescription: {long}\n---\n", "big")
    assert skill is None
    assert problems == [f"its description is {MAX_DESCRIPTION_CHARS + 1} characters, over "
                        f"{MAX_DESCRIPTION_CHARS}: shorten it"]


def test_the_skill_tools_are_offered_only_when_the_home_has_skills(home_dir: Path, journal: Journal,
                                                                    workspace: Path) -> None:
    assert not {"skills_use", "skills_read", "skills_run_script"} & registry.enabled(Config())[0].keys()
    make_skill(home_dir)
    engine = Engine(Home(home_dir), journal, workspace=workspace, config=Config())
    offered = [offer.name for offer in engine.start_session().state.tools]
    assert offered[-3:] == ["skills_use", "skills_read", "skills_run_script"]


def test_skills_use_lists_every_skill_in_its_description_the_same_bytes_for_every_engine(
        home_dir: Path, journal: Journal, workspace: Path) -> None:
    make_skill(home_dir)
    make_skill(home_dir, "csv-tools", "---\nname: csv-tools\ndescription: Sum CSV columns.\n---\nSum them.\n")

    def described() -> str:
        engine = Engine(Home(home_dir), journal, workspace=workspace, config=Config())
        return engine.builtins["skills_use"].description

    first = described()
    assert first.endswith("Skills:\n- csv-tools: Sum CSV columns.\n"
                          "- pdf-tools: Count the pages of PDF files. Use when asked about PDFs.")
    assert described() == first


# -- the tools, through the CLI ----------------------------------------------------------------


def test_skills_use_answers_the_instructions_and_journals_the_activation_with_the_sha256(
        home_dir: Path, workspace: Path) -> None:
    folder = make_skill(home_dir)
    session_id, events = run_script(home_dir, workspace, reply(call("skills_use", name="pdf-tools")))
    (used,) = results(events)
    assert used.output.endswith("# PDF tools\n\nRun scripts/count.py with the file's name. reference.md says more.")
    assert not used.is_error
    (activated,) = [stored.event for stored in events if isinstance(stored.event, SkillActivated)]
    assert activated.name == "pdf-tools"
    assert activated.sha256 == hashlib.sha256((folder / "SKILL.md").read_bytes()).hexdigest()
    assert rebuild(events).active_skills == {"pdf-tools": activated.sha256}


def test_an_unknown_skill_is_refused_with_the_list_of_skills(home_dir: Path, workspace: Path) -> None:
    make_skill(home_dir)
    _, events = run_script(home_dir, workspace, reply(call("skills_use", name="pdf")))
    (refused,) = results(events)
    assert (refused.is_error, refused.output) == (True, 'there is no skill "pdf"; skills: pdf-tools')


def test_a_skill_must_be_active_before_its_files_are_read_or_its_scripts_run(home_dir: Path,
                                                                             workspace: Path) -> None:
    make_skill(home_dir)
    _, events = run_script(home_dir, workspace, reply(call("skills_read", name="pdf-tools", path="reference.md"),
                                                      call("skills_run_script", name="pdf-tools", script="count.py")))
    assert [(r.is_error, r.output) for r in results(events)] == [
        (True, 'skill "pdf-tools" is not active: call skills_use with it first')] * 2


def test_skills_read_reads_an_active_skill_s_file_and_nothing_outside_its_folder(home_dir: Path,
                                                                               workspace: Path) -> None:
    folder = make_skill(home_dir)
    (home_dir / "secret.txt").write_text("the home's own\n")
    (folder / "escape.md").symlink_to(home_dir / "secret.txt")
    (folder / "inner.md").symlink_to("reference.md")
    reads = [call("skills_read", name="pdf-tools", path=path)
             for path in ("reference.md", "inner.md", "../../secret.txt", "escape.md", "/etc/passwd", "missing.md")]
    _, events = run_script(home_dir, workspace, reply(call("skills_use", name="pdf-tools")), reply(*reads))
    assert said_by(events, "path") == {
        "reference.md": (False, "Pages are counted from 1.\n"),
        "inner.md": (False, "Pages are counted from 1.\n"),
        "../../secret.txt": (True, '../../secret.txt is not a path inside the folder of skill pdf-tools: give one '
                                   'relative to it, without ".."'),
        "escape.md": (True, "escape.md leads out of the folder of skill pdf-tools (a symbolic link): only the "
                            "skill's own files can be used"),
        "/etc/passwd": (True, '/etc/passwd is not a path inside the folder of skill pdf-tools: give one relative to '
                              'it, without ".."'),
        "missing.md": (True, "skill pdf-tools has no file missing.md"),
    }


def test_a_script_runs_in_the_workspace_with_its_arguments_journaled_as_a_call_with_a_process(
        home_dir: Path, workspace: Path) -> None:
    make_skill(home_dir)
    _, events = run_script(home_dir, workspace, reply(call("skills_use", name="pdf-tools")),
                           reply(call("skills_run_script", name="pdf-tools", script="count.py",
                                      args=["a.pdf", "b c.pdf"])))
    ran = results(events)[1]
    assert (ran.is_error, ran.exit_code) == (False, 0)
    assert ran.output == f"pages of a.pdf b c.pdf 3 in {workspace.resolve()}"
    (started,) = [stored.event for stored in events
                  if isinstance(stored.event, ToolCallStarted) and stored.event.tool == "skills_run_script"]
    assert started.arguments == {"name": "pdf-tools", "script": "count.py", "args": ["a.pdf", "b c.pdf"]}
    assert Path(started.output_dir or "").parent.is_dir()  # the call's own folder, with its full output


def test_a_script_outside_scripts_or_missing_or_failing_says_so(home_dir: Path, workspace: Path) -> None:
    folder = make_skill(home_dir)
    (folder / "scripts" / "fail.sh").write_text("echo failing >&2\nexit 3\n")
    (folder / "scripts" / "data.txt").write_text("not a program\n")
    runs = [call("skills_run_script", name="pdf-tools", script=script)
            for script in ("../reference.md", "nope.py", "fail.sh", "data.txt")]
    _, events = run_script(home_dir, workspace, reply(call("skills_use", name="pdf-tools")), reply(*runs))
    assert said_by(events, "script") == {
        "../reference.md": (True, '../reference.md is not a path inside scripts/ of skill pdf-tools: give one '
                                  'relative to it, without ".."'),
        "nope.py": (True, "skill pdf-tools has no script nope.py; its scripts: count.py, data.txt, fail.sh"),
        "fail.sh": (True, "failing\n[exit code 3]"),
        "data.txt": (True, "data.txt of skill pdf-tools is not executable and its name does not end in .py or .sh: "
                           "make it executable (chmod +x, with a #! line)"),
    }


@pytest.mark.skipif(sandbox.unavailable() is not None, reason="no sandbox here (bubblewrap)")
def test_a_script_runs_in_the_sandbox_seeing_its_skill_but_not_the_rest_of_the_home(home_dir: Path,
                                                                                  workspace: Path) -> None:
    folder = make_skill(home_dir)
    (home_dir / "config.json").write_text("{}")
    (folder / "scripts" / "look.py").write_text(
        "import sys\nfor path in sys.argv[1:]:\n    try:\n        print(open(path).read().strip())\n"
        "    except OSError as exc:\n        print(type(exc).__name__)\n")
    paths = [str(folder / "reference.md"), str(home_dir / "config.json")]
    _, events = run_script(home_dir, workspace, reply(call("skills_use", name="pdf-tools")),
                           reply(call("skills_run_script", name="pdf-tools", script="look.py", args=paths)))
    assert results(events)[1].output == "Pages are counted from 1.\nFileNotFoundError"


# -- a crash after an activation ---------------------------------------------------------------


def test_a_skill_activated_before_a_sigkill_is_still_active_after_resume(home_dir: Path, workspace: Path) -> None:
    folder = make_skill(home_dir)
    started = workspace.parent / "script-started"
    (folder / "scripts" / "hang.py").write_text(
        f"import time\nopen({str(started)!r}, 'w').close()\ntime.sleep(120)\n")
    script = workspace.parent / "script.json"
    script.write_text(json.dumps([
        reply(call("skills_use", name="pdf-tools")),
        reply(call("skills_run_script", name="pdf-tools", script="hang.py")),
        reply(call("skills_read", name="pdf-tools", path="reference.md")),
        reply(text="done"),
    ]))
    run = forked.Popen([PYTHON, "-m", "zagent_cli", "--home", str(home_dir), "run", "--model", f"scripted:{script}",
                        "go"], cwd=workspace, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert run.stderr is not None
    session_id = run.stderr.readline().split()[1].rstrip(",")
    wait_for(started.exists, "the skill's script to start", seconds=60)
    os.kill(run.pid, signal.SIGKILL)
    run.wait()

    resumed = zagent(home_dir, "resume", session_id, "--model", f"scripted:{script}", cwd=workspace)
    assert resumed.returncode == 0, resumed.stderr
    assert "Traceback" not in resumed.stderr
    with SQLiteJournal(home_dir / "journal.db") as journal:
        events = list(journal.read(session_id))
    check_invariants(events)
    assert [stored.event.name for stored in events if isinstance(stored.event, SkillActivated)] == ["pdf-tools"]
    (cut,) = [stored.event for stored in events if isinstance(stored.event, ToolCallInterrupted)]
    read = results(events)[-1]
    assert (read.is_error, read.output) == (False, "Pages are counted from 1.\n")
    assert cut.call_id != read.call_id
    assert rebuild(events).active_skills.keys() == {"pdf-tools"}


# -- the CLI: skills list, doctor, tools list --------------------------------------------------


def test_skills_list_shows_the_skills_and_the_problems_as_text_and_json(home_dir: Path, workspace: Path) -> None:
    make_skill(home_dir)
    make_skill(home_dir, "Bad_Name", "---\nname: Bad_Name\ndescription: d\n---\n")
    text = zagent(home_dir, "skills", "list", cwd=workspace)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines() == [
        "pdf-tools  Count the pages of PDF files. Use when asked about PDFs.  [skills/pdf-tools]",
        "",
        "problems:",
        '  error: skills/Bad_Name/SKILL.md: not loaded: its name "Bad_Name" is not lowercase letters, digits and '
        "hyphens of at most 64 characters: rename it",
    ]
    listed = json.loads(zagent(home_dir, "skills", "list", "--json", cwd=workspace).stdout)
    assert listed["skills"] == [{"name": "pdf-tools", "description": "Count the pages of PDF files. Use when asked "
                                 "about PDFs.", "folder": str((home_dir / "skills" / "pdf-tools").resolve()),
                                 "allowed_tools": ["Read", "Bash"]}]
    assert [p["source"] for p in listed["problems"]] == ["skills/Bad_Name/SKILL.md"]


def test_a_home_without_skills_says_so(home_dir: Path, workspace: Path) -> None:
    listed = zagent(home_dir, "skills", "list", cwd=workspace)
    assert listed.stdout == f"no skills loaded from {home_dir.resolve() / 'skills'}\n"


def test_doctor_counts_the_skills_and_reports_a_broken_one(home_dir: Path, workspace: Path) -> None:
    make_skill(home_dir)
    make_skill(home_dir, "half", "---\nname: half\n---\n")
    doctor = zagent(home_dir, "doctor", cwd=workspace)
    lines = doctor.stdout.splitlines()
    assert "skills: 1 loaded, 1 not loaded" in lines
    assert '  error: skills/half/SKILL.md: not loaded: the front matter has no "description"; add description: ...' \
        in lines
    assert doctor.returncode == 1
    as_json = json.loads(zagent(home_dir, "doctor", "--json", cwd=workspace).stdout)
    assert as_json["skills"] == {"loaded": ["pdf-tools"]}


def test_tools_list_offers_the_skill_tools_once_a_skill_is_added(home_dir: Path, workspace: Path) -> None:
    def builtins() -> list[str]:
        listed = json.loads(zagent(home_dir, "tools", "list", "--json", cwd=workspace).stdout)
        return [b["name"] for b in listed["builtins"]]

    assert "skills_use" not in builtins()
    make_skill(home_dir)  # the listing kept from before is not served: skills/ changed
    assert builtins()[-3:] == ["skills_use", "skills_read", "skills_run_script"]


def test_a_session_with_skills_replays_without_a_difference_served_or_rerun(home_dir: Path, workspace: Path) -> None:
    make_skill(home_dir)
    session_id, _ = run_script(home_dir, workspace, reply(call("skills_use", name="pdf-tools")),
                               reply(call("skills_read", name="pdf-tools", path="reference.md")))
    for tools in ("recorded", "rerun"):
        replayed = zagent(home_dir, "replay", session_id, "--tools", tools, cwd=workspace)
        assert replayed.returncode == 0, replayed.stdout + replayed.stderr
        assert f"replay of {session_id} (tools {tools}): matches, 2 of 2 steps" in replayed.stdout


def test_skills_past_the_listing_budget_are_left_out_and_reported(home_dir: Path) -> None:
    description = "d" * 1000
    for index in range(20):
        make_skill(home_dir, f"s{index:02}", f"---\nname: s{index:02}\ndescription: {description}\n---\n")
    catalog = load_skills(Home(home_dir))
    fits = MAX_LISTING_CHARS // len(f"- s00: {description}\n")
    assert list(catalog.skills) == [f"s{index:02}" for index in range(fits)]
    assert len(listing(catalog)) <= MAX_LISTING_CHARS
    assert [p.source for p in catalog.problems] == [f"skills/s{index:02}" for index in range(fits, 20)]


def test_a_session_is_warned_of_the_skills_that_did_not_load(home_dir: Path, journal: Journal,
                                                            workspace: Path) -> None:
    make_skill(home_dir)
    make_skill(home_dir, "half", "---\nname: half\n---\n")
    session = Engine(Home(home_dir), journal, workspace=workspace, config=Config()).start_session()
    assert 'skills/half/SKILL.md: not loaded: the front matter has no "description"; add description: ...' \
        in session.state.warnings


def test_a_skill_file_that_cannot_be_opened_is_an_error_result_not_a_crash(home_dir: Path, workspace: Path) -> None:
    import socket

    folder = make_skill(home_dir)
    with socket.socket(socket.AF_UNIX) as listening:
        listening.bind(str(folder / "live.sock"))
        _, events = run_script(home_dir, workspace, reply(call("skills_use", name="pdf-tools")),
                               reply(call("skills_read", name="pdf-tools", path="live.sock")))
    assert results(events)[1].output == "live.sock of skill pdf-tools could not be read: No such device or address"


def test_skills_use_and_skills_read_only_read_so_a_read_only_sub_agent_is_given_them_and_not_scripts() -> None:
    assert {tool.name: tool.read_only for tool in skills.TOOLS} == {
        "skills_use": True, "skills_read": True, "skills_run_script": False}
