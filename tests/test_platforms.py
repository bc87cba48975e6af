"""zagent runs on Linux and macOS; on Windows outside WSL it says so in one line and exits
(issue 26). The platform is faked in a real interpreter: ``sys.platform`` is all the
entry point looks at, and nothing imported with it may need what Windows lacks."""

from __future__ import annotations

import subprocess

from conftest import PYTHON

# Faked once the entry point is imported: click itself reads sys.platform on import, and would
# load Windows' console modules.
_AS_WINDOWS = """
import sys
from zagent_cli.main import main
sys.platform = "win32"
try:
    main()
finally:
    print(sorted(name for name in sys.modules if name in ("fcntl", "termios") or name.startswith(("zagent_core",
                                                                                                  "zagent_store"))))
"""


def test_on_windows_zagent_says_in_one_line_where_it_runs_and_exits_1() -> None:
    for argv in ([], ["--version"], ["tools", "list"], ["run", "--model", "scripted:x.json", "hi"]):
        done = subprocess.run([PYTHON, "-c", _AS_WINDOWS, *argv], capture_output=True, text=True, timeout=60)
        assert done.returncode == 1, done.stderr
        assert done.stderr.splitlines() == [
            "zagent runs on Linux and macOS, not on Windows: it needs fcntl, os.killpg and /proc, which Windows "
            "lacks; run it inside WSL (https://learn.microsoft.com/windows/wsl/install)"]
        # Nothing that needs a POSIX host was imported on the way: on Windows the line is all there is.
        assert done.stdout == "[]\n"


def test_on_linux_the_same_entry_point_runs_the_command() -> None:
    done = subprocess.run([PYTHON, "-c", "from zagent_cli.main import main; main()", "--version"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("zagent, version "), done.stderr
