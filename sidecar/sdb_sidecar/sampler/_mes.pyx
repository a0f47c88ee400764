# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Method entries, the sampler's second layer (Reads -> MethodEntries -> Walk -> States -> Sampler):
each Ruby frame's method entry from the env words phase 3 read (find_mes, env_me: Ruby's
rb_vm_frame_method_entry), and what an entry is (value_type, me_def_iseq), read once per entry and
kept in `types` (native/intern.c). Walk's checks (me_disagrees, finish_job) decide whether a frame
may keep the entry found here."""
from libc.stdlib cimport realloc
from sdb_sidecar.sampler._intern cimport sdb_intern_init, sdb_intern_free, sdb_intern_insert


cdef class MethodEntries(Reads):
    def __cinit__(self, Registry reg, int pid, double rate_hz=1000.0, int max_depth=2048):
        if sdb_intern_init(&self.types, sizeof(TypeEnt), 1024) != 0:
            raise MemoryError()

    def __dealloc__(self):
        sdb_intern_free(&self.types)

    # Ruby's rb_vm_frame_method_entry: from the frame's ep, while the env is not local
    # (ep[0] & VM_ENV_FLAG_LOCAL), ep[-2] is the method entry if it is an imemo_ment, else go to
    # the previous env (ep[-1] & ~env_prev_tag_mask); at the local env ep[-2] is a ment, a cref (no method) or an
    # svar holding cref_or_me. The ep words come from phase 3's spans (one VM stack: the
    # previous env of a block is mostly a deeper frame's, already read); heap envs (escaped
    # blocks, procs) not in the spans and the type of each ep[-2] value are read at first sight.
    cdef uint32_t value_type(self, uint64_t v, uint64_t *inner) noexcept nogil:
        """The imemo type of the object at v (IMEMO_NONE: not an imemo, or not readable), and for an
        svar its cref_or_me (inner). Only method entries are remembered by address: a defined
        method's entry lives as long as its method. An svar (a frame that uses $~ or $_), a cref
        (class bodies, instance_eval) or any other value is read each time: they come and go with
        calls, and the GC gives a freed one's slot to the next object, a method entry's too. A
        remembered svar lent a later frame an earlier frame's method (another class's `initialize`);
        a remembered cref left a method entry born in its slot without its method (a bare label)."""
        cdef uint64_t buf[2]
        cdef uint32_t t
        cdef TypeEnt ent
        cdef const TypeEnt *known
        inner[0] = 0
        if v < 4096 or (v & self.L.immediate_mask):
            return IMEMO_NONE           # Qfalse, Qnil, special constants
        known = <const TypeEnt *>sdb_intern_find_u64(&self.types, sdb_mix64(v), v)
        if known != NULL:
            return known.type           # a method entry (the only kind kept)
        if self.read1(v, buf, 16) != 16 or (buf[0] & self.L.t_mask) != self.L.t_imemo:
            return IMEMO_NONE
        t = <uint32_t>((buf[0] >> self.L.imemo_shift) & self.L.imemo_mask)
        if t == self.L.imemo_svar:
            inner[0] = buf[1]
        elif t == self.L.imemo_ment:
            ent.addr = v
            ent.type = t
            ent.inner = 0
            ent.def_read = 0
            sdb_intern_insert(&self.types, sdb_mix64(v), &ent)     # not kept when memory runs out
        return t

    cdef uint64_t me_def_iseq(self, uint64_t me, int again=0) noexcept nogil:
        """What the method entry at `me` runs: its definition's ISeq for a `def` method, INNER_NOT_ISEQ
        for any other kind (a C function's, a define_method's), 0 when it cannot be read (or this Ruby's
        row has no definition ISeq). Read once per entry (a defined method's entry lives as long as
        its method), and again when `again`: the kept read can be older than a move of the
        definition's ISeq (a compaction moves the ISeq and updates the definition, while an entry
        that is pinned stays at its address: under YJIT, every frame of a moved method was refused
        after GC.verify_compaction_references until its entry was read again) or than the entry's
        slot given to another entry."""
        cdef TypeEnt *t
        cdef uint8_t mb[ME_SPAN]
        cdef uint8_t db[64]
        cdef uint64_t d, di
        cdef uint32_t span, kind
        if self.L.def_iseq == LAYOUT_NA:
            return 0
        t = <TypeEnt *>sdb_intern_find_u64(&self.types, sdb_mix64(me), me)
        if t != NULL and t.def_read and not again:
            return t.inner
        span = (self.L.def_iseq if self.L.def_iseq > self.L.def_type else self.L.def_type) + 8
        if span > 64 or self.read1(me, mb, ME_SPAN) != ME_SPAN:
            return 0
        d = u64_at(mb, self.L.me_def)
        if d == 0 or self.read1(d, db, span) != span:
            return 0
        kind = (db[self.L.def_type] >> self.L.def_type_shift) & self.L.def_type_mask
        if kind == self.L.method_type_iseq:
            di = u64_at(db, self.L.def_iseq)
        else:
            di = INNER_NOT_ISEQ
        if t != NULL:
            t.inner = di
            t.def_read = 1
        return di

    cdef uint64_t env_me(self, const Job *job, const uint64_t *epd) noexcept nogil:
        """The method entry for a frame whose env words (ep[-2..0] in Ruby 3.1-4.0) are epd[0..]."""
        cdef uint64_t words[ENV_WORDS_MAX]
        cdef uint64_t me, p
        cdef uint32_t level, k
        cdef const Cluster *cl
        cdef const uint64_t *d = epd
        for level in range(ME_WALK_MAX):
            if d[self.env_flags_at] & self.L.env_flag_local:
                return self.check_me(d[self.env_me_at], 1)
            me = self.check_me(d[self.env_me_at], 0)
            if me != 0:
                return me
            p = d[self.env_prev_at] & ~(<uint64_t>self.L.env_prev_tag_mask)
            if p < self.env_below or p >= ADDR_MAX or (p & 7):
                return 0                    # no env there (torn, or garbage: never used as an offset)
            d = NULL
            for k in range(job.cluster0, job.cluster1):
                cl = &self.clusters[k]
                if p >= cl.lo + self.env_below and p + 8 <= cl.hi:
                    d = <const uint64_t *>(self.eparena + cl.arena_off + (p - self.env_below - cl.lo))
                    break
            if d == NULL:
                if self.read1(p - self.env_below, words, self.env_below + 8) != self.env_below + 8:   # a heap env
                    return 0
                d = words
        return 0

    cdef void find_mes(self, Job *job) noexcept nogil:
        """Every Ruby frame's method entry: from the thread's previous read (same ISeq and env at
        the same depth, set in phase 3), else by the walk. Remembered for the next read."""
        cdef SlotCache *c = &self.cache[job.slot]
        cdef RawFrame *r
        cdef MeMemo *m
        cdef uint32_t j, cs
        cdef int memo = not job.truncated
        if memo and c.memo_cap < job.nf + 1:
            cs = job.nf + 16
            m = <MeMemo *>realloc(c.memo, cs * sizeof(MeMemo))
            if m == NULL:
                memo = 0
            else:
                c.memo = m
                c.memo_cap = cs
        for j in range(job.nf):
            r = &self.raw[job.frame0 + j]
            if r.me_known:
                continue                                 # its memo entry holds it already
            m = &c.memo[job.nf - 1 - j] if memo else NULL
            if r.iseq != 0 and r.pc != 0 and r.ep_off != NO_EP:
                r.me = self.env_me(job, <const uint64_t *>(self.eparena + r.ep_off))
                if m != NULL:
                    m.ep = r.ep
                    m.iseq = r.iseq
                    m.me = r.me
            elif m != NULL:
                m.ep = 0
        c.nmemo = job.nf if memo else 0
