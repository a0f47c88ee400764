"""Reading Ruby objects out of the target: strings, ISeq locations, lines from a pc.

Every read goes through `Sampler.read_memory` (process_vm_readv) and may fail: the
object can be freed or moved between the sample and this read. Failures raise
`RemoteReadError`, which says what was being read; callers record the symbol as
unknown rather than guess. All offsets, and every Ruby number (type tags, imemo types, the
enums, st_table, the symbol table, the succinct line index), come from the layout row the gem
published (struct sdb_layout); the trace's own ISeq and method types are sdb_trace's.
"""
from __future__ import annotations

import functools
import struct
from typing import Dict, Optional, Tuple

from sdb_trace import ISEQ_TYPES, METHOD_TYPES
from sdb_trace.registry_h import SDB_NA as NA   # a layout field the row does not have
from sdb_trace.registry_h import SDB_INTERNAL_PATH_PREFIX
MAX_STRING = 64 * 1024
MAX_ISEQ_SIZE = 1 << 22  # instruction words; larger means the ISeq was freed and its memory reused


def _trace_types(L: dict) -> Tuple[Dict[int, int], Dict[int, int]]:
    """{Ruby's value: the trace's} for ISeq and method types, for this layout's values of them."""
    return _type_maps(tuple(L.get(f"iseq_type_{n}") for n in ISEQ_TYPES),
                      tuple(L.get(f"method_type_{n}") for n in METHOD_TYPES))


@functools.lru_cache(maxsize=8)       # one entry per set of Ruby enum values: every Ruby so far shares one
def _type_maps(iseq_values: tuple, method_values: tuple) -> Tuple[Dict[int, int], Dict[int, int]]:
    return ({v: i for i, v in enumerate(iseq_values) if v is not None},
            {v: i for i, v in enumerate(method_values) if v is not None})


def trace_iseq_type(L: dict, ruby_type: int) -> int:
    """The trace's ISeq type (sdb_trace.ISEQ_TYPES) of the running Ruby's rb_iseq_type value; -1: none."""
    return _trace_types(L)[0].get(ruby_type, -1)


def trace_method_type(L: dict, ruby_type: int) -> int:
    """The trace's method type (sdb_trace.METHOD_TYPES) of the running Ruby's rb_method_type_t; -1: none."""
    return _trace_types(L)[1].get(ruby_type, -1)


def shown_as_c_method(L: dict, path: str, builtin_attrs: Optional[int] = None) -> bool:
    """Ruby's backtraces show the frames of this ISeq as a C method's, at their Ruby caller: on 4.0+
    every ISeq of Ruby's internal .rb files (its path begins with `<internal:`), on 3.4 a built-in
    method whose `builtin_attrs` (when read) has C_TRACE. The row says which (docs/ruby-internals.md)."""
    if L["internal_path_c_trace"] == 1 and path.startswith(SDB_INTERNAL_PATH_PREFIX):
        return True
    return builtin_attrs is not None and L["builtin_attr_c_trace"] != NA and bool(builtin_attrs & L["builtin_attr_c_trace"])


def _special_const(v: int, L: dict) -> bool:
    return v == 0 or v & L["immediate_mask"] != 0 or v < 4096


def _nil(v: Optional[int], L: dict) -> bool:
    return v is None or v == 0 or v == L["qnil"] or v & L["immediate_mask"] != 0


class RemoteReadError(Exception):
    pass


GC_UNKNOWN = ("GC state unknown",)     # RemoteRuby.gc_calm: this Ruby's layout gives no word to read


class RemoteRuby:
    def __init__(self, sampler, layout: dict):
        self._read = sampler.read_memory
        self.L = layout
        self._lines: Dict[int, Optional[tuple]] = {}  # iseq -> (encoded, size, entries, table)

    def type_of(self, flags: int) -> int:
        """An object's type tag (RUBY_T_*) from its flags word."""
        return flags & self.L["t_mask"]

    def imemo_type(self, flags: int) -> int:
        """An imemo's type (imemo_*) from its flags word; -1: not an imemo."""
        L = self.L
        if flags & L["t_mask"] != L["t_imemo"]:
            return -1
        return (flags >> L["imemo_shift"]) & L["imemo_mask"]

    # ------------------------------------------------------------ GC
    def gc_calm(self, closing=None):
        """Whether no GC sweep can have freed an object of the target since `closing`'s opening:
        called once before a read (closing None), it returns a token; called after the read with
        that token, True when no sweep was in progress at either end and none ran in between (only
        a sweep frees an object, and a lazy one leaves a dead ISeq whole on a page not swept yet
        while its name's Strings, swept on another, are already other Strings). None before the
        read: a sweep is in progress now. GC_UNKNOWN: this Ruby's layout does not say (the gem
        found no word to read; layout.gc_sweeps_addr)."""
        L = self.L
        try:
            if L.get("gc_sweeps_addr"):
                # 3.3+: the gem's count of sweep starts and ends, odd during one
                now = self.u64(L["gc_sweeps_addr"], "the GC's sweep count")
                state = None if now & 1 else now
            elif L.get("gc_count_addr") and L.get("gc_flags_addr"):
                # before 3.2: GCs started and the mode, the count read on the outside of the mode
                # (a cycle that starts and sweeps between the two reads changes the count)
                if closing is None:
                    count = self.u64(L["gc_count_addr"], "the GC count")
                mode = struct.unpack("<I", self.read(L["gc_flags_addr"], 4, "the GC's flags"))[0] & L["gc_mode_mask"]
                if closing is not None:
                    count = self.u64(L["gc_count_addr"], "the GC count")
                state = None if mode == L["gc_mode_sweeping"] else (count, mode)
            else:
                return GC_UNKNOWN if closing is None else closing is GC_UNKNOWN
        except RemoteReadError:
            state = None
        return state if closing is None else (state is not None and state == closing)

    def gc_sweeps_started(self) -> Optional[int]:
        """How many GC sweeps have started so far, or more (before 3.2: the GCs started, each sweeps
        after its mark); None when this Ruby's layout gives no word to read. An object alive at one
        moment can be freed only by a sweep that starts after it: the same number at both ends of a
        span of time means nothing alive at its start was freed within it."""
        L = self.L
        try:
            if L.get("gc_sweeps_addr"):
                return (self.u64(L["gc_sweeps_addr"], "the GC's sweep count") + 1) // 2
            if L.get("gc_count_addr") and L.get("gc_flags_addr"):
                return self.u64(L["gc_count_addr"], "the GC count")
        except RemoteReadError:
            pass
        return None

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
        span = max(L["rstring_heap_len"], L["rstring_heap_ptr"], L["rstring_embed_ary"],
                   L["rstring_embed_len"] if L["rstring_embed_len"] != NA else 0) + 8
        head = self.read(value, max(span, 40), what)    # an embedded string's first bytes too
        flags = struct.unpack_from("<Q", head, 0)[0]
        if flags & self.L["t_mask"] != self.L["t_string"]:
            raise RemoteReadError(f"{what} at 0x{value:x} is not a String (type 0x{flags & self.L['t_mask']:x})")
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
        head = self.read(ary, max(L["rarray_heap_len"], L["rarray_heap_ptr"], L["rarray_embed_ary"]) + 8, what)
        flags = struct.unpack_from("<Q", head, 0)[0]
        if self.type_of(flags) != self.L["t_array"]:
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
        head = self.read(iseq, self.L["iseq_body"] + 8, "ISeq")
        flags = struct.unpack_from("<Q", head, 0)[0]
        if self.imemo_type(flags) != self.L["imemo_iseq"]:
            raise RemoteReadError(f"0x{iseq:x} is no longer an ISeq")
        body = struct.unpack_from("<Q", head, self.L["iseq_body"])[0]
        if body == 0:
            raise RemoteReadError(f"ISeq 0x{iseq:x} has no body (not loaded yet)")
        return body

    def _iseq_refs(self, iseq: int) -> Tuple[int, bytes, tuple]:
        """An ISeq's body, the body's first bytes, and the objects its name is read from: (label,
        base_label, pathobj, and the pathobj Array's items when it is one)."""
        L = self.L
        body = self.iseq_body(iseq)
        span = max(L["body_pathobj"], L["body_label"], L["body_base_label"], L["body_first_lineno"]) + 8
        b = self.read(body, span, "ISeq body")
        pathobj = struct.unpack_from("<Q", b, L["body_pathobj"])[0]
        head = self.read(pathobj, 8, "ISeq path")
        items = () if self.type_of(struct.unpack_from("<Q", head, 0)[0]) == L["t_string"] else \
            tuple(self.array(pathobj, "ISeq path array")[:2])
        refs = (struct.unpack_from("<Q", b, L["body_label"])[0], struct.unpack_from("<Q", b, L["body_base_label"])[0],
                pathobj, items)
        return body, b, refs

    def _iseq_strings(self, refs: tuple) -> tuple:
        """(label, base_label, path, realpath) read from the objects of _iseq_refs."""
        label_v, base_v, pathobj, items = refs
        label = self.string(label_v, "ISeq label") or ""
        base_label = self.string(base_v, "ISeq base label") or ""
        if not items:
            path = realpath = self.string(pathobj, "ISeq path") or ""
        else:
            path = self.string(items[0], "ISeq path") or ""
            realpath = self.string(items[1], "ISeq realpath") if len(items) > 1 else None
        return label, base_label, path, realpath

    def iseq_info(self, iseq: int) -> dict:
        """label, base_label, path, realpath, first_line, type of an ISeq. Its name is read from objects
        GC compaction may move (and reuse the old slots of) while we read: the ISeq must refer to the
        same objects before, between and after two reads of the strings, and the two reads must agree,
        else nothing read is trusted. One re-check of the objects after one read was not enough: busy
        run 17 (test_compact_paths, GC.compact every 10 ms, a loaded machine) named an ISeq with the
        path "2057858", one of the program's junk Strings: most likely a read preempted across
        compactions found the name's object moved out and its slot taken by that String, and the
        object back by the time it looked again (the trace was lost: not proven). That now needs
        the same String at the same slot in both reads as well."""
        L = self.L
        body, b, refs = self._iseq_refs(iseq)
        itype = struct.unpack_from("<I", b, L["body_type"])[0]
        if L["body_first_lineno_is_fixnum"]:
            first_line = struct.unpack_from("<q", b, L["body_first_lineno"])[0] >> L["fixnum_shift"]
        else:
            first_line = struct.unpack_from("<i", b, L["body_first_lineno"])[0]
        strings = self._iseq_strings(refs)
        if self._iseq_refs(iseq)[::2] != (body, refs) or self._iseq_strings(refs) != strings \
                or self._iseq_refs(iseq)[::2] != (body, refs):
            raise RemoteReadError(f"ISeq 0x{iseq:x}: its name's objects moved while they were read")
        label, base_label, path, realpath = strings
        info = {"label": label, "base_label": base_label, "path": path, "realpath": realpath,
                "first_line": first_line, "type": trace_iseq_type(L, itype)}
        attrs = None
        if L["body_builtin_attrs"] != NA:
            attrs = struct.unpack("<I", self.read(body + L["body_builtin_attrs"], 4, "ISeq attributes"))[0]
        if shown_as_c_method(L, path, attrs):
            info["c_trace"] = True
        return info

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
        L = self.L
        serial = id_ >> L["id_scope_shift"] if id_ > L["tlast_op_id"] else id_
        ids = self.u64(table + L["symbols_ids"], "symbol table")
        chunk = self.array_entry(ids, serial // L["id_entry_unit"], "symbol table chunk")
        entry = (serial % L["id_entry_unit"]) * L["id_entry_size"] + L["id_entry_str"]
        if L["id_chunk_data"] == NA:
            return self.string(self.array_entry(chunk, entry, "symbol table entry"), "method name")
        # 4.1: the chunk is a T_DATA wrapping an rb_darray of entries (symbol.c, darray.h)
        ary = self.u64(chunk + L["id_chunk_data"], "symbol table chunk's entries")
        if entry // L["id_entry_size"] >= self.u64(ary + L["id_chunk_len"], "symbol table chunk's length"):
            raise RemoteReadError(f"symbol table entry: index {entry} past its chunk's end")
        return self.string(self.u64(ary + L["id_chunk_entries"] + 8 * entry, "symbol table entry"), "method name")

    def cfunc_name(self, me: int) -> Optional[str]:
        """The name Ruby's backtrace gives a C method frame (its original method name)."""
        return self.method_info(me)["name"]

    def method_info(self, me: int, expect: Optional[Tuple[int, int]] = None) -> dict:
        """What naming a frame needs from a callable method entry (rb_profile_frame_full_label):
        `name` (cfunc: the original method name; a Ruby method: its ISeq's base label), `type`
        (method definition type: 0 ISeq, 1 C function, 4 define_method, ...), `class_path` (the
        path of the class it is defined in, as rb_profile_frame_classpath gives it; None when
        unknown) and `singleton` (a singleton method: `Foo.bar`, not `Foo#bar`). `expect`: the
        (def, defined_class) the sampler saw there; another pair means the entry was moved or
        replaced since (RemoteReadError: no name rather than another entry's). Read twice: the two
        must agree, as an ISeq's name must (iseq_info: a compaction may move the strings it is made
        of, and another String take their slot, between a read and a look again)."""
        first = self._method_info_once(me, expect)
        if self._method_info_once(me, expect) != first:
            raise RemoteReadError(f"the method entry at 0x{me:x}: its name's objects moved while they were read")
        return first

    def _method_info_once(self, me: int, expect: Optional[Tuple[int, int]]) -> dict:
        L = self.L
        head = self.read(me, max(L["me_defined_class"], L["me_def"]) + 8, "method entry")
        flags = struct.unpack_from("<Q", head, 0)[0]
        if self.imemo_type(flags) != L["imemo_ment"]:
            raise RemoteReadError(f"0x{me:x} is not a method entry")
        defined_class = struct.unpack_from("<Q", head, L["me_defined_class"])[0]
        d = struct.unpack_from("<Q", head, L["me_def"])[0]
        if expect is not None and expect != (d, defined_class):
            raise RemoteReadError(f"the method entry at 0x{me:x} was moved or replaced before it was read")
        dbytes = self.read(d, max(L["def_original_id"], L["def_iseq"], L["def_type"]) + 8, "method definition")
        mtype = (dbytes[L["def_type"]] >> L["def_type_shift"]) & L["def_type_mask"]
        name = None
        if mtype == L["method_type_iseq"]:
            try:
                name = self.iseq_info(struct.unpack_from("<Q", dbytes, L["def_iseq"])[0])["base_label"]
            except RemoteReadError:
                name = None
        if name is None:
            name = self.id_name(struct.unpack_from("<Q", dbytes, L["def_original_id"])[0])
        class_path, singleton = None, False
        if defined_class and defined_class != L["qnil"]:
            try:
                class_path, singleton = self.class_of_method(defined_class)
            except RemoteReadError:
                class_path = None
        return {"name": name, "type": trace_method_type(L, mtype), "class_path": class_path, "singleton": singleton}

    # ------------------------------------------------------------ classes
    def _class_head(self, klass: int) -> Tuple[int, int]:
        head = self.read(klass, self.L["rbasic_klass"] + 8, "class")
        return struct.unpack_from("<Q", head, 0)[0], struct.unpack_from("<Q", head, self.L["rbasic_klass"])[0]

    def class_of_method(self, klass: int) -> Tuple[Optional[str], bool]:
        """rb_profile_frame_classpath and singleton_method_p of a defined_class."""
        flags, parent = self._class_head(klass)
        L = self.L
        t = self.type_of(flags)
        # before 3.4 Ruby tests FL_SINGLETON on any defined_class: an ICLASS whose bit means
        # something else (RICLASS_IS_ORIGIN on 3.3) makes `Kernel.sleep`, as Ruby itself says
        flagged = bool(flags & (1 << self.L["fl_singleton_bit"]))
        if t == L["t_iclass"]:                         # a module included: name the module
            return self.class_path(parent), flagged and bool(self.L["singleton_any_type"])
        if t not in (L["t_class"], L["t_module"]):
            raise RemoteReadError(f"0x{klass:x} is not a class (type 0x{t:x})")
        if flagged and (t == L["t_class"] or self.L["singleton_any_type"]):
            obj = self.attached_object(klass)
            if obj is None:
                return None, True
            oflags = self.u64(obj, "singleton's object") if not _special_const(obj, L) else 0
            if not _special_const(obj, L) and self.type_of(oflags) in (L["t_class"], L["t_module"]):
                return self.class_path(obj), True
            # rb_profile_frame_classpath: "#<%s:%p>" of the object's class
            return f"#<{self.class_path(self.real_class(obj)) or '?'}:0x{obj:016x}>", True
        return self.class_path(klass), False

    def real_class(self, obj: int) -> int:
        """rb_obj_class: the object's class, past singleton classes and included modules."""
        klass = self.u64(obj + self.L["rbasic_klass"], "object's class")
        for _ in range(64):
            flags, _k = self._class_head(klass)
            if self.type_of(flags) == self.L["t_iclass"] or flags & (1 << self.L["fl_singleton_bit"]):
                klass = self.u64(klass + self.L["rclass_super"], "superclass")
                continue
            return klass
        raise RemoteReadError(f"no class found for 0x{obj:x}")

    def attached_object(self, klass: int) -> Optional[int]:
        L = self.L
        if L["classext_attached_object"] != NA:
            return self.u64(klass + L["classext_attached_object"], "singleton's object")
        if L["id_attached"]:
            return self.class_ivar(klass, L["id_attached"])
        return None

    def class_ivar(self, klass: int, id_: int) -> Optional[int]:
        """A hidden ivar of a class kept in its st_table (Ruby 3.1); None when absent."""
        L = self.L
        ext = self.u64(klass + L["class_ext_ptr"], "class extension")
        tbl = self.u64(ext + L["classext_iv_tbl"], "class ivar table")
        if not tbl:
            return None
        head = self.read(tbl, max(L["st_entries_start"], L["st_entries_bound"], L["st_entries"]) + 8,
                         "class ivar table")
        start, bound, entries = (struct.unpack_from("<Q", head, L[f])[0]
                                 for f in ("st_entries_start", "st_entries_bound", "st_entries"))
        if bound < start or bound - start > 4096:
            raise RemoteReadError(f"class ivar table at 0x{tbl:x} has implausible bounds")
        if bound == start:
            return None
        size = L["st_entry_size"]
        raw = self.read(entries + start * size, (bound - start) * size, "class ivar entries")
        for i in range(bound - start):
            key = struct.unpack_from("<Q", raw, i * size + L["st_entry_key"])[0]
            value = struct.unpack_from("<Q", raw, i * size + L["st_entry_record"])[0]
            if key == id_:
                return value
        return None

    def class_path(self, klass: int, depth: int = 0) -> Optional[str]:
        """rb_class_path: the permanent or temporary path, else `#<Class:0x...>` (anonymous)."""
        L = self.L
        path = None
        if L["classext_classpath"] != NA:
            path = self.u64(klass + L["classext_classpath"], "class path")
        elif L["id_classpath"]:
            path = self.class_ivar(klass, L["id_classpath"])
            if _nil(path, L):
                path = self.class_ivar(klass, L["id_tmp_classpath"])
        else:
            return None
        if not _nil(path, L):
            return self.string(path, "class path")
        flags, meta = self._class_head(klass)
        if self.type_of(flags) == L["t_module"] and depth < 4:
            # rb_tmp_class_path: a module whose class (rb_obj_class) is not Module, a Refinement,
            # is named after the path of its raw klass (RBASIC(klass)->klass), which is its
            # singleton class where it has one (`#<#<Class:0x...>:0x...>`), else that class
            if self.class_path(self.real_class(klass), depth + 1) != "Module":
                mname = self.class_path(meta, depth + 1)
                if mname:
                    return f"#<{mname}:0x{klass:016x}>"
            return f"#<Module:0x{klass:016x}>"
        return f"#<Class:0x{klass:016x}>"

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
                first_line = struct.unpack_from("<q", b, L["body_first_lineno"])[0] >> L["fixnum_shift"]
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
                per = L["succ_block_positions"]
                nblocks = max(0, (size + 1 - L["succ_imm_entries"] + per - 1) // per) + 1
                succ = self.read(succ_ptr, L["succ_part"] + L["succ_block_size"] * nblocks, "line index")
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
            return 0 if itype == self.L["iseq_type_top"] else first_line
        n = (pc - encoded) // 8
        if n < 0 or n > size:
            return 0
        pos = n - 1 if n else 0
        if not lines:
            return 0
        if len(lines) == 1 or succ is None:
            return lines[0]
        idx = _succ_index_lookup(self.L, succ, pos)
        if idx < 1 or idx > len(lines):
            return 0
        return lines[idx - 1]


def _succ_index_lookup(L: dict, table: bytes, x: int) -> int:
    """Rank of position x in Ruby's succinct bit vector (iseq.c succ_index_lookup), its sizes and
    bit widths from the layout row (succ_*)."""
    imm, per_word, imm_bits = L["succ_imm_entries"], L["succ_imm_per_word"], L["succ_imm_bits"]
    if x < imm:
        word = struct.unpack_from("<Q", table, 8 * (x // per_word))[0]
        return (word >> (imm_bits * (x % per_word))) & ((1 << imm_bits) - 1)
    per, size = L["succ_block_positions"], L["succ_block_size"]
    b = (x - imm) // per
    bit = (x - imm) % per
    off = L["succ_part"] + size * b
    if off + size > len(table):
        return 0
    rank = struct.unpack_from("<I", table, off + L["succ_block_rank"])[0]
    small = struct.unpack_from("<Q", table, off + L["succ_block_small_ranks"])[0]
    sb = bit // 64
    if sb:
        small_bits = L["succ_small_bits"]
        rank += (small >> (small_bits * (sb - 1))) & ((1 << small_bits) - 1)
    bits = struct.unpack_from("<Q", table, off + L["succ_block_bits"] + 8 * sb)[0]
    return rank + bin((bits << (63 - bit % 64)) & 0xFFFFFFFFFFFFFFFF).count("1")
