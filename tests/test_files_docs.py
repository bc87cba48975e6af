"""The transcripts of the file built-ins' sections of docs/builtins.md are what zagent prints.

The ```sh blocks of those sections run, in order, as one script (as the tutorial does in
test_docs.py); each ```text block after one must be among the lines it printed, in order,
with times, session ids and temporary paths normalised.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from test_docs import _FENCE, DOCS, MARKER, _clean_env, _shown_lines_printed

SECTIONS = ("## The read-before-edit gate", "## list_files")


def file_steps() -> list[tuple[str, str | None]]:
    page = (DOCS / "builtins.md").read_text(encoding="utf-8")
    text = page[page.index(SECTIONS[0]):page.index(SECTIONS[1])]
    steps: list[tuple[str, str | None]] = []
    for match in _FENCE.finditer(text):
        language, body = match.group(1), match.group(2)
        if language == "sh":
            steps.append((body, None))
        elif language == "text" and steps and steps[-1][1] is None:
            steps[-1] = (steps[-1][0], body)
    return steps


def test_the_file_transcripts_are_what_zagent_prints(tmp_path: Path) -> None:
    steps = file_steps()
    assert len(steps) >= 5 and all(shown for _, shown in steps)
    script = "".join(f"{body}echo '{MARKER}'\n" for body, _ in steps)
    proc = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=_clean_env(tmp_path),
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout
    printed = proc.stdout.split(MARKER + "\n")
    assert len(printed) == len(steps) + 1
    for number, ((command, shown), output) in enumerate(zip(steps, printed), start=1):
        assert shown is not None
        missing = _shown_lines_printed(shown, output)
        assert not missing, (f"block {number} of the file sections of docs/builtins.md:\n{command}\nshows lines it "
                             "does not print:\n" + "\n".join(missing) + f"\n\nit printed:\n{output}")
