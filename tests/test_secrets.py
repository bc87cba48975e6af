"""The model's key stays with the provider: no tool reads it, no journal or terminal shows it.

Everything here is real: a process started with the key in its environment, a child that
looks for it where a hostile tool would (its own environment, ``/proc/$PPID/environ``,
``/proc/$PPID/mem``), and ``zagent run`` against an OpenAI-compatible server on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from conftest import PYTHON, python_tool
from test_openai import FakeServer, completion, server  # noqa: F401 - the fixture

from zagent_core.tools import credentials
from zagent_store import SQLiteJournal

KEY = "sk-model-key-3141592653"
OTHER_KEY = "sk-zagent-key-2718281828"

#: Looks for the needles (from needles.txt beside it) everywhere a process can look on its
#: own: prints one verdict per place, never the values it found.
SPY = r"""
import json, os, sys
from pathlib import Path

needles = [n.encode() for n in (Path(sys.argv[0]).resolve().parent / "needles.txt").read_text().split()]

def verdict(data):
    return "found" if any(n in data for n in needles) else "absent"

def parent_memory(pid):
    try:
        maps = open(f"/proc/{pid}/maps").read().splitlines()
        mem = open(f"/proc/{pid}/mem", "rb")
    except OSError:
        return "unreadable"
    for line in maps:
        span, perms = line.split()[:2]
        if not perms.startswith("r"):
            continue
        low, high = (int(x, 16) for x in span.split("-"))
        try:
            mem.seek(low)
            if verdict(mem.read(high - low)) == "found":
                return "found"
        except (OSError, ValueError, OverflowError):
            continue
    return "absent"

def parent_environ(pid):
    try:
        return verdict(open(f"/proc/{pid}/environ", "rb").read())
    except OSError:
        return "unreadable"

print(json.dumps({
    "own_environ": verdict(b"\0".join(os.environb.values())),
    "own_initial_environ": verdict(open("/proc/self/environ", "rb").read()),
    "parent_environ": parent_environ(os.getppid()),
    "parent_memory": parent_memory(os.getppid()),
}))
"""

#: Runs argv[1:] without any capability, even as root: the tests are about what an
#: ordinary user's tool can read of an ordinary user's zagent (root may read anything, and
#: a process with capabilities its reader lacks is unreadable whatever it does).
UNPRIVILEGED = [PYTHON, "-c", r"""
import ctypes, errno, os, sys
libc = ctypes.CDLL(None, use_errno=True)
for cap in range(64):  # PR_CAPBSET_DROP: nothing comes back at execve
    if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() not in (errno.EINVAL, errno.EPERM):
        raise OSError(ctypes.get_errno(), "PR_CAPBSET_DROP")
class Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]
class Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]
if libc.capset(ctypes.byref(Header(0x20080522, 0)), (Data * 2)()) != 0:
    raise OSError(ctypes.get_errno(), "capset")
os.execv(sys.argv[1], sys.argv[1:])
"""]

SAFE = {"own_environ": "absent", "own_initial_environ": "absent"}


def _clean_environ(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ZAGENT_", "OPENAI_"))}
    env.update(extra)
    return env


def _assert_safe(verdicts: dict[str, str]) -> None:
    assert verdicts | SAFE == verdicts, verdicts
    assert verdicts["parent_environ"] in ("absent", "unreadable"), verdicts
    assert verdicts["parent_memory"] in ("absent", "unreadable"), verdicts


def test_once_the_provider_is_built_no_child_finds_the_key_in_its_parent(server: FakeServer, tmp_path: Path) -> None:
    spy = tmp_path / "spy.py"
    spy.write_text(SPY)
    server.reply(body=completion("hello"))
    (spy.parent / "needles.txt").write_text(f"{KEY} {OTHER_KEY}")
    # The program knows the keys only from its environment, so that a key the spy finds in
    # its memory is one the provider kept (not this program's own text).
    program = f"""
import subprocess, sys
from zagent_core.agent.models import Message
from zagent_core.agent.models.openai import OpenAIModel
model = OpenAIModel("m", base_url={server.url!r}, api_key_env="MY_MODEL_KEY")
model.reply([Message(role="user", content="hi")], [])
own = open("/proc/self/environ", "rb").read().split(b"\\0")
print([entry for entry in own if entry.startswith((b"MY_MODEL_KEY=", b"ZAGENT_API_KEY="))])
spied = subprocess.run([sys.executable, {str(spy)!r}], capture_output=True, text=True)
print(spied.stdout, spied.stderr)
"""
    done = subprocess.run([*UNPRIVILEGED, PYTHON, "-c", program], capture_output=True, text=True, timeout=60,
                          env=_clean_environ(MY_MODEL_KEY=KEY, ZAGENT_API_KEY=OTHER_KEY))
    assert done.returncode == 0, done.stderr
    own, spied = done.stdout.splitlines()[:2]
    # the variables are still there, their values blanked in place
    assert own == "[b'MY_MODEL_KEY=', b'ZAGENT_API_KEY=']"
    _assert_safe(json.loads(spied))
    # the provider still has the key, and sends it where it belongs
    assert server.headers[0]["Authorization"] == f"Bearer {KEY}"


def test_no_tool_environment_holds_zagents_variables_or_a_key_variable() -> None:
    # (A variable a provider took is withheld too: the zagent run tests below show it with
    # model.api_key_env; taking one here would make the test process non-dumpable.)
    environ = {"ZAGENT_API_KEY": "k", "ZAGENT_HOME": "/h", "OPENAI_API_KEY": "k", "PATH": "/bin"}
    assert credentials.tool_environment(environ) == {"PATH": "/bin"}


def _zagent(home: Path, *args: str, url: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*UNPRIVILEGED, PYTHON, "-m", "zagent_cli", "--home", str(home), *args],
                          capture_output=True, text=True, timeout=120, cwd=home.parent,
                          env=_clean_environ(OPENAI_BASE_URL=url, **env))


def _kept_anywhere(home: Path, secret: str) -> list[str]:
    """Files of the home (journal, call folders) that hold ``secret``, tools aside."""
    return [str(path) for path in home.rglob("*")
            if path.is_file() and "tools" not in path.relative_to(home).parts and secret.encode() in path.read_bytes()]


def test_tools_run_by_zagent_run_cannot_read_the_key_and_an_echoed_key_is_redacted(
        server: FakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    for name, background in (("spy", False), ("spy_bg", True)):
        folder = python_tool(home, name, SPY, background=background)
        (folder / "needles.txt").write_text(f"{KEY} {OTHER_KEY}")
    (home / "config.json").write_text(json.dumps({"model": {"api_key_env": "MY_MODEL_KEY"}}))
    server.reply(body=completion(None, [("c1", "spy", "{}"), ("c2", "spy_bg", "{}")], "tool_calls"))
    server.reply(body=completion(f"the key you sent is {KEY}"))
    server.reply(body=completion("the background spy is done"))
    done = _zagent(home, "run", "--model", "openai:m", "look around", url=server.url,
                   MY_MODEL_KEY=KEY, ZAGENT_API_KEY=OTHER_KEY)
    assert done.returncode == 0, done.stderr
    assert server.headers[0]["Authorization"] == f"Bearer {KEY}"
    with SQLiteJournal(home / "journal.db") as journal:
        (session,) = journal.sessions()
        events = [stored.event for stored in journal.read(session.session_id)]
    outputs = {getattr(e, "call_id", None): getattr(e, "output", "") for e in events
               if e.type in ("tool_call_finished", "task_exited")}
    _assert_safe(json.loads(outputs["c1"]))
    _assert_safe(json.loads(outputs["c2"]))
    said = [e.text for e in events if e.type == "model_replied" and e.text]
    assert "the key you sent is [redacted]" in said
    for secret in (KEY, OTHER_KEY):
        assert secret not in done.stdout + done.stderr
        assert _kept_anywhere(home, secret) == []


def test_an_error_that_echoes_the_key_is_redacted_on_the_terminal_and_in_the_journal(
        server: FakeServer, tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "tools").mkdir(parents=True)
    server.reply(401, {"error": {"message": f"Incorrect API key provided: {KEY}"}})
    done = _zagent(home, "run", "--model", "openai:m", "hello", url=server.url, ZAGENT_API_KEY=KEY)
    assert done.returncode == 1
    assert "Incorrect API key provided: [redacted]" in done.stdout + done.stderr
    assert KEY not in done.stdout + done.stderr
    assert _kept_anywhere(home, KEY) == []


def test_tools_run_withholds_the_model_key_from_its_tool_and_from_its_own_environment(tmp_path: Path) -> None:
    """No provider is built by `tools run`, and still the key reaches no tool (issue 8, item 7)."""
    home = tmp_path / "home"
    spy = home / "tools" / "spy"
    spy.mkdir(parents=True)
    (spy / "main.py").write_text(
        "import os\nparent = open(f'/proc/{os.getppid()}/environ', 'rb').read()\n"
        "print('LEAK' if b'sk-tools-run-secret' in parent or 'sk-tools-run-secret' in str(os.environ) else 'clean')\n")
    (spy / "spy.json").write_text(json.dumps({"description": "spy", "command": [PYTHON, "main.py"]}))
    env = {**os.environ, "ZAGENT_API_KEY": "sk-tools-run-secret", "MY_KEY": "sk-tools-run-secret"}
    (home / "config.json").write_text(json.dumps({"model": {"api_key_env": "MY_KEY"}}))
    result = subprocess.run([PYTHON, "-m", "zagent_cli", "--home", str(home), "tools", "run", "spy"],
                            capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "clean"
