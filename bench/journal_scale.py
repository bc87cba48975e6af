"""Journal at scale: reading queries on a journal of a million events, beside raw sqlite3.

Builds a realistic journal (default 1,000,000 events, about 10,000 sessions of about 100
events), then times what a user runs to read it, each beside the hand-written sqlite3
query that answers the same question, in the same run:

* ``SQLiteJournal.sessions()`` (all, and the default ``--limit``) and ``zagent --home H
  sessions list`` (default ``--limit``; ``--list-all`` adds ``--limit 0``) vs a raw
  ``GROUP BY session_id``;
* ``zagent audit --tool NAME`` (the most and the least called tool), ``--session ID``,
  ``--errors --limit 20``, ``--slowest 10`` (as a subprocess, and in-process through
  ``SQLiteJournal.audit``) vs raw queries over ``events`` (requested rows joined to
  their outcome row, through the indexes);
* ``zagent sessions show ID`` vs the raw ``SELECT ... WHERE session_id = ?``;
* for reference, the CLI's fixed cost (``zagent audit --since 2100-01-01``: start-up,
  imports, opening the journal, an empty query) and ``zagent --help``.

It prints EXPLAIN QUERY PLAN of the SQL zagent runs (captured with the connection's
trace callback, so it is whatever the code runs today) and of the raw queries, the
table, where ``sessions list`` spends its time, and last, the fixes suggested for the
slow queries, measured on the same temp journal after adding indexes (zagent itself is
not changed; ``--keep`` copies the journal before that part; ``--no-suggestions`` skips it).

How the journal is built: ``SQLiteJournal`` creates the file (so the table, indexes,
triggers and views are the real ones, migrations included), then plain ``sqlite3``
``executemany`` fills it in transactions of 50,000 rows (``synchronous=OFF`` while
building). The rows are shaped like real sessions: ``session_started`` with 20 tool
offers, turns (``user_message``, ``turn_started``, ``model_replied`` with 1-3 tool calls,
``tool_call_requested``/``started``/``finished``, foreground notes and
``notes_delivered``, a final reply, ``turn_ended``), background calls (``task_started``,
task notes, ``task_exited``, ``wake_requested``, then a ``wake`` turn), calls of the
built-in ``terminal``, refused and failed calls, sessions ended, left idle or cut off
mid-call. A few sessions run at the same time, so their events interleave. Every
``data`` body comes from a template made by zagent's own ``dump_event`` of a pydantic
model, with ids, numbers and lists filled in by string formatting; a sample of sessions
is then read back through ``SQLiteJournal.read`` and ``rebuild``, and every sampled body
must round-trip ``load_event`` / ``dump_event`` unchanged. Each session then gets its
``heads`` row (schema 3) from ``SQLiteJournal.rebuild_heads``, and each session that has not
ended the newest snapshot the engine would have left it (end of its last turn, or every
1,000 events), so ``sessions list`` reads what it would in a real home.
``bench/resume_scale.py`` imports :func:`build` (with ``extra`` long sessions) and the
snapshot helpers. ``ANALYZE`` is not run (zagent
never runs it, so the planner has no statistics, as in a real home) unless ``--analyze``.

Each query runs once as a warm-up (whose result is used to check that the zagent and
raw answers name the same calls or sessions), then ``-n`` times, the two sides
alternating and the order flipping every round; the table shows medians. The file is in
the OS page cache (it was just written): these are warm-cache figures.

    /root/.pyenv/versions/3.11.7/bin/python bench/journal_scale.py [--events N] [-n RUNS] [--keep PATH]
        [--tool NAME]... [--list-all] [--analyze] [--no-suggestions]

About 3 minutes for the default million events with ``--list-all`` (25-30 s of it
building the journal; ``sessions list --limit 0`` takes about 18 s a run), about 1.5
minutes without; ``--events 20000 -n 1`` is a 10-second smoke test.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from zagent_core.journal.events import (
    ModelReplied,
    NoteReceived,
    NotesDelivered,
    OutputFile,
    RepliedCall,
    SessionEnded,
    SessionStarted,
    TaskExited,
    TaskStarted,
    ToolCallFinished,
    ToolCallRejected,
    ToolCallRequested,
    ToolCallStarted,
    ToolOffer,
    TurnEnded,
    TurnStarted,
    UserMessage,
    WakeRequested,
    dump_event,
    load_event,
)
from zagent_store import SQLiteJournal

BIN = Path(sys.executable).parent
ZAGENT = BIN / "zagent"
INSERT = (
    "INSERT INTO events (session_id, version, type, at, call_id, task_id, data)"
    " VALUES (?, ?, ?, ?, ?, ?, ?)"
)
TXN_ROWS = 50_000
CONCURRENT = 3  # sessions running at once: their events interleave in the journal
START_MS = 1_790_000_000_000  # 2026-09-21, the journal's first event (ms since the epoch)
HOME_DIR = "/home/agent/.zagent"
WORKSPACE = "/home/agent/work/shop-api"
PYTHON = "/usr/bin/python3"
ENV_NAMES = ["ZAGENT_CAPS", "ZAGENT_HOME", "ZAGENT_NOTIFY_FILE", "ZAGENT_OUTPUT_DIR", "ZAGENT_SCRATCH",
             "ZAGENT_SESSION", "ZAGENT_TOOL_DIR", "ZAGENT_TOOL_NAME", "ZAGENT_WORKSPACE"]

# -- sentinels: placeholders put into the models, then turned into str.format fields ------

S_SESSION, S_CALL, S_TASK, S_WAKE = "SxSESSIONxS", "SxCALLxS", "SxTASKxS", "SxWAKExS"
I_PID, I_DURATION, I_OFFSET, I_TICKS = 987650001, 987650002, 987650003, 987650004
I_TOKENS_IN, I_TOKENS_OUT, I_NOTE = 987650005, 987650006, 987650007

_FIELDS = {S_SESSION: "s", S_CALL: "c", S_TASK: "t", S_WAKE: "w", str(I_PID): "pid", str(I_DURATION): "ms",
           str(I_OFFSET): "off", str(I_TICKS): "ticks", str(I_TOKENS_IN): "tin", str(I_TOKENS_OUT): "tout",
           f"[{I_NOTE}]": "[{notes}]", f'["{S_WAKE}"]': "[{wakes}]", '"tool_calls":[]': '"tool_calls":[{calls}]'}


def template(event: Any) -> str:
    """``dump_event(event)`` as a ``str.format`` template: each sentinel becomes a field."""
    text = dump_event(event).replace("{", "{{").replace("}", "}}")
    # Longest first, so that the list sentinels win over the bare ones inside them.
    for sentinel in sorted(_FIELDS, key=len, reverse=True):
        field = _FIELDS[sentinel]
        text = text.replace(sentinel.replace("{", "{{").replace("}", "}}"),
                            field if field.startswith(("[", '"')) else "{" + field + "}")
    return text


# -- the tools: ~20 names, weighted, with argument and output variants ----------------------

_WORDS = ("invoice", "customer", "order", "refund", "cart", "payment", "shipping", "token", "session", "retry",
          "cache", "timeout", "webhook", "schema", "migration", "coupon", "tax", "currency", "locale", "audit")
_FILES = ("src/shop/orders.py", "src/shop/payments.py", "src/shop/api/routes.py", "src/shop/models.py",
          "tests/test_orders.py", "tests/test_payments.py", "README.md", "pyproject.toml", "src/shop/tax.py",
          "src/shop/cart.py", "docs/api.md", "migrations/0042_refunds.sql", "src/shop/webhooks.py")
_DIRS = ("src", "src/shop", "src/shop/api", "tests", "docs", "migrations", ".")


def _args(tool: str, r: random.Random) -> dict[str, Any]:
    w, f, d = r.choice(_WORDS), r.choice(_FILES), r.choice(_DIRS)
    return {
        "read_file": lambda: {"path": f, "offset": r.choice([0, 0, 40, 120]), "limit": r.choice([200, 400])},
        "list_dir": lambda: {"path": d, "depth": r.randint(1, 3)},
        "grep": lambda: {"pattern": f"def .*{w}", "path": d, "ignore_case": r.random() < 0.3},
        "edit_file": lambda: {"path": f, "old": f"{w} = None", "new": f"{w} = load_{w}(config)"},
        "write_file": lambda: {"path": f"src/shop/{w}_utils.py",
                               "content": f'"""Helpers for {w}s."""\n\n\ndef parse_{w}(raw):\n    return raw.strip()\n'},
        "run_tests": lambda: {"path": r.choice([x for x in _FILES if x.startswith("tests")]), "k": w,
                              "maxfail": r.choice([1, 5])},
        "shell": lambda: {"command": r.choice([f"ls -la {d}", "git status --short", f"wc -l {f}",
                                               f"python -m compileall -q {d}"])},
        "git_diff": lambda: {"path": f, "staged": r.random() < 0.2},
        "git_log": lambda: {"n": r.choice([5, 10, 20]), "path": f},
        "python_eval": lambda: {"code": f"import json; print(len(json.load(open('fixtures/{w}.json'))))"},
        "web_fetch": lambda: {"url": f"https://docs.example.com/{w}/guide.html", "max_chars": 8000},
        "search_docs": lambda: {"query": f"how to handle {w} {r.choice(_WORDS)}", "top": 5},
        "sql_query": lambda: {"sql": f"SELECT id, status FROM {w}s WHERE created_at > date('now', '-7 days') LIMIT 50"},
        "format_code": lambda: {"path": f, "check": r.random() < 0.5},
        "word_count": lambda: {"text": " ".join(r.choice(_WORDS) for _ in range(12)), "top": 3},
        "http_get": lambda: {"url": f"http://localhost:8000/api/{w}s?limit=10", "headers": {"Accept": "application/json"}},
        "image_maker": lambda: {"color": r.choice(["red", "teal", "navy"]), "width": 64, "height": 64,
                                "gradient": r.random() < 0.5},
        "build_project": lambda: {"target": r.choice(["all", "wheel", "docs"]), "clean": r.random() < 0.3},
        "slow_report": lambda: {"topic": w, "seconds": r.choice([5, 10, 30])},
        "terminal": lambda: r.choice([{"action": "list"}, {"action": "read", "task_id": "1"},
                                      {"action": "wait", "task_id": "1", "timeout_seconds": 30}]),
    }[tool]()


# name, weight, kind ("fg", "bg" = background task, "terminal" = built-in, no process), output mode, error share.
# image_maker is rarely used: fewer than 100 calls in a million events (the case `audit --tool` finds hardest).
TOOLS = [
    ("read_file", 18, "fg", "text", 0.03), ("list_dir", 9, "fg", "text", 0.01), ("grep", 10, "fg", "text", 0.02),
    ("edit_file", 8, "fg", "json", 0.06), ("write_file", 5, "fg", "json", 0.02), ("run_tests", 8, "fg", "text", 0.30),
    ("shell", 7, "fg", "text", 0.12), ("git_diff", 5, "fg", "text", 0.01), ("git_log", 3, "fg", "text", 0.01),
    ("python_eval", 4, "fg", "text", 0.15), ("web_fetch", 4, "fg", "json", 0.08), ("search_docs", 4, "fg", "json", 0.02),
    ("sql_query", 3, "fg", "json", 0.10), ("format_code", 2, "fg", "text", 0.05), ("word_count", 2, "fg", "json", 0.0),
    ("http_get", 2, "fg", "json", 0.10), ("image_maker", 0.04, "fg", "json", 0.02), ("build_project", 2, "bg", "text", 0.15),
    ("slow_report", 1, "bg", "json", 0.05), ("terminal", 2, "terminal", "json", 0.05),
]
ARG_VARIANTS = 12


def _hash(name: str, salt: str) -> str:
    import hashlib

    return hashlib.sha256(f"{salt}:{name}".encode()).hexdigest()


class Templates:
    """Every ``data`` body the generator writes, as format templates from zagent's models."""

    def __init__(self, r: random.Random) -> None:
        self.tools = {}
        offers = []
        for name, weight, kind, output_mode, error_share in TOOLS:
            folder = "(built-in)" if kind == "terminal" else f"{HOME_DIR}/tools/{name}"
            offers.append(ToolOffer(name=name, description=f"{name.replace('_', ' ').capitalize()}: "
                                    f"a tool of the shop-api agent. Use it when the user asks to {name.split('_')[0]} "
                                    "something in the workspace; it reports what it did, and errors as text.",
                                    folder=folder, manifest_hash="" if kind == "terminal" else _hash(name, "m")))
            call_dir = f"{HOME_DIR}/sessions/{S_SESSION}/calls/{S_CALL}"
            variants = []
            for _ in range(ARG_VARIANTS):
                arguments = _args(name, r)
                variants.append({
                    "requested": template(ToolCallRequested(call_id=S_CALL, tool=name, arguments=arguments)),
                    "replied": template(RepliedCall(id=S_CALL, call_id=S_CALL, name=name, arguments=arguments)),
                    "started": template(ToolCallStarted(
                        call_id=S_CALL, task_id=S_TASK if kind == "bg" else None, tool=name, arguments=arguments,
                        argv=[PYTHON, f"{HOME_DIR}/tools/{name}/{name}.py"], cwd=WORKSPACE, input_mode="stdin_json",
                        output_mode=output_mode, output_dir=f"{call_dir}/output", notify_file=f"{call_dir}/notify",
                        env_names=ENV_NAMES, timeout_seconds=900.0 if kind == "bg" else 60.0,
                        manifest_hash=_hash(name, "m"), files_hash=_hash(name, "f"))),
                })
            ok_outputs = [f"{name}: done ({n} {r.choice(_WORDS)}s).\n" + "\n".join(
                f"{r.choice(_FILES)}:{r.randint(1, 400)}: {r.choice(_WORDS)} {r.choice(_WORDS)}" for _ in range(n))
                for n in (1, 3, 8, 20)]
            err_outputs = [f"{name} failed: {r.choice(_WORDS)} not found\nTraceback (most recent call last):\n"
                           f'  File "{r.choice(_FILES)}", line {r.randint(1, 400)}\nKeyError: \'{r.choice(_WORDS)}\'',
                           f"Error: exit status 1\nFAILED {r.choice(_FILES)}::test_{r.choice(_WORDS)} - AssertionError"]
            files = [OutputFile(path=f"{call_dir}/output/swatch.png", size=812, mime="image/png", attached=False,
                                note="media attachments are off (capabilities.media)")] if name == "image_maker" else []
            finished = lambda output, is_error, code, timed_out=False: template(ToolCallFinished(  # noqa: E731
                call_id=S_CALL, output=output, is_error=is_error, exit_code=code, pid=I_PID, duration_ms=I_DURATION,
                timed_out=timed_out, files=[] if is_error else files))
            if kind == "terminal":
                finished = lambda output, is_error, code, timed_out=False: template(ToolCallFinished(  # noqa: E731
                    call_id=S_CALL, output=output, is_error=is_error, exit_code=None, duration_ms=I_DURATION))
            self.tools[name] = {
                "weight": weight, "kind": kind, "error_share": error_share, "variants": variants,
                "ok": [finished(o, False, 0) for o in ok_outputs],
                "error": [finished(o, True, 1) for o in err_outputs],
                "timeout": finished(f"{name} timed out after 60 s and was stopped\n(partial output)", True, None, True),
                "rejected": template(ToolCallRejected(
                    call_id=S_CALL, reason="invalid_arguments",
                    message=f"{name} was not run: its arguments do not match its parameters.\n"
                            "$: 'path' is a required property", problems=["$: 'path' is a required property"])),
                "note": template(NoteReceived(call_id=S_CALL, task_id=S_TASK if kind == "bg" else None,
                                              text=f"{name}: {r.choice(_WORDS)} step done", offset=I_OFFSET)),
            }
            if kind == "bg":
                task_dir = call_dir
                self.tools[name].update(
                    task_started=template(TaskStarted(task_id=S_TASK, call_id=S_CALL, tool=name, pid=I_PID,
                                                      start_ticks=I_TICKS, boot_id="9bd72030-43ed-43dd-8ea3-0eb242d9f482",
                                                      task_dir=task_dir)),
                    bg_finished=template(ToolCallFinished(
                        call_id=S_CALL, output=f"started as task #{S_TASK}; its notes reach you as it runs and you are "
                        "woken with its result when it exits (terminal tool: list, read, wait, kill)",
                        is_error=False, exit_code=None, pid=None, duration_ms=0)),
                    exited_ok=template(TaskExited(
                        task_id=S_TASK, call_id=S_CALL, output=f"{name} finished: report written to {call_dir}/output/"
                        "report.md", is_error=False, exit_code=0, pid=I_PID, duration_ms=I_DURATION,
                        files=[OutputFile(path=f"{call_dir}/output/report.md", size=2048, mime="text/markdown")])),
                    exited_error=template(TaskExited(
                        task_id=S_TASK, call_id=S_CALL, output=f"{name} failed: exit status 2\nerror: missing target",
                        is_error=True, exit_code=2, pid=I_PID, duration_ms=I_DURATION)),
                    wake=template(WakeRequested(
                        wake_id=S_WAKE, reason="task_exited", call_id=S_CALL, task_id=S_TASK,
                        text=f"task #{S_TASK} ({name}) finished:\n{name} finished: report written to "
                             f"{call_dir}/output/report.md")),
                )
        self.names = [t[0] for t in TOOLS]
        self.weights = [t[1] for t in TOOLS]
        self.started = [template(SessionStarted(origin=origin, workspace=WORKSPACE, zagent_version="0.1.0",
                                                tools=offers, warnings=warnings))
                        for origin, warnings in (("run", []), ("run", []), ("tools run", []), ("api", []),
                                                 ("run", ["tools/legacy_grep: manifest.json: 'input' must be one of "
                                                          "stdin_json, args_json, env; not loaded"]))]
        self.user = [template(UserMessage(text=t)).format() for t in (
            "Add a refund endpoint to the orders API, with tests.",
            "Why does test_payments fail on CI? Fix it.",
            "Rename customer_id to account_id everywhere, then run the tests.",
            "Build the docs and tell me about broken links.",
            "Write a short report on the webhook retry policy.",
            "The cart total is off by one cent for EUR; find out why and fix it.",
        )]
        self.turn_started = {reason: template(TurnStarted(reason=reason, notes=[I_NOTE], wakes=[S_WAKE]))
                             for reason in ("user", "wake")}
        self.notes_delivered = template(NotesDelivered(notes=[I_NOTE], wakes=[]))
        self.replied_calls = [template(ModelReplied(
            model="gpt-4.1-mini", text=text, tool_calls=[], stop_reason="tool_calls", input_tokens=I_TOKENS_IN,
            output_tokens=I_TOKENS_OUT, duration_ms=I_DURATION))
            for text in ("", "", "Let me look at the code first.", "I'll run the tests to see what fails.")]
        self.replied_final = [template(ModelReplied(
            model="gpt-4.1-mini", text=text, tool_calls=[], stop_reason="stop", input_tokens=I_TOKENS_IN,
            output_tokens=I_TOKENS_OUT, duration_ms=I_DURATION)) for text in (
            "Done: the refund endpoint is in src/shop/api/routes.py, with 6 tests; all pass.",
            "The failure came from a rounding step in src/shop/tax.py (banker's rounding on EUR). I changed it to "
            "ROUND_HALF_UP and added a regression test. The full suite passes.",
            "I could not finish: the build needs network access, which this workspace does not have.",
        )]
        self.turn_ended = template(TurnEnded(reason="idle")).format()
        self.ended = template(SessionEnded(reason="completed")).format()


# -- one session, as rows ----------------------------------------------------------------------


class Clock:
    """Milliseconds since the epoch, formatted as the journal stores ``at``."""

    def __init__(self, r: random.Random) -> None:
        self.ms, self._second, self._text, self.r = START_MS, -1, "", r

    def tick(self) -> str:
        self.ms += int(self.r.expovariate(1 / 700))  # ~0.7 s between events: ~8 days per million
        second, ms = divmod(self.ms, 1000)
        if second != self._second:
            self._second, self._text = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        return f"{self._text}.{ms:03d}Z"


ENDINGS = ("ended", "cut_turn", "idle", "cut_call")


def session_events(sid: str, t: Templates, r: random.Random, target: int, ending: str | None = None) -> list[tuple]:
    """One session's events as ``(type, call_id, task_id, data)``, about ``target`` of them.

    Follows the engine's order (see ``Engine``, ``Session`` and ``Agent.turn``), so the
    session rebuilds without errors. The version of each event is its index + 1.
    ``ending`` (one of :data:`ENDINGS`) forces how it ends: ``session_ended``, cut off
    mid-turn, left idle after a turn (resumable), or killed mid-call; by default it is
    drawn (75%, 5%, 16%, 4%). The random draws are the same either way.
    """
    rows: list[tuple] = []
    add = rows.append
    fmt = {"s": sid}
    add(("session_started", None, None, r.choice(t.started).format(**fmt)))
    pending_notes: list[int] = []  # versions of notes not yet delivered
    pending_wakes: list[str] = []
    tasks = 0
    choices, weights, tools = t.names, t.weights, t.tools
    wake_turn = False
    cut = r.random() < 0.04  # the engine will be killed mid-call, once the session is long enough
    if ending is not None:
        cut = ending == "cut_call"
    while True:
        # -- a turn ----------------------------------------------------------------------
        if not wake_turn:
            add(("user_message", None, None, r.choice(t.user)))
        add(("turn_started", None, None, t.turn_started["wake" if wake_turn else "user"].format(
            notes=",".join(map(str, pending_notes)), wakes=",".join(f'"{w}"' for w in pending_wakes))))
        pending_notes, pending_wakes = [], []
        started_tasks = []
        for _step in range(r.choice((1, 2, 2, 3, 3, 4, 5, 6))):
            calls = [(f"call_{r.getrandbits(48):012x}", tools[name], r.randrange(ARG_VARIANTS), name)
                     for name in r.choices(choices, weights, k=r.choice((1, 1, 1, 1, 1, 2, 2, 3)))]
            add(("model_replied", None, None, r.choice(t.replied_calls).format(
                tin=r.randint(2_000, 60_000), tout=r.randint(20, 900), ms=r.randint(400, 9_000),
                calls=",".join(tool["variants"][v]["replied"].format(c=c) for c, tool, v, _ in calls))))
            for call_id, tool, v, name in calls:
                variant = tool["variants"][v]
                fmt = {"s": sid, "c": call_id}
                add(("tool_call_requested", call_id, None, variant["requested"].format(**fmt)))
                if r.random() < 0.02:
                    add(("tool_call_rejected", call_id, None, tool["rejected"].format(**fmt)))
                    continue
                kind = tool["kind"]
                if kind == "terminal":
                    add(("tool_call_finished", call_id, None, r.choice(tool["ok"]).format(**fmt, ms=r.randint(0, 40))))
                    continue
                if kind == "bg":
                    tasks += 1
                    task_id = str(tasks)
                    fmt["t"] = task_id
                    add(("tool_call_started", call_id, task_id, variant["started"].format(**fmt)))
                    add(("task_started", call_id, task_id, tool["task_started"].format(
                        pid=r.randint(2_000, 400_000), ticks=r.randint(10_000, 9_000_000), **fmt)))
                    add(("tool_call_finished", call_id, None, tool["bg_finished"].format(**fmt)))
                    started_tasks.append((call_id, task_id, tool))
                    continue
                add(("tool_call_started", call_id, None, variant["started"].format(**fmt)))
                if r.random() < 0.1:  # a slow tool posting progress notes
                    for n in range(1, r.randint(2, 4)):
                        add(("note_received", call_id, None, tool["note"].format(**fmt, off=n * 31)))
                        pending_notes.append(len(rows))
                if cut and len(rows) >= target:
                    return rows  # the engine was killed while the tool ran: the session is "interrupted"
                roll = r.random()
                if roll < 0.005:
                    data = tool["timeout"].format(**fmt, pid=r.randint(2_000, 400_000), ms=60_000 + r.randint(0, 900))
                elif roll < 0.005 + tool["error_share"]:
                    data = r.choice(tool["error"]).format(**fmt, pid=r.randint(2_000, 400_000),
                                                         ms=r.randint(30, 90_000))
                else:
                    data = r.choice(tool["ok"]).format(**fmt, pid=r.randint(2_000, 400_000),
                                                      ms=int(r.lognormvariate(6, 1.6)) + 5)
                add(("tool_call_finished", call_id, None, data))
            if pending_notes:
                add(("notes_delivered", None, None, t.notes_delivered.format(notes=",".join(map(str, pending_notes)))))
                pending_notes = []
        add(("model_replied", None, None, r.choice(t.replied_final).format(
            tin=r.randint(2_000, 60_000), tout=r.randint(20, 900), ms=r.randint(400, 9_000), calls="")))
        add(("turn_ended", None, None, t.turn_ended))
        # -- background tasks end while the agent is idle, and wake it ---------------------
        for call_id, task_id, tool in started_tasks:
            fmt = {"s": sid, "c": call_id, "t": task_id}
            for n in range(1, r.randint(1, 4)):
                add(("note_received", call_id, task_id, tool["note"].format(off=n * 40, **fmt)))
                pending_notes.append(len(rows))
            exited = tool["exited_error"] if r.random() < tool["error_share"] else tool["exited_ok"]
            add(("task_exited", call_id, task_id, exited.format(
                pid=r.randint(2_000, 400_000), ms=r.randint(5_000, 900_000), **fmt)))
            wake_id = f"wake_{r.getrandbits(48):012x}"
            add(("wake_requested", call_id, task_id, tool["wake"].format(w=wake_id, **fmt)))
            pending_wakes.append(wake_id)
        wake_turn = bool(pending_wakes)
        if not wake_turn and len(rows) >= target:
            break
    roll = r.random()
    if ending is not None:
        roll = {"ended": 0.0, "cut_turn": 0.77, "idle": 0.9, "cut_call": 0.9}[ending]
    if roll < 0.75:
        add(("session_ended", None, None, t.ended))
    elif roll < 0.80:  # cut off mid-turn: a turn began and never ended
        add(("user_message", None, None, r.choice(t.user)))
        add(("turn_started", None, None, t.turn_started["user"].format(notes="", wakes="")))
    # else: left idle, resumable
    return rows


def build(path: Path, n_events: int, seed: int, *, extra: Sequence[tuple[int, str]] = ()) -> dict[str, Any]:
    """Create the journal with SQLiteJournal, then fill it with plain sqlite3.

    ``extra`` sessions, as ``(events, ending)``, are written first among the sessions
    running at the same time (so their events interleave with the others', as a long
    session's do); their ids are ``built["extra_ids"]``. They count in ``n_events``.
    Every session gets its ``heads`` row, as ``SQLiteJournal.append`` keeps it
    (``rebuild_heads``); no snapshot is written (see :func:`snapshot_sessions`).
    """
    SQLiteJournal(path).close()
    r = random.Random(seed)
    templates = Templates(r)
    clock = Clock(r)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-262144")  # 256 MiB while building
    types: Counter[str] = Counter()
    sessions: list[str] = []
    seen_ids: set[str] = set()
    made = 0  # events generated so far (queued in active sessions or written)

    def new_session(target: int | None = None, ending: str | None = None) -> list:
        nonlocal made
        while True:
            sid = time.strftime("%Y%m%d-%H%M%S", time.gmtime(clock.ms // 1000)) + f"-{r.getrandbits(24):06x}"
            if sid not in seen_ids:
                break
        seen_ids.add(sid)
        sessions.append(sid)
        events = session_events(sid, templates, r, target=target or int(r.lognormvariate(4.35, 0.55)),
                                ending=ending)
        made += len(events)
        return [sid, 0, events]

    def rows():
        active = [new_session(target, ending) for target, ending in extra]
        while len(active) < CONCURRENT and made < n_events:
            active.append(new_session())
        while active:
            i = r.randrange(len(active))
            session = active[i]
            sid, done, events = session
            # An append: one event, or a few in one go (requested + started, a batch of notes).
            for _ in range(r.choice((1, 1, 1, 2, 3))):
                if done == len(events):
                    break
                type_, call_id, task_id, data = events[done]
                done += 1
                types[type_] += 1
                yield sid, done, type_, clock.tick(), call_id, task_id, data
            session[1] = done
            if done == len(events):
                if made < n_events:
                    active[i] = new_session()
                else:
                    active.pop(i)

    start = time.perf_counter()
    source = rows()
    written = 0
    while True:
        chunk = [row for _, row in zip(range(TXN_ROWS), source)]
        if not chunk:
            break
        conn.execute("BEGIN")
        conn.executemany(INSERT, chunk)
        conn.execute("COMMIT")
        written += len(chunk)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    with SQLiteJournal(path) as journal:  # plain INSERTs skip the per-session head rows appends keep
        journal.rebuild_heads()
    return {"events": written, "sessions": len(sessions), "seconds": time.perf_counter() - start,
            "types": types, "session_ids": sessions, "extra_ids": sessions[:len(extra)]}


def snapshot_version(versions_and_types: Iterable[tuple[int, str]]) -> int:
    """The version of the newest snapshot the engine leaves of a session with these events.

    ``Session`` snapshots every ``SNAPSHOT_EVERY`` events, at the end of each turn, and
    when the session ends (0: none yet).
    """
    from zagent_core.session.writer import SNAPSHOT_EVERY

    last = 0
    for version, type_ in versions_and_types:
        if version - last >= SNAPSHOT_EVERY or type_ in ("turn_ended", "session_ended"):
            last = version
    return last


def snapshot_at(journal: SQLiteJournal, session_id: str, version: int) -> int:
    """Save the session's state at ``version`` as its snapshot, as ``Session.snapshot`` does; its size."""
    from zagent_core.journal.fold import rebuild
    from zagent_core.journal.snapshots import projection_tag, to_snapshot
    from zagent_core.journal.views import status_of

    state = rebuild(itertools.islice(journal.read(session_id), version))
    data = to_snapshot(state)
    journal.save_snapshot(session_id, state.version, projection_tag(), data, status_of(state))
    return len(data)


def snapshot_sessions(path: Path, session_ids: Iterable[str], *, open_only: bool = True) -> int:
    """Give sessions the newest snapshot the engine would have left them (see :func:`snapshot_version`).

    ``open_only`` skips the sessions that ended: what reads a snapshot (``sessions list``,
    resume) never needs theirs, and folding them all would double the build time.
    Returns how many events were folded.
    """
    folded = 0
    with SQLiteJournal(path) as journal:
        conn = journal._conn
        for sid in session_ids:
            rows = conn.execute("SELECT version, type FROM events WHERE session_id = ? ORDER BY version",
                                (sid,)).fetchall()
            if open_only and rows and rows[-1][1] == "session_ended":
                continue
            version = snapshot_version(rows)
            if version:
                snapshot_at(journal, sid, version)
                folded += version
    return folded


def verify(path: Path, session_ids: list[str], sample: int, seed: int) -> tuple[int, int]:
    """Read a sample of sessions back through zagent: rebuild, and exact body round-trip."""
    from zagent_core.journal.fold import rebuild

    r = random.Random(seed + 1)
    picked = r.sample(session_ids, min(sample, len(session_ids)))
    journal = SQLiteJournal(path)
    conn = sqlite3.connect(path)
    events = 0
    try:
        for sid in picked:
            state = rebuild(journal.read(sid))
            assert state.version > 0, sid
            for type_, call_id, task_id, data in conn.execute(
                    "SELECT type, call_id, task_id, data FROM events WHERE session_id = ? ORDER BY version", (sid,)):
                event = load_event(type_, json.loads(data))
                if dump_event(event) != data:
                    raise AssertionError(f"{type_} body does not round-trip:\n{data}\n{dump_event(event)}")
                # The columns as SQLiteJournal.append fills them.
                assert (call_id, task_id) == (event.__dict__.get("call_id"), event.__dict__.get("task_id")), data
                events += 1
    finally:
        conn.close()
        journal.close()
    return len(picked), events


# -- the queries ------------------------------------------------------------------------------

RAW_SESSIONS = """SELECT session_id, min(at), max(at), count(*), sum(type = 'tool_call_requested'),
       max(type = 'session_ended')
FROM events GROUP BY session_id ORDER BY max(seq) DESC"""

# Each call's request, joined to its outcome (finished, rejected or interrupted) by call_id.
_RAW_CALLS = """SELECT r.session_id, r.call_id, json_extract(r.data, '$.tool') AS tool,
       json_extract(r.data, '$.arguments') AS arguments, r.at AS requested_at, o.type AS outcome,
       json_extract(o.data, '$.is_error') AS is_error, json_extract(o.data, '$.exit_code') AS exit_code,
       json_extract(o.data, '$.duration_ms') AS duration_ms,
       substr(coalesce(json_extract(o.data, '$.output'), json_extract(o.data, '$.message')), 1, 200) AS output_head
FROM {source} r
LEFT JOIN events o ON o.call_id = r.call_id AND o.session_id = r.session_id
     AND o.type IN ('tool_call_finished', 'tool_call_rejected', 'tool_call_interrupted')"""

RAW_TOOL = _RAW_CALLS.format(source="""(SELECT * FROM events
      WHERE type = 'tool_call_requested' AND json_extract(data, '$.tool') = ?
      ORDER BY seq DESC LIMIT 100)""") + "\nORDER BY r.seq"

RAW_SESSION = _RAW_CALLS.format(source="events") + """
WHERE r.session_id = ? AND r.type = 'tool_call_requested'
ORDER BY r.seq"""

# The 20 most recently requested calls that failed: requests newest first, each joined to
# its outcome, stopping at the 20th failure.
RAW_ERRORS = """SELECT r.session_id, r.call_id, json_extract(r.data, '$.tool') AS tool,
       json_extract(r.data, '$.arguments') AS arguments, r.at AS requested_at, o.type AS outcome,
       json_extract(o.data, '$.exit_code') AS exit_code, json_extract(o.data, '$.duration_ms') AS duration_ms,
       substr(coalesce(json_extract(o.data, '$.output'), json_extract(o.data, '$.message')), 1, 200) AS output_head
FROM events r
JOIN events o ON o.call_id = r.call_id AND o.session_id = r.session_id
     AND o.type IN ('tool_call_finished', 'tool_call_rejected', 'tool_call_interrupted')
WHERE r.type = 'tool_call_requested'
  AND (o.type != 'tool_call_finished' OR json_extract(o.data, '$.is_error'))
ORDER BY r.at DESC LIMIT 20"""

RAW_SLOWEST = """SELECT r.session_id, r.call_id, json_extract(r.data, '$.tool') AS tool,
       json_extract(r.data, '$.arguments') AS arguments, r.at AS requested_at,
       json_extract(o.data, '$.is_error') AS is_error, json_extract(o.data, '$.duration_ms') AS duration_ms
FROM (SELECT * FROM events WHERE type = 'tool_call_finished'
      ORDER BY json_extract(data, '$.duration_ms') DESC LIMIT 10) o
JOIN events r ON r.call_id = o.call_id AND r.session_id = o.session_id AND r.type = 'tool_call_requested'
ORDER BY duration_ms DESC"""

RAW_SHOW = "SELECT seq, version, type, at, data FROM events WHERE session_id = ? ORDER BY version"


def plan(conn: sqlite3.Connection, sql: str, params: tuple = ()) -> list[str]:
    """EXPLAIN QUERY PLAN as an indented tree."""
    rows = conn.execute("EXPLAIN QUERY PLAN " + sql, params).fetchall()
    depth = {0: -1}
    lines = []
    for node, parent, _, detail in rows:
        depth[node] = depth.get(parent, -1) + 1
        lines.append("    " + "  " * depth[node] + detail)
    return lines


def traced(journal: SQLiteJournal, fn: Callable[[], Any]) -> list[str]:
    """The SQL a journal method runs (bound parameters inlined), via the trace callback."""
    seen: list[str] = []
    conn = getattr(journal, "_conn", None)
    if conn is None:
        return seen
    conn.set_trace_callback(seen.append)
    try:
        fn()
    finally:
        conn.set_trace_callback(None)
    return [s for s in seen if s.lstrip().upper().startswith(("SELECT", "WITH"))]


# -- timing -----------------------------------------------------------------------------------


def ms(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return (time.perf_counter() - start) * 1000, out


def compare(name: str, zagent: Callable[[], Any], raw: Callable[[], Any], runs: int, slow_ms: float) -> dict:
    """Warm up both, then alternate ``runs`` rounds (order flipped every round): medians.

    A side slower than ``slow_ms`` in its warm-up gets 3 rounds at most.
    """
    gc.collect()
    z_first, z_out = ms(zagent)
    r_first, r_out = ms(raw)
    rounds = min(runs, 3) if max(z_first, r_first) > slow_ms else runs
    z_times, r_times = [], []
    for i in range(rounds):
        sides = ((zagent, z_times), (raw, r_times))
        for fn, times in (sides if i % 2 == 0 else sides[::-1]):
            times.append(ms(fn)[0])
    return {"name": name, "zagent": statistics.median(z_times), "raw": statistics.median(r_times),
            "z_range": (min(z_times), max(z_times)), "r_range": (min(r_times), max(r_times)),
            "rounds": rounds, "z_out": z_out, "r_out": r_out}


def cli(home: Path, *args: str) -> Callable[[], list[str]]:
    argv = [str(ZAGENT), "--home", str(home), *args]

    def run() -> list[str]:
        done = subprocess.run(argv, capture_output=True, text=True, cwd=home)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-2000:]}")
        return done.stdout.splitlines()

    return run


def raw_query(path: Path, sql: str, params: tuple = ()) -> Callable[[], list]:
    """A fresh connection per run (as a CLI command has), the query, every row fetched."""
    def run() -> list:
        conn = sqlite3.connect(path)
        try:
            return conn.execute(sql, params).fetchall()
        finally:
            conn.close()
    return run


def api(path: Path, method: str, **kwargs: Any) -> Callable[[], Any]:
    """A fresh SQLiteJournal per run, one method call."""
    def run() -> Any:
        with SQLiteJournal(path) as journal:
            return getattr(journal, method)(**kwargs)
    return run


def cli_list_limit() -> int | None:
    """``sessions list``'s default ``--limit``, from its help (None if it has no such option)."""
    import re

    out = subprocess.run([str(ZAGENT), "sessions", "list", "--help"], capture_output=True, text=True).stdout
    found = re.search(r"--limit\b[^\[]*\[default: (\d+)", out)
    return int(found.group(1)) if found else None


def answer(res: dict) -> str:
    """What each side returned, and whether they agree."""
    z_out, r_out, kind = res["z_out"], res["r_out"], res["kind"]
    if kind == "sessions":
        z_ids = [s.session_id for s in z_out] if not z_out or not isinstance(z_out[0], str) else \
            [line.split()[0] for line in z_out[1:]]
        r_ids = [row[0] for row in r_out]
        verdict = "same sessions, same order" if z_ids == r_ids else \
            f"{len(set(z_ids) & set(r_ids))} in common with raw's {len(r_ids)}"
        return f"{len(z_ids):,} sessions, {verdict}"
    if kind == "calls":
        z_ids = {(row["session_id"], row["call_id"]) for row in z_out}
        r_ids = {(row[0], row[1]) for row in r_out}
        verdict = "same calls as raw" if z_ids == r_ids else f"{len(z_ids & r_ids)} in common with raw's {len(r_ids)}"
        return f"{len(z_out)} calls, {verdict}"
    return f"{len(z_out):,} lines printed; raw {len(r_out):,} rows"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=1_000_000, help="events in the journal (default 1,000,000)")
    parser.add_argument("-n", "--runs", type=int, default=5,
                        help="timed rounds per query (default 5; 3 for a query whose warm-up took over 10 s)")
    parser.add_argument("--keep", metavar="PATH", help="keep the journal: copy it to PATH at the end")
    parser.add_argument("--tool", metavar="NAME", action="append",
                        help="tool for `audit --tool` (repeatable; default: the most and the least called)")
    parser.add_argument("--list-all", action="store_true",
                        help="also time `sessions list --limit 0` (every session: slow, 3 rounds)")
    parser.add_argument("--seed", type=int, default=1130)
    parser.add_argument("--analyze", action="store_true", help="run ANALYZE before timing (zagent never does)")
    parser.add_argument("--dir", help="where to put the temp home (default: the system temp dir)")
    parser.add_argument("--no-suggestions", action="store_true",
                        help="skip the last part (indexes and rewrites suggested for the slow queries, measured)")
    args = parser.parse_args()

    print(f"zagent journal at scale (SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cpus)")
    with tempfile.TemporaryDirectory(prefix="zagent-scale-", dir=args.dir) as tmp:
        home = Path(tmp) / "home"
        path = home / "journal.db"
        built = build(path, args.events, args.seed)
        size = path.stat().st_size
        print(f"built {built['events']:,} events in {built['sessions']:,} sessions in {built['seconds']:.1f} s "
              f"({built['events'] / built['seconds']:,.0f} events/s); file {size / 1e6:,.1f} MB "
              f"({size / built['events']:.0f} bytes/event)")
        print("  " + ", ".join(f"{t} {n:,}" for t, n in built["types"].most_common()))
        start = time.perf_counter()
        n_sessions, n_events = verify(path, built["session_ids"], 60, args.seed)
        print(f"verified {n_sessions} random sessions ({n_events:,} events): rebuild() ok, every body "
              f"round-trips load_event/dump_event exactly, call_id/task_id columns as append() fills them "
              f"({time.perf_counter() - start:.1f} s)")
        start = time.perf_counter()
        folded = snapshot_sessions(path, built["session_ids"])
        print(f"snapshots: sessions not ended got the newest snapshot the engine leaves (end of their last "
              f"turn, or every 1,000 events); {folded:,} events folded ({time.perf_counter() - start:.1f} s)")
        if args.analyze:
            conn = sqlite3.connect(path)
            conn.execute("ANALYZE")
            conn.close()
            print("ANALYZE run: the planner has statistics (a real zagent journal has none)")

        conn = sqlite3.connect(path)
        tool_counts = Counter(dict(conn.execute(
            "SELECT json_extract(data, '$.tool'), count(*) FROM events WHERE type = 'tool_call_requested' GROUP BY 1")))
        ranked = [name for name, _ in tool_counts.most_common()]
        tools = args.tool or [ranked[0], ranked[-1]]
        # A typical session: the median by size, ended, among the last hundred to end.
        recent = conn.execute("SELECT session_id, count(*) FROM events WHERE session_id IN "
                              "(SELECT session_id FROM events WHERE type = 'session_ended' ORDER BY seq DESC LIMIT 100)"
                              " GROUP BY session_id ORDER BY 2").fetchall()
        session_id, session_size = recent[len(recent) // 2]
        conn.close()
        list_limit = cli_list_limit()
        print(f"audit --tool: " + ", ".join(f"{t} ({tool_counts[t]:,} calls)" for t in tools)
              + f" of {sum(tool_counts.values()):,}; session {session_id} ({session_size} events); "
              f"sessions list default --limit: {list_limit}")

        # -- query plans -----------------------------------------------------------------
        print("\nquery plans (EXPLAIN QUERY PLAN of the SQL each side runs; SEARCH = through an index on the "
              "columns shown, SCAN = every row of the table or index named):")
        journal = SQLiteJournal(path)
        zagent_sql = {"SQLiteJournal.sessions()": traced(journal, journal.sessions)}
        if list_limit:
            zagent_sql[f"SQLiteJournal.sessions({list_limit}) (sessions list)"] = traced(
                journal, lambda: journal.sessions(list_limit))
        for t in tools:
            zagent_sql[f"audit --tool {t}"] = traced(journal, lambda t=t: journal.audit(tool=t, limit=100))
        zagent_sql[f"audit --session {session_id}"] = traced(journal, lambda: journal.audit(session=session_id, limit=100))
        zagent_sql["audit --errors --limit 20"] = traced(journal, lambda: journal.audit(errors=True, limit=20))
        zagent_sql["audit --slowest 10"] = traced(journal, lambda: journal.audit(slowest=10, limit=100))
        journal.close()
        conn = sqlite3.connect(path)
        for label, statements in zagent_sql.items():
            for sql in statements:
                print(f"\n  zagent: {label}")
                print("\n".join(plan(conn, sql)))
        for label, sql, params in (("raw: sessions GROUP BY", RAW_SESSIONS, ()),
                                   (f"raw: --tool {tools[0]}", RAW_TOOL, (tools[0],)),
                                   ("raw: --session", RAW_SESSION, (session_id,)),
                                   ("raw: --errors", RAW_ERRORS, ()),
                                   ("raw: --slowest", RAW_SLOWEST, ())):
            print(f"\n  {label}")
            print("\n".join(plan(conn, sql, params)))
        conn.close()

        # -- timings ---------------------------------------------------------------------------
        print(f"\ntiming: {args.runs} rounds each after a warm-up, zagent and raw alternating (median ms) ...",
              flush=True)
        startup = compare("zagent --help (CLI start-up, for reference)", cli(home, "--help"),
                          lambda: subprocess.run([sys.executable, "-c", "pass"], check=True), args.runs, 10_000)
        work = [("SQLiteJournal.sessions()", api(path, "sessions"), raw_query(path, RAW_SESSIONS), "sessions")]
        if list_limit:
            raw_limited = raw_query(path, RAW_SESSIONS + f" LIMIT {list_limit}")
            work += [(f"SQLiteJournal.sessions({list_limit})", api(path, "sessions", limit=list_limit), raw_limited,
                      "sessions"),
                     (f"zagent sessions list (default --limit {list_limit})", cli(home, "sessions", "list"),
                      raw_limited, "sessions")]
        else:
            work.append(("zagent sessions list", cli(home, "sessions", "list"), raw_query(path, RAW_SESSIONS),
                         "sessions"))
        if args.list_all and list_limit:
            work.append(("zagent sessions list --limit 0 (all)", cli(home, "sessions", "list", "--limit", "0"),
                         raw_query(path, RAW_SESSIONS), "sessions"))
        audits = [(f"audit --tool {t}", ["--tool", t], {"tool": t, "limit": 100}, RAW_TOOL, (t,)) for t in tools]
        audits += [
            (f"audit --session {session_id}", ["--session", session_id], {"session": session_id, "limit": 100},
             RAW_SESSION, (session_id,)),
            ("audit --errors --limit 20", ["--errors", "--limit", "20"], {"errors": True, "limit": 20}, RAW_ERRORS, ()),
            ("audit --slowest 10", ["--slowest", "10"], {"slowest": 10, "limit": 100}, RAW_SLOWEST, ()),
        ]
        for label, argv, filters, sql, params in audits:
            work.append((f"SQLiteJournal.audit: {label[6:]}", api(path, "audit", **filters),
                         raw_query(path, sql, params), "calls"))
            work.append((f"zagent {label}", cli(home, "audit", *argv), raw_query(path, sql, params), "lines"))
        work.append((f"zagent sessions show {session_id}", cli(home, "sessions", "show", session_id),
                     raw_query(path, RAW_SHOW, (session_id,)), "lines"))
        # A CLI command whose query costs nothing (no call after 2100): its fixed cost, for reference.
        work.append(("zagent audit --since 2100-01-01 (CLI fixed cost)", cli(home, "audit", "--since", "2100-01-01"),
                     raw_query(path, "SELECT 1"), "reference"))
        results = []
        for name, zagent, raw, kind in work:
            result = compare(name, zagent, raw, args.runs, 10_000)
            result["kind"] = kind
            results.append(result)
            print(f"  {name:<56} zagent {result['zagent']:9.1f}  raw {result['raw']:8.1f}  "
                  f"({result['rounds']} rounds)", flush=True)

        # -- the table -------------------------------------------------------------------------
        print()
        header = f"{'query':<56} {'zagent ms':>10} {'raw ms':>9} {'ratio':>8}  {'zagent min-max':>17}  answer"
        print(header)
        print("-" * (len(header) + 40))
        for res in results:
            if res["kind"] == "reference":
                continue
            lo, hi = res["z_range"]
            print(f"{res['name']:<56} {res['zagent']:>10.1f} {res['raw']:>9.1f} {res['zagent'] / res['raw']:>7.1f}x  "
                  f"{lo:>8.1f}-{hi:<8.1f}  {answer(res)}")
        fixed = results[-1]
        print(f"{fixed['name']:<56} {fixed['zagent']:>10.1f} {fixed['raw']:>9.1f} {'':>8}  "
              f"{fixed['z_range'][0]:>8.1f}-{fixed['z_range'][1]:<8.1f}  (raw = connect + SELECT 1)")
        print(f"{startup['name']:<56} {startup['zagent']:>10.1f} {startup['raw']:>9.1f} {'':>8}  "
              f"{startup['z_range'][0]:>8.1f}-{startup['z_range'][1]:<8.1f}  (raw = python -c pass)")
        print(f"\njournal: {built['events']:,} events, {built['sessions']:,} sessions, {size / 1e6:,.1f} MB on disk "
              f"(WAL checkpointed), built in {built['seconds']:.1f} s")

        # -- where sessions list's time goes -----------------------------------------------------
        from zagent_core import Engine, Home
        from zagent_core.journal.fold import rebuild

        print(f"\nwhere `sessions list` spends its time, in-process (best of 3): sessions({list_limit}), then "
              "Engine.status() for each session listed (read() + rebuild() of all its events):")
        best: dict[str, float] = {}
        with SQLiteJournal(path) as journal:
            engine = Engine(Home(home), journal, workspace=home)
            for _ in range(3):
                for key, fn in (("sessions", lambda: journal.sessions(list_limit)),
                                ("read", lambda: [list(journal.read(s.session_id)) for s in summaries]),
                                ("rebuild", lambda: [rebuild(events) for events in stored]),
                                ("status", lambda: [engine.status(s.session_id) for s in summaries])):
                    took, out = ms(fn)
                    best[key] = min(best.get(key, took), took)
                    if key == "sessions":
                        summaries = out
                    elif key == "read":
                        stored = out
        n_listed = sum(len(e) for e in stored)
        rows = [(f"sessions({list_limit})", best["sessions"], ""),
                (f"Engine.status() x {len(summaries)}", best["status"], f"{n_listed:,} events"),
                ("  of which read(): SQL, json.loads, load_event", best["read"],
                 f"{best['read'] * 1000 / n_listed:.1f} µs/event"),
                ("  of which rebuild(): apply, model_copy", best["rebuild"],
                 f"{best['rebuild'] * 1000 / n_listed:.1f} µs/event"),
                ("CLI fixed cost (audit --since 2100-01-01, median)", results[-1]["zagent"], "")]
        for label, value, note in rows:
            print(f"  {label:<52} {value:9.1f} ms  {note}")
        per_event = best["status"] / n_listed
        conn = sqlite3.connect(path)
        open_events = conn.execute("SELECT count(*) FROM events WHERE session_id NOT IN "
                                   "(SELECT session_id FROM events WHERE type = 'session_ended')").fetchone()[0]
        conn.close()
        print(f"  => `sessions list --limit 0` spends about {per_event * built['events'] / 1000:.1f} s in "
              f"Engine.status() for all {built['sessions']:,} sessions; {per_event * open_events / 1000:.1f} s if the "
              f"sessions the summary already shows as ended ({built['types']['session_ended']:,}) were not rebuilt")

        if args.keep:
            keep = Path(args.keep)
            keep.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, keep)
            print(f"\nkept the journal at {keep} (before the suggestions below added indexes)")

        if not args.no_suggestions:
            suggestions(path, results, tools, session_id, list_limit or 50, args.runs)


SUGGESTED_INDEXES = [
    # (session_id, type) + at: a session's calls come out in time order, no walk of every request.
    "CREATE INDEX bench_session_type_at ON events (session_id, type, at)",
    # The tool index + at: one tool's calls in time order, however rare the tool.
    "CREATE INDEX bench_tool_at ON events (json_extract(data, '$.tool'), at) WHERE type = 'tool_call_requested'",
    # Finished calls by duration (type first, so the planner prefers it to events_type_at).
    "CREATE INDEX bench_duration ON events (type, json_extract(data, '$.duration_ms')) WHERE type = 'tool_call_finished'",
]

# --slowest driven from the finished events (through bench_duration), the view only for those ten.
SUGGESTED_SLOWEST = """SELECT * FROM tool_calls WHERE (session_id, call_id) IN (
    SELECT session_id, call_id FROM events WHERE type = 'tool_call_finished'
    ORDER BY json_extract(data, '$.duration_ms') DESC LIMIT ?)
ORDER BY duration_ms DESC"""


def recent_sessions(conn: sqlite3.Connection, limit: int) -> list[str]:
    """The ``limit`` most recently active sessions: walk the events newest first (rowid order)
    and stop at the ``limit``-th distinct session, instead of a GROUP BY over every event."""
    found: dict[str, None] = {}
    for (sid,) in conn.execute("SELECT session_id FROM events ORDER BY seq DESC"):
        if sid not in found:
            found[sid] = None
            if len(found) == limit:
                break
    return list(found)


def suggestions(path: Path, results: list[dict], tools: list[str], session_id: str, limit: int, runs: int) -> None:
    """Measure the fixes suggested for the slow queries, on this temp journal (not on zagent)."""
    print("\nsuggestions, measured on this temp journal (zagent itself is unchanged; median ms, in-process):")
    conn = sqlite3.connect(path)
    start = time.perf_counter()
    for sql in SUGGESTED_INDEXES:
        conn.execute(sql)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    print(f"  added {len(SUGGESTED_INDEXES)} indexes in {time.perf_counter() - start:.1f} s "
          f"(file now {path.stat().st_size / 1e6:,.1f} MB):")
    for sql in SUGGESTED_INDEXES:
        print(f"    {sql}")
    before = {res["name"]: res["zagent"] for res in results}

    def median_of(fn: Callable[[], Any]) -> tuple[float, Any]:
        out = fn()
        return statistics.median(ms(fn)[0] for _ in range(runs)), out

    def driver(sql: str, params: tuple = ()) -> str:
        """The plan's SEARCH/SCAN steps, but those of the view's per-call subqueries (alias e)."""
        steps = [detail for *_, detail in conn.execute("EXPLAIN QUERY PLAN " + sql, params)
                 if detail.startswith(("SEARCH", "SCAN")) and not detail.startswith(("SEARCH e ", "SCAN ("))]
        return "; ".join(dict.fromkeys(steps)) or "?"

    print(f"\n  {'query':<52} {'before':>9} {'after':>9}  same answer  walks")
    from zagent_store.views import audit_query

    cases = [(f"audit --tool {t}", {"tool": t, "limit": 100}) for t in tools]
    cases += [(f"audit --session {session_id}", {"session": session_id, "limit": 100}),
              ("audit --errors --limit 20", {"errors": True, "limit": 20})]
    for label, filters in cases:
        after, rows = median_of(api(path, "audit", **filters))
        sql, params = audit_query(**filters)
        old = next((r for r in results if r["name"] == f"SQLiteJournal.audit: {label[6:]}"), None)
        same = old is not None and {(r["session_id"], r["call_id"]) for r in rows} == \
            {(r["session_id"], r["call_id"]) for r in old["z_out"]}
        print(f"  {'SQLiteJournal.audit: ' + label[6:]:<52} {before.get('SQLiteJournal.audit: ' + label[6:], 0):9.1f} "
              f"{after:9.1f}  {'yes' if same else 'NO':<11}  {driver(sql, tuple(params))}")
    after, rows = median_of(lambda: conn.execute(SUGGESTED_SLOWEST, (10,)).fetchall())
    old = next(r for r in results if r["name"] == "SQLiteJournal.audit: --slowest 10")
    same = {(r[0], r[1]) for r in rows} == {(r["session_id"], r["call_id"]) for r in old["z_out"]}
    print(f"  {'--slowest 10, rewritten (see SUGGESTED_SLOWEST)':<52} "
          f"{before['SQLiteJournal.audit: --slowest 10']:9.1f} {after:9.1f}  {'yes' if same else 'NO':<11}  "
          f"{driver(SUGGESTED_SLOWEST, (10,))}")
    journal = SQLiteJournal(path)
    try:
        old_ms, old_ids = median_of(lambda: [s.session_id for s in journal.sessions(limit)])
    finally:
        journal.close()
    after, ids = median_of(lambda: recent_sessions(conn, limit))
    print(f"  {f'sessions({limit}): walk seq DESC to the {limit}th session':<52} {old_ms:9.1f} {after:9.1f}  "
          f"{'yes' if ids == old_ids else 'NO':<11}  SCAN events (rowid order, newest first), stops early")
    conn.close()


if __name__ == "__main__":
    main()
