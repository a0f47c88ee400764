/**********************************************************************
 * sdb_check.c - the layout check: the row's offsets proven on this process's own frames,
 * classes and symbols (rb_profile_frames is the judge), and the facts found on the way.
 **********************************************************************/
#include "sdb_gem.h"

/* ---------- the layout check ---------- */

struct sdb_vm_frame {
    uint32_t path_len;
    long first_lineno, local_first_lineno;
    char path[SDB_PATH_CAP];
};

static int
sdb_read_lineno(const struct sdb_layout *L, uint64_t body, long *out)
{
    if (L->body_first_lineno_is_fixnum) {
        uint64_t v;
        if (sdb_read_u64(body + L->body_first_lineno, &v)) return -1;
        *out = (long)((int64_t)v >> L->fixnum_shift);
    }
    else {
        int32_t v;
        if (sdb_read(body + L->body_first_lineno, &v, sizeof(v))) return -1;
        *out = v;
    }
    return 0;
}

/* Reads a String's bytes through the layout. */
static int
sdb_read_rstring(const struct sdb_layout *L, uint64_t str, struct sdb_vm_frame *f)
{
    uint64_t flags, len, ptr;
    if (sdb_read_u64(str, &flags) || (flags & L->t_mask) != L->t_string) return -1;
    if (flags & (1ull << L->rstring_noembed_bit)) {
        if (sdb_read_u64(str + L->rstring_heap_len, &len) || sdb_read_u64(str + L->rstring_heap_ptr, &ptr))
            return -1;
    }
    else {
        if (L->rstring_embed_len != SDB_NA) {
            uint64_t l;
            if (sdb_read_u64(str + L->rstring_embed_len, &l)) return -1;
            len = l;
        }
        else {
            len = (flags >> L->rstring_embed_len_shift) & L->rstring_embed_len_mask;
        }
        ptr = str + L->rstring_embed_ary;
    }
    if (len > (1u << 20)) return -1;
    f->path_len = (uint32_t)len;
    if (len > SDB_PATH_CAP) len = SDB_PATH_CAP;
    return len ? sdb_read(ptr, f->path, len) : 0;
}

/* pathobj: a String, or an Array [path, realpath]. */
static int
sdb_read_pathobj(const struct sdb_layout *L, uint64_t pathobj, struct sdb_vm_frame *f)
{
    uint64_t flags, first;
    if (sdb_read_u64(pathobj, &flags)) return -1;
    if ((flags & L->t_mask) == L->t_array) {
        uint64_t elts = pathobj + L->rarray_embed_ary;
        if (!(flags & (1ull << L->rarray_embed_bit))) {
            if (sdb_read_u64(pathobj + L->rarray_heap_ptr, &elts)) return -1;
        }
        if (sdb_read_u64(elts, &first)) return -1;
        pathobj = first;
    }
    return sdb_read_rstring(L, pathobj, f);
}

static int
sdb_is_iseq(const struct sdb_layout *L, uint64_t iseq)
{
    uint64_t flags;
    if (sdb_read_u64(iseq, &flags)) return 0;
    return (flags & L->t_mask) == L->t_imemo && ((flags >> L->imemo_shift) & L->imemo_mask) == L->imemo_iseq;
}

/* The row's numbers that this Ruby's public headers give (the gem is compiled against them): the
 * type tags, where an imemo keeps its type, struct st_table. The rest (imemo types, frame magics,
 * the enums) is proven on this thread's own frames by sdb_check_layout and sdb_check_frame. */
static int
sdb_check_public_numbers(const struct sdb_layout *L, char *why, size_t cap)
{
    const struct { const char *name; unsigned row, header; } n[] = {
        {"t_mask", L->t_mask, RUBY_T_MASK}, {"t_class", L->t_class, RUBY_T_CLASS},
        {"t_module", L->t_module, RUBY_T_MODULE}, {"t_string", L->t_string, RUBY_T_STRING},
        {"t_array", L->t_array, RUBY_T_ARRAY}, {"t_imemo", L->t_imemo, RUBY_T_IMEMO},
        {"t_iclass", L->t_iclass, RUBY_T_ICLASS}, {"imemo_shift", L->imemo_shift, RUBY_FL_USHIFT},
        {"immediate_mask", L->immediate_mask, RUBY_IMMEDIATE_MASK},
        {"fixnum_shift", L->fixnum_shift, (unsigned)__builtin_ctzl(RB_INT2FIX(1) & ~(VALUE)RUBY_FIXNUM_FLAG)},
        {"st_num_entries", L->st_num_entries, offsetof(st_table, num_entries)},
        {"st_entries_start", L->st_entries_start, offsetof(st_table, entries_start)},
        {"st_entries_bound", L->st_entries_bound, offsetof(st_table, entries_bound)},
        {"st_entries", L->st_entries, offsetof(st_table, entries)},
    };
    size_t i;
    for (i = 0; i < sizeof(n) / sizeof(n[0]); i++) {
        if (n[i].row != n[i].header) {
            snprintf(why, cap, "the row's %s is %u, this Ruby's headers say %u", n[i].name, n[i].row, n[i].header);
            return -1;
        }
    }
    return 0;
}

/* One control frame's ep[0] against the row's frame magics and env flags: the running frame (a C
 * method's: this one) is CFUNC, the outermost is Ruby's dummy (LOCAL and FINISH set), a method's
 * frame is METHOD and LOCAL. 0 = agrees (or nothing to say); -1 = refused, reason in `why`. */
static int
sdb_check_frame(const struct sdb_layout *L, const unsigned char *cfpbuf, int running, int outermost,
                uint32_t iseq_type, char *why, size_t cap)
{
    uint64_t ep, ep0;
    uint32_t magic;
    memcpy(&ep, cfpbuf + L->cfp_ep, 8);
    if (!ep || sdb_read_u64(ep - 8 * (uint64_t)L->env_flags, &ep0)) return 0;
    magic = (uint32_t)(ep0 & L->frame_magic_mask);
    if (running && magic != L->frame_magic_cfunc) {
        snprintf(why, cap, "the running C method's frame has ep[0] 0x%llx, not the row's CFUNC magic 0x%x",
                 (unsigned long long)ep0, L->frame_magic_cfunc);
        return -1;
    }
    if (outermost && (magic != L->frame_magic_dummy || !(ep0 & L->env_flag_local) || !(ep0 & L->frame_flag_finish))) {
        snprintf(why, cap, "the outermost frame has ep[0] 0x%llx, not the row's DUMMY magic 0x%x with LOCAL 0x%x "
                 "and FINISH 0x%x", (unsigned long long)ep0, L->frame_magic_dummy, L->env_flag_local, L->frame_flag_finish);
        return -1;
    }
    if (iseq_type == L->iseq_type_method && (magic != L->frame_magic_method || !(ep0 & L->env_flag_local))) {
        snprintf(why, cap, "a method's frame has ep[0] 0x%llx, not the row's METHOD magic 0x%x with LOCAL 0x%x",
                 (unsigned long long)ep0, L->frame_magic_method, L->env_flag_local);
        return -1;
    }
    return 0;
}

/* Walks this thread's frames through the layout and compares them with
 * rb_profile_frames. 0 = agreed; -1 = refused, reason in `why`. */
int
sdb_check_layout(const struct sdb_layout *L, char *why, size_t cap)
{
    VALUE buf[SDB_CHECK_FRAMES];
    int lines[SDB_CHECK_FRAMES];
    struct sdb_vm_frame *mine;
    uint64_t th = (uint64_t)(uintptr_t)RTYPEDDATA_DATA(rb_thread_current());
    uint64_t ec, back, cfp, stack, stack_size, end, running;
    unsigned char cfpbuf[256];
    int n, i, nmine = 0, j = 0, rc = -1, last_is_dummy = 0;

    if (sdb_read_u64(th + L->thread_ec, &ec)) {
        snprintf(why, cap, "cannot read rb_thread_t.ec at +%u (%s)", L->thread_ec, strerror(errno));
        return -1;
    }
    if (sdb_read_u64(ec + L->ec_thread_ptr, &back) || back != th) {
        snprintf(why, cap, "ec->thread_ptr (+%u) does not point back at the thread", L->ec_thread_ptr);
        return -1;
    }
    if (L->thread_status != SDB_NA) {
        uint8_t b;
        if (sdb_read(th + L->thread_status, &b, 1) || ((b >> L->thread_status_shift) & L->thread_status_mask) != L->thread_runnable) {
            snprintf(why, cap, "th->status (byte %u) does not say RUNNABLE for the running thread", L->thread_status);
            return -1;
        }
    }
    if (sdb_read_u64(ec + L->ec_cfp, &cfp) || sdb_read_u64(ec + L->ec_vm_stack, &stack) ||
        sdb_read_u64(ec + L->ec_vm_stack_size, &stack_size)) {
        snprintf(why, cap, "cannot read ec->cfp/vm_stack/vm_stack_size");
        return -1;
    }
    end = stack + stack_size * 8;
    if (L->cfp_size == 0 || L->cfp_size > sizeof(cfpbuf) || stack_size == 0 || stack_size > (1u << 26) ||
        cfp < stack || cfp >= end || (end - cfp) % L->cfp_size != 0) {
        snprintf(why, cap, "ec->cfp is not a control frame inside the VM stack (cfp size %u)", L->cfp_size);
        return -1;
    }

    if (sdb_check_public_numbers(L, why, cap)) return -1;
    n = rb_profile_frames(0, SDB_CHECK_FRAMES, buf, lines);
    mine = ALLOC_N(struct sdb_vm_frame, SDB_CHECK_FRAMES);
    /* the outermost frame (end - 1) is Ruby's dummy; on the main thread it holds a real ISeq.
     * rb_profile_frames reports it on 3.1 but not on 3.3+; Thread#backtrace never does (nor
     * does the sidecar). Walk it, and accept Ruby's count with or without it. */
    for (running = cfp; cfp < end && nmine < SDB_CHECK_FRAMES; cfp += L->cfp_size) {
        uint64_t pc, iseq, body, pathobj, local, lbody;
        uint32_t type = UINT32_MAX;
        struct sdb_vm_frame *f = &mine[nmine];
        if (sdb_read(cfp, cfpbuf, L->cfp_size)) {
            snprintf(why, cap, "cannot read a control frame at 0x%llx", (unsigned long long)cfp);
            goto done;
        }
        memcpy(&pc, cfpbuf + L->cfp_pc, 8);
        memcpy(&iseq, cfpbuf + L->cfp_iseq, 8);
        body = 0;
        if (iseq && pc && sdb_is_iseq(L, iseq) && !sdb_read_u64(iseq + L->iseq_body, &body) && body)
            (void)sdb_read(body + L->body_type, &type, 4);
        if (sdb_check_frame(L, cfpbuf, cfp == running, cfp + L->cfp_size == end, type, why, cap)) goto done;
        if (!iseq || !pc || !body) continue;
        if (sdb_read_u64(body + L->body_pathobj, &pathobj) || sdb_read_pathobj(L, pathobj, f) ||
            sdb_read_lineno(L, body, &f->first_lineno)) {
            snprintf(why, cap, "frame %d: cannot read the iseq's path/first_lineno (pathobj +%u)",
                     nmine, L->body_pathobj);
            goto done;
        }
        f->local_first_lineno = f->first_lineno;
        last_is_dummy = (cfp + L->cfp_size == end);
        if (!sdb_read_u64(body + L->body_local_iseq, &local) && local && local != iseq &&
            !sdb_read_u64(local + L->iseq_body, &lbody) && lbody)
            sdb_read_lineno(L, lbody, &f->local_first_lineno);
        nmine++;
    }

    if (getenv("SDB_DEBUG_LAYOUT")) { /* for adding a Ruby version: both views, side by side */
        for (i = 0; i < nmine; i++)
            fprintf(stderr, "sdb: layout frame %d: %.*s first_lineno %ld (local %ld)\n", i,
                    (int)(mine[i].path_len < 200 ? mine[i].path_len : 200), mine[i].path,
                    mine[i].first_lineno, mine[i].local_first_lineno);
        for (i = 0; i < n; i++) {
            VALUE path = rb_profile_frame_path(buf[i]), first = rb_profile_frame_first_lineno(buf[i]);
            VALUE label = rb_profile_frame_full_label(buf[i]);
            fprintf(stderr, "sdb: rb_profile_frames %d: %s %s first_lineno %ld\n", i,
                    RB_TYPE_P(label, T_STRING) ? StringValueCStr(label) : "?",
                    RB_TYPE_P(path, T_STRING) ? StringValueCStr(path) : "(no path)",
                    FIXNUM_P(first) ? FIX2LONG(first) : -1L);
        }
    }
    for (i = 0; i < n; i++) {
        VALUE path = rb_profile_frame_path(buf[i]);
        VALUE first = rb_profile_frame_first_lineno(buf[i]);
        long want_line;
        struct sdb_vm_frame *f;
        if (!RB_TYPE_P(path, T_STRING) || !FIXNUM_P(first)) continue; /* cfunc */
        if (j >= nmine) {
            if (n == SDB_CHECK_FRAMES || nmine == SDB_CHECK_FRAMES) break;
            snprintf(why, cap, "Ruby reports more frames than the layout finds (%d found)", nmine);
            goto done;
        }
        f = &mine[j];
        want_line = FIX2LONG(first);
        if ((long)f->path_len != RSTRING_LEN(path) ||
            memcmp(f->path, RSTRING_PTR(path), f->path_len < SDB_PATH_CAP ? f->path_len : SDB_PATH_CAP)) {
            snprintf(why, cap, "frame %d: path \"%.*s\" read through the layout, Ruby says \"%.*s\"", j,
                     (int)(f->path_len < 60 ? f->path_len : 60), f->path,
                     (int)(RSTRING_LEN(path) < 60 ? RSTRING_LEN(path) : 60), RSTRING_PTR(path));
            goto done;
        }
        /* for a block in a method Ruby names the method: its local iseq */
        if (want_line != f->first_lineno && want_line != f->local_first_lineno) {
            snprintf(why, cap, "frame %d (%.*s): first_lineno %ld read through the layout, Ruby says %ld", j,
                     (int)(f->path_len < 60 ? f->path_len : 60), f->path, f->first_lineno, want_line);
            goto done;
        }
        j++;
    }
    if (i == n && j != nmine && !(last_is_dummy && j == nmine - 1) && n < SDB_CHECK_FRAMES) {
        snprintf(why, cap, "the layout finds %d Ruby frames, Ruby reports %d", nmine, j);
        goto done;
    }
    if (j == 0) {
        snprintf(why, cap, "no Ruby frame found to compare");
        goto done;
    }
    rc = 0;
done:
    xfree(mine);
    return rc;
}

/* ---------- class paths (for the sidecar's method names) ----------
 * The sidecar names a method entry's class from outside: its path where Ruby keeps it (3.3+: a
 * field of the class's rb_classext_t; 3.1: the hidden ivar __classpath__, or __tmp_classpath__,
 * in the class's ivar st_table), and a singleton's attached object (3.3+: a classext field; 3.1:
 * the ivar __attached__). Checked here on the gem's own module and its singleton class, through
 * the same reads the sidecar makes; what does not check out is withdrawn (SDB_NA / 0), so the
 * sidecar names methods without their class rather than wrongly. */

static int
sdb_class_ivar(const struct sdb_layout *L, uint64_t klass, uint64_t id, uint64_t *out)
{
    uint64_t ext, tbl, n, start, bound, entries, i, key, value;
    if (sdb_read_u64(klass + L->class_ext_ptr, &ext) || !ext ||
        sdb_read_u64(ext + L->classext_iv_tbl, &tbl) || !tbl ||
        sdb_read_u64(tbl + L->st_num_entries, &n) || sdb_read_u64(tbl + L->st_entries_start, &start) ||
        sdb_read_u64(tbl + L->st_entries_bound, &bound) || sdb_read_u64(tbl + L->st_entries, &entries) ||
        bound < start || bound - start > 4096 || !entries)
        return -1;
    for (i = start; i < bound; i++) {
        uint64_t e = entries + i * L->st_entry_size;
        if (sdb_read_u64(e + L->st_entry_key, &key) || sdb_read_u64(e + L->st_entry_record, &value)) return -1;
        if (key == id) {
            *out = value;
            return 0;
        }
    }
    return -1;
}

static int
sdb_is_path(const struct sdb_layout *L, uint64_t v, const char *want)
{
    VALUE s = (VALUE)v;
    uint64_t flags;
    if (!v || RB_SPECIAL_CONST_P(s) || sdb_read_u64(v, &flags) || (flags & L->t_mask) != L->t_string) return 0;
    return RSTRING_LEN(s) == (long)strlen(want) && !memcmp(RSTRING_PTR(s), want, strlen(want));
}

/* RubyVM::InstructionSequence.of(klass.instance_method(name)), for rb_protect: [klass, name] */
static VALUE
sdb_iseq_of(VALUE args)
{
    VALUE m = rb_funcall(RARRAY_AREF(args, 0), rb_intern("instance_method"), 1, RARRAY_AREF(args, 1));
    return rb_funcall(rb_path2class("RubyVM::InstructionSequence"), rb_intern("of"), 1, m);
}

/* The caller/callee link the sampler checks: a method's frame sits at its caller's sp +
 * (local_table_size + env_data_size) words (vm_call_iseq_setup_normal). Checked on this thread's own stack,
 * which stands still while we read it (RubyGems' require gives method/block pairs): a link that
 * does not hold withdraws both fields (SDB_NA), and the sampler then checks no link. With no
 * pair on the stack (`ruby -rsdb`), the row's sourced offsets stay. */
void
sdb_check_link(struct sdb_layout *L)
{
    uint64_t th = (uint64_t)(uintptr_t)RTYPEDDATA_DATA(rb_thread_current());
    uint64_t ec, cfp, stack, stack_size, end, pc, iseq, sp, ep, body;
    uint64_t callee_ep = 0;
    uint32_t type, locals, callee_locals = 0;
    unsigned char cfpbuf[256];
    int callee_method = 0, checked = 0, failed = 0;

    if (L->cfp_sp == SDB_NA || L->body_local_table_size == SDB_NA) return;
    if (L->cfp_sp + 8 > L->cfp_size || sdb_read_u64(th + L->thread_ec, &ec) || sdb_read_u64(ec + L->ec_cfp, &cfp) ||
        sdb_read_u64(ec + L->ec_vm_stack, &stack) || sdb_read_u64(ec + L->ec_vm_stack_size, &stack_size)) {
        failed = 1;
        goto out;
    }
    end = stack + stack_size * 8;
    for (; cfp < end && cfp >= stack; cfp += L->cfp_size) {
        int ruby = 0;
        if (sdb_read(cfp, cfpbuf, L->cfp_size)) break;
        memcpy(&pc, cfpbuf + L->cfp_pc, 8);
        memcpy(&iseq, cfpbuf + L->cfp_iseq, 8);
        memcpy(&sp, cfpbuf + L->cfp_sp, 8);
        memcpy(&ep, cfpbuf + L->cfp_ep, 8);
        if (iseq && pc && sdb_is_iseq(L, iseq) && !sdb_read_u64(iseq + L->iseq_body, &body) && body &&
            !sdb_read(body + L->body_type, &type, 4) && !sdb_read(body + L->body_local_table_size, &locals, 4)) {
            ruby = 1;
            if (callee_method && (type == L->iseq_type_method || type == L->iseq_type_block)) {
                checked++;
                if (callee_ep != sp + ((uint64_t)callee_locals + L->env_data_size) * 8) failed++;
            }
        }
        callee_method = ruby && type == L->iseq_type_method;
        callee_ep = ep;
        callee_locals = ruby ? locals : 0;
    }
out:
    if (getenv("SDB_DEBUG_LAYOUT"))
        fprintf(stderr, "sdb: caller/callee links: %d checked, %d failed (cfp_sp +%u, local_table_size +%u)\n",
                checked, failed, L->cfp_sp, L->body_local_table_size);
    if (failed) L->cfp_sp = L->body_local_table_size = SDB_NA;
}

void
sdb_check_classes(struct sdb_layout *L, VALUE mod)
{
    VALUE sing = rb_singleton_class(mod);
    uint64_t v = 0;
    if (L->class_ext_ptr != SDB_NA && L->classext_iv_tbl != SDB_NA) {
        L->id_classpath = rb_intern("__classpath__");
        L->id_tmp_classpath = rb_intern("__tmp_classpath__");
        L->id_attached = rb_intern("__attached__");
        if (sdb_class_ivar(L, (uint64_t)mod, L->id_classpath, &v) || !sdb_is_path(L, v, "Sdb"))
            L->id_classpath = L->id_tmp_classpath = 0;
        if (sdb_class_ivar(L, (uint64_t)sing, L->id_attached, &v) || v != (uint64_t)mod)
            L->id_attached = 0;
        if (!L->id_classpath) L->class_ext_ptr = L->classext_iv_tbl = SDB_NA;
    }
    if (L->classext_classpath != SDB_NA &&
        (sdb_read_u64((uint64_t)mod + L->classext_classpath, &v) || !sdb_is_path(L, v, "Sdb")))
        L->classext_classpath = SDB_NA;
    if (L->classext_attached_object != SDB_NA &&
        (sdb_read_u64((uint64_t)sing + L->classext_attached_object, &v) || v != (uint64_t)mod))
        L->classext_attached_object = SDB_NA;
    if (L->body_builtin_attrs != SDB_NA) {
        /* a built-in method marked leaf must read as such, a method of ours as none */
        int state = 0;
        VALUE iseqw = rb_protect(sdb_iseq_of, rb_ary_new_from_args(2, rb_cInteger, ID2SYM(rb_intern("-@"))), &state);
        VALUE ours = state ? Qnil : rb_protect(sdb_iseq_of, rb_ary_new_from_args(2, rb_singleton_class(mod),
                                                ID2SYM(rb_intern("enabled?"))), &state);
        uint64_t body, attrs = 0, mine = 1, iseq;
        if (state) rb_set_errinfo(Qnil);
        /* an InstructionSequence's data is a pointer to the rb_iseq_t* (iseq.c iseqw_new) */
        if (state || NIL_P(iseqw) || NIL_P(ours) || !RTYPEDDATA_P(iseqw) || !RTYPEDDATA_P(ours) ||
            sdb_read_u64((uint64_t)(uintptr_t)RTYPEDDATA_DATA(iseqw), &iseq) ||
            sdb_read_u64(iseq + L->iseq_body, &body) ||
            sdb_read(body + L->body_builtin_attrs, &attrs, 4) || L->builtin_attr_leaf == SDB_NA ||
            !(attrs & L->builtin_attr_leaf) ||
            sdb_read_u64((uint64_t)(uintptr_t)RTYPEDDATA_DATA(ours), &iseq) ||
            sdb_read_u64(iseq + L->iseq_body, &body) ||
            sdb_read(body + L->body_builtin_attrs, &mine, 4) || (mine & 0xffffffffu) != 0)
            L->body_builtin_attrs = SDB_NA;
    }
    if (getenv("SDB_DEBUG_LAYOUT"))
        fprintf(stderr, "sdb: builtin attrs +%u; class facts: classpath +%u, ivar ids %llu/%llu, attached +%u / id %llu\n",
                L->body_builtin_attrs, L->classext_classpath, (unsigned long long)L->id_classpath, (unsigned long long)L->id_tmp_classpath,
                L->classext_attached_object, (unsigned long long)L->id_attached);
}

/* ---------- GC (for the sidecar's "(garbage collection)" frame) ----------
 * Ruby calls GC_ENTER/GC_EXIT hooks around every piece of GC work (a full mark, an incremental
 * step, a lazy sweep step), on the thread that does it, which holds the GVL. The hook stores
 * 1/0 in the header: the sidecar reads it with its sample, no syscall.
 * GC_END_MARK and GC_END_SWEEP bracket each sweep (a compaction runs inside it): sdb_gc_sweeps
 * counts both, odd while a sweep is in progress. Only a sweep frees objects, and a lazy one frees
 * a dead ISeq's Strings on one page while the ISeq itself, on a page not swept yet, still reads
 * whole: the sidecar trusts a name it reads only when this word was even and the same before and
 * after the read (layout.gc_sweeps_addr; symbols.py: RemoteRuby.gc_calm). */
static volatile uint64_t sdb_gc_sweeps;

static void
sdb_gc_event(VALUE tpval, void *data)
{
    rb_event_flag_t ev = rb_tracearg_event_flag(rb_tracearg_from_tracepoint(tpval));
    struct sdb_header *h = sdb.hdr;
    (void)data;
    if (ev & (RUBY_INTERNAL_EVENT_GC_END_MARK | RUBY_INTERNAL_EVENT_GC_END_SWEEP)) {
        __atomic_add_fetch(&sdb_gc_sweeps, 1, __ATOMIC_RELEASE);
        return;
    }
    if (h) __atomic_store_n(&h->gc_active, (ev & RUBY_INTERNAL_EVENT_GC_ENTER) ? 1u : 0u, __ATOMIC_RELAXED);
}

void
sdb_hook_gc(void)
{
    static VALUE tp = 0;
    VALUE state;
#if RUBY_API_VERSION_MAJOR == 3 && RUBY_API_VERSION_MINOR < 3
    /* Before 3.3, any GC event hook turns off the allocation fast path for every object
     * (gc.c: newobj_of checks flags.has_hook, set by any objspace event; 3.3 checks only for a
     * NEWOBJ hook): an allocation-heavy app ran 12-15 % slower with this hook on 3.1. No GC frame
     * there rather than a slower app. */
    return;
#endif
    if (tp) return;
    tp = rb_tracepoint_new(0, RUBY_INTERNAL_EVENT_GC_ENTER | RUBY_INTERNAL_EVENT_GC_EXIT |
                           RUBY_INTERNAL_EVENT_GC_END_MARK | RUBY_INTERNAL_EVENT_GC_END_SWEEP, sdb_gc_event, NULL);
    rb_obj_hide(tp); /* not one more TracePoint for ObjectSpace.each_object */
    rb_gc_register_mark_object(tp);
    rb_tracepoint_enable(tp);
    /* a sweep under way now (the hook came too late to count its start; a lazy sweep goes on
     * between GC steps) makes the word odd: GC.latest_gc_info(:state) is :none, :marking or a
     * sweep's (:sweeping, :compacting) */
    state = rb_gc_latest_gc_info(ID2SYM(rb_intern("state")));
    if (state != ID2SYM(rb_intern("none")) && state != ID2SYM(rb_intern("marking"))) sdb_gc_sweeps = 1;
    /* in the layout a forked child's file copies, and in this file's */
    sdb.layout.gc_sweeps_addr = (uint64_t)(uintptr_t)&sdb_gc_sweeps;
    if (sdb.hdr) __atomic_store_n(&sdb.hdr->layout.gc_sweeps_addr, sdb.layout.gc_sweeps_addr, __ATOMIC_RELEASE);
}

/* ---------- GC seen from outside (Ruby 3.1, where sdb_hook_gc hooks nothing) ----------
 * The sidecar reads two words of the VM with every tick: objspace->flags, whose during_gc bit
 * gc_enter sets and gc_exit clears on the thread that holds the GVL, and the main ractor's
 * threads.running_ec, which Ruby sets to the ec that takes the GVL or switches fibers
 * (ractor_core.h: rb_ractor_thread_switch, rb_ractor_set_current_ec). While during_gc is set,
 * the thread whose ec is the running ec is the one collecting. No hook: allocation is untouched.
 * Both addresses are found here and proven, or left 0 (then no GC frame, as before):
 *  - objspace->flags: among the words of rb_vm_t, the one pointer whose word at +objspace_flags
 *    changes by exactly the dont_gc bit when GC is disabled and enabled (rb_gc_disable first
 *    finishes a GC in progress, as GC.disable does; the app's own setting is put back, and no GC
 *    can start in between: this thread holds the GVL and allocates nothing);
 *  - running_ec: the one word of the main ractor that holds this thread's ec (it holds the GVL)
 *    and is followed by the main thread's rb_thread_t* (threads.running_ec, threads.main). */
#if RUBY_API_VERSION_MAJOR == 3 && RUBY_API_VERSION_MINOR < 2
extern void *ruby_current_vm_ptr;      /* vm_core.h; exported by libruby 3.1 */
extern void *ruby_single_main_ractor;  /* vm_core.h; the main ractor while it is the only one */
#define SDB_VM_WORDS 512               /* rb_vm_t is searched in its first 4 KiB ... */
#define SDB_RACTOR_WORDS 256           /* ... rb_ractor_t in its first 2 KiB */

/* a C pointer to a struct of the VM: 8-byte aligned (an alignment, no Ruby number) */
static int
sdb_plausible_ptr(uint64_t p)
{
    return p >= 4096 && (p & 7) == 0 && p < 0x0100000000000000ull;
}
#endif

void
sdb_find_gc_words(struct sdb_layout *L)
{
    L->gc_flags_addr = 0;
    L->running_ec_addr = 0;
    L->gc_sweeps_addr = 0;
    L->gc_count_addr = 0;
#if RUBY_API_VERSION_MAJOR == 3 && RUBY_API_VERSION_MINOR < 2
    static uint64_t vmw[SDB_VM_WORDS];
    static uint32_t off[SDB_VM_WORDS], on[SDB_VM_WORDS];
    static unsigned char ok[SDB_VM_WORDS];
    uint64_t vm = (uint64_t)(uintptr_t)ruby_current_vm_ptr, r = (uint64_t)(uintptr_t)ruby_single_main_ractor;
    uint64_t th, ec, main_th, w[2], flags = 0, rec = 0;
    uint32_t dont, i, nvm = 0, found = 0;
    VALUE was;
    if (L->objspace_flags == SDB_NA || L->gc_dont_gc_bit >= 32 || L->gc_during_bit >= 32 || !vm || !r) return;
    dont = 1u << L->gc_dont_gc_bit;
    while (nvm < SDB_VM_WORDS && sdb_read_u64(vm + 8ull * nvm, &vmw[nvm]) == 0) nvm++;
    was = rb_gc_disable();
    for (i = 0; i < nvm; i++)
        ok[i] = sdb_plausible_ptr(vmw[i]) && sdb_read(vmw[i] + L->objspace_flags, &on[i], 4) == 0;
    rb_gc_enable();
    for (i = 0; i < nvm; i++)
        ok[i] = ok[i] && sdb_read(vmw[i] + L->objspace_flags, &off[i], 4) == 0;
    if (was == Qtrue) rb_gc_disable();
    for (i = 0; i < nvm; i++) {
        if (ok[i] && (on[i] & dont) && (on[i] ^ off[i]) == dont) {
            flags = vmw[i] + L->objspace_flags;
            found++;
        }
    }
    if (found != 1) return;

    th = (uint64_t)(uintptr_t)RTYPEDDATA_DATA(rb_thread_current());
    main_th = (uint64_t)(uintptr_t)RTYPEDDATA_DATA(rb_thread_main());
    if (sdb_read_u64(th + L->thread_ec, &ec) || ec == 0) return;
    found = 0;
    for (i = 0; i + 1 < SDB_RACTOR_WORDS; i++) {
        if (sdb_read(r + 8ull * i, w, sizeof(w))) break;
        if (w[0] == ec && w[1] == main_th) {
            rec = r + 8ull * i;
            found++;
        }
    }
    if (found != 1) return;
    L->gc_flags_addr = flags;
    L->running_ec_addr = rec;
    /* rb_gc_count's word: the table's offset, checked against what Ruby says now */
    if (L->objspace_count != SDB_NA && L->gc_mode_mask != SDB_NA && L->gc_mode_sweeping != SDB_NA) {
        uint64_t count_addr = flags - L->objspace_flags + L->objspace_count, count;
        if (sdb_read_u64(count_addr, &count) == 0 && count == (uint64_t)rb_gc_count()) L->gc_count_addr = count_addr;
    }
    if (getenv("SDB_DEBUG_LAYOUT"))
        fprintf(stderr, "sdb: GC words: objspace->flags at vm word, running_ec at main ractor +%llu\n",
                (unsigned long long)(rec - r));
#endif
}

const struct sdb_layout_row *
sdb_pick_row(const char *name)
{
    size_t i;
    for (i = 0; i < SDB_LAYOUT_ROW_COUNT; i++)
        if (strcmp(sdb_layout_rows[i].name, name) == 0) return &sdb_layout_rows[i];
    return NULL;
}

/* SDB_TEST_CORRUPT_LAYOUT=<field> (tests only): shift one offset or number by 8; a flag bit moves
 * to the next bit. =drift: the row of another patch release of the same minor, one that added a
 * word to rb_iseq_constant_body before its location (as 4.0.6 added fields to the VM and ractor
 * structs): every body offset from the location on is 8 further. */
void
sdb_corrupt_for_tests(struct sdb_layout *L)
{
    const char *e = getenv("SDB_TEST_CORRUPT_LAYOUT");
    if (!e || !*e) return;
    if (!strcmp(e, "drift")) {
        uint16_t *moved[] = {&L->body_pathobj, &L->body_base_label, &L->body_label, &L->body_first_lineno,
                             &L->body_insns_info_body, &L->body_insns_info_positions, &L->body_insns_info_size,
                             &L->body_insns_info_succ_table, &L->body_parent_iseq, &L->body_local_iseq,
                             &L->body_local_table_size, &L->body_builtin_attrs};
        size_t i;
        for (i = 0; i < sizeof(moved) / sizeof(moved[0]); i++)
            if (*moved[i] != SDB_NA) *moved[i] += 8;
        return;
    }
    if (!strcmp(e, "t_string")) L->t_string += 8;
    else if (!strcmp(e, "imemo_iseq")) L->imemo_iseq += 8;
    else if (!strcmp(e, "st_entries")) L->st_entries += 8;
    else if (!strcmp(e, "frame_magic_cfunc")) L->frame_magic_cfunc += 8;
    else if (!strcmp(e, "frame_magic_dummy")) L->frame_magic_dummy += 8;
    else if (!strcmp(e, "frame_magic_method")) L->frame_magic_method += 8;
    else if (!strcmp(e, "env_flag_local")) L->env_flag_local <<= 1;
    else if (!strcmp(e, "frame_flag_finish")) L->frame_flag_finish <<= 1;
    if (!strcmp(e, "1") || !strcmp(e, "thread_ec")) L->thread_ec += 8;
    else if (!strcmp(e, "body_pathobj")) L->body_pathobj += 8;
    else if (!strcmp(e, "cfp_iseq")) L->cfp_iseq += 8;
    else if (!strcmp(e, "body_first_lineno")) L->body_first_lineno += 8;
    else if (!strcmp(e, "cfp_size")) L->cfp_size += 8;
    else if (!strcmp(e, "body_local_table_size")) L->body_local_table_size += 8;
}
