"""MCP: a trivial call over ``zagent mcp serve`` beside a bare MCP server and ``zagent tools run``.

A temp home holds ``echo_stdin`` from examples/home (its "python" replaced by this
interpreter). Measured in the same run, client side, per call:

- ``zagent mcp serve`` over stdio: the SDK's ``Client`` against the server as a subprocess,
  the connection kept open, N calls (each validated, run and journaled as a session's call);
- a bare MCP server on the same SDK (``MCPServer`` with one tool that runs the very same
  program with ``subprocess.run``, the same stdin bytes), the same client, N calls;
- ``zagent tools run echo_stdin`` as a process per call (what a client without MCP pays);
- raw ``subprocess.run`` of the tool program, the work itself.

The two MCP servers run side by side and their calls alternate (which goes first flips
every call). Also shown: the time to start each server and be ready for a call (spawn,
``initialize``, ``tools/list``). Medians and means in ms.

    /root/.pyenv/versions/3.11.7/bin/python bench/mcp_calls.py [--quick] [-n CALLS]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "home"
ARGUMENTS = {"name": "world"}

BARE_SERVER = textwrap.dedent("""\
    import json
    import subprocess
    import sys

    from mcp.server.mcpserver import MCPServer

    ARGV = {argv!r}
    server = MCPServer("bare")


    @server.tool()
    def echo_stdin(name: str, times: int = 1) -> str:
        \"\"\"Echo the arguments back (the same program zagent runs).\"\"\"
        arguments = {{"name": name}} | ({{"times": times}} if times != 1 else {{}})
        done = subprocess.run(ARGV, input=json.dumps(arguments).encode(), capture_output=True, cwd={cwd!r})
        return (done.stdout + done.stderr).decode()


    server.run()
""")


def make_home(root: Path) -> tuple[Path, Path, list[str]]:
    home, workspace = root / "home", root / "workspace"
    shutil.copytree(EXAMPLES / "tools" / "echo_stdin", home / "tools" / "echo_stdin")
    manifest = home / "tools" / "echo_stdin" / "echo_stdin.json"
    data = json.loads(manifest.read_text())
    data["command"][0] = sys.executable
    manifest.write_text(json.dumps(data, indent=2))
    workspace.mkdir()
    argv = [sys.executable, str(home / "tools" / "echo_stdin" / "echo_stdin.py")]
    (root / "bare.py").write_text(BARE_SERVER.format(argv=argv, cwd=str(workspace)))
    return home, workspace, argv


def summary(values: list[float]) -> tuple[float, float]:
    return statistics.median(values), statistics.mean(values)


async def measure(home: Path, workspace: Path, bare: Path, calls: int) -> dict[str, list[float]]:
    zagent = StdioServerParameters(command=sys.executable, args=[
        "-m", "zagent_cli", "--home", str(home), "--workspace", str(workspace), "mcp", "serve"])
    plain = StdioServerParameters(command=sys.executable, args=[str(bare)], cwd=str(workspace))
    times: dict[str, list[float]] = {"zagent": [], "bare": [], "zagent start": [], "bare start": []}

    async def one(client: Client, into: list[float]) -> None:
        start = time.perf_counter()
        result = await client.call_tool("echo_stdin", ARGUMENTS)
        into.append((time.perf_counter() - start) * 1000)
        assert not result.is_error and "Hello, world!" in str(result.content[0]), result

    with open(os.devnull, "w") as quiet:  # the servers' stderr (zagent says where it serves)
        start = time.perf_counter()
        async with Client(stdio_client(zagent, errlog=quiet)) as z_client:
            await z_client.list_tools()
            times["zagent start"].append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
            async with Client(stdio_client(plain, errlog=quiet)) as b_client:
                await b_client.list_tools()
                times["bare start"].append((time.perf_counter() - start) * 1000)
                for _ in range(5):  # warm-up: both servers' imports, page cache, the journal's statements
                    await one(z_client, [])
                    await one(b_client, [])
                for i in range(calls):
                    first, second = ((z_client, times["zagent"]), (b_client, times["bare"]))[:: 1 if i % 2 else -1]
                    await one(*first)
                    await one(*second)
    return times


def per_process(home: Path, workspace: Path, argv: list[str], calls: int) -> tuple[list[float], list[float]]:
    """``zagent tools run`` (a process per call) and the raw program, alternating."""
    command = [sys.executable, "-m", "zagent_cli", "--home", str(home), "--workspace", str(workspace), "tools", "run",
               "echo_stdin", "--args", json.dumps(ARGUMENTS)]
    stdin = json.dumps(ARGUMENTS).encode()
    cli: list[float] = []
    raw: list[float] = []
    for i in range(calls + 2):
        for which in ((0, 1) if i % 2 else (1, 0)):
            start = time.perf_counter()
            if which == 0:
                done = subprocess.run(command, capture_output=True, stdin=subprocess.DEVNULL)
            else:
                done = subprocess.run(argv, input=stdin, capture_output=True, cwd=workspace)
            elapsed = (time.perf_counter() - start) * 1000
            assert done.returncode == 0 and b"Hello, world!" in done.stdout, done
            if i >= 2:  # the first two warm up
                (cli if which == 0 else raw).append(elapsed)
    return cli, raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="20 MCP calls of each and 5 processes")
    parser.add_argument("-n", "--calls", type=int, help="MCP calls of each server (default 200, quick 20)")
    parser.add_argument("--processes", type=int, help="zagent tools run processes (default 30, quick 5)")
    args = parser.parse_args()
    calls = args.calls or (20 if args.quick else 200)
    processes = args.processes or (5 if args.quick else 30)

    with tempfile.TemporaryDirectory(prefix="zagent-bench-") as tmp:
        home, workspace, argv = make_home(Path(tmp))
        times = anyio.run(measure, home, workspace, Path(tmp) / "bare.py", calls)
        cli, raw = per_process(home, workspace, argv, processes)

    print(f"MCP: one trivial call (echo_stdin, stdin_json -> text) over stdio (Python {sys.version.split()[0]}, "
          f"{os.cpu_count()} cpus, journal synchronous=FULL, the default)")
    print(f"{calls} calls of each MCP server on an open connection, alternating; {processes} processes of "
          "zagent tools run and of the raw program, alternating")
    print()
    header = f"{'':<52} {'median ms':>10} {'mean ms':>9} {'n':>5}"
    print(header)
    print("-" * len(header))
    rows = [
        ("zagent mcp serve: tools/call", times["zagent"]),
        ("bare MCPServer (subprocess.run of the program)", times["bare"]),
        ("zagent tools run (a process per call)", cli),
        ("raw subprocess.run of the program", raw),
        ("zagent mcp serve: start + initialize + tools/list", times["zagent start"]),
        ("bare MCPServer: start + initialize + tools/list", times["bare start"]),
    ]
    for label, values in rows:
        median, mean = summary(values)
        print(f"{label:<52} {median:>10.2f} {mean:>9.2f} {len(values):>5}")
    z, b = statistics.median(times["zagent"]), statistics.median(times["bare"])
    print()
    print(f"zagent over MCP vs the bare server: {z / b:.2f}x ({z - b:+.2f} ms a call: validation, the call folder, "
          "the journal's transactions, the result)")
    print(f"zagent over MCP vs zagent tools run: {statistics.median(cli) / z:.1f}x faster a call")


if __name__ == "__main__":
    main()
