# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The walk, the sampler's third layer (Reads -> MethodEntries -> Walk -> States -> Sampler): from
the bytes phases 1-3 read to samples. Each Ruby frame's method entry (read_and_walk: _mes.pyx's
find_mes over the ep words read), the checks of untrusted memory (check_iseq, me_disagrees,
link_ok, finish_job: docs/internals.md, "Reading the stacks of a tick"), interning into the tables
(native/intern.c: ISeqs, frames, stacks, method entries, cref_or_me types) and one sample per thread
(emit, into what the next drain takes)."""
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy, memset, memcmp
from sdb_sidecar.sampler._intern cimport (sdb_intern_init, sdb_intern_free, sdb_intern_clear, sdb_intern_find,
                                  sdb_intern_insert, sdb_intern_at)


cdef struct StackKey:        # a stack being interned: its frame ids, leaf first
    const uint32_t *ids
    uint32_t n
    uint64_t hash

cdef int frame_eq(const void *entry, const void *key, const void *ctx) noexcept nogil:
    cdef const FrameEnt *g = <const FrameEnt *>entry
    cdef const FrameEnt *f = <const FrameEnt *>key
    return g.iseq == f.iseq and g.pc == f.pc and g.me == f.me and g.kind == f.kind

cdef int stack_eq(const void *entry, const void *key, const void *ctx) noexcept nogil:
    """ctx: the arena holding the frame ids of the stacks"""
    cdef const StackEnt *s = <const StackEnt *>entry
    cdef const StackKey *k = <const StackKey *>key
    return s.hash == k.hash and s.length == k.n and (
        k.n == 0 or memcmp(&(<const uint32_t *>ctx)[s.off], k.ids, k.n * sizeof(uint32_t)) == 0)


cdef class Walk(MethodEntries):
    def __cinit__(self, Registry reg, int pid, double rate_hz=1000.0, int max_depth=2048):
        self.ids = <uint32_t *>malloc((max_depth + 2) * sizeof(uint32_t))
        self.cur = <FrameEnt *>malloc((max_depth + 2) * sizeof(FrameEnt))
        if (sdb_intern_init(&self.iseqs, sizeof(IseqEnt), 4096) != 0
                or sdb_intern_init(&self.frames, sizeof(FrameEnt), 4096) != 0
                or sdb_intern_init(&self.stacks, sizeof(StackEnt), 4096) != 0
                or sdb_intern_init(&self.mes, sizeof(uint64_t), 1024) != 0
                or self.ids == NULL or self.cur == NULL):
            raise MemoryError()
        # the empty stack is stack 0
        self.intern_stack(NULL, 0)

    def __dealloc__(self):
        free(self.ids)
        free(self.cur)
        sdb_intern_free(&self.iseqs)
        sdb_intern_free(&self.frames)
        sdb_intern_free(&self.stacks)
        free(self.arena)
        sdb_intern_free(&self.mes)
        free(self.g.samples)
        free(self.g.tevts)
        free(self.g.new_iseqs)
        free(self.g.new_mes)

    cdef int check_iseq(self, uint64_t iseq, uint64_t pc, uint64_t now, int jit=0) noexcept nogil:
        """1 if iseq is a real ISeq of the target with pc inside it; with `jit` (a frame YJIT pushed,
        whose pc YJIT may not have written), 2 if it is a real ISeq, read now, and pc is not inside
        it; else 0.
        Known ISeqs are checked from the cache; an unknown one (or a pc outside the
        cached range: the address may have been reused) is read from the target."""
        cdef IseqEnt *e
        cdef uint8_t ib[ISEQ_SPAN]
        cdef uint8_t bb[BODY_SPAN_MAX]
        cdef uint64_t flags, body, encoded, size
        cdef uint32_t span = BODY_SPAN
        cdef IseqEnt fresh
        cdef int64_t id
        e = self.iseq_lookup(iseq)
        cdef int known = e != NULL
        if known and pc >= e.encoded and pc <= e.encoded + e.size * 8:
            return 1
        if known and jit and e.read_ns == now:
            return 2        # read for this sample already (link_ok, then finish_job): the pc not its own
        if self.L.body_local_table_size != LAYOUT_NA and self.L.body_local_table_size != 0 \
                and self.L.body_local_table_size + 4 <= BODY_SPAN_MAX \
                and self.L.body_local_table_size + 4 > span:
            span = self.L.body_local_table_size + 4
        if self.L.body_local_iseq != LAYOUT_NA and self.L.body_local_iseq != 0 \
                and self.L.body_local_iseq + 8 <= BODY_SPAN_MAX and self.L.body_local_iseq + 8 > span:
            span = self.L.body_local_iseq + 8
        if self.read1(iseq, ib, ISEQ_SPAN) != ISEQ_SPAN:
            return 0
        flags = u64_at(ib, 0)
        body = u64_at(ib, self.L.iseq_body)
        if (flags & self.L.t_mask) != self.L.t_imemo \
                or ((flags >> self.L.imemo_shift) & self.L.imemo_mask) != self.L.imemo_iseq or body == 0:
            return 0
        if self.read1(body, bb, span) != span:
            return 0
        size = u32_at(bb, self.L.body_iseq_size)
        encoded = u64_at(bb, self.L.body_iseq_encoded)
        if encoded == 0 or size == 0:
            return 0
        if pc < encoded or pc > encoded + size * 8:
            if not jit:
                return 0
            if known and e.encoded == encoded and e.size == size:
                e.read_ns = now
                return 2                    # the ISeq it was, its pc not kept
        if not known:
            id = sdb_intern_insert(&self.iseqs, sdb_mix64(iseq), &fresh)
            if id < 0:
                return 0
            e = <IseqEnt *>sdb_intern_at(&self.iseqs, <uint64_t>id)
        e.addr = iseq
        e.encoded = encoded
        e.size = size
        e.type = TYPE_UNREAD
        e.locals = 0
        e.read_ns = now
        e.local_iseq = 0
        if self.L.body_local_iseq != LAYOUT_NA and self.L.body_local_iseq != 0 and self.L.body_local_iseq + 8 <= span:
            e.local_iseq = u64_at(bb, self.L.body_local_iseq)
        if span > BODY_SPAN:
            e.type = u32_at(bb, self.L.body_type)
            e.locals = u32_at(bb, self.L.body_local_table_size)
        # a new ISeq, or a reused address: handed to the Drainer, which names it from eBPF's birth
        # record when eBPF saw its birth (attached from that birth to this sample: nothing born there
        # unseen in between) and reads it otherwise. (A map of eBPF's names, trusted here when it held
        # these instructions, named a method born unseen at a reused address with a reused buffer by
        # its predecessor's name: the probes stop themselves before the map can be cleared.)
        if grow(<void **>&self.g.new_iseqs, &self.g.new_iseq_cap, self.g.new_iseq_len + 1, sizeof(AddrEvt)) == 0:
            self.g.new_iseqs[self.g.new_iseq_len].addr = iseq
            self.g.new_iseqs[self.g.new_iseq_len].at_ns = now
            self.g.new_iseqs[self.g.new_iseq_len].encoded = encoded
            self.g.new_iseq_len += 1
        return 1 if pc >= encoded and pc <= encoded + size * 8 else 2

    cdef void note_me(self, uint64_t me, uint64_t now) noexcept nogil:
        cdef uint8_t mb[ME_SPAN]
        if me == 0 or sdb_intern_find_u64(&self.mes, sdb_mix64(me), me) != NULL:
            return
        if sdb_intern_insert(&self.mes, sdb_mix64(me), &me) < 0:
            return
        if grow(<void **>&self.g.new_mes, &self.g.new_me_cap, self.g.new_me_len + 1, sizeof(AddrEvt)) == 0:
            self.g.new_mes[self.g.new_me_len].addr = me
            self.g.new_mes[self.g.new_me_len].at_ns = now
            # what the entry is now: the Drainer's later read must find the same definition and class
            # (GC.compact moves method entries, and a freed one's memory is reused)
            self.g.new_mes[self.g.new_me_len].encoded = 0
            self.g.new_mes[self.g.new_me_len].klass = 0
            if self.read1(me, mb, ME_SPAN) == ME_SPAN:
                self.g.new_mes[self.g.new_me_len].encoded = u64_at(mb, self.L.me_def)
                self.g.new_mes[self.g.new_me_len].klass = u64_at(mb, self.L.me_defined_class)
            self.g.new_me_len += 1

    cdef int64_t intern_frame(self, const FrameEnt *f) noexcept nogil:
        """The id of frame f (a new one the first time it is seen); -1: no memory."""
        cdef uint64_t h = sdb_mix64(f.iseq * 31 + f.pc * 17 + f.me * 7 + f.kind + 1)
        cdef int64_t id = sdb_intern_find(&self.frames, h, frame_eq, f, NULL)
        if id >= 0:
            return id
        return sdb_intern_insert(&self.frames, h, f)

    cdef int64_t intern_stack(self, const uint32_t *ids, uint32_t n) noexcept nogil:
        """The id of the stack of frames ids[0:n], leaf first (a new one the first time); -1: no memory."""
        cdef uint64_t h = 0x9e3779b97f4a7c15ULL ^ n
        cdef uint32_t k
        cdef int64_t sid
        cdef StackKey key
        cdef StackEnt ent
        for k in range(n):
            h = sdb_mix64(h ^ ids[k])
        key.ids = ids
        key.n = n
        key.hash = h
        sid = sdb_intern_find(&self.stacks, h, stack_eq, &key, self.arena)
        if sid >= 0:
            return sid
        if grow(<void **>&self.arena, &self.arena_cap, self.arena_len + n + 1, sizeof(uint32_t)) != 0:
            return -1
        ent.hash = h
        ent.off = <uint32_t>self.arena_len
        ent.length = n
        sid = sdb_intern_insert(&self.stacks, h, &ent)
        if sid < 0:
            return -1
        if n:
            memcpy(&self.arena[self.arena_len], ids, n * sizeof(uint32_t))
        self.arena_len += n
        return sid

    cdef int me_disagrees(self, uint64_t iseq, uint64_t me) noexcept nogil:
        """1 when the method entry found for a Ruby frame of `iseq` (0: none found) cannot be that
        frame's. A frame of a method's ISeq always has its method's entry (Ruby calls a `def` method
        with its resolved entry: an alias's, a refinement's or a zsuper's original, an ISeq method),
        so on such a frame: no entry (env words read while another frame stood there: rubocop showed
        methods without their class), or an entry of another kind (a C function's or a
        define_method's: the env words of a call that stood at the same depth), or an ISeq method
        whose definition's ISeq is not the frame's. On the other frames (blocks, rescues, ensures,
        evals: theirs is the local env's entry) an ISeq method whose definition's ISeq is not the
        frame's local ISeq. Methods of other kinds and entries that cannot be read are not checked
        there (0), nor is an ISeq not read yet."""
        cdef const IseqEnt *e = self.iseq_lookup(iseq)
        cdef uint64_t di
        cdef int of_method
        if e == NULL:
            return 0
        of_method = e.type == self.L.iseq_type_method
        if me == 0:
            return of_method
        if e.local_iseq == 0:
            return 0
        di = self.me_def_iseq(me)
        if (di == INNER_NOT_ISEQ and of_method) or (di != 0 and di != INNER_NOT_ISEQ and di != e.local_iseq):
            di = self.me_def_iseq(me, 1)    # the entry's kept read may be older than a move: read it now
        if di == INNER_NOT_ISEQ:
            return of_method
        return di != 0 and di != e.local_iseq

    cdef int read_and_walk(self, uint32_t first, uint32_t n) noexcept nogil:
        """Phases 1-3 (Reads.read_jobs), then 3b: the method entry of every Ruby frame (reads only at
        first sight). -1: the target is gone."""
        cdef uint32_t j
        if self.read_jobs(first, n) != 0:
            return -1
        for j in range(first, first + n):
            if self.jobs[j].result == R_OK:
                self.find_mes(&self.jobs[j])
        return 0

    cdef int link_ok(self, Job *job, uint32_t j, RawFrame *r) noexcept nogil:
        """0 when Ruby frame j (a method's) cannot be the callee of the Ruby frame below it. A call
        sets the caller's sp to its receiver's slot and puts the method's locals and env right
        after it (vm_call_iseq_setup_normal): ep = caller's sp + (local_table_size + env_data_size) words. A
        frame the thread left, still in memory above a Ruby frame it entered since, sits where its
        old caller's sp was: it fails this unless the new frame has the same sp there. 1 when the
        link holds or cannot be checked (no such field in the row, a block or other frame, a C
        caller: checked by FINISH, an env moved to the heap), or the frame is deeper than LINK_DEPTH from the leaf (a frame
        is left behind by a return and a call within the microseconds of a copy: near the leaf;
        this bounds the cost on deep stacks). The caller's sp in memory can lag what it runs (the
        interpreter may keep it in a register between calls): a live frame's own link is always
        exact, a frame left behind can pass when the new caller's sp is where the old one's was."""
        cdef IseqEnt *e
        cdef IseqEnt *pe
        cdef RawFrame *p
        cdef uint64_t psp, vm_stack
        # (0: an older gem's file, where these were reserved and zero)
        if self.L.body_local_table_size == LAYOUT_NA or self.L.body_local_table_size == 0 \
                or self.L.cfp_sp == LAYOUT_NA or self.L.cfp_sp == 0 or j + 1 >= job.nf \
                or j >= LINK_DEPTH:
            return 1
        p = &self.raw[job.frame0 + j + 1]
        if p.iseq == 0 or p.pc == 0:
            return 1
        e = self.iseq_lookup(r.iseq)
        if not (e != NULL and r.pc >= e.encoded and r.pc <= e.encoded + e.size * 8):
            if self.check_iseq(r.iseq, r.pc, job.lo_ns, self.frame_jit(job, j)) == 0:
                return 0
            e = self.iseq_lookup(r.iseq)
            if e == NULL:
                return 0
        if e.type != self.L.iseq_type_method or e.locals >= 65536:
            return 1
        # an env Ruby moved to the heap (a block of the method became a Proc: vm_make_env_each sets
        # cfp->ep to the copy) has no place relative to the caller's sp: nothing to check. Sidekiq's
        # Processor#dispatch is one (its blocks go to methods taking &block): every read of a job's
        # stack was dropped before this
        vm_stack = u64_at(job.hdr, self.L.ec_vm_stack)
        if r.ep < vm_stack or r.ep >= vm_stack + u64_at(job.hdr, self.L.ec_vm_stack_size) * 8:
            return 1
        # the caller a method or a block (an eval's or a class body's sp may lie elsewhere: the
        # binding's env); known from this or an earlier read, else not checked
        pe = self.iseq_lookup(p.iseq)
        if pe == NULL or (pe.type != self.L.iseq_type_method and pe.type != self.L.iseq_type_block):
            return 1
        psp = u64_at(self.rawbuf + job.raw_off, (j + 1) * self.L.cfp_size + self.L.cfp_sp)
        return r.ep == psp + (<uint64_t>e.locals + self.L.env_data_size) * 8

    cdef int finish_job(self, Job *job, uint64_t now) noexcept nogil:
        """Phase 4 for one job: checks, interning, the sample. Returns an R_* outcome."""
        cdef const sdb_slot *s = <const sdb_slot *>(self.reg.base + self.reg.slots_offset
                                                    + <size_t>job.slot * self.reg.slot_size)
        cdef SlotCache *c = &self.cache[job.slot]
        cdef uint64_t shallow, magic, ep0
        cdef uint32_t j, k, nunstable, n_out, cs
        cdef int64_t fid, sid
        cdef RawFrame *r
        cdef FrameEnt *f
        cdef const uint64_t *epd
        cdef int same, ck, in_gc, have, flags_and_ec
        cdef uint64_t gc_word, running_ec, def_iseq
        # the copy window as the trace keeps it, in whole us back from `now` (rounded out): names
        # first read for this sample hold from exactly the window's start the trace will show
        job.lo_ns = now - (now - job.lo_ns + 999) // 1000 * 1000 if now > job.lo_ns else now
        cdef FrameEnt *pf
        cdef uint32_t *pi
        if sdb_load_acquire_u64(&s.gen) != job.gen:
            return R_GONE                  # the thread left, or its slot changed, during the read
        shallow = job.cfp2 if job.cfp2 > job.cfp else job.cfp
        nunstable = 0
        if shallow > job.cfp:
            # frames above the shallowest frame pointer seen; a garbage pointer makes them all unstable
            nunstable = job.nf if (shallow - job.cfp) / self.L.cfp_size > job.nf \
                else <uint32_t>((shallow - job.cfp) / self.L.cfp_size)

        # classify and check, innermost first
        n_out = 0
        # the GC words: read with the stack when it was read in context (the tick's own read of them
        # is up to a tick later), else the tick's
        # (3.1: objspace->flags and the running ec, the gem found them; 3.3+: the gem's gc_active)
        flags_and_ec = self.L.gc_flags_addr != 0 and self.L.running_ec_addr != 0
        if job.ctx and job.ctx_gc_ok:
            have, gc_word, running_ec = 1, job.ctx_gc_word, job.ctx_running_ec
        elif flags_and_ec:
            have, gc_word, running_ec = self.gc_words_read == 2, self.gc_flags_word, self.running_ec_word
        else:
            have, gc_word, running_ec = 1, sdb_load_relaxed_u32(&self.reg.hdr.gc_active), 0
        if flags_and_ec:
            in_gc = have and job.ec == running_ec and job.state != STATE_BLOCKED \
                and (gc_word >> self.L.gc_during_bit) & 1
        else:
            in_gc = job.state == STATE_RUNNING and gc_word != 0
        if in_gc:
            # the VM is in GC and this thread holds the GVL: it is the one collecting. 3.3+: the
            # gem's GC_ENTER/GC_EXIT hook keeps the header's word. 3.1: objspace->flags.during_gc,
            # read in this thread's read, and its ec is the one that last took the GVL
            f = &self.cur[0]
            f.kind = KIND_GC
            f.iseq = 0
            f.pc = 0
            f.me = 0
            f.pad = 0
            n_out = 1
            self.gc_samples += 1
        if nunstable >= job.nf:
            return R_TORN
        for j in range(nunstable, job.nf):
            r = &self.raw[job.frame0 + j]
            f = &self.cur[n_out]
            f.pad = 0
            if r.iseq != 0 and r.pc != 0:
                if not self.link_ok(job, j, r):
                    return R_TORN
                if j + 1 < job.nf and self.raw[job.frame0 + j + 1].iseq == 0 \
                        and self.raw[job.frame0 + j + 1].ep_off != NO_EP \
                        and ((<const uint64_t *>(self.eparena + self.raw[job.frame0 + j + 1].ep_off))[2]
                             & self.L.frame_magic_mask) == self.L.frame_magic_cfunc:
                    # called by a C function: Ruby marks such a frame FINISH (vm_call0, invoke_block);
                    # without it, this is a frame the thread left, still in memory above the C
                    # function it has called since. A C function's frame is known by its ISeq 0
                    # and its magic, never by its pc: YJIT leaves a C frame's pc as the slot held
                    # it (gen_send_cfunc), and a frame copied while the interpreter writes it can
                    # show the C function's ISeq 0 beside the pc of the Ruby frame it replaces
                    if r.ep_off == NO_EP or ((<const uint64_t *>(self.eparena + r.ep_off))[2]
                                             & self.L.frame_flag_finish) == 0:
                        return R_TORN
                f.kind = KIND_RUBY          # checked below: a real ISeq with pc inside it
                f.iseq = r.iseq
                f.pc = r.pc
                f.me = r.me
                f.pad = self.frame_jit(job, j)     # its pc may be an older frame's (below)
                n_out += 1
                continue
            if r.ep_off == NO_EP:
                return R_TORN               # a frame with no env: copied while it was written
            epd = <const uint64_t *>(self.eparena + r.ep_off)      # the env words (ep[-2], ep[-1], ep[0])
            ep0 = epd[self.env_flags_at]
            magic = ep0 & self.L.frame_magic_mask
            if r.iseq == 0 and magic == self.L.frame_magic_cfunc:
                f.kind = KIND_CFUNC
                f.iseq = 0
                f.pc = 0
                f.me = epd[self.env_me_at]
                if f.me == 0 or self.check_me(f.me, 0) == 0:
                    return R_TORN       # ep[-2] is not a method entry: read while the frame changed
                n_out += 1
            elif r.iseq != 0 and magic == self.L.frame_magic_ifunc:
                f.kind = KIND_OTHER
                f.iseq = 0
                f.pc = 0
                f.me = 0
                n_out += 1
            elif magic != self.L.frame_magic_dummy and magic != self.L.frame_magic_top \
                    and magic != self.L.frame_magic_eval:
                return R_TORN               # a method, block or class frame without ISeq and pc: half written
        if job.truncated:
            f = &self.cur[n_out]
            memset(f, 0, sizeof(FrameEnt))  # no ISeq, pc or method entry
            f.kind = KIND_TRUNCATED
            n_out += 1

        # frames equal (root-aligned) to this thread's previous sample were checked then;
        # the rest are checked now and interned
        same = c.has_prev and c.nprev == n_out
        for j in range(n_out):
            f = &self.cur[j]
            k = n_out - 1 - j
            if c.has_prev and k < c.nprev:
                if (c.prev[k].iseq == f.iseq and c.prev[k].pc == f.pc and c.prev[k].me == f.me
                        and c.prev[k].kind == f.kind):
                    self.ids[j] = c.prev_ids[k]
                    f.pad = 0
                    continue
            same = 0
            # a name read later for an address first seen here must hold from the earliest moment
            # these frames may have been copied (the drainer proves nothing was born there since)
            if f.kind == KIND_RUBY:
                ck = self.check_iseq(f.iseq, f.pc, job.lo_ns, f.pad)
                f.pad = 0
                if ck == 0:
                    return R_TORN
                if ck == 2:
                    # YJIT's frame of a real ISeq whose pc is not inside it: the slot's older pc
                    # (YJIT had no call out to save it for). The method is sure, the line is not:
                    # pc 0, no line (Ruby itself gives YJIT's top frame line 0)
                    f.pc = 0
                    self.yjit_pcs += 1
                if self.me_disagrees(f.iseq, f.me):
                    # the entry (or its absence) is another call's: the env words were read after
                    # the frame was replaced at the same depth, or the memo kept an older read's.
                    # Read again, every env walked anew
                    c.nmemo = 0
                    return R_TORN
                self.note_me(f.me, job.lo_ns)
            elif f.kind == KIND_CFUNC:
                def_iseq = self.me_def_iseq(f.me)
                if def_iseq != 0 and def_iseq != INNER_NOT_ISEQ:
                    def_iseq = self.me_def_iseq(f.me, 1)    # the kept read may be an older entry's
                if def_iseq != 0 and def_iseq != INNER_NOT_ISEQ:
                    # a `def` method's entry in a C function's frame: Ruby pushes a C frame only
                    # with its C method's entry (vm_call_cfunc_with_frame), so these env words are
                    # another call's, read while the frame at this depth was replaced (make_beta's
                    # frame read as a C frame with make_alpha's entry, 3.1 --yjit under load)
                    c.nmemo = 0
                    return R_TORN
                self.note_me(f.me, job.lo_ns)
            fid = self.intern_frame(f)
            if fid < 0:
                return R_FATAL
            self.ids[j] = <uint32_t>fid
        if same:
            sid = c.prev_stack
        else:
            sid = self.intern_stack(self.ids, n_out)
            if sid < 0:
                return R_FATAL
            if c.cap < n_out + 1:
                cs = n_out + 16
                c.has_prev = 0              # until both arrays hold cs entries
                pf = <FrameEnt *>realloc(c.prev, cs * sizeof(FrameEnt))
                if pf == NULL:
                    return R_FATAL
                c.prev = pf
                pi = <uint32_t *>realloc(c.prev_ids, cs * sizeof(uint32_t))
                if pi == NULL:
                    return R_FATAL
                c.prev_ids = pi
                c.cap = cs
            for j in range(n_out):
                c.prev[n_out - 1 - j] = self.cur[j]
                c.prev_ids[n_out - 1 - j] = self.ids[j]
            c.nprev = n_out
            c.prev_stack = <uint32_t>sid
            c.has_prev = 1

        return self.emit(job, <uint32_t>sid, now, job.lo_ns, job.ec)

    cdef int emit(self, const Job *job, uint32_t sid, uint64_t now, uint64_t lo_ns, uint64_t ec) noexcept nogil:
        """A sample at `now` of stack `sid`, whose frames were copied no earlier than lo_ns, a whole
        number of us before it (finish_job rounds it so; a stack known unchanged since an earlier
        read: lo_ns = now), read on ec. Its span is the slot's when the slot was taken, if the slot
        still says so now (serials are never reused) and that span began on this ec (fiber)."""
        cdef uint64_t win = (now - lo_ns) // 1000
        cdef uint64_t span = 0
        cdef const sdb_slot *s
        if job.span0 != 0:
            s = <const sdb_slot *>(self.reg.base + self.reg.slots_offset + <size_t>job.slot * self.reg.slot_size)
            if sdb_load_acquire_u64(&s.span) == job.span0 and job.span_ec == ec and ec != 0:
                span = job.span0
            else:
                self.span_unsure += 1
        if grow(<void **>&self.g.samples, &self.g.sample_cap, self.g.sample_len + 1, sizeof(SampleEnt)) != 0:
            return R_FATAL
        self.g.samples[self.g.sample_len].t_ns = now
        if win > 0xffffffffUL:
            win = 0xffffffffUL
        self.g.samples[self.g.sample_len].win_us = <uint32_t>win
        self.g.samples[self.g.sample_len].serial = job.serial
        self.g.samples[self.g.sample_len].stack = sid
        self.g.samples[self.g.sample_len].state = job.state
        self.g.samples[self.g.sample_len].span = span
        self.g.samples[self.g.sample_len].tick = self.ticks
        self.g.sample_len += 1
        self.total_samples += 1
        self.cache[job.slot].last_ns = now
        self.cache[job.slot].last_span = job.span0
        if job.ctx:
            self.ctx_samples += 1
        return R_OK

    cdef void start_over(self) noexcept nogil:
        """drain(reset=True), under the mutex: the tables empty (their memory kept for reuse)."""
        cdef uint32_t i
        sdb_intern_clear(&self.frames)
        self.frames_drained = 0
        sdb_intern_clear(&self.stacks)
        self.stacks_drained = 0
        self.arena_len = 0
        sdb_intern_clear(&self.iseqs)
        sdb_intern_clear(&self.mes)
        for i in range(self.nslots + 1):
            self.cache[i].has_prev = 0
