"""RemoteRuby.iseq_info against a made-up target memory: a name whose object's slot held another String
for the first read (moved out by a compaction, its slot reused, moved back before the re-check: busy
run 17 named an ISeq with the path "2057858") is refused, never returned; a name read the same twice
is returned."""
from __future__ import annotations

import struct

import pytest

from sdb_sidecar.target.symbols import NA, RemoteReadError, RemoteRuby

pytestmark = pytest.mark.once

# a layout as RemoteRuby reads it (Ruby 3.1's numbers; only what naming an ISeq uses)
L = {"iseq_body": 16, "t_mask": 0x1f, "t_imemo": 0x1a, "t_string": 0x05, "t_array": 0x07,
     "imemo_shift": 12, "imemo_mask": 0x0f, "imemo_iseq": 7,
     "body_type": 0, "body_pathobj": 8, "body_label": 16, "body_base_label": 24, "body_first_lineno": 40,
     "body_first_lineno_is_fixnum": 1, "fixnum_shift": 1, "body_builtin_attrs": NA, "builtin_attr_c_trace": NA,
     "internal_path_c_trace": 0,
     "rstring_noembed_bit": 13, "rstring_heap_len": 16, "rstring_heap_ptr": 24, "rstring_embed_ary": 24,
     "rstring_embed_len": 16, "rstring_embed_len_shift": 0, "rstring_embed_len_mask": 0,
     "rarray_embed_bit": 13, "rarray_embed_len_shift": 15, "rarray_embed_len_mask": 3, "rarray_embed_ary": 16,
     "rarray_heap_len": 16, "rarray_heap_ptr": 32, "qnil": 0x08, "immediate_mask": 0x07}
ISEQ, BODY, PATH, LABEL = 0x10000, 0x20000, 0x30000, 0x40000


def embedded_string(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<QQq", L["t_string"], 0, len(raw)) + raw.ljust(40, b"\0")


class Memory:
    """The target's memory: address -> bytes, where an address may hold a list of contents, one per read
    (the last one stays)."""

    def __init__(self, objects: dict):
        self.objects = objects

    def read_memory(self, addr: int, n: int) -> bytes:
        for base, content in self.objects.items():
            if isinstance(content, list):
                current = content[0]
                if base <= addr < base + len(current):
                    if len(content) > 1:
                        content.pop(0)
                    return current[addr - base:addr - base + n]
            elif base <= addr < base + len(content):
                return content[addr - base:addr - base + n]
        raise OSError(14, "Bad address")


def target(path_contents) -> RemoteRuby:
    iseq = struct.pack("<QQQ", L["t_imemo"] | (L["imemo_iseq"] << L["imemo_shift"]), 0, BODY)
    body = struct.pack("<IIQQQQQ", 3, 0, PATH, LABEL, LABEL, 0, (12 << 1) | 1)
    memory = Memory({ISEQ: iseq, BODY: body, PATH: path_contents, LABEL: embedded_string("m1")})
    return RemoteRuby(memory, L)


def test_a_name_read_the_same_twice_is_the_iseqs_name():
    info = target(embedded_string("(eval)")).iseq_info(ISEQ)
    assert (info["label"], info["path"], info["first_line"]) == ("m1", "(eval)", 12)


def test_a_path_whose_slot_held_another_string_at_the_first_read_is_refused():
    # GIVEN an ISeq that refers to the same path object before and after every read, but whose path
    # object's slot held one of the program's junk Strings when the path was first read
    remote = target([embedded_string("(eval)"), embedded_string("2057858"), embedded_string("(eval)")])
    # THEN the read names nothing (the Drainer reads it again later, or writes it unknown): never "2057858"
    with pytest.raises(RemoteReadError):
        remote.iseq_info(ISEQ)
