"""The audit views: the journal as tables people (and Datasette, sqlite-utils) can query.

``tool_calls``, ``tasks``, ``notes`` and ``sessions`` are plain SQL views over ``events``;
they store nothing, so they are always exactly what the journal says. Indexes make the
common questions cheap on a journal of millions of events: a session's events by type,
calls of one tool, events by type and time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import sqlite_utils

_LAST = "(SELECT {what} FROM events e WHERE e.session_id = r.session_id AND e.call_id = r.call_id AND e.type {cond} ORDER BY e.seq DESC LIMIT 1)"


def _last(what: str, cond: str) -> str:
    return _LAST.format(what=what, cond=cond)


TOOL_CALLS = f"""
SELECT r.session_id AS session_id,
       r.call_id AS call_id,
       json_extract(r.data, '$.tool') AS tool,
       json_extract(r.data, '$.arguments') AS arguments,
       coalesce({_last("CASE e.type WHEN 'tool_call_finished' THEN 'finished' WHEN 'tool_call_rejected' THEN 'rejected'"
                       " WHEN 'tool_call_interrupted' THEN 'interrupted' ELSE 'running' END",
                       "IN ('tool_call_started', 'tool_call_finished', 'tool_call_rejected', 'tool_call_interrupted')")},
                'requested') AS status,
       {_last("json_extract(e.data, '$.is_error')", "= 'tool_call_finished'")} AS is_error,
       {_last("json_extract(e.data, '$.exit_code')", "= 'tool_call_finished'")} AS exit_code,
       r.at AS requested_at,
       {_last("e.at", "= 'tool_call_started'")} AS started_at,
       {_last("json_extract(e.data, '$.duration_ms')", "= 'tool_call_finished'")} AS duration_ms,
       {_last("substr(coalesce(json_extract(e.data, '$.output'), json_extract(e.data, '$.message')), 1, 200)",
              "IN ('tool_call_finished', 'tool_call_rejected', 'tool_call_interrupted')")} AS output_head,
       {_last("json_array_length(json_extract(e.data, '$.files'))", "= 'tool_call_finished'")} AS files,
       {_last("json_extract(e.data, '$.task_id')", "= 'tool_call_started'")} AS task_id
FROM events r
WHERE r.type = 'tool_call_requested'
"""

TASKS = """
SELECT s.session_id AS session_id,
       json_extract(s.data, '$.task_id') AS task_id,
       s.call_id AS call_id,
       json_extract(s.data, '$.tool') AS tool,
       coalesce((SELECT substr(e.type, 6) FROM events e WHERE e.session_id = s.session_id AND e.task_id = s.task_id
                 AND e.type IN ('task_exited', 'task_killed', 'task_interrupted') ORDER BY e.seq DESC LIMIT 1),
                'running') AS status,
       s.at AS started_at,
       (SELECT e.at FROM events e WHERE e.session_id = s.session_id AND e.task_id = s.task_id
        AND e.type IN ('task_exited', 'task_killed', 'task_interrupted') ORDER BY e.seq DESC LIMIT 1) AS ended_at,
       (SELECT json_extract(e.data, '$.exit_code') FROM events e WHERE e.session_id = s.session_id
        AND e.task_id = s.task_id AND e.type IN ('task_exited', 'task_killed') ORDER BY e.seq DESC LIMIT 1) AS exit_code,
       json_extract(s.data, '$.pid') AS pid,
       json_extract(s.data, '$.task_dir') AS task_dir
FROM events s
WHERE s.type = 'task_started'
"""

NOTES = """
SELECT session_id, seq, at, call_id, task_id,
       json_extract(data, '$.text') AS text,
       json_extract(data, '$.wake') AS wake
FROM events
WHERE type = 'note_received'
"""

SESSIONS = """
SELECT session_id,
       min(at) AS started_at,
       max(at) AS last_event_at,
       count(*) AS events,
       sum(type = 'tool_call_requested') AS calls,
       sum(type = 'task_started') AS tasks,
       sum(type = 'model_replied') AS model_replies,
       CASE WHEN max(type = 'session_ended') THEN 'ended' ELSE 'open' END AS status
FROM events
GROUP BY session_id
"""

VIEWS = {"tool_calls": TOOL_CALLS, "tasks": TASKS, "notes": NOTES, "sessions": SESSIONS}


def create_audit_views(db: sqlite_utils.Database) -> None:
    """Migration 2: the audit views and the indexes that keep them (and listings) fast."""
    # Each index gives both the filter and the order audit wants (newest first), so a
    # query for a rare tool or one session reads only its own rows (bench/journal_scale.py).
    db.table("events").create_index(["session_id", "type", "at"], index_name="events_session_type")
    db.table("events").create_index(["type", "at"], index_name="events_type_at")
    db.execute("CREATE INDEX events_tool ON events (json_extract(data, '$.tool'), at)"
               " WHERE type = 'tool_call_requested'")
    db.execute("CREATE INDEX events_duration ON events (type, json_extract(data, '$.duration_ms'))"
               " WHERE type = 'tool_call_finished'")
    for name, sql in VIEWS.items():
        db.create_view(name, sql, replace=True)


def audit_query(*, session: str | None = None, tool: str | None = None, since: str | None = None,
                errors: bool = False, asked: bool = False, slowest: int | None = None,
                limit: int | None = None, descendants: bool = False, outcome: str | None = None) -> tuple[str, list[Any]]:
    """SQL (and its parameters) over ``tool_calls`` for ``zagent audit``'s filters
    (``descendants``: the calls of ``session``'s sub-agents too, at any depth; ``outcome``: the
    calls whose tool reported it)."""
    where: list[str] = []
    params: list[Any] = []
    if outcome:
        # From the events, not the view's column: a journal opened read-only may predate it.
        where.append(f"{reported('tool_calls', 'status')} = ?")
        params.append(outcome)
    if asked:
        where.append("EXISTS (SELECT 1 FROM decisions d WHERE d.session_id = tool_calls.session_id"
                     " AND d.call_id = tool_calls.call_id)")
    if session and descendants:
        where.append(f"session_id IN ({SUBTREE})")
        params.append(session)
    elif session:
        where.append("session_id = ?")
        params.append(session)
    if tool:
        where.append("tool = ?")
        params.append(tool)
    if since:
        where.append("requested_at >= ?")
        params.append(since)
    if errors:
        where.append("(status IN ('rejected', 'interrupted') OR is_error = 1)")
    sql = "SELECT * FROM tool_calls"
    if slowest and not where:
        # Pick the slowest calls from the duration index first; the view then only
        # describes those few (a walk of every call otherwise).
        # A background call's duration is its task's: the slowest task ends are candidates
        # too. Joined from the few picked (CROSS JOIN keeps that order): each is then found
        # by its call, where an IN over the union would walk every call.
        return ("WITH pick AS (SELECT * FROM (SELECT session_id, call_id FROM events WHERE type = 'tool_call_finished'"
                " ORDER BY json_extract(data, '$.duration_ms') DESC LIMIT ?) AS calls"
                f" UNION SELECT * FROM (SELECT session_id, call_id FROM events WHERE {TASK_ENDS}"
                " ORDER BY json_extract(data, '$.duration_ms') DESC LIMIT ?) AS task_ends)"
                " SELECT t.* FROM pick CROSS JOIN tool_calls t ON t.session_id = pick.session_id"
                " AND t.call_id = pick.call_id ORDER BY t.duration_ms DESC LIMIT ?", [slowest, slowest, slowest])
    if where:
        sql += " WHERE " + " AND ".join(where)
    if slowest:
        sql += " AND duration_ms IS NOT NULL" if where else " WHERE duration_ms IS NOT NULL"
        sql += " ORDER BY duration_ms DESC LIMIT ?"
        params.append(slowest)
    else:
        sql += " ORDER BY requested_at"
        if limit:
            sql = f"SELECT * FROM ({sql} DESC LIMIT ?) AS newest ORDER BY requested_at"
            params.append(limit)
    return sql, params


# -- schema 3: the lean hot path ---------------------------------------------------------
#
# Every index on ``events`` costs each append; schema 3 keeps only partial indexes, each
# on the few event types its queries read, so an event of any other type (notes, model
# replies, turns: most of a session) pays one comparison per index and writes nothing.
# A query can use a partial index only when its WHERE repeats the index's condition, so
# the views below spell each condition exactly as its index does.

# The event types of calls and tasks, spelled as a range: a comparison per row is all an
# event of another type costs (an IN list costs four times more), and the range holds
# exactly the task_* and tool_call_* types.
CALLS_AND_TASKS = "type BETWEEN 'task_exited' AND 'tool_call_started'"

INDEXES_3 = {
    # audit's listing (newest calls first, --since, --limit)
    "events_requested": "(at) WHERE type = 'tool_call_requested'",
    # a session's calls (audit --session), each call's start and outcome, each task's end
    "events_calls": f"(session_id, call_id, seq) WHERE {CALLS_AND_TASKS}",
}

#: Schema 2's indexes on every event, replaced by the partial ones above.
DROPPED_3 = ("events_session_type", "events_type_at", "events_call_id", "events_task_id")


def _outcome(what: str, cond: str, row: str = "r") -> str:
    """``what`` of the newest event of the call of row ``row`` whose type matches ``cond``."""
    return (f"(SELECT {what} FROM events e WHERE e.session_id = {row}.session_id AND e.call_id = {row}.call_id"
            f" AND e.{CALLS_AND_TASKS} AND e.type {cond} ORDER BY e.seq DESC LIMIT 1)")


TOOL_CALLS_3 = f"""
SELECT r.session_id AS session_id,
       r.call_id AS call_id,
       json_extract(r.data, '$.tool') AS tool,
       json_extract(r.data, '$.arguments') AS arguments,
       coalesce({_outcome("CASE e.type WHEN 'tool_call_finished' THEN 'finished' WHEN 'tool_call_rejected' THEN 'rejected'"
                          " WHEN 'tool_call_interrupted' THEN 'interrupted' ELSE 'running' END",
                          "IN ('tool_call_started', 'tool_call_finished', 'tool_call_rejected', 'tool_call_interrupted')")},
                'requested') AS status,
       {_outcome("json_extract(e.data, '$.is_error')", "= 'tool_call_finished'")} AS is_error,
       {_outcome("json_extract(e.data, '$.exit_code')", "= 'tool_call_finished'")} AS exit_code,
       r.at AS requested_at,
       {_outcome("e.at", "= 'tool_call_started'")} AS started_at,
       {_outcome("json_extract(e.data, '$.duration_ms')", "= 'tool_call_finished'")} AS duration_ms,
       {_outcome("substr(coalesce(json_extract(e.data, '$.output'), json_extract(e.data, '$.message')), 1, 200)",
                 "IN ('tool_call_finished', 'tool_call_rejected', 'tool_call_interrupted')")} AS output_head,
       {_outcome("json_array_length(json_extract(e.data, '$.files'))", "= 'tool_call_finished'")} AS files,
       {_outcome("json_extract(e.data, '$.task_id')", "= 'tool_call_started'")} AS task_id
FROM events r
WHERE r.{CALLS_AND_TASKS} AND r.type = 'tool_call_requested'
"""


def _task_end(what: str, types: str) -> str:
    # A task is one call's: its events are found by the call, then by the task.
    return (f"(SELECT {what} FROM events e WHERE e.session_id = s.session_id AND e.call_id = s.call_id"
            f" AND e.task_id = s.task_id AND e.{CALLS_AND_TASKS} AND e.type IN ({types}) ORDER BY e.seq DESC LIMIT 1)")


TASKS_3 = f"""
SELECT s.session_id AS session_id,
       json_extract(s.data, '$.task_id') AS task_id,
       s.call_id AS call_id,
       json_extract(s.data, '$.tool') AS tool,
       coalesce({_task_end("substr(e.type, 6)", "'task_exited', 'task_killed', 'task_interrupted'")}, 'running') AS status,
       s.at AS started_at,
       {_task_end("e.at", "'task_exited', 'task_killed', 'task_interrupted'")} AS ended_at,
       {_task_end("json_extract(e.data, '$.exit_code')", "'task_exited', 'task_killed'")} AS exit_code,
       json_extract(s.data, '$.pid') AS pid,
       json_extract(s.data, '$.task_dir') AS task_dir
FROM events s
WHERE s.{CALLS_AND_TASKS} AND s.type = 'task_started'
"""

# From the per-session head row the append keeps, and the newest snapshot's status: no
# scan of the events. An open session shows its snapshot's status when it has one.
SESSIONS_3 = """
SELECT h.session_id AS session_id,
       h.started_at AS started_at,
       h.last_at AS last_event_at,
       h.version AS events,
       h.calls AS calls,
       h.tasks AS tasks,
       h.model_replies AS model_replies,
       CASE WHEN h.ended THEN 'ended'
            ELSE coalesce((SELECT s.status FROM snapshots s WHERE s.session_id = h.session_id
                           ORDER BY s.version DESC LIMIT 1), 'open') END AS status
FROM heads h
"""

VIEWS_3 = {"tool_calls": TOOL_CALLS_3, "tasks": TASKS_3, "notes": NOTES, "sessions": SESSIONS_3}


def lean_audit_schema(db: sqlite_utils.Database) -> None:
    """Migration 3's part for the audit: partial indexes instead of indexes on every event."""
    for name in DROPPED_3:
        db.execute(f"DROP INDEX IF EXISTS {name}")
    for name, columns in INDEXES_3.items():
        db.execute(f"CREATE INDEX {name} ON events {columns}")
    for name, sql in VIEWS_3.items():
        db.create_view(name, sql, replace=True)


# -- schema 4: a background call reports its task's outcome ------------------------------
#
# A background call finishes at once with "started as task #N"; what the tool really did
# is in its task's end. Schema 4's ``tool_calls`` reports that end for such a call (its
# status, error flag, exit code, duration and output), and ``tasks`` gains the same
# columns, so ``zagent audit --errors`` lists a task that failed.

#: The events that answer a call, in the order they come: the call's result, then (for a
#: background call) its task's end, which is the answer that counts.
_ANSWERS = ("'tool_call_finished', 'tool_call_rejected', 'tool_call_interrupted', "
            "'task_exited', 'task_killed', 'task_interrupted'")
_OUTPUT = "substr(coalesce(json_extract(e.data, '$.output'), json_extract(e.data, '$.message')), 1, 200)"

# The task ends, spelled as a range (exactly task_exited, task_interrupted, task_killed).
TASK_ENDS = "type BETWEEN 'task_exited' AND 'task_killed'"

INDEXES_4 = {
    # audit --slowest over background calls: their durations are their tasks'
    "events_task_duration": f"(json_extract(data, '$.duration_ms')) WHERE {TASK_ENDS}",
}

# The status looks at the task's events first (a background call is running until its
# task ends, though its call has finished), then at the call's own.
TOOL_CALLS_4 = f"""
SELECT r.session_id AS session_id,
       r.call_id AS call_id,
       json_extract(r.data, '$.tool') AS tool,
       json_extract(r.data, '$.arguments') AS arguments,
       coalesce((SELECT CASE e.type WHEN 'tool_call_finished' THEN 'finished' WHEN 'tool_call_rejected' THEN 'rejected'
                        WHEN 'tool_call_interrupted' THEN 'interrupted' WHEN 'task_exited' THEN 'finished'
                        WHEN 'task_killed' THEN 'killed' WHEN 'task_interrupted' THEN 'interrupted'
                        ELSE 'running' END
                 FROM events e WHERE e.session_id = r.session_id AND e.call_id = r.call_id AND e.{CALLS_AND_TASKS}
                 AND e.type IN ('tool_call_started', {_ANSWERS}, 'task_started')
                 ORDER BY e.type BETWEEN 'task_exited' AND 'task_started' DESC, e.seq DESC LIMIT 1),
                'requested') AS status,
       {_outcome("json_extract(e.data, '$.is_error')", f"IN ({_ANSWERS})")} AS is_error,
       {_outcome("json_extract(e.data, '$.exit_code')", f"IN ({_ANSWERS})")} AS exit_code,
       r.at AS requested_at,
       {_outcome("e.at", "= 'tool_call_started'")} AS started_at,
       {_outcome("json_extract(e.data, '$.duration_ms')", f"IN ({_ANSWERS})")} AS duration_ms,
       {_outcome(_OUTPUT, f"IN ({_ANSWERS})")} AS output_head,
       {_outcome("json_array_length(json_extract(e.data, '$.files'))", f"IN ({_ANSWERS})")} AS files,
       {_outcome("json_extract(e.data, '$.task_id')", "= 'tool_call_started'")} AS task_id
FROM events r
WHERE r.{CALLS_AND_TASKS} AND r.type = 'tool_call_requested'
"""

_ENDS = "'task_exited', 'task_killed', 'task_interrupted'"

TASKS_4 = f"""
SELECT s.session_id AS session_id,
       json_extract(s.data, '$.task_id') AS task_id,
       s.call_id AS call_id,
       json_extract(s.data, '$.tool') AS tool,
       coalesce({_task_end("substr(e.type, 6)", _ENDS)}, 'running') AS status,
       {_task_end("json_extract(e.data, '$.is_error')", _ENDS)} AS is_error,
       s.at AS started_at,
       {_task_end("e.at", _ENDS)} AS ended_at,
       {_task_end("json_extract(e.data, '$.duration_ms')", _ENDS)} AS duration_ms,
       {_task_end("json_extract(e.data, '$.exit_code')", _ENDS)} AS exit_code,
       {_task_end(_OUTPUT, _ENDS)} AS output_head,
       json_extract(s.data, '$.pid') AS pid,
       json_extract(s.data, '$.task_dir') AS task_dir
FROM events s
WHERE s.{CALLS_AND_TASKS} AND s.type = 'task_started'
"""


def task_outcome_views(db: sqlite_utils.Database) -> None:
    """Migration 4's part for the audit: background calls report their task's end."""
    for name, columns in INDEXES_4.items():
        db.execute(f"CREATE INDEX {name} ON events {columns}")
    db.create_view("tool_calls", TOOL_CALLS_4, replace=True)
    db.create_view("tasks", TASKS_4, replace=True)


ARTIFACTS = """
SELECT session_id, seq, at, call_id,
       json_extract(data, '$.kind') AS kind,
       json_extract(data, '$.title') AS title,
       json_extract(data, '$.url') AS url,
       json_extract(data, '$.path') AS path,
       json_extract(data, '$.ref') AS ref,
       json_extract(data, '$.description') AS description
FROM events
WHERE type = 'artifact_recorded'
"""


def artifacts_view(db: sqlite_utils.Database) -> None:
    """Migration 5: what sessions recorded with ``record_artifact`` (``events_session_type`` keeps a session's cheap)."""
    db.create_view("artifacts", ARTIFACTS, replace=True)


# -- schema 6: people in the loop ----------------------------------------------------------
#
# Who was asked what, and the answer: one row per question (``ask_user``) or approval
# (``"permission": "ask"``), answered or still waiting. These events are rare, so a partial
# index on them costs the hot path one comparison per append.

#: The events of a person asked and answering, spelled as the index and the view both spell it.
PEOPLE = "type IN ('approval_decided', 'approval_requested', 'input_answered', 'input_requested')"

INDEXES_6 = {
    # a call's question or approval, and its answer (audit attaches them to its calls)
    "events_people": f"(session_id, call_id, seq) WHERE {PEOPLE}",
}

def _decisions(people: Callable[[str], str]) -> str:
    """The ``decisions`` view, with ``people(alias)`` spelling its events' condition as their index does."""
    return f"""
SELECT r.session_id AS session_id,
       r.call_id AS call_id,
       CASE r.type WHEN 'input_requested' THEN 'question' ELSE 'approval' END AS kind,
       coalesce(json_extract(r.data, '$.tool'), 'ask_user') AS tool,
       CASE r.type WHEN 'input_requested' THEN json_extract(r.data, '$.question')
            ELSE json_extract(r.data, '$.arguments') END AS asked,
       json_extract(r.data, '$.choices') AS choices,
       json_extract(r.data, '$.why') AS why,
       r.at AS asked_at,
       CASE WHEN d.seq IS NULL THEN NULL WHEN d.type = 'input_answered' THEN 'answered'
            WHEN json_extract(d.data, '$.approved') THEN 'approved' ELSE 'denied' END AS decision,
       json_extract(d.data, '$.answer') AS answer,
       json_extract(d.data, '$.reason') AS reason,
       json_extract(d.data, '$.via') AS via,
       d.at AS decided_at
FROM events r
LEFT JOIN events d ON d.session_id = r.session_id AND d.call_id = r.call_id AND {people('d.')}
     AND d.type = CASE r.type WHEN 'input_requested' THEN 'input_answered' ELSE 'approval_decided' END
WHERE {people('r.')} AND r.type IN ('input_requested', 'approval_requested')
"""


DECISIONS = _decisions(lambda alias: alias + PEOPLE)


def decisions_view(db: sqlite_utils.Database) -> None:
    """Migration 6: the ``decisions`` view (questions and approvals, and their answers)."""
    for name, columns in INDEXES_6.items():
        db.execute(f"CREATE INDEX {name} ON events {columns}")
    db.create_view("decisions", DECISIONS, replace=True)


# -- schema 7: session trees ---------------------------------------------------------------
#
# A sub-agent is a session of its own; ``heads`` (schema 7) keeps which session spawned it,
# so the ``sessions`` view tells the trees apart without reading any event.

#: The session ``?`` and its sub-agents at any depth (``heads_parent`` finds each one's children).
SUBTREE = """WITH RECURSIVE tree(session_id) AS (
    SELECT CAST(? AS TEXT) UNION SELECT h.session_id FROM heads h JOIN tree t ON h.parent_session_id = t.session_id)
SELECT session_id FROM tree"""

SESSIONS_7 = SESSIONS_3.rstrip().removesuffix("FROM heads h").rstrip() + """,
       h.parent_session_id AS parent_session_id,
       h.parent_call_id AS parent_call_id,
       h.label AS label,
       h.depth AS depth
FROM heads h
"""


# -- schema 8: workers ----------------------------------------------------------------------

#: A ``heads h`` row of a session that may want a driver: its newest snapshot, if of its last
#: event, does not say it needs nothing (or a person: ``failed``, a turn stopped by an error). A driver that stops cleanly snapshots what it leaves,
#: so an idle session is passed over without reading its events; one cut off is not. A
#: sub-agent is its parent's to drive (the parent's resume goes on with it), never a worker's.
WANTS_DRIVER = """h.parent_session_id IS NULL
    AND NOT EXISTS (SELECT 1 FROM snapshots s WHERE s.session_id = h.session_id AND s.version = h.version
                    AND s.status IN ('idle', 'failed', 'waiting on user', 'waiting on approval'))"""


# -- schema 9: the people index without an IN list ----------------------------------------------
#
# An IN list in a partial index's condition is looked up in a table SQLite builds afresh for
# every INSERT: 1.7 µs per appended event, of whatever type, more than all the other partial
# indexes together (bench/journal_append.py). Two ranges hold exactly the same four types (no
# other type sorts between either pair), for one comparison or two per event.


def people_9(alias: str) -> str:
    """Schema 9's condition of the events of a person asked and answering, on the table ``alias``."""
    return (f"({alias}type BETWEEN 'approval_decided' AND 'approval_requested'"
            f" OR {alias}type BETWEEN 'input_answered' AND 'input_requested')")


INDEXES_9 = {"events_people": f"(session_id, call_id, seq) WHERE {people_9('')}"}

DECISIONS_9 = _decisions(people_9)


def people_ranges(db: sqlite_utils.Database) -> None:
    """Migration 9: ``events_people`` and the ``decisions`` view over two ranges of types, not an IN list."""
    for name, columns in INDEXES_9.items():
        db.execute(f"DROP INDEX {name}")
        db.execute(f"CREATE INDEX {name} ON events {columns}")
    db.create_view("decisions", DECISIONS_9, replace=True)


# -- schema 10: what a tool says its call came to -------------------------------------------
#
# A tool may report an outcome with its result (``success``, ``failure`` or ``partial``, and a
# reason): ``tool_calls`` gains ``outcome`` and ``outcome_reason``, a background call's from its
# task's end. Calls whose tool reports none have NULL in both.


def reported(row: str, key: str) -> str:
    """``key`` (``status`` or ``reason``) of the outcome reported with the answer to the call of row ``row``."""
    return _outcome(f"json_extract(e.data, '$.outcome.{key}')", f"IN ({_ANSWERS})", row)


TOOL_CALLS_10 = TOOL_CALLS_4.replace("\nFROM events r\n", f""",
       {reported("r", "status")} AS outcome,
       {reported("r", "reason")} AS outcome_reason
FROM events r
""", 1)


def outcome_columns(db: sqlite_utils.Database) -> None:
    """Migration 10: ``tool_calls`` says the outcome each call's tool reported."""
    db.create_view("tool_calls", TOOL_CALLS_10, replace=True)
