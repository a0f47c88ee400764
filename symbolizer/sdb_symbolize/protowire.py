"""Protocol Buffers' wire encoding, by hand (https://protobuf.dev/programming-guides/encoding/):
the few field kinds a writer of proto3 messages needs, each returning the field's bytes (its tag
and its payload). A message is the concatenation of its fields; an embedded message is a
length-delimited field holding those bytes. Fields at their default (0, "", empty) are left out,
as proto3 serializers do, except where `keep` says the field must be present.

The OTLP encoder (reporters/otlp.py) writes its messages with these and never with generated
classes, so the classes of the `opentelemetry-proto` package stay an independent reader of its
output (the tests decode with them)."""
from __future__ import annotations

import struct
import sys
from array import array
from typing import Iterable, Sequence

_VARINT = 0
_FIXED64 = 1
_LEN = 2

_U64 = (1 << 64) - 1


def _varint(v: int) -> bytes:
    """An unsigned varint: 7 bits a byte, low first, the high bit set on all but the last (3 to 5
    bytes written out: a pprof's values, a count of nanoseconds, are mostly these)."""
    if v >= 1 << 14:                    # smaller ones: the loop below (once each, for _SMALL)
        if v < 1 << 21:
            return bytes((v & 0x7F | 0x80, v >> 7 & 0x7F | 0x80, v >> 14))
        if v < 1 << 28:
            return bytes((v & 0x7F | 0x80, v >> 7 & 0x7F | 0x80, v >> 14 & 0x7F | 0x80, v >> 21))
        if v < 1 << 35:
            return bytes((v & 0x7F | 0x80, v >> 7 & 0x7F | 0x80, v >> 14 & 0x7F | 0x80, v >> 21 & 0x7F | 0x80,
                          v >> 28))
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


_SMALL = [_varint(v) for v in range(1 << 14)]     # every 1- and 2-byte varint: most indices and tags


def varint(v: int) -> bytes:
    """An unsigned varint; a negative int64/int32 as its 64-bit two's complement (10 bytes), as
    protobuf encodes them."""
    if 0 <= v < 16384:
        return _SMALL[v]
    return _varint(v & _U64 if v < 0 else v)


def tag(field: int, wire_type: int) -> bytes:
    return varint((field << 3) | wire_type)


def uint(field: int, v: int, keep: bool = False) -> bytes:
    """A varint field (int32, int64, uint32, uint64, bool); nothing for 0 unless `keep`."""
    if not v and not keep:
        return b""
    return tag(field, _VARINT) + varint(v)


def fixed64(field: int, v: int) -> bytes:
    """A fixed64 field (8 bytes, little endian); nothing for 0."""
    if not v:
        return b""
    return tag(field, _FIXED64) + struct.pack("<Q", v & _U64)


def message(field: int, body: bytes, keep: bool = False) -> bytes:
    """An embedded message (or bytes) field holding `body`; nothing for an empty one unless `keep`
    (an element of a repeated field is always kept: its presence is its meaning)."""
    if not body and not keep:
        return b""
    return tag(field, _LEN) + varint(len(body)) + body


def string(field: int, text: str, keep: bool = False) -> bytes:
    """A string field: `text` as UTF-8. A string the trace read from the target is data and goes in
    as it is (no escaping in a binary field); protobuf requires valid UTF-8, so a lone surrogate (a
    string decoded with surrogateescape somewhere upstream) becomes U+FFFD rather than failing."""
    return message(field, utf8(text), keep)


def utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text).encode("utf-8")


def packed_varints(field: int, values: Iterable[int]) -> bytes:
    """A packed repeated varint field (repeated int32/int64/uint64 in proto3); nothing when empty."""
    small = _SMALL
    body = b"".join([small[v] if 0 <= v < 16384 else varint(v) for v in values])
    return message(field, body)


def repeated_varint(field: int, v: int, n: int) -> bytes:
    """A packed repeated varint field of `n` copies of `v` (a profile's per-sample values)."""
    if n <= 0:
        return b""
    return message(field, varint(v) * n)


def packed_fixed64(field: int, values: Sequence[int]) -> bytes:
    """A packed repeated fixed64 field (timestamps): 8 little-endian bytes each; nothing when empty."""
    if not len(values):
        return b""
    a = values if isinstance(values, array) and values.typecode == "Q" else array("Q", values)
    if sys.byteorder != "little":
        a = array("Q", a)
        a.byteswap()
    return message(field, a.tobytes())
