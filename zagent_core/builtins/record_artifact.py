"""The built-in ``record_artifact`` tool: note on the session what it produced that outlives it.

A pull request, a branch, a commit, a file or anything else (``custom``) is journaled as
``artifact_recorded`` with the call's result, so an audit lists what a session made
without reading its conversation. What each kind needs is checked, so a record points at
something: a pull request's ``url``, a branch's or commit's ``ref``, a file's ``path``
(which must exist; it is recorded absolute).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from zagent_core.journal.events import ArtifactRecorded
from zagent_core.tools.inprocess import Arguments, Builtin, BuiltinContext, PathRefused
from zagent_core.tools.results import ToolResult

KINDS = ("pull_request", "branch", "commit", "file", "custom")
#: What each kind must name, besides its title.
_NEEDS = {"pull_request": "url", "branch": "ref", "commit": "ref", "file": "path"}
_COMMIT = re.compile(r"^[0-9a-fA-F]{7,64}$")
MAX_TITLE = 200
MAX_DESCRIPTION = 4000

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "kind": {"type": "string", "enum": list(KINDS),
                 "description": "pull_request (needs url), branch (needs ref), commit (needs ref: its hash), "
                                "file (needs path), or custom."},
        "title": {"type": "string", "minLength": 1, "maxLength": MAX_TITLE, "description": "A short title."},
        "url": {"type": "string", "description": "Where it is on the web (http or https)."},
        "path": {"type": "string", "description": "The file, absolute or relative to the workspace."},
        "ref": {"type": "string", "description": "The branch name or the commit hash."},
        "description": {"type": "string", "maxLength": MAX_DESCRIPTION, "description": "What it is, in a few lines."},
    },
    "required": ["kind", "title"],
    "additionalProperties": False,
}


def _url_problem(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        parts.port  # read only to check it: a port that is not a number 0-65535 raises when read
    except ValueError as exc:
        return f'"url" is not a valid URL ({exc}): {url!r}; check its host and port'
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in url):
        return f'"url" must be a web address (http:// or https://, no spaces), not {url!r}'
    return None


def _ref_problem(kind: str, ref: str) -> str | None:
    if kind == "commit" and not _COMMIT.match(ref):
        return f'"ref" of a commit is its hash (7 to 64 hex digits), not {ref!r}'
    if not ref.strip() or any(c.isspace() or ord(c) < 32 for c in ref):
        return f'"ref" must be a branch or tag name without spaces, not {ref!r}'
    return None


def run(context: BuiltinContext, arguments: Arguments) -> ToolResult:
    """Check and stage one artifact; answers with a one-line confirmation."""
    kind: str = arguments["kind"]
    title = arguments["title"].strip()
    url, ref, path = arguments.get("url"), arguments.get("ref"), arguments.get("path")
    needed = _NEEDS.get(kind)
    problems: list[str] = []
    if not title:
        problems.append('"title" is empty: give the artifact a short title')
    if needed is not None and not arguments.get(needed):
        problems.append(f'a {kind.replace("_", " ")} needs "{needed}"')
    if url is not None:
        problems.append(_url_problem(url) or "")
    if ref is not None:
        problems.append(_ref_problem(kind, ref) or "")
    if path is not None:
        try:
            resolved = context.resolve(path)
        except PathRefused as refused:
            problems.append(str(refused))
        else:
            if kind == "file" and not resolved.exists():
                problems.append(f"no such file: {path} (looked for {resolved})")
            path = str(resolved)
    problems = [problem for problem in problems if problem]
    if problems:
        return ToolResult(output="nothing recorded: " + "; ".join(problems), is_error=True)
    artifact = ArtifactRecorded(call_id=context.call_id, kind=kind, title=title, url=url, path=path, ref=ref,  # type: ignore[arg-type]
                                description=arguments.get("description"))
    context.record_artifact(artifact)
    where = next((value for value in (url, path, ref) if value), None)
    return ToolResult(output=f'Recorded {kind.replace("_", " ")} "{title}"' + (f": {where}" if where else ""),
                      is_error=False)


TOOL = Builtin(
    name="record_artifact",
    description=("Record on the session something it produced that outlives it: a pull request, a branch, a "
                 "commit, a file, or anything else (custom), so that it is listed with the session."),
    parameters=PARAMETERS, run=run,
    concurrency_safe=True,  # it only stages an event
    # A record is committed with the call's result: a call a crash cut off recorded nothing.
    replay="safe",
)
