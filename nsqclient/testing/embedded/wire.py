"""Go-compatible helpers the embedded servers need to reproduce nsqd's bytes exactly.

nsqd's error texts and JSON come from Go: numbers parsed by ``protocol.ByteToBase10`` (unsigned,
wrapping), names quoted with ``%q``, lengths read as signed int32, JSON marshalled with ``<>&``
escaped. This module copies those behaviours, plus :class:`ClientError` (an ``E_*`` error frame to
send, fatal or not) and the strict query-string parser of Go's ``url.ParseQuery``.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Final

__all__ = [
    "NON_FATAL",
    "ClientError",
    "go_json",
    "go_quote",
    "int32_at",
    "parse_base10",
    "parse_query",
    "to_int64",
]

NON_FATAL: Final = frozenset({"E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"})
_U64: Final = (1 << 64) - 1
_I32 = struct.Struct(">i")


class ClientError(Exception):
    """An error frame for the client: ``code`` plus a description (bytes, sent verbatim)."""

    def __init__(self, code: str, desc: str | bytes = b"") -> None:
        self.code = code
        self.desc = desc.encode("utf-8", "surrogateescape") if isinstance(desc, str) else desc
        super().__init__(self.text.decode("utf-8", "replace"))

    @property
    def text(self) -> bytes:
        return self.code.encode() + (b" " + self.desc if self.desc else b"")

    @property
    def fatal(self) -> bool:
        return self.code not in NON_FATAL


def parse_base10(data: bytes) -> int | None:
    """``protocol.ByteToBase10``: digits only (empty is 0), wrapping at 2**64; None on error."""
    if not data:
        return 0
    if not data.isdigit() or not data.isascii():
        return None
    return int(data) & _U64


def to_int64(value: int) -> int:
    """Reinterpret the low 64 bits of ``value`` as a signed int64 (Go's conversions)."""
    value &= _U64
    return value - (1 << 64) if value >> 63 else value


def int32_at(buf: bytes, pos: int = 0) -> int:
    """A big-endian length read the way nsqd reads it: as a signed int32."""
    return int(_I32.unpack_from(buf, pos)[0])


_ESCAPES: Final = {
    0x07: b"\\a",
    0x08: b"\\b",
    0x0C: b"\\f",
    0x0A: b"\\n",
    0x0D: b"\\r",
    0x09: b"\\t",
    0x0B: b"\\v",
    0x22: b'\\"',
    0x5C: b"\\\\",
}


def go_quote(data: bytes) -> bytes:
    """Go's ``%q`` of a string holding ``data``: printable runes kept, the rest escaped."""
    if data.isascii() and all(0x20 <= b < 0x7F and b not in (0x22, 0x5C) for b in data):
        return b'"' + data + b'"'
    out = bytearray(b'"')
    i = 0
    while i < len(data):
        b = data[i]
        if b < 0x80:
            if b in _ESCAPES:
                out += _ESCAPES[b]
            elif 0x20 <= b < 0x7F:
                out.append(b)
            else:
                out += b"\\x%02x" % b
            i += 1
            continue
        rune, size = _decode_rune(data, i)
        if rune is None:
            out += b"\\x%02x" % b
        elif chr(rune).isprintable():
            out += data[i : i + size]
        elif rune < 0x10000:
            out += b"\\u%04x" % rune
        else:
            out += b"\\U%08x" % rune
        i += size
    out += b'"'
    return bytes(out)


def _decode_rune(data: bytes, i: int) -> tuple[int | None, int]:
    for size in (2, 3, 4):
        try:
            text = data[i : i + size].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if len(text) == 1:
            return ord(text), size
    return None, 1


def go_json(value: Any) -> bytes:
    """``json.Marshal``: compact, UTF-8, with ``<``, ``>``, ``&``, U+2028/9 escaped."""
    text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if any(c in text for c in "<>&\u2028\u2029"):
        for raw, esc in (
            ("<", "\\u003c"),
            (">", "\\u003e"),
            ("&", "\\u0026"),
            ("\u2028", "\\u2028"),
            ("\u2029", "\\u2029"),
        ):
            text = text.replace(raw, esc)
    return text.encode("utf-8", "surrogateescape")


_HEX: Final = frozenset(b"0123456789abcdefABCDEF")


def _unescape(part: bytes) -> str:
    """``url.QueryUnescape``: ``+`` is a space; a ``%`` must start two hex digits."""
    if b"%" not in part:
        return part.replace(b"+", b" ").decode("utf-8", "surrogateescape")
    out = bytearray()
    i = 0
    while i < len(part):
        b = part[i]
        if b == 0x25:
            pair = part[i + 1 : i + 3]
            if len(pair) != 2 or not all(c in _HEX for c in pair):
                raise ValueError(f"invalid URL escape {part[i : i + 3]!r}")
            out.append(int(pair, 16))
            i += 3
        else:
            out.append(0x20 if b == 0x2B else b)
            i += 1
    return bytes(out).decode("utf-8", "surrogateescape")


def parse_query(raw: str) -> dict[str, list[str]]:
    """``url.ParseQuery``; raises ValueError where Go returns an error (bad escape, ``;``)."""
    values: dict[str, list[str]] = {}
    error: ValueError | None = None
    for part in raw.encode("utf-8", "surrogateescape").split(b"&"):
        if not part:
            continue
        if b";" in part:
            error = error or ValueError("invalid semicolon separator in query")
            continue
        key, _, value = part.partition(b"=")
        try:
            k, v = _unescape(key), _unescape(value)
        except ValueError as exc:
            error = error or exc
            continue
        values.setdefault(k, []).append(v)
    if error is not None:
        raise error
    return values
