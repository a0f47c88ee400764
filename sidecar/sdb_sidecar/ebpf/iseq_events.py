"""The records of `bpf/iseq_events.c` as the eBPF symbolizer reads them (their header, kinds and flags)
and the program's compile-time constants (`bpf_cflags`: the layout row as -D constants)."""
from __future__ import annotations

import ctypes
from typing import List

from sdb_trace.registry_h import SDB_NA

EV_NEW, EV_MOVE = 1, 2
F_TRUNCATED, F_UNREADABLE, F_NO_REALPATH, F_BASE_IS_LABEL, F_REALPATH_IS_PATH = 1, 2, 4, 8, 16
NSTR = 4
RINGBUF_PAGES = 2048        # 8 MiB: ~25,000 records, a second of the busiest boot measured


class EventHdr(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_uint32), ("flags", ctypes.c_uint32), ("time_ns", ctypes.c_uint64),
                ("addr", ctypes.c_uint64), ("addr2", ctypes.c_uint64), ("type", ctypes.c_uint32),
                ("first_line", ctypes.c_int32), ("len", ctypes.c_uint16 * NSTR), ("probe", ctypes.c_uint32),
                ("tgid", ctypes.c_uint32)]


HDR_SIZE = ctypes.sizeof(EventHdr)


def bpf_cflags(layout: dict) -> List[str]:
    """The layout row as -D constants of the BPF program."""
    L = layout
    consts = {
        "ISEQ_BODY": L["iseq_body"],
        "BODY_TYPE": L["body_type"], "BODY_PATHOBJ": L["body_pathobj"], "BODY_BASE_LABEL": L["body_base_label"],
        "BODY_LABEL": L["body_label"], "BODY_FIRST_LINENO": L["body_first_lineno"],
        "BODY_ISEQ_ENCODED": L["body_iseq_encoded"],
        "FIRST_LINENO_FIXNUM": 1 if L["body_first_lineno_is_fixnum"] else 0,
        "RSTR_NOEMBED_BIT": L["rstring_noembed_bit"], "RSTR_HEAP_LEN": L["rstring_heap_len"],
        "RSTR_HEAP_PTR": L["rstring_heap_ptr"], "RSTR_EMBED_LEN": L["rstring_embed_len"],
        "RSTR_EMBED_ARY": L["rstring_embed_ary"], "RSTR_EMBED_LEN_SHIFT": L["rstring_embed_len_shift"],
        "RSTR_EMBED_LEN_MASK": L["rstring_embed_len_mask"],
        "RARY_EMBED_BIT": L["rarray_embed_bit"], "RARY_EMBED_LEN_SHIFT": L["rarray_embed_len_shift"],
        "RARY_EMBED_LEN_MASK": L["rarray_embed_len_mask"], "RARY_EMBED_ARY": L["rarray_embed_ary"],
        "RARY_HEAP_LEN": L["rarray_heap_len"], "RARY_HEAP_PTR": L["rarray_heap_ptr"],
        # Ruby's numbers: type tags and where an imemo keeps its type
        "RB_T_MASK": L["t_mask"], "RB_T_STRING": L["t_string"], "RB_T_ARRAY": L["t_array"],
        "RB_T_IMEMO": L["t_imemo"], "RB_IMEMO_SHIFT": L["imemo_shift"], "RB_IMEMO_MASK": L["imemo_mask"],
        "RB_IMEMO_ISEQ": L["imemo_iseq"], "RB_IMMEDIATE_MASK": L["immediate_mask"],
        "RB_FIXNUM_SHIFT": L["fixnum_shift"],
    }
    consts["RINGBUF_PAGES"] = RINGBUF_PAGES
    consts["SDB_NA"] = SDB_NA                    # a layout field the row does not have
    return [f"-D{k}={int(v)}" for k, v in consts.items()]
