"""Feather's file tools as they run inside the episode's sandbox: read, edit, write, grep, glob.

Run by :func:`infra.agents.feather.shell.helper_call` as ``python -I -S -B /opt/rufus-feather/files.py REQ``
in the sandbox, as the job uid, one process (one round trip) per call; REQ is base64 JSON or ``@PATH`` of a
JSON file the host staged; the output is one JSON header line, then the tool's text. ``unpack`` (the
workspace archive) and ``peek`` (background output) serve the harness. Standard library only (bound into
the sandbox alone); hand-written because these rules are the harness's contract:

* every path resolves (links followed) inside the workspace root or is refused: ``..``, absolute paths
  elsewhere, links pointing out. The sandbox is the security boundary; this is the tools' promise;
* ``read`` numbers lines like ``cat -n`` within ``offset``/``limit`` and a byte budget and returns the
  sha256 of the whole file; an image answers :data:`VISION` only;
* ``edit`` and an overwriting ``write`` refuse unless the file's sha256 equals the host's record of its
  last read (``records``); ``old_string`` must occur once unless ``replace_all``; both return the new hash;
* ``grep`` (regex per line, optional glob filter) and ``glob`` stop at ``limit`` results and say
  ``truncated: true``; files are visited in sorted order.

The model's errors (and ``OSError`` on its files: no space, permissions) are ``{"ok": false, "error"}``
replies; a crash of this program is an environment failure on the host.
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import json
import os
import re
import stat
import sys
import tarfile
from collections.abc import Iterator

ROOT = "/app"
OUTPUTS = "/tmp/rufus_outputs/"  # the harbor runtime's root-owned folder of background output
VISION = "Vision is not available in this environment."
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp")
MAX_FILE_BYTES = 32 << 20  # larger files are for bash (head, sed, split)
LINE_CHARS = 2000  # a longer line is cut in read output
MATCH_CHARS = 300  # a grep hit shows this much of its line


class PolicyError(Exception):
    """A refusal caused by the model's call: its text goes back to the model as the tool's error."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def resolve(root: str, path: object, what: str = "file_path") -> str:
    """Return the real path of ``path`` (relative to ``root`` or absolute); refuse it outside ``root``."""
    if not isinstance(path, str) or not path.strip() or "\0" in path:
        raise PolicyError(f"{what} must be a non-empty path")
    real = os.path.realpath(os.path.join(root, path.strip()))
    if real != root and not real.startswith(root + "/"):
        raise PolicyError(f"{path.strip()} is outside the workspace {root}")
    return real


def _load(real: str) -> bytes:
    """Return the bytes of the regular file ``real`` (not followed if it became a link)."""
    try:
        st = os.lstat(real)
    except FileNotFoundError:
        raise PolicyError(f"{real} does not exist") from None
    if stat.S_ISDIR(st.st_mode):
        raise PolicyError(f"{real} is a directory")
    if not stat.S_ISREG(st.st_mode):
        raise PolicyError(f"{real} is not a regular file")
    if st.st_size > MAX_FILE_BYTES:
        raise PolicyError(f"{real} has {st.st_size} bytes, more than the file tools take ({MAX_FILE_BYTES})")
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        return fh.read(MAX_FILE_BYTES + 1)


def _text(real: str, data: bytes) -> str:
    if b"\0" in data[:8192]:
        raise PolicyError(f"{real} is a binary file ({len(data)} bytes), not text")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise PolicyError(f"{real} is not UTF-8 text ({len(data)} bytes)") from None


def _store(real: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(real), exist_ok=True)
    fd = os.open(real, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _fresh(real: str, data: bytes, records: dict[str, str], doing: str) -> None:
    """Refuse to change ``real`` unless the host's record of its last read matches its bytes now."""
    seen = records.get(real)
    if seen is None:
        raise PolicyError(f"{real} has not been read; read it before {doing} it")
    if seen != sha256(data):
        raise PolicyError(f"{real}: file changed since it was read; read it again before {doing} it")


def read(root: str, args: dict, records: dict, budget: int) -> tuple[dict, str]:
    real = resolve(root, args.get("file_path"))
    if real.lower().endswith(IMAGE_SUFFIXES) and os.path.isfile(real):
        return {"ok": True, "image": True}, VISION
    data = _load(real)
    lines = _text(real, data).split("\n")
    if lines[-1] == "":
        lines.pop()
    n, offset, limit = len(lines), int(args.get("offset") or 1), int(args["limit"])
    head = {"ok": True, "path": real, "sha256": sha256(data), "lines": n}
    if n == 0:
        return head, "(empty file)"
    if offset > n:
        return head, f"(the file has {n} lines; offset {offset} is past its end)"
    rows: list[str] = []
    used, last = 0, offset - 1
    for i in range(offset - 1, min(n, offset - 1 + limit)):
        line = lines[i].removesuffix("\r")
        if len(line) > LINE_CHARS:
            line = line[:LINE_CHARS] + f" [line cut at {LINE_CHARS} characters]"
        row = f"{i + 1:>6}\t{line}\n"
        used += len(row.encode())
        if used > budget and rows:
            break
        rows.append(row)
        last = i + 1
    if last < n or offset > 1:
        rows.append(f"[lines {offset}-{last} of {n}]")
    return head, "".join(rows).rstrip("\n")


def edit(root: str, args: dict, records: dict, _budget: int) -> tuple[dict, str]:
    old, new, every = args["old_string"], args["new_string"], bool(args.get("replace_all"))
    if old == "":
        raise PolicyError("old_string is empty; write creates or replaces a whole file")
    if old == new:
        raise PolicyError("old_string and new_string are identical")
    real = resolve(root, args.get("file_path"))
    data = _load(real)
    _fresh(real, data, records, "editing")
    text = _text(real, data)
    count = text.count(old)
    if count == 0:
        raise PolicyError(f"old_string was not found in {real}")
    if count > 1 and not every:
        raise PolicyError(
            f"old_string occurs {count} times in {real}; include more surrounding text to make it unique, "
            "or set replace_all"
        )
    out = (text.replace(old, new) if every else text.replace(old, new, 1)).encode()
    _store(real, out)
    done = count if every else 1
    return {"ok": True, "path": real, "sha256": sha256(out), "replacements": done}, (
        f"Edited {real}: {done} replacement{'s' if done > 1 else ''}."
    )


def write(root: str, args: dict, records: dict, _budget: int) -> tuple[dict, str]:
    real = resolve(root, args.get("file_path"))
    out = str(args["content"]).encode()
    if len(out) > MAX_FILE_BYTES:
        raise PolicyError(f"content has {len(out)} bytes, more than the {MAX_FILE_BYTES} write takes")
    created = not os.path.lexists(real)
    if not created:
        _fresh(real, _load(real), records, "overwriting")
    _store(real, out)
    verb = "Created" if created else "Wrote"
    return {"ok": True, "path": real, "sha256": sha256(out), "created": created}, (
        f"{verb} {real} ({len(out)} bytes)."
    )


def _translate(pattern: str) -> str:
    """Regex source of a glob: ``**/`` any directories, ``*``/``?`` within a name, ``[..]``, ``{a,b}``."""
    out, i = [], 0
    while i < len(pattern):
        c, rest = pattern[i], pattern[i:]
        if rest.startswith("**/"):
            piece, i = "(?:[^/]*/)*", i + 3
        elif rest.startswith("**"):
            piece, i = ".*", i + 2
        elif c in "*?":
            piece, i = "[^/]*" if c == "*" else "[^/]", i + 1
        elif c == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            piece, i = "[" + re.sub(r"\A!", "^", body).replace("\\", "\\\\") + "]", end + 1
        elif c == "{" and "}" in rest:
            end = pattern.index("}", i)
            piece, i = "(?:" + "|".join(map(_translate, pattern[i + 1 : end].split(","))) + ")", end + 1
        else:
            piece, i = re.escape(c), i + 1
        out.append(piece)
    return "".join(out)


def glob_regex(pattern: str) -> re.Pattern[str]:
    """Compiled full-match regex of glob ``pattern`` over ``/``-separated relative paths."""
    try:
        return re.compile(_translate(pattern) + r"\Z")
    except re.error as exc:
        raise PolicyError(f"invalid glob pattern {pattern!r}: {exc}") from None


def _files(root: str, base: str) -> Iterator[str]:
    """Regular files under ``base`` in sorted order; links are kept only when they resolve inside ``root``."""
    if os.path.isfile(base):
        yield base
        return
    if not os.path.isdir(base):
        raise PolicyError(f"{base} does not exist")
    found = []
    for dirpath, dirnames, filenames in os.walk(base):  # links to directories are not descended
        dirnames.sort()
        for name in filenames:
            path = os.path.join(dirpath, name)
            real = os.path.realpath(path)
            if (real == root or real.startswith(root + "/")) and os.path.isfile(real):
                found.append(path)
    yield from sorted(found)


def grep(root: str, args: dict, _records: dict, budget: int) -> tuple[dict, str]:
    flags = re.IGNORECASE if args.get("ignore_case") else 0
    try:
        rx = re.compile(str(args["pattern"]), flags)
    except re.error as exc:
        raise PolicyError(f"invalid regular expression {args['pattern']!r}: {exc}") from None
    base, limit = resolve(root, args.get("path") or ".", "path"), int(args["limit"])
    only = args.get("glob")
    filt = glob_regex(only) if only else None
    hits: list[str] = []
    used, truncated = 0, False
    for path in _files(root, base):
        name = os.path.basename(path) if "/" not in str(only) else _rel(path, base)
        if filt is not None and not filt.match(name):
            continue
        try:
            data = _load(path)
        except (PolicyError, OSError):
            continue
        if b"\0" in data[:8192]:
            continue
        for number, line in enumerate(data.decode("utf-8", errors="replace").split("\n"), 1):
            if rx.search(line):
                hit = f"{_rel(path, root)}:{number}: {line.removesuffix(chr(13))[:MATCH_CHARS]}"
                used += len(hit.encode()) + 1
                if len(hits) >= limit or used > budget:
                    truncated = True
                    break
                hits.append(hit)
        if truncated:
            break
    return _listing(hits, truncated, "matches", "No matches.")


def glob(root: str, args: dict, _records: dict, budget: int) -> tuple[dict, str]:
    pattern = str(args["pattern"]).strip()
    pattern = pattern[len(root) + 1 :] if pattern.startswith(root + "/") else pattern
    if not pattern or pattern.startswith("/") or ".." in pattern.split("/"):
        raise PolicyError(f"glob pattern {args['pattern']!r} must be relative to the search path")
    base, limit, rx = resolve(root, args.get("path") or ".", "path"), int(args["limit"]), glob_regex(pattern)
    hits, used, truncated = [], 0, False
    for path in _files(root, base):
        if rx.match(_rel(path, base)):
            used += len(_rel(path, root).encode()) + 1
            if len(hits) >= limit or used > budget:
                truncated = True
                break
            hits.append(_rel(path, root))
    return _listing(hits, truncated, "files", "No files matched.")


def _rel(path: str, base: str) -> str:
    return os.path.relpath(path, base) if os.path.isdir(base) else os.path.basename(path)


def _listing(hits: list[str], truncated: bool, noun: str, empty: str) -> tuple[dict, str]:
    tail = f"truncated: true (the first {len(hits)} {noun} are shown)" if truncated else "truncated: false"
    text = "\n".join([*hits, tail] if hits else [empty, tail])
    return {"ok": True, "count": len(hits), "truncated": truncated}, text


def unpack(root: str, args: dict, _records: dict, _budget: int) -> tuple[dict, str]:
    """Extract the workspace archive into ``root`` (tarfile's ``data`` filter: nothing lands outside)."""
    with tarfile.open(str(args["archive"])) as tar:
        files = sum(m.isfile() for m in tar.getmembers())
        tar.extractall(root, filter="data")
    return {"ok": True, "files": files}, ""


def peek(_root: str, args: dict, _records: dict, max_bytes: int) -> tuple[dict, str]:
    """New output of background tasks from their offsets (cut at a character boundary) and exit codes."""
    tasks = list(args["tasks"])
    per = max_bytes // max(2 * len(tasks), 1)
    infos, parts, texts = [], [], []
    for task in tasks:
        info: dict = {}
        for stream in ("out", "err"):
            path, offset = str(task[stream]), int(task[f"{stream}_off"])
            if not path.startswith(OUTPUTS):
                raise ValueError(f"peek: {path} is not a background output file")
            try:
                with open(path, "rb") as fh:
                    size = os.fstat(fh.fileno()).st_size
                    fh.seek(offset)
                    data = fh.read(max(min(per, size - offset), 0))
            except FileNotFoundError:
                size, data = 0, b""
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            text = decoder.decode(data)
            info[f"{stream}_off"] = offset + len(data) - len(decoder.getstate()[0])
            info[f"{stream}_size"] = size
            parts.append(len(text))
            texts.append(text)
        try:
            with open(str(task["exit"])) as fh:
                info["exit"] = int(fh.read().strip())
        except (OSError, ValueError):
            info["exit"] = None
        infos.append(info)
    return {"ok": True, "tasks": infos, "parts": parts}, "".join(texts)


def handle(request: dict, root: str = ROOT) -> tuple[dict, str]:
    """Run one request; a policy error or an ``OSError`` of the model's files is an ``ok: false`` reply."""
    op = OPS[request["op"]]
    args, records = request.get("args") or {}, request.get("records") or {}
    try:
        return op(root, args, records, int(request.get("max_bytes", 16384)))
    except PolicyError as exc:
        return {"ok": False, "error": str(exc)}, ""
    except OSError as exc:
        return {"ok": False, "error": f"{exc.strerror or exc}: {exc.filename or ''}".rstrip(": ")}, ""


OPS = {"read": read, "edit": edit, "write": write, "grep": grep, "glob": glob, "unpack": unpack, "peek": peek}


def main(argv: list[str]) -> None:
    raw = argv[1]
    if raw.startswith("@"):
        with open(raw[1:], "rb") as fh:
            request = json.loads(fh.read())
    else:
        request = json.loads(base64.b64decode(raw))
    head, text = handle(request)
    sys.stdout.write(json.dumps(head, ensure_ascii=False) + "\n" + text)


if __name__ == "__main__":
    main(sys.argv)
