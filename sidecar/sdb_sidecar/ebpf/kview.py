"""The kernel view: which threads of the target the kernel put on a CPU, read from shared memory.

Ruby 3.1 has no GVL hooks, so the gem cannot count a thread's runs as it does on 3.2+; the sampler
asked procfs instead, for every thread at every tick (`schedstat`'s switch-in count, and `stat`'s
state letter to know a thread was asleep during a read): most of its CPU on 3.1. Where eBPF can be
used, `bpf/thread_switches.c` keeps, per thread, its switch-in count and whether it is on a CPU,
in a BPF array mapped here (BPF_F_MMAPABLE): the sampler reads both without a syscall
(`Sampler.use_kernel_view`). Where it cannot, the sampler goes on with procfs.

The offsets of task_struct.pid and .tgid come from the running kernel's BTF
(/sys/kernel/btf/vmlinux), read by `task_offsets`: kernel headers of another version would give
wrong ones."""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Dict, Tuple

from .bpfload import EbpfUnavailable, MappedProgram, _import_bcc, bpf_source, check_available, compile_bpf

BTF_PATH = "/sys/kernel/btf/vmlinux"
KV_SLOTS = 1 << 16                 # slot = tid & (KV_SLOTS - 1); 8 bytes each: 512 KiB
KV_ENTRY = 8

# extra bytes after a btf_type, per kind (STRUCT/UNION, ENUM, FUNC_PROTO, DATASEC, ENUM64: per member)
_FIXED = {1: 4, 3: 12, 14: 4, 17: 4}
_PER_MEMBER = {4: 12, 5: 12, 6: 8, 13: 8, 15: 12, 19: 12}
_STRUCT, _UNION = 4, 5


def task_offsets(path: str = BTF_PATH) -> Tuple[int, int]:
    """(offset of task_struct.pid, offset of task_struct.tgid) in bytes, from the kernel's BTF.
    Raises EbpfUnavailable when the BTF cannot be read or has no such members."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise EbpfUnavailable(f"cannot read the kernel's BTF ({path}: {e.strerror})") from None
    if len(data) < 24:
        raise EbpfUnavailable(f"{path} is not BTF")
    magic, _version, _flags, hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from("<HBBIIIII", data)
    if magic != 0xEB9F:
        raise EbpfUnavailable(f"{path} is not little-endian BTF")
    types = hdr_len + type_off
    strings = hdr_len + str_off

    def name(off: int) -> bytes:
        start = strings + off
        return data[start:data.index(b"\0", start)]

    # one pass: where each type's record starts, and the STRUCT named task_struct
    starts = [0]                    # type ids start at 1
    pos, end, task = types, types + type_len, None
    while pos < end:
        name_off, info, _size = struct.unpack_from("<III", data, pos)
        kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
        starts.append(pos)
        if kind == _STRUCT and task is None and name(name_off) == b"task_struct" and vlen > 0:
            task = len(starts) - 1
        pos += 12 + _FIXED.get(kind, 0) + _PER_MEMBER.get(kind, 0) * vlen
    if task is None:
        raise EbpfUnavailable("the kernel's BTF has no struct task_struct")

    def members(type_id: int, base_bits: int, out: Dict[bytes, int]) -> None:
        p = starts[type_id]
        _n, info, _s = struct.unpack_from("<III", data, p)
        bitfields = info >> 31
        for i in range((info & 0xFFFF)):
            m_name, m_type, m_off = struct.unpack_from("<III", data, p + 12 + 12 * i)
            bits = base_bits + ((m_off & 0xFFFFFF) if bitfields else m_off)
            if m_name:
                out.setdefault(name(m_name), bits)
            elif 0 < m_type < len(starts):          # an anonymous struct or union: its members too
                k = (struct.unpack_from("<I", data, starts[m_type] + 4)[0] >> 24) & 0x1F
                if k in (_STRUCT, _UNION):
                    members(m_type, bits, out)

    found: Dict[bytes, int] = {}
    members(task, 0, found)
    if b"pid" not in found or b"tgid" not in found or found[b"pid"] % 8 or found[b"tgid"] % 8:
        raise EbpfUnavailable("the kernel's struct task_struct has no byte-aligned pid and tgid")
    return found[b"pid"] // 8, found[b"tgid"] // 8


class KernelView(MappedProgram):
    """The BPF program and its array mapped here, for the processes added (a process tree shares one).
    `address` and `slots` are what Sampler.use_kernel_view takes. close() when no sampler reads it."""

    WHAT = "the kernel view"

    def __init__(self):
        super().__init__()
        self.slots = KV_SLOTS

    def start(self) -> None:
        check_available()
        BPF = _import_bcc()
        pid_off, tgid_off = task_offsets()
        cflags = [f"-DTASK_PID={pid_off}", f"-DTASK_TGID={tgid_off}", f"-DKV_SLOTS={KV_SLOTS}"]
        try:
            self._bpf = compile_bpf(BPF, bpf_source("thread_switches.c"), cflags)   # attaches sched_switch
        except Exception as e:  # bcc raises a bare Exception for a failed compile, load or attach
            raise EbpfUnavailable(f"the kernel view did not load: {str(e).splitlines()[0] if str(e) else e}") \
                from None
        self._map_array("kview", KV_SLOTS * KV_ENTRY)

    def add(self, pid: int) -> None:
        """The view follows the threads of process `pid` from now on."""
        targets = self._bpf["targets"]
        targets[targets.Key(pid)] = targets.Leaf(1)
        self.pids.add(pid)
