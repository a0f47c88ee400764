/**********************************************************************
 * sdb_methods.c - the methods sdb takes over (Thread#name=, Process._fork, exec: C functions that
 * call Ruby's own first), and units of work (Sdb::Spans).
 **********************************************************************/
#include "sdb_gem.h"

/* ---------- the methods sdb takes over: Thread#name=, Process._fork, exec ----------
 * Each is replaced by a C function of the same name, class, visibility and arity that calls
 * Ruby's own C function for it first: a C method pushes no Ruby frame and has Ruby's own label
 * (`Thread#name=`, `Process._fork`, `Kernel#exec`); no module is prepended, so no core class
 * gets an origin class (on 3.3 a prepended Kernel makes Ruby's profiling API say
 * `Kernel.sleep`). Ruby's function is found through the method's entry: UnboundMethod data
 * (struct METHOD, proc.c) holds the rb_method_entry_t*, whose definition (method.h) holds the
 * cfunc {func, invoker, argc}: every offset and number from the layout row. Every fact is checked before use (an imemo_ment with this
 * method's id and owner, a CFUNC definition of this arity), through fault-safe reads. */

static VALUE
sdb_instance_method(VALUE args)
{
    return rb_funcall(RARRAY_AREF(args, 0), rb_intern("instance_method"), 1, RARRAY_AREF(args, 1));
}

static sdb_cfunc_t
sdb_cfunc_of(VALUE owner, const char *name, int argc)
{
    ID id = rb_intern(name);
    int state = 0, off;
    const struct sdb_layout *L = &sdb.layout;
    VALUE um = rb_protect(sdb_instance_method, rb_ary_new_from_args(2, owner, ID2SYM(id)), &state);
    uint64_t data;
    if (state) {
        rb_set_errinfo(Qnil);
        return NULL;
    }
    if (!RB_TYPE_P(um, T_DATA) || !RTYPEDDATA_P(um)) return NULL;
    data = (uint64_t)(uintptr_t)SDB_TYPED_DATA(um);
    for (off = 16; off <= 40; off += 8) { /* me: +24 on 3.1 (recv, klass, iclass), +32 on 3.3+ (owner) */
        uint64_t me, flags, called, mowner, def, func;
        uint8_t type;
        int32_t n;
        if (sdb_read_u64(data + off, &me) || !me || RB_SPECIAL_CONST_P((VALUE)me) || sdb_read_u64(me, &flags) ||
            (flags & L->t_mask) != L->t_imemo || ((flags >> L->imemo_shift) & L->imemo_mask) != L->imemo_ment)
            continue;
        if (sdb_read_u64(me + L->me_called_id, &called) || called != (uint64_t)id ||
            sdb_read_u64(me + L->me_owner, &mowner) || mowner != (uint64_t)owner ||
            sdb_read_u64(me + L->me_def, &def) || !def || sdb_read(def + L->def_type, &type, 1) ||
            ((type >> L->def_type_shift) & L->def_type_mask) != L->method_type_cfunc ||
            sdb_read(def + L->def_cfunc_argc, &n, 4) || n != argc ||
            sdb_read_u64(def + L->def_cfunc_func, &func) || !func)
            continue;
        RB_GC_GUARD(um);
        return (sdb_cfunc_t)(uintptr_t)func;
    }
    return NULL;
}

static VALUE
sdb_m_name_set(VALUE self, VALUE name)
{
    VALUE ret = sdb.orig_name_set(self, name); /* raises as Ruby does; returns the frozen name or nil */
    if (sdb_in_main_ractor()) sdb_slot_rename(sdb_thread_ptr(self), ret); /* another's threads have no slot */
    return ret;
}

static VALUE
sdb_m_fork(VALUE self)
{
    VALUE pid;
    if (!sdb_in_main_ractor()) return sdb.orig_fork(self); /* Ruby refuses it there (process.c) */
    if (sdb.hdr && sdb.enabled) {
        sdb_sweep_children(1);
        sdb_spare_ready();
        sdb.fork_boot_ns = sdb_now_ns(CLOCK_BOOTTIME); /* the child's start lies after this */
    }
    pid = sdb.orig_fork(self);
    if (FIXNUM_P(pid) && FIX2LONG(pid) > 0 && sdb.hdr) {
        if (sdb_spare.map && !sdb_spare.lent_to) sdb_spare.lent_to = (pid_t)FIX2LONG(pid);
        sdb_follow_child((pid_t)FIX2LONG(pid));
    }
    else if (pid == INT2FIX(0)) {
        char why[256];
        const char *reason = sdb_after_fork_child(why, sizeof(why));
        if (reason) {
            char msg[300];
            snprintf(msg, sizeof(msg), "sdb: %s", reason);
            sdb_warn(msg);
        }
    }
    return pid;
}

struct sdb_exec_call {
    sdb_cfunc_t func;
    int argc;
    const VALUE *argv;
    VALUE self;
};

static VALUE
sdb_exec_call(VALUE p)
{
    const struct sdb_exec_call *c = (const struct sdb_exec_call *)p;
    return c->func(c->argc, c->argv, c->self);
}

static VALUE
sdb_exec_with(sdb_cfunc_t func, int argc, const VALUE *argv, VALUE self)
{
    struct sdb_exec_call c = { func, argc, argv, self };
    int state = 0;
    VALUE ret;
    sdb_before_exec(sdb_in_main_ractor());
    ret = rb_protect(sdb_exec_call, (VALUE)&c, &state);
    sdb_after_failed_exec(); /* exec came back (it raised): still this Ruby */
    if (state) rb_jump_tag(state);
    return ret;
}

static VALUE sdb_m_exec_kernel(int argc, VALUE *argv, VALUE self) { return sdb_exec_with(sdb.orig_exec_kernel, argc, argv, self); }
static VALUE sdb_m_exec_kernel_s(int argc, VALUE *argv, VALUE self) { return sdb_exec_with(sdb.orig_exec_kernel_s, argc, argv, self); }
static VALUE sdb_m_exec_process(int argc, VALUE *argv, VALUE self) { return sdb_exec_with(sdb.orig_exec_process, argc, argv, self); }

/* Finds Ruby's functions, then (all found, or none replaced) puts ours in their place. NULL or
 * the name of the method that was not found. */
const char *
sdb_take_over_methods(void)
{
    VALUE kernel_s = rb_singleton_class(rb_mKernel), process_s = rb_singleton_class(rb_mProcess), verbose;
    if (!(sdb.orig_name_set = sdb_cfunc_of(rb_cThread, "name=", 1))) return "Thread#name=";
    if (!(sdb.orig_fork = sdb_cfunc_of(process_s, "_fork", 0))) return "Process._fork";
    if (!(sdb.orig_exec_kernel = sdb_cfunc_of(rb_mKernel, "exec", -1))) return "Kernel#exec";
    if (!(sdb.orig_exec_kernel_s = sdb_cfunc_of(kernel_s, "exec", -1))) return "Kernel.exec";
    if (!(sdb.orig_exec_process = sdb_cfunc_of(process_s, "exec", -1))) return "Process.exec";
    /* optional: without them the thread-begin hook calls the methods */
    sdb.orig_native_thread_id = sdb_cfunc_of(rb_cThread, "native_thread_id", 0);
    sdb.orig_thread_name = sdb_cfunc_of(rb_cThread, "name", 0);
    verbose = ruby_verbose; /* no "method redefined" warning under -w */
    ruby_verbose = Qnil;
    rb_define_method(rb_cThread, "name=", sdb_m_name_set, 1);
    rb_define_singleton_method(rb_mProcess, "_fork", sdb_m_fork, 0);
    rb_define_private_method(rb_mKernel, "exec", sdb_m_exec_kernel, -1);
    rb_define_singleton_method(rb_mKernel, "exec", sdb_m_exec_kernel_s, -1);
    rb_define_singleton_method(rb_mProcess, "exec", sdb_m_exec_process, -1);
    ruby_verbose = verbose;
    return NULL;
}

/* ---------- units of work (spans): Sdb::Spans, called by Sdb.label and the middlewares ----------
 * A span is a web request, a job or a labelled block on one thread. Its begin and end go into the
 * registry's span ring (sdb_registry.h); while it runs, the thread's slot names it (span, and the
 * ec of the fiber it runs on). All of it with the GVL held (these are C methods): one writer at a
 * time. Nothing here allocates once an endpoint name has been seen: a Hash lookup, a clock read
 * and a few stores. */

static uint64_t
sdb_current_ec(uint64_t th)
{
    return th ? *(const uint64_t *)(uintptr_t)(th + sdb.layout.thread_ec) : 0;
}

/* The id of an endpoint name in the registry's string table (interned once), 0: none or refused. */
static uint32_t
sdb_intern(VALUE str)
{
    VALUE v;
    long len;
    uint32_t used, need, id;
    if (SYMBOL_P(str)) str = rb_sym2str(str);
    if (!RB_TYPE_P(str, T_STRING)) return 0;
    v = rb_hash_lookup2(sdb.strings, str, Qundef);
    if (v != Qundef) return (uint32_t)FIX2ULONG(v);
    len = RSTRING_LEN(str);
    used = sdb.hdr->strings_used;
    need = (uint32_t)((4 + len + 3) & ~3L);
    if (len == 0 || len > SDB_STRING_MAX || (uint64_t)used + need > SDB_STRINGS_SIZE) {
        sdb.hdr->strings_refused++; /* not cached: the Hash stays as small as the table */
        return 0;
    }
    memcpy(sdb.strings_base + used, &(uint32_t){ (uint32_t)len }, 4);
    memcpy(sdb.strings_base + used + 4, RSTRING_PTR(str), (size_t)len);
    __atomic_store_n(&sdb.hdr->strings_used, used + need, __ATOMIC_RELEASE);
    id = used + 1;
    rb_hash_aset(sdb.strings, rb_str_new_frozen(str), ULONG2NUM(id));
    return id;
}

/* ---------- trace context: a request's W3C trace id and span id ----------
 * From the `traceparent` header (W3C Trace Context, level 1, version 00), strictly: exactly
 * "00-" 32 lowercase hex "-" 16 lowercase hex "-" 2 lowercase hex, 55 bytes; a trace id or parent
 * id of all zeros, another version, upper case, a space or a longer value (two headers joined) gives
 * none: an id is never guessed. Reads the String's bytes in place: nothing is allocated. */
static int
sdb_hex_nibble(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

/* `n` bytes from 2n lowercase hex chars at `src`; 0 if one is not lowercase hex, or all are zero. */
static int
sdb_hex_bytes(const char *src, uint8_t *out, size_t n)
{
    size_t i;
    uint8_t any = 0;
    for (i = 0; i < n; i++) {
        int hi = sdb_hex_nibble(src[2 * i]), lo = sdb_hex_nibble(src[2 * i + 1]);
        if (hi < 0 || lo < 0) return 0;
        out[i] = (uint8_t)(hi << 4 | lo);
        any |= out[i];
    }
    return any != 0;
}

#define SDB_TRACEPARENT_LEN 55

/* 1 and the ids in trace[16], span[8] when `p` (len bytes) is a valid version-00 traceparent, else 0. */
static int
sdb_parse_traceparent(const char *p, long len, uint8_t *trace, uint8_t *span)
{
    if (len != SDB_TRACEPARENT_LEN || p[0] != '0' || p[1] != '0' || p[2] != '-' || p[35] != '-' || p[52] != '-')
        return 0;
    if (sdb_hex_nibble(p[53]) < 0 || sdb_hex_nibble(p[54]) < 0) return 0;   /* flags: any value, but hex */
    return sdb_hex_bytes(p + 3, trace, SDB_TRACE_ID_LEN) && sdb_hex_bytes(p + 36, span, SDB_TRACE_SPAN_LEN);
}

/* The ids of (trace, span_id) as Spans.open takes them, into ids[24] (zeros: none): span_id nil ->
 * `trace` is a traceparent header value; span_id a String -> `trace` and `span_id` are an
 * OpenTelemetry SpanContext's binary ids (16 and 8 bytes, not all zero). */
static void
sdb_trace_ids(VALUE trace, VALUE span_id, uint8_t *ids)
{
    uint8_t t[SDB_TRACE_ID_LEN], s[SDB_TRACE_SPAN_LEN], any_t = 0, any_s = 0;
    int i;
    memset(ids, 0, SDB_TRACE_ID_LEN + SDB_TRACE_SPAN_LEN);
    if (!RB_TYPE_P(trace, T_STRING)) return;
    if (NIL_P(span_id)) {
        if (!sdb_parse_traceparent(RSTRING_PTR(trace), RSTRING_LEN(trace), t, s)) return;
    }
    else {
        if (!RB_TYPE_P(span_id, T_STRING) || RSTRING_LEN(trace) != SDB_TRACE_ID_LEN ||
            RSTRING_LEN(span_id) != SDB_TRACE_SPAN_LEN)
            return;
        memcpy(t, RSTRING_PTR(trace), SDB_TRACE_ID_LEN);
        memcpy(s, RSTRING_PTR(span_id), SDB_TRACE_SPAN_LEN);
        for (i = 0; i < SDB_TRACE_ID_LEN; i++) any_t |= t[i];
        for (i = 0; i < SDB_TRACE_SPAN_LEN; i++) any_s |= s[i];
        if (!any_t || !any_s) return;
    }
    memcpy(ids + SDB_TRACE_ID_AT, t, SDB_TRACE_ID_LEN);
    memcpy(ids + SDB_TRACE_SPAN_AT, s, SDB_TRACE_SPAN_LEN);
}

/* Sdb::Spans.trace_ids(trace, span_id = nil) -> [trace_id_hex, span_id_hex] or nil: what
 * Spans.open would publish for these arguments (for the gem's tests; the middleware never calls it). */
VALUE
sdb_spans_trace_ids(int argc, VALUE *argv, VALUE self)
{
    uint8_t ids[SDB_TRACE_ID_LEN + SDB_TRACE_SPAN_LEN];
    char hex[2 * sizeof(ids)];
    size_t i;
    (void)self;
    rb_check_arity(argc, 1, 2);
    sdb_trace_ids(argv[0], argc > 1 ? argv[1] : Qnil, ids);
    for (i = 0; i < sizeof(ids); i++) {
        if (ids[i]) break;
    }
    if (i == sizeof(ids)) return Qnil;
    for (i = 0; i < sizeof(ids); i++) {
        hex[2 * i] = "0123456789abcdef"[ids[i] >> 4];
        hex[2 * i + 1] = "0123456789abcdef"[ids[i] & 15];
    }
    return rb_ary_new_from_args(2, rb_str_new(hex + 2 * SDB_TRACE_ID_AT, 2 * SDB_TRACE_ID_LEN),
                                rb_str_new(hex + 2 * SDB_TRACE_SPAN_AT, 2 * SDB_TRACE_SPAN_LEN));
}

/* `ids`: a begin's trace context (SDB_TRACE_*), NULL: an end (request_id). */
static void
sdb_span_write(uint32_t what, uint32_t kind, uint64_t span, uint64_t parent, uint64_t thread_serial,
               uint32_t endpoint, uint32_t status, VALUE request_id, const uint8_t *ids)
{
    uint64_t i = sdb.hdr->span_head;
    struct sdb_span_event *e = &sdb.spans[i & (SDB_SPAN_EVENTS - 1)];
    __atomic_store_n(&e->seq, 2 * i + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    e->span = span;
    e->parent = parent;
    e->thread_serial = thread_serial;
    e->at_ns = sdb_now_ns(CLOCK_MONOTONIC);
    e->what = what;
    e->kind = kind;
    e->endpoint = endpoint;
    e->status = status;
    if (ids) {
        memset(e->request_id, 0, SDB_REQUEST_ID_MAX);
        memcpy(e->request_id, ids, SDB_TRACE_ID_LEN + SDB_TRACE_SPAN_LEN);
    }
    else if (RB_TYPE_P(request_id, T_STRING) && RSTRING_LEN(request_id) < SDB_REQUEST_ID_MAX &&
        !memchr(RSTRING_PTR(request_id), 0, (size_t)RSTRING_LEN(request_id))) {
        memcpy(e->request_id, RSTRING_PTR(request_id), (size_t)RSTRING_LEN(request_id));
        memset(e->request_id + RSTRING_LEN(request_id), 0, SDB_REQUEST_ID_MAX - (size_t)RSTRING_LEN(request_id));
    }
    else { /* none, or longer than the field: never a cut id */
        memset(e->request_id, 0, SDB_REQUEST_ID_MAX);
    }
    __atomic_store_n(&e->seq, 2 * i + 2, __ATOMIC_RELEASE);
    __atomic_store_n(&sdb.hdr->span_head, i + 1, __ATOMIC_RELEASE);
}

/* Sdb::Spans.current -> the serial of the span this thread is in on this fiber, 0: none. */
VALUE
sdb_spans_current(VALUE self)
{
    uint64_t th;
    struct sdb_slot *s;
    (void)self;
    if (!sdb.enabled || !sdb_in_main_ractor()) return INT2FIX(0);
    th = sdb_thread_ptr(rb_thread_current());
    s = sdb_slot_of(th);
    if (!s || s->span_ec != sdb_current_ec(th)) return INT2FIX(0);
    return ULL2NUM(s->span);
}

/* Sdb::Spans.open(kind, endpoint or nil, trace = nil, span_id = nil) -> the new span's serial (0:
 * sdb is off). The thread's slot names it from now on, for stacks read on this fiber. trace and
 * span_id: the span's trace context (sdb_trace_ids), published with its begin. */
VALUE
sdb_spans_open(int argc, VALUE *argv, VALUE self)
{
    uint64_t th, span, parent = 0, ec;
    struct sdb_slot *s;
    VALUE kind, endpoint;
    uint8_t ids[SDB_TRACE_ID_LEN + SDB_TRACE_SPAN_LEN];
    (void)self;
    rb_check_arity(argc, 2, 4);
    kind = argv[0];
    endpoint = argv[1];
    if (!sdb.enabled || !sdb.hdr || !sdb_in_main_ractor()) return INT2FIX(0);
    sdb_trace_ids(argc > 2 ? argv[2] : Qnil, argc > 3 ? argv[3] : Qnil, ids);
    th = sdb_thread_ptr(rb_thread_current());
    ec = sdb_current_ec(th);
    s = sdb_slot_of(th);
    span = sdb.next_span++;
    if (s && s->span_ec == ec) parent = s->span;
    sdb_span_write(SDB_SPAN_BEGIN, FIXNUM_P(kind) ? (uint32_t)FIX2LONG(kind) : 0, span, parent,
                   s ? s->serial : 0, sdb_intern(endpoint), 0, Qnil, ids);
    if (s) {
        __atomic_store_n(&s->span, 0, __ATOMIC_RELEASE); /* never a moment with the new ec and the old span */
        __atomic_store_n(&s->span_ec, ec, __ATOMIC_RELEASE);
        __atomic_store_n(&s->span, span, __ATOMIC_RELEASE);
    }
    return ULL2NUM(span);
}

/* Sdb::Spans.close(span, parent, endpoint or nil, request_id or nil, status) -> nil. The thread
 * is in `parent` again (0: none). */
VALUE
sdb_spans_close(VALUE self, VALUE span, VALUE parent, VALUE endpoint, VALUE request_id, VALUE status)
{
    uint64_t th, sp, par;
    struct sdb_slot *s;
    (void)self;
    if (!sdb.enabled || !sdb.hdr || !sdb_in_main_ractor() || !RB_INTEGER_TYPE_P(span) || (sp = NUM2ULL(span)) == 0)
        return Qnil;
    par = RB_INTEGER_TYPE_P(parent) ? NUM2ULL(parent) : 0;
    th = sdb_thread_ptr(rb_thread_current());
    s = sdb_slot_of(th);
    if (s && s->span == sp) __atomic_store_n(&s->span, par, __ATOMIC_RELEASE);
    sdb_span_write(SDB_SPAN_END, 0, sp, par, s ? s->serial : 0, sdb_intern(endpoint),
                   FIXNUM_P(status) ? (uint32_t)FIX2LONG(status) : 0, request_id, NULL);
    return Qnil;
}
