"""A missing extra is said in one line with the command that installs it, and that command
works where zagent was installed from a clone (issue 26): ``pip install -e '.[mcp]'``, not
``pip install 'zagent[mcp]'``, which would fetch another zagent.

The extra is hidden for real: a ``sitecustomize`` on PYTHONPATH puts an import blocker on
``sys.meta_path`` of the zagent process, so ``import mcp`` (or ``anyio``) fails there as on
a machine without it. How zagent was installed is what a ``direct_url.json`` says, in a
``dist-info`` folder put first on the path, as pip writes them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BLOCKER = """\
import sys

class Hidden:
    \"\"\"No module of the hidden distributions can be imported, as if they were not installed.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {HIDDEN!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Hidden())
"""


def env_with(*paths: Path, **more: str) -> dict[str, str]:
    """This environment with ``paths`` first on PYTHONPATH."""
    first = os.pathsep.join(str(path) for path in paths)
    inherited = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": f"{first}{os.pathsep}{inherited}" if inherited else first, **more}


def hiding(tmp_path: Path, *modules: str) -> Path:
    """A folder whose sitecustomize hides ``modules`` from the interpreter it starts in."""
    folder = tmp_path / "hide"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(BLOCKER.format(HIDDEN=set(modules)))
    return folder


@pytest.mark.parametrize("hidden", [("mcp", "mcp_types", "anyio"), ("anyio",), ("mcp", "mcp_types")])
def test_mcp_serve_without_the_mcp_extra_says_how_to_install_it(tmp_path: Path, hidden: tuple[str, ...]) -> None:
    served = subprocess.run([sys.executable, "-m", "zagent_cli", "--home", str(tmp_path / "home"), "mcp", "serve"],
                            capture_output=True, text=True, stdin=subprocess.DEVNULL, cwd=tmp_path, timeout=60,
                            env=env_with(hiding(tmp_path, *hidden)))
    assert served.returncode == 1 and "Traceback" not in served.stderr, served.stderr
    (line,) = served.stderr.splitlines()
    assert line.startswith("Error: zagent mcp serve needs the MCP SDK, which the mcp extra installs (")
    assert line.endswith("[mcp]'") and " install " in line


def hint(tmp_path: Path, direct_url: dict[str, object] | None, *, cwd: Path, path: str | None = None) -> str:
    """What ``install_command("mcp")`` says in a zagent whose distribution records ``direct_url``."""
    site = tmp_path / "site"
    info = site / "zagent-0.1.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: zagent\nVersion: 0.1.0\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    said = subprocess.run([sys.executable, "-c", "from zagent_core.version import install_command\n"
                                                 "print(install_command('mcp'))"],
                          capture_output=True, text=True, cwd=cwd, timeout=60,
                          env=env_with(site, **({"PATH": path} if path is not None else {})))
    assert said.returncode == 0, said.stderr
    return said.stdout.strip()


def test_an_install_hint_names_the_clone_zagent_was_installed_from(tmp_path: Path) -> None:
    clone, elsewhere = tmp_path / "zagent clone", tmp_path / "work"
    clone.mkdir()
    elsewhere.mkdir()
    editable = {"url": clone.as_uri(), "dir_info": {"editable": True}}
    assert hint(tmp_path, editable, cwd=clone).endswith(" install -e '.[mcp]'")
    assert hint(tmp_path, editable, cwd=elsewhere).endswith(f" install -e '{clone}[mcp]'")
    wheel = {"url": "https://files.example/zagent-0.1.0-py3-none-any.whl", "archive_info": {}}
    assert hint(tmp_path, wheel, cwd=elsewhere).endswith(" install 'zagent[mcp]'")
    assert hint(tmp_path, None, cwd=elsewhere).endswith(" install 'zagent[mcp]'")  # from an index: no direct_url


def test_an_install_hint_uses_the_pip_of_the_python_zagent_runs_on(tmp_path: Path) -> None:
    own = Path(sys.executable).parent
    if not (own / "pip").exists():
        pytest.skip(f"no pip next to {sys.executable}")
    assert hint(tmp_path, None, cwd=tmp_path, path=f"{own}{os.pathsep}/usr/bin:/bin") == "pip install 'zagent[mcp]'"
    assert hint(tmp_path, None, cwd=tmp_path, path="/nonexistent") == f"{sys.executable} -m pip install 'zagent[mcp]'"
