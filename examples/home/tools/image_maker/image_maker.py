"""image_maker: write a solid-colour or gradient PNG to $ZAGENT_OUTPUT_DIR (stdin_json in, json out).

Standard library only: the PNG is assembled by hand with zlib + struct.
"""
import json
import os
import re
import struct
import sys
import zlib

COLOR = re.compile(r"^#([0-9a-fA-F]{6})$")
NAME = re.compile(r"^[a-z0-9_-]{1,40}$")
MAX_SIDE = 1024


def reply(output, is_error=False):
    sys.stdout.write(json.dumps({"output": output, "is_error": is_error}) + "\n")
    return 0


def chunk(kind, data):
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)


def png_bytes(width, height, rgb, gradient):
    r, g, b = rgb
    rows = []
    for y in range(height):
        if gradient:
            f = 1.0 - (y / (height - 1) if height > 1 else 0.0)
            px = bytes((round(r * f), round(g * f), round(b * f)))
        else:
            px = bytes((r, g, b))
        rows.append(b"\x00" + px * width)  # filter type 0 (None) per scanline
    if not gradient:
        rows = [rows[0]] * height
    raw = b"".join(rows)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
            + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def main():
    raw = sys.stdin.read()
    try:
        args = json.loads(raw) if raw.strip() else {}
    except json.JSONDecodeError as e:
        return reply(f"arguments are not valid JSON ({e}); send an object like {{\"color\": \"#ff8800\"}}", True)
    if not isinstance(args, dict):
        return reply("arguments must be a JSON object like {\"color\": \"#ff8800\"}", True)

    color = args.get("color")
    m = COLOR.match(color) if isinstance(color, str) else None
    if not m:
        return reply(f"invalid color {color!r}: use \"#rrggbb\" with exactly six hex digits, "
                     "e.g. \"#ff8800\" (orange) or \"#000000\" (black); names like \"red\" and "
                     "short forms like \"#f80\" are not accepted", True)
    hexv = m.group(1)
    rgb = (int(hexv[0:2], 16), int(hexv[2:4], 16), int(hexv[4:6], 16))

    dims = {}
    for key in ("width", "height"):
        v = args.get(key, 64)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_SIDE:
            return reply(f"invalid {key} {v!r}: use an integer from 1 to {MAX_SIDE} (default 64)", True)
        dims[key] = v

    style = args.get("style", "solid")
    if style not in ("solid", "gradient"):
        return reply(f"invalid style {style!r}: use \"solid\" or \"gradient\"", True)

    name = args.get("name", "image")
    if not isinstance(name, str) or not NAME.match(name):
        return reply(f"invalid name {name!r}: use 1-40 lowercase letters, digits, _ or - "
                     "(no extension, no slashes), e.g. \"orange_swatch\"", True)

    out_dir = os.environ.get("ZAGENT_OUTPUT_DIR")
    if not out_dir:
        return reply("ZAGENT_OUTPUT_DIR is not set: run this tool through zagent "
                     "(zagent tools run image_maker ...), or set it to a writable folder", True)
    path = os.path.abspath(os.path.join(out_dir, name + ".png"))
    try:
        os.makedirs(out_dir, exist_ok=True)
        data = png_bytes(dims["width"], dims["height"], rgb, style == "gradient")
        with open(path, "wb") as f:
            f.write(data)
    except OSError as e:
        return reply(f"could not write {path}: {e.strerror or e}; check that the output folder is writable", True)

    what = (f"a solid {'#' + hexv.lower()} fill" if style == "solid"
            else f"a vertical gradient from {'#' + hexv.lower()} (top) to black (bottom)")
    return reply(f"Wrote {path}: a {dims['width']}x{dims['height']} PNG image ({len(data)} bytes) "
                 f"showing {what}.")


if __name__ == "__main__":
    sys.exit(main())
