"""The wire format between host and sandbox: length-prefixed JSON frames and a data-only value codec.

Shared by :mod:`infra.sandbox.harness` (inside the sandbox, where it is bound next to the harness) and
the host. Standard library only. :func:`decode` builds builtin values only, never objects of the
sender's choosing, which is what keeps a hostile job's answers inert on the host.
"""

from __future__ import annotations

import base64
import json
import socket
import struct

HEADER = struct.Struct(">I")
_BIG_INT = 1 << 900


class ProtocolError(Exception):
    """A frame or value on the wire that does not follow the protocol."""


# --------------------------------------------------------------------------------------------- framing
def send_frame(sock: socket.socket, obj: object) -> None:
    """Send one length-prefixed JSON frame."""
    data = json.dumps(obj, separators=(",", ":")).encode()
    sock.sendall(HEADER.pack(len(data)) + data)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            raise EOFError("channel closed")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def recv_frame(sock: socket.socket, max_bytes: int) -> object:
    """Receive one frame; a frame over ``max_bytes`` or not JSON raises :class:`ProtocolError`."""
    (size,) = HEADER.unpack(_recv_exact(sock, HEADER.size))
    if size > max_bytes:
        raise ProtocolError(f"frame of {size} bytes exceeds the {max_bytes}-byte limit")
    try:
        return json.loads(_recv_exact(sock, size))
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"undecodable frame: {exc}") from None


# ----------------------------------------------------------------------------------------------- codec
def encode(value: object, handles: dict[int, object] | None = None) -> object:
    """Encode a value as tagged JSON; an object that is not plain data becomes a handle (or raises)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return {"I": hex(int(value))} if abs(value) >= _BIG_INT else int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, list):
        return [encode(v, handles) for v in value]
    if isinstance(value, tuple):
        return {"t": [encode(v, handles) for v in value]}
    if isinstance(value, dict):
        return {"d": [[encode(k, handles), encode(v, handles)] for k, v in value.items()]}
    if isinstance(value, (set, frozenset)):
        return {"s" if isinstance(value, set) else "f": [encode(v, handles) for v in value]}
    if isinstance(value, (bytes, bytearray)):
        return {"b": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, complex):
        return {"c": [value.real, value.imag]}
    tolist = getattr(value, "tolist", None)  # numpy scalars and arrays
    if callable(tolist) and type(value).__module__.startswith("numpy"):
        return encode(tolist(), handles)
    if handles is None:
        raise TypeError(f"cannot encode {type(value).__name__}")
    handles[id(value)] = value
    return {"h": id(value)}


_SCALARS = (type(None), bool, int, float, str)
#: Deepest nesting :func:`decode` accepts (a list in a list … counts one level each). Honest answers nest
#: far less; the bound keeps decoding far from the interpreter's recursion limit, whatever the sender did.
MAX_DEPTH = 200
#: Most values (containers and scalars) one :func:`decode` call builds; frames are size-capped as well.
MAX_NODES = 1 << 21


def decode(obj: object, handle_factory=None) -> object:
    """Decode tagged JSON into builtin values only; anything unexpected raises :class:`ProtocolError`.

    Nesting deeper than :data:`MAX_DEPTH` or more than :data:`MAX_NODES` values is refused (a
    ``ProtocolError``, never a ``RecursionError``), so a hostile answer cannot exhaust the host's stack.
    """
    budget = [MAX_NODES]
    try:
        return _decode(obj, handle_factory, 0, budget)
    except RecursionError:  # a caller already deep in its own stack: still a clean protocol failure
        raise ProtocolError("value nests too deeply to decode") from None


def _decode(obj: object, factory, depth: int, budget: list[int]) -> object:
    budget[0] -= 1
    if budget[0] < 0:
        raise ProtocolError(f"value has more than {MAX_NODES} parts")
    if isinstance(obj, _SCALARS):
        return obj
    if depth >= MAX_DEPTH:
        raise ProtocolError(f"value nests deeper than {MAX_DEPTH} levels")
    depth += 1
    if isinstance(obj, list):
        return [_decode(v, factory, depth, budget) for v in obj]
    if not isinstance(obj, dict) or len(obj) != 1:
        raise ProtocolError("malformed value")
    ((tag, body),) = obj.items()
    try:
        if tag == "t":
            return tuple(_decode(v, factory, depth, budget) for v in _items(body))
        if tag == "d":
            return {
                _decode(k, factory, depth, budget): _decode(v, factory, depth, budget)
                for k, v in _items(body)
            }
        if tag == "s":
            return {_decode(v, factory, depth, budget) for v in _items(body)}
        if tag == "f":
            return frozenset(_decode(v, factory, depth, budget) for v in _items(body))
        if tag == "b":
            return base64.b64decode(body, validate=True)
        if tag == "c":
            return complex(float(body[0]), float(body[1]))
        if tag == "I":
            return int(body, 16)
        if tag == "h" and factory is not None and isinstance(body, int) and not isinstance(body, bool):
            return factory(body)
    except (TypeError, ValueError, IndexError, KeyError) as exc:
        raise ProtocolError(f"malformed {tag!r} value: {exc}") from None
    raise ProtocolError(f"unknown value tag {tag!r}")


def _items(body: object) -> list:
    if not isinstance(body, list):
        raise ProtocolError("malformed container value")
    return body
