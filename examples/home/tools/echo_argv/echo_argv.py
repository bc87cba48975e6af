"""echo_argv: the arguments arrive as JSON in the last argv element (input: args_json, output: text)."""
import json
import sys


def main():
    if len(sys.argv) < 2:
        print("no arguments JSON on the command line; run as: python echo_argv.py '{\"name\": \"Ada\"}'",
              file=sys.stderr)
        return 2
    try:
        args = json.loads(sys.argv[-1])
    except json.JSONDecodeError as e:
        print(f"last argument is not valid JSON ({e}); expected an object like {{\"name\": \"Ada\"}}",
              file=sys.stderr)
        return 2
    if not isinstance(args, dict):
        print(f"expected a JSON object as the last argument, got {type(args).__name__}", file=sys.stderr)
        return 2
    print(f"argv has {len(sys.argv) - 1} argument(s); the last one parsed as JSON:")
    print(json.dumps(args, indent=2, ensure_ascii=False))
    name, times = args.get("name"), args.get("times", 1)
    if not isinstance(name, str):
        print("\"name\" must be a string, e.g. {\"name\": \"Ada\"}", file=sys.stderr)
        return 2
    if isinstance(times, bool) or not isinstance(times, int) or not 1 <= times <= 5:
        print(f"\"times\" must be an integer from 1 to 5 (got {times!r}); omit it for 1", file=sys.stderr)
        return 2
    for _ in range(times):
        print(f"Hello, {name}!")
    return 0


if __name__ == "__main__":
    sys.exit(main())
