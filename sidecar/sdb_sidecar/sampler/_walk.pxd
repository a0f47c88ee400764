# From the bytes of a tick to samples: method entries, checks, interning (docs/internals.md,
# "Untrusted memory").
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t
from sdb_sidecar.sampler._util cimport *
from sdb_sidecar.sampler._types cimport *
from sdb_sidecar.sampler._registry cimport Registry, sdb_layout, sdb_slot, sdb_header
from sdb_sidecar.sampler._intern cimport sdb_intern, sdb_intern_find_u64
from sdb_sidecar.sampler._mes cimport MethodEntries


cdef class Walk(MethodEntries):
    # tables (native/intern.c, one kind of table five times: the fifth, types, is MethodEntries')
    cdef sdb_intern iseqs               # IseqEnt by address: ISeqs checked in the target
    cdef sdb_intern frames              # FrameEnt: a frame's id is its position
    cdef uint64_t frames_drained
    cdef sdb_intern stacks              # StackEnt (frame ids in arena): a stack's id is its position
    cdef uint64_t stacks_drained
    cdef uint32_t *arena
    cdef uint64_t arena_cap, arena_len
    cdef sdb_intern mes                 # method entries seen (uint64_t addresses)
    cdef Gathered g                     # outputs since the last drain
    cdef uint32_t *ids                  # the sample being made: its frames' ids, leaf first
    cdef FrameEnt *cur                  #   and its frames
    cdef readonly uint64_t ticks, total_samples
    cdef readonly uint64_t gc_samples   # samples taken while their thread was in GC
    cdef readonly uint64_t yjit_pcs     # YJIT frames sampled without a line (their pc not kept)
    cdef readonly uint64_t span_unsure  # samples of a thread in a span left without it: the span
                                        # changed during the read, or the stack was another fiber's

    cdef inline IseqEnt *iseq_lookup(self, uint64_t addr) noexcept nogil:
        """The ISeq checked at addr, NULL: none."""
        return <IseqEnt *>sdb_intern_find_u64(&self.iseqs, sdb_mix64(addr), addr)

    cdef int check_iseq(self, uint64_t iseq, uint64_t pc, uint64_t now, int jit=*) noexcept nogil
    cdef void note_me(self, uint64_t me, uint64_t now) noexcept nogil
    cdef int64_t intern_frame(self, const FrameEnt *f) noexcept nogil
    cdef int64_t intern_stack(self, const uint32_t *ids, uint32_t n) noexcept nogil
    cdef int me_disagrees(self, uint64_t iseq, uint64_t me) noexcept nogil
    cdef int read_and_walk(self, uint32_t first, uint32_t n) noexcept nogil
    cdef inline int frame_jit(self, const Job *job, uint32_t j) noexcept nogil:
        """1 if Ruby frame j was pushed by YJIT: its jit_return is set (the interpreter clears it).
        YJIT writes such a frame's pc only when the frame calls out, so the pc can be the one an
        older frame left in the slot (v3_3_8:yjit/src/codegen.rs, gen_send_iseq)."""
        return self.L.cfp_jit_return != LAYOUT_NA and self.L.cfp_jit_return != 0 \
            and u64_at(self.rawbuf + job.raw_off, j * self.L.cfp_size + self.L.cfp_jit_return) != 0

    cdef int link_ok(self, Job *job, uint32_t j, RawFrame *r) noexcept nogil
    cdef int finish_job(self, Job *job, uint64_t now) noexcept nogil
    cdef int emit(self, const Job *job, uint32_t sid, uint64_t now, uint64_t lo_ns, uint64_t ec) noexcept nogil
    cdef void start_over(self) noexcept nogil
