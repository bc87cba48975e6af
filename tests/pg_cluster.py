"""A throwaway PostgreSQL server for tests and benchmarks: ``initdb`` and ``pg_ctl`` in a
temporary folder, on a free loopback port, stopped (and the folder removed) at the end.

Run as root, the server runs as the ``postgres`` user (PostgreSQL refuses to run as
root). Nothing is installed or left behind; where no server binaries are installed,
:func:`server_binaries` says so and the callers skip with that reason.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

_SEARCHED = ("/usr/lib/postgresql/*/bin", "/usr/local/pgsql/bin", "/opt/homebrew/opt/postgresql*/bin")


def server_binaries() -> Path | None:
    """The folder holding ``initdb`` and ``pg_ctl``: ``$ZAGENT_PG_BIN``, PATH, or a usual install place."""
    if os.environ.get("ZAGENT_PG_BIN"):
        return Path(os.environ["ZAGENT_PG_BIN"])
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    for pattern in _SEARCHED:
        matches = sorted(Path("/").glob(pattern.lstrip("/")), reverse=True)  # the newest version first
        for folder in matches:
            if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
                return folder
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def throwaway_cluster() -> Iterator[str]:
    """Start a server; yields the URL of its ``postgres`` database (user ``zagent``, no password)."""
    binaries = server_binaries()
    if binaries is None:
        raise FileNotFoundError("no PostgreSQL server is installed (initdb and pg_ctl not found)")
    as_root = os.geteuid() == 0
    folder = Path(tempfile.mkdtemp(prefix="zagent-pg-"))
    data = folder / "data"
    run_as: dict[str, object] = {}
    if as_root:
        account = pwd.getpwnam("postgres")
        os.chown(folder, account.pw_uid, account.pw_gid)
        run_as = {"user": account.pw_uid, "group": account.pw_gid, "extra_groups": []}
    port = _free_port()
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.PIPE, "check": True, "cwd": folder, **run_as}
    try:
        subprocess.run([str(binaries / "initdb"), "-D", str(data), "-U", "zagent", "--auth=trust",
                        "--no-sync", "-E", "UTF8", "--locale=C"], **quiet)  # type: ignore[call-overload]
        # Durability as a real server keeps it (fsync on): the tests' crash promises rest on it.
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c max_connections=200"
        subprocess.run([str(binaries / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(folder / "log"),
                        "-w", "-t", "60", "start"], **quiet)  # type: ignore[call-overload]
        try:
            yield f"postgresql://zagent@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run([str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
                           **{**quiet, "check": False})  # type: ignore[call-overload]
    except subprocess.CalledProcessError as exc:
        log = folder / "log"
        raise RuntimeError(f"the throwaway PostgreSQL server did not start: {exc.stderr.decode(errors='replace')}"
                           + (log.read_text(errors="replace") if log.exists() else "")) from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def fresh_database(server_url: str) -> Iterator[str]:
    """The URL of a new, empty database on the server at ``server_url``, dropped at the end."""
    import uuid

    import psycopg

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield server_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(server_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE {name} WITH (FORCE)")
