"""Java's DataInput over an in-memory buffer: the primitives Flink's state formats are written with.

Every read is bounds-checked and a short or malformed read raises ``FlinkStateError`` naming the file
and the byte position, so a truncated or corrupt file can never decode into a value. Reads go through
precompiled ``struct`` formats on the whole buffer (no per-byte Python loops, no copies but the slices
asked for), which keeps a 1,000-partition checkpoint cheap to decode.
"""

from __future__ import annotations

import struct
from typing import Final

from app.errors import FlinkStateError

_I8: Final = struct.Struct(">b")
_U16: Final = struct.Struct(">H")
_I16: Final = struct.Struct(">h")
_I32: Final = struct.Struct(">i")
_I64: Final = struct.Struct(">q")
_I32_I32: Final = struct.Struct(">ii")


def decode_modified_utf8(raw: bytes) -> str:
    """Java's modified UTF-8 (DataOutput.writeUTF) -> str; ValueError when Java would reject it.

    Modified UTF-8 differs from UTF-8 in two ways: NUL is the two bytes C0 80, and a character
    outside the BMP is its two UTF-16 surrogates, each encoded as three bytes (4-byte forms are invalid).
    """
    if raw.isascii():
        return raw.decode("ascii")
    if any(b >= 0xF0 for b in raw):
        raise ValueError("4-byte sequence in modified UTF-8")
    text = raw.replace(b"\xc0\x80", b"\x00").decode("utf-8", "surrogatepass")
    # Re-pair the surrogates Java wrote one by one; a lone surrogate stays as Java keeps it.
    return text.encode("utf-16-be", "surrogatepass").decode("utf-16-be", "surrogatepass")


class DataInput:
    """A cursor over ``data`` reading big-endian Java primitives; errors name ``source``."""

    __slots__ = ("data", "end", "pos", "source")

    def __init__(self, data: bytes, source: str, pos: int = 0, end: int | None = None) -> None:
        self.data = data
        self.pos = pos
        self.end = len(data) if end is None else end
        self.source = source

    def fail(self, reason: str, at: int | None = None) -> FlinkStateError:
        """The error for ``reason`` at the current (or the given) byte position."""
        return FlinkStateError(self.source, f"{reason} (at byte {self.pos if at is None else at})")

    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int, what: str) -> int:
        start = self.pos
        if n < 0 or start + n > self.end:
            raise self.fail(f"truncated: {what} needs {n} bytes, {self.end - start} left")
        self.pos = start + n
        return start

    def i8(self, what: str) -> int:
        value: int = _I8.unpack_from(self.data, self._need(1, what))[0]
        return value

    def u8(self, what: str) -> int:
        return self.data[self._need(1, what)]

    def boolean(self, what: str) -> bool:
        value = self.u8(what)
        if value > 1:
            raise self.fail(f"{what}: {value} is not a boolean", self.pos - 1)
        return value == 1

    def i16(self, what: str) -> int:
        value: int = _I16.unpack_from(self.data, self._need(2, what))[0]
        return value

    def i32(self, what: str) -> int:
        value: int = _I32.unpack_from(self.data, self._need(4, what))[0]
        return value

    def i64(self, what: str) -> int:
        value: int = _I64.unpack_from(self.data, self._need(8, what))[0]
        return value

    def count(self, what: str, item_size: int = 1) -> int:
        """A non-negative int count, checked against the bytes left so a corrupt one cannot loop long."""
        at = self.pos
        n = self.i32(what)
        if n < 0 or n * item_size > self.end - self.pos:
            raise self.fail(f"{what}: count {n} does not fit the {self.end - self.pos} bytes left", at)
        return n

    def i64_array(self, n: int, what: str) -> tuple[int, ...]:
        start = self._need(8 * n, what)
        return struct.unpack_from(f">{n}q", self.data, start) if n else ()

    def raw(self, n: int, what: str) -> bytes:
        start = self._need(n, what)
        return self.data[start : start + n]

    def skip(self, n: int, what: str) -> None:
        self._need(n, what)

    def utf(self, what: str) -> str:
        """DataInput.readUTF: an unsigned 16-bit byte length, then modified UTF-8."""
        n: int = _U16.unpack_from(self.data, self._need(2, what))[0]
        start = self._need(n, what)
        try:
            return decode_modified_utf8(self.data[start : start + n])
        except ValueError as exc:
            raise self.fail(f"{what}: not modified UTF-8 ({exc})", start) from exc


def unpack_i32_pair(data: bytes, pos: int) -> tuple[int, int]:
    """Two big-endian ints at ``pos`` (the caller has checked the bounds)."""
    first, second = _I32_I32.unpack_from(data, pos)
    return first, second
