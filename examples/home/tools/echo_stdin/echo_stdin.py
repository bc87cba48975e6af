"""echo_stdin: the arguments arrive as one JSON object on stdin (input: stdin_json, output: text)."""
import json
import sys


def main():
    raw = sys.stdin.read()
    try:
        args = json.loads(raw)
    except json.JSONDecodeError as e:
        print(f"stdin is not valid JSON ({e}); expected an object like {{\"name\": \"Ada\"}}", file=sys.stderr)
        return 2
    if not isinstance(args, dict):
        print(f"expected a JSON object on stdin, got {type(args).__name__}", file=sys.stderr)
        return 2
    name, times = args.get("name"), args.get("times", 1)
    if not isinstance(name, str):
        print("\"name\" must be a string, e.g. {\"name\": \"Ada\"}", file=sys.stderr)
        return 2
    if isinstance(times, bool) or not isinstance(times, int) or not 1 <= times <= 5:
        print(f"\"times\" must be an integer from 1 to 5 (got {times!r}); omit it for 1", file=sys.stderr)
        return 2
    print(f"Received {len(args)} argument(s) on stdin:")
    for key, value in args.items():
        print(f"  {key} = {json.dumps(value, ensure_ascii=False)}")
    for _ in range(times):
        print(f"Hello, {name}!")
    return 0


if __name__ == "__main__":
    sys.exit(main())
