"""Reading Ruby objects out of the target: strings, ISeq locations, lines from a pc.

Every read goes through `Sampler.read_memory` (process_vm_readv) and may fail: the
object can be freed or moved between the sample and this read. Failures raise
`RemoteReadError`, which says what was being read; callers record the symbol as
unknown rather than guess. All offsets come from the layout the gem published.
"""
from __future__ import annotations

import struct
from typing import Dict, Optional, Tuple

NA = 0xFFFF
T_MASK = 0x1F
T_STRING = 0x05
T_ARRAY = 0x07
T_IMEMO = 0x1A
IMEMO_ISEQ = 7
IMEMO_MENT = 6
ID_ENTRY_UNIT = 512  # symbol.c: ids is an Array of 512-entry chunks of [String, Symbol] pairs
MAX_STRING = 64 * 1024
IMM_TABLE = 54  # succ_index_table: ranks of the first 54 positions are kept immediately
MAX_ISEQ_SIZE = 1 << 22  # instruction words; larger means the ISeq was freed and its memory reused


class RemoteReadError(Exception):
    pass


class RemoteRuby:
    def __init__(self, sampler, layout: dict):
        self._read = sampler.read_memory
        self.L = layout
        self._lines: Dict[int, Optional[tuple]] = {}  # iseq -> (encoded, size, entries, table)

    # ------------------------------------------------------------ primitives
    def read(self, addr: int, n: int, what: str) -> bytes:
        if addr == 0:
            raise RemoteReadError(f"{what}: null pointer")
        try:
            return self._read(addr, n)
        except OSError as e:
            raise RemoteReadError(f"{what} at 0x{addr:x}: {e.strerror or e}") from None

    def u64(self, addr: int, what: str) -> int:
        return struct.unpack("<Q", self.read(addr, 8, what))[0]

    def string(self, value: int, what: str = "String") -> Optional[str]:
        """A Ruby String VALUE as text; None for nil."""
        L = self.L
        if value == L["qnil"] or value == 0:
            return None
        head = self.read(value, 40, what)
        flags = struct.unpack_from("<Q", head, 0)[0]
        if flags & T_MASK != T_STRING:
            raise RemoteReadError(f"{what} at 0x{value:x} is not a String (type 0x{flags & T_MASK:x})")
        if flags & (1 << L["rstring_noembed_bit"]):
            length = struct.unpack_from("<q", head, L["rstring_heap_len"])[0]
            ptr = struct.unpack_from("<Q", head, L["rstring_heap_ptr"])[0]
            if length < 0 or length > MAX_STRING:
                raise RemoteReadError(f"{what} at 0x{value:x} has an implausible length {length}")
            data = self.read(ptr, length, what) if length else b""
        else:
            if L["rstring_embed_len"] != NA:
                length = struct.unpack_from("<q", head, L["rstring_embed_len"])[0]
            else:
                length = (flags >> L["rstring_embed_len_shift"]) & L["rstring_embed_len_mask"]
            start = L["rstring_embed_ary"]
            if length < 0 or length > MAX_STRING:
                raise RemoteReadError(f"{what} at 0x{value:x} has an implausible length {length}")
            if start + length <= len(head):
                data = head[start:start + length]
            else:
                data = self.read(value + start, length, what)
        return data.decode("utf-8", "replace")

    def _array_span(self, ary: int, what: str) -> Tuple[int, int]:
        """(length, address of the first element) of a remote Array, embedded or not."""
        L = self.L
        head = self.read(ary, 40, what)
        flags = struct.unpack_from("<Q", head, 0)[0]
        if flags & T_MASK != T_ARRAY:
            raise RemoteReadError(f"{what} at 0x{ary:x} is not an Array")
        if flags & (1 << L["rarray_embed_bit"]):
            return (flags >> L["rarray_embed_len_shift"]) & L["rarray_embed_len_mask"], ary + L["rarray_embed_ary"]
        n = struct.unpack_from("<q", head, L["rarray_heap_len"])[0]
        if n < 0 or n > 1 << 20:
            raise RemoteReadError(f"{what} at 0x{ary:x} has an implausible length {n}")
        return n, struct.unpack_from("<Q", head, L["rarray_heap_ptr"])[0]

    def array(self, value: int, what: str) -> list:
        n, ptr = self._array_span(value, what)
        return list(struct.unpack(f"<{n}Q", self.read(ptr, 8 * n, what))) if n else []

    # ------------------------------------------------------------ ISeqs
    def iseq_body(self, iseq: int) -> int:
        head = self.read(iseq, 24, "ISeq")
        flags = struct.unpack_from("<Q", head, 0)[0]
        if flags & T_MASK != T_IMEMO or (flags >> 12) & 0xF != IMEMO_ISEQ:
            raise RemoteReadError(f"0x{iseq:x} is no longer an ISeq")
        body = struct.unpack_from("<Q", head, self.L["iseq_body"])[0]
        if body == 0:
            raise RemoteReadError(f"ISeq 0x{iseq:x} has no body (not loaded yet)")
        return body

    def iseq_info(self, iseq: int) -> dict:
        """label, base_label, path, realpath, first_line, type of an ISeq."""
        L = self.L
        body = self.iseq_body(iseq)
        span = max(L["body_pathobj"], L["body_label"], L["body_base_label"], L["body_first_lineno"]) + 8
        b = self.read(body, span, "ISeq body")
        itype = struct.unpack_from("<I", b, L["body_type"])[0]
        pathobj = struct.unpack_from("<Q", b, L["body_pathobj"])[0]
        label = self.string(struct.unpack_from("<Q", b, L["body_label"])[0], "ISeq label") or ""
        base_label = self.string(struct.unpack_from("<Q", b, L["body_base_label"])[0], "ISeq base label") or ""
        if L["body_first_lineno_is_fixnum"]:
            first_line = struct.unpack_from("<q", b, L["body_first_lineno"])[0] >> 1
        else:
            first_line = struct.unpack_from("<i", b, L["body_first_lineno"])[0]
        path, realpath = self.pathobj(pathobj)
        return {"label": label, "base_label": base_label, "path": path, "realpath": realpath,
                "first_line": first_line, "type": itype}

    def pathobj(self, value: int) -> Tuple[str, Optional[str]]:
        """A pathobj is a String (path == realpath) or an Array [path, realpath]."""
        head = self.read(value, 8, "ISeq path")
        flags = struct.unpack_from("<Q", head, 0)[0]
        if flags & T_MASK == T_STRING:
            p = self.string(value, "ISeq path") or ""
            return p, p
        items = self.array(value, "ISeq path array")
        path = self.string(items[0], "ISeq path") if items else ""
        realpath = self.string(items[1], "ISeq realpath") if len(items) > 1 else None
        return path or "", realpath

    # ------------------------------------------------------------ C methods
    def array_entry(self, ary: int, idx: int, what: str) -> int:
        n, ptr = self._array_span(ary, what)
        if idx >= n:
            raise RemoteReadError(f"{what}: index {idx} past its end ({n})")
        return self.u64(ptr + 8 * idx, what)

    def id_name(self, id_: int) -> Optional[str]:
        """rb_id2str, from outside: None when the gem found no symbol table."""
        table = self.L["global_symbols_addr"]
        if not table:
            return None
        serial = id_ >> 4 if id_ > self.L["tlast_op_id"] else id_
        ids = self.u64(table + 16, "symbol table")
        chunk = self.array_entry(ids, serial // ID_ENTRY_UNIT, "symbol table chunk")
        return self.string(self.array_entry(chunk, (serial % ID_ENTRY_UNIT) * 2, "symbol table entry"), "method name")

    def cfunc_name(self, me: int) -> Optional[str]:
        """The name Ruby's backtrace gives a C method frame (its original method name)."""
        L = self.L
        flags = self.u64(me, "method entry")
        if flags & T_MASK != T_IMEMO or (flags >> 12) & 0xF != IMEMO_MENT:
            raise RemoteReadError(f"0x{me:x} is not a method entry")
        d = self.u64(me + L["me_def"], "method definition")
        return self.id_name(self.u64(d + L["def_original_id"], "method id"))

    # ------------------------------------------------------------ lines
    def _line_table(self, iseq: int):
        if iseq in self._lines:
            return self._lines[iseq]
        L = self.L
        table = None
        try:
            body = self.iseq_body(iseq)
            span = max(L["body_insns_info_body"], L["body_insns_info_size"], L["body_insns_info_succ_table"],
                       L["body_iseq_encoded"], L["body_iseq_size"], L["body_type"], L["body_first_lineno"]) + 8
            b = self.read(body, span, "ISeq body")
            itype = struct.unpack_from("<I", b, L["body_type"])[0]
            size = struct.unpack_from("<I", b, L["body_iseq_size"])[0]
            encoded = struct.unpack_from("<Q", b, L["body_iseq_encoded"])[0]
            if L["body_first_lineno_is_fixnum"]:
                first_line = struct.unpack_from("<q", b, L["body_first_lineno"])[0] >> 1
            else:
                first_line = struct.unpack_from("<i", b, L["body_first_lineno"])[0]
            n = struct.unpack_from("<I", b, L["body_insns_info_size"])[0]
            if size > MAX_ISEQ_SIZE or n > size + 1:
                raise RemoteReadError(f"ISeq 0x{iseq:x} has implausible sizes ({size} words, {n} lines)")
            entries_ptr = struct.unpack_from("<Q", b, L["body_insns_info_body"])[0]
            succ_ptr = struct.unpack_from("<Q", b, L["body_insns_info_succ_table"])[0]
            esz, lofs = L["insn_info_entry_size"], L["insn_info_line_no"]
            lines = []
            if n and entries_ptr:
                raw = self.read(entries_ptr, n * esz, "line table")
                lines = [struct.unpack_from("<i", raw, i * esz + lofs)[0] for i in range(n)]
            succ = None
            if n > 1 and succ_ptr:
                nblocks = max(0, (size + 1 - IMM_TABLE + 511) // 512) + 1
                succ = self.read(succ_ptr, 48 + 80 * nblocks, "line index")
            table = (encoded, size, lines, succ, itype, first_line)
        except RemoteReadError:
            table = None
        self._lines[iseq] = table
        return table

    def forget(self, iseq: int) -> None:
        """Drop cached facts about an ISeq (its address was reused)."""
        self._lines.pop(iseq, None)

    def line(self, iseq: int, pc: int) -> int:
        """The line Ruby reports for a frame at pc (calc_pos in vm_backtrace.c); 0 if unknown."""
        t = self._line_table(iseq)
        if t is None:
            return 0
        encoded, size, lines, succ, itype, first_line = t
        if pc == 0:
            return 0 if itype == 0 else first_line
        n = (pc - encoded) // 8
        if n < 0 or n > size:
            return 0
        pos = n - 1 if n else 0
        if not lines:
            return 0
        if len(lines) == 1 or succ is None:
            return lines[0]
        idx = _succ_index_lookup(succ, pos)
        if idx < 1 or idx > len(lines):
            return 0
        return lines[idx - 1]


def _succ_index_lookup(table: bytes, x: int) -> int:
    """Rank of position x in Ruby's succinct bit vector (iseq.c succ_index_lookup)."""
    if x < IMM_TABLE:
        imm = struct.unpack_from("<Q", table, 8 * (x // 9))[0]
        return (imm >> (7 * (x % 9))) & 0x7F
    b = (x - IMM_TABLE) // 512
    bit = (x - IMM_TABLE) % 512
    off = 48 + 80 * b
    if off + 80 > len(table):
        return 0
    rank = struct.unpack_from("<I", table, off)[0]
    small = struct.unpack_from("<Q", table, off + 8)[0]
    sb = bit // 64
    if sb:
        rank += (small >> (9 * (sb - 1))) & 0x1FF
    bits = struct.unpack_from("<Q", table, off + 16 + 8 * sb)[0]
    return rank + bin((bits << (63 - bit % 64)) & 0xFFFFFFFFFFFFFFFF).count("1")
