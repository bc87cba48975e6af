"""pytest plugin: recorded zagent sessions as regression tests (registered as ``pytest11``).

* Exports named ``*.zagent.jsonl`` (``zagent sessions export ID -o x.zagent.jsonl``) under
  your test paths become test items: each replays its session against the tools of the
  home named by the ``zagent_home`` ini option, and fails with the step-by-step diff. An
  item whose replay ran no tool again (every call served from the recording, its tools
  being ``replay: unsafe``) tested nothing: it is skipped, with the reason, never passed.
* The ``zagent_replay`` fixture does the same from a test:
  ``zagent_replay("tests/replays/x.zagent.jsonl", tools="rerun").assert_matches()``.

Ini options: ``zagent_home`` (relative to the rootdir; default ``$ZAGENT_HOME`` or
``~/.zagent``), ``zagent_workspace`` (the folder a rerun copies, relative to the rootdir;
default the recorded workspace), ``zagent_replay_tools`` (``rerun``, the default, or
``recorded``) and ``zagent_replay_allow_unsafe`` (rerun tools marked ``replay: unsafe`` too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from zagent_core.history.replay_report import ReplayReport
from zagent_core.home import Home


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("zagent_home", "agent home whose tools zagent replays use")
    parser.addini("zagent_workspace", "folder a zagent rerun copies as the workspace (default: the recorded one)")
    parser.addini("zagent_replay_tools", "recorded or rerun (default)", default="rerun")
    parser.addini("zagent_replay_allow_unsafe", "also rerun tools marked replay: unsafe", type="bool", default=False)


def _home(config: pytest.Config) -> Home:
    configured = config.getini("zagent_home")
    return Home(config.rootpath / configured) if configured else Home.locate()


def _workspace(config: pytest.Config) -> Path | None:
    configured = config.getini("zagent_workspace")
    return config.rootpath / configured if configured else None


def pytest_configure(config: pytest.Config) -> None:
    # Said once, before any test runs, rather than as a failure of every replay.
    workspace = _workspace(config)
    if workspace is not None and not workspace.is_dir():
        raise pytest.UsageError(f"zagent_workspace = {config.getini('zagent_workspace')}: {workspace} is not a "
                                "folder (the workspace zagent replays copy, relative to the rootdir)")


def replay_export(path: str | Path, home: Home, *, tools: str = "rerun", allow_unsafe: bool = False,
                  normalize: list[tuple[str, str]] | None = None, workspace: str | Path | None = None) -> ReplayReport:
    """Replay the session of an export file against ``home``'s tools (in a copy of
    ``workspace`` when given, else of the recorded workspace)."""
    from zagent_core.config import load_config
    from zagent_core.history.exports import import_session, parse_export
    from zagent_core.history.replay import ReplayOptions, replay
    from zagent_core.history.replay_workspace import replay_folder
    from zagent_store import SQLiteJournal

    config, _ = load_config(home.config_path)
    rules = [(r.pattern, r.replacement) for r in config.replay.normalize] + list(normalize or [])
    with replay_folder(home) as tmp:
        with open(path, encoding="utf-8") as handle:
            imported = parse_export(handle, source=str(path))
        with SQLiteJournal(Path(tmp) / "recorded.db") as recorded, SQLiteJournal(Path(tmp) / "replay.db") as into:
            session_id = import_session(recorded, imported, home=Home(tmp))
            # tools comes from an ini option, unchecked until ReplayOptions refuses what is no mode.
            options = ReplayOptions(tools=tools, allow_unsafe=allow_unsafe,  # type: ignore[arg-type]
                                    normalisers=rules, config=config,
                                    workspace=Path(workspace) if workspace is not None else None)
            return replay(recorded, session_id, home, into, options, workdir=Path(tmp) / "work")


class ReplayDiverged(AssertionError):
    def __init__(self, report: ReplayReport) -> None:
        super().__init__(report.text())
        self.report = report


def _skip_reason(report: ReplayReport) -> str:
    served = len(report.not_rerun)
    return (f"zagent replay ran nothing again: its {served} call(s) were served from the recording (their tools "
            "are replay: unsafe); set zagent_replay_allow_unsafe = true, mark the tools \"replay\": \"safe\", "
            "or set zagent_replay_tools = recorded to check only the host's decisions")


class ReplayItem(pytest.Item):
    def runtest(self) -> None:
        config = self.config
        report = replay_export(self.path, _home(config), tools=config.getini("zagent_replay_tools").strip().lower(),
                               allow_unsafe=config.getini("zagent_replay_allow_unsafe"),
                               workspace=_workspace(config))
        if report.diverged:
            raise ReplayDiverged(report)
        if report.nothing_rerun:
            # Neither a pass (nothing was tested) nor a failure (nothing differs): said, with what to change.
            pytest.skip(_skip_reason(report))

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, ReplayDiverged):
            return excinfo.value.report.text()
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, f"zagent replay of {self.path.name}"


class ReplayFile(pytest.File):
    def collect(self) -> Iterator[ReplayItem]:
        yield ReplayItem.from_parent(self, name="replay")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> ReplayFile | None:
    if file_path.name.endswith(".zagent.jsonl"):
        return ReplayFile.from_parent(parent, path=file_path)
    return None


@pytest.fixture
def zagent_replay(request: pytest.FixtureRequest) -> Callable[..., ReplayReport]:
    """``zagent_replay(path, tools="rerun", home=None, allow_unsafe=False, normalize=None, workspace=None)``
    -> report."""
    def run(path: str | Path, tools: str | None = None, home: str | Path | None = None,
            allow_unsafe: bool | None = None, normalize: list[tuple[str, str]] | None = None,
            workspace: str | Path | None = None) -> ReplayReport:
        config = request.config
        return replay_export(
            path, Home(home) if home else _home(config), tools=tools or config.getini("zagent_replay_tools"),
            allow_unsafe=config.getini("zagent_replay_allow_unsafe") if allow_unsafe is None else allow_unsafe,
            normalize=normalize, workspace=workspace if workspace is not None else _workspace(config))
    return run
