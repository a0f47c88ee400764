/**********************************************************************
 * sdb.c - the gem's entry points (Sdb.__open and friends, Init_sdb_ext) and
 * its state; the units it calls are listed in sdb_gem.h.
 **********************************************************************/
#include "sdb_gem.h"

struct sdb_state sdb;
ID sdb_id_alive_p, sdb_id_name, sdb_id_warn, sdb_id_native_thread_id;
SDB_TLS struct sdb_slot *sdb_tls_slot;
SDB_TLS uint64_t sdb_tls_serial;
SDB_TLS uint64_t sdb_tls_thread;
#if SDB_HOOK_NAMES_THREAD
SDB_TLS uint64_t sdb_tls_regs;
#endif

/* fork: the child's only thread must not keep a pointer into the parent's mapping */
static void
sdb_tls_atfork_child(void)
{
    sdb_tls_set(NULL);
}

/* ---------- Ruby-visible (private) entry points ---------- */

/* The app's service name, for the registry header: SDB_SERVICE_NAME, else OTEL_SERVICE_NAME (an empty
 * one counts as not set, as OpenTelemetry's SDKs take it). One too long for the header is not
 * published (a cut name could be another service's), with a warning. */
static void
sdb_read_service_name(void)
{
    const char *var = "SDB_SERVICE_NAME", *v = getenv(var);
    size_t len;
    if (!v || !*v) v = getenv(var = "OTEL_SERVICE_NAME");
    memset(sdb.service_name, 0, sizeof(sdb.service_name));
    if (!v || !*v) return;
    len = strlen(v);
    if (len >= sizeof(sdb.service_name)) {
        char msg[160];
        snprintf(msg, sizeof(msg), "sdb: %s is longer than %d bytes: the sidecar gets no service name from it",
                 var, SDB_SERVICE_MAX - 1);
        sdb_warn(msg);
        return;
    }
    memcpy(sdb.service_name, v, len);
}

/* Sdb.__open -> nil, or a String: why sdb is disabled (to warn once). Publishes the registry,
 * checks the layout, adopts the threads alive now and installs the hooks. */
static VALUE
sdb_open(VALUE self)
{
    char why[256];
    char name[16];
    const char *reason, *forced = getenv("SDB_FORCE_LAYOUT");
    const struct sdb_layout_row *row;
    VALUE ver = sdb_const_str("RUBY_VERSION");
    (void)self;

    if (sdb.hdr) return Qnil; /* already open */
    sdb_remove_stale_registries();
    sdb.clk_tck = sysconf(_SC_CLK_TCK);
    sdb_copy_cstr(sdb.ruby_version, sizeof(sdb.ruby_version), RSTRING_PTR(ver), RSTRING_LEN(ver));
    {
        VALUE desc = sdb_const_str("RUBY_DESCRIPTION");
        sdb_copy_cstr(sdb.ruby_description, sizeof(sdb.ruby_description), RSTRING_PTR(desc), RSTRING_LEN(desc));
    }
    sdb_read_service_name();
    if (!sdb.free_stack) sdb_slots_alloc(sdb_slot_count_from_env());
    if ((reason = sdb_file_create(getpid(), sdb_proc_start_ticks(), why, sizeof(why))) != NULL)
        return rb_str_new_cstr(reason);
    if (!sdb.end_proc_set) {
        rb_set_end_proc(sdb_at_exit, Qnil);
        sdb.end_proc_set = 1;
    }

    if (forced && *forced) {
        sdb_copy_cstr(name, sizeof(name), forced, strlen(forced));
    }
    else {
        const char *v = RSTRING_PTR(ver), *dot1 = strchr(v, '.');
        const char *dot2 = dot1 ? strchr(dot1 + 1, '.') : NULL;
        size_t len = dot2 ? (size_t)(dot2 - v) : strlen(v);
        sdb_copy_cstr(name, sizeof(name), v, len);
    }
    row = sdb_pick_row(name);
    if (!row) {
        if (forced && *forced) {
            char known[128] = "";
            size_t i;
            for (i = 0; i < SDB_LAYOUT_ROW_COUNT; i++) {
                strncat(known, " ", sizeof(known) - strlen(known) - 1);
                strncat(known, sdb_layout_rows[i].name, sizeof(known) - strlen(known) - 1);
            }
            snprintf(why, sizeof(why), "SDB_FORCE_LAYOUT=%s names no layout row (known:%s); "
                     "profiling disabled", name, known);
        }
        else
            snprintf(why, sizeof(why), "Ruby %s has no layout row; profiling disabled "
                     "(set SDB_FORCE_LAYOUT=4.0 or 3.4 to try the nearest row)", RSTRING_PTR(ver));
        sdb_disable(why);
        return rb_str_new_cstr(why);
    }
    sdb_copy_cstr(sdb.hdr->layout_name, sizeof(sdb.hdr->layout_name), row->name, strlen(row->name));
    sdb_copy_cstr(sdb.layout_name, sizeof(sdb.layout_name), row->name, strlen(row->name));
    sdb.layout = row->layout;
    sdb_corrupt_for_tests(&sdb.layout);
    memcpy(&sdb.hdr->layout, &sdb.layout, sizeof(sdb.layout));
    if (sdb_check_layout(&sdb.layout, why, sizeof(why)) != 0) {
        char msg[256 + 128];
        snprintf(msg, sizeof(msg), "layout %s does not match this Ruby %s: %s; profiling disabled "
                 "(report this with `ruby -v`)", row->name, RSTRING_PTR(ver), why);
        sdb_disable(msg);
        return rb_str_new_cstr(msg);
    }
    if (!sdb.hooked && (reason = sdb_take_over_methods()) != NULL) {
        snprintf(why, sizeof(why), "cannot find Ruby's own C function of %s in this Ruby %s; profiling disabled "
                 "(report this with `ruby -v`)", reason, RSTRING_PTR(ver));
        sdb_disable(why);
        return rb_str_new_cstr(why);
    }
    sdb.layout.global_symbols_addr = sdb_find_global_symbols(&sdb.layout);
    sdb_check_classes(&sdb.layout, self);
    sdb_check_link(&sdb.layout);
    sdb_find_gc_words(&sdb.layout);
    /* ZJIT's lightweight frames (4.1+): the sidecar must know whether ZJIT is on to tell a ZJIT frame
     * (stale ISeq and pc, the real ones in its JIT frame record) from a YJIT frame; rb_zjit_entry
     * is libruby's (exported) word that is nonzero once ZJIT is on (zjit.h: rb_zjit_enabled_p) */
    sdb.layout.zjit_entry_addr = sdb.layout.zjit_frame_slot == SDB_NA ? 0
        : (uint64_t)(uintptr_t)dlsym(RTLD_DEFAULT, "rb_zjit_entry");
    memcpy(&sdb.hdr->layout, &sdb.layout, sizeof(sdb.layout));
    sdb_hook_gc();
    sdb.enabled = 1;
    sdb_adopt_running_threads();
    if (!sdb.hooked) {
        rb_event_flag_t events = RUBY_EVENT_THREAD_BEGIN;
#if !SDB_HOOK_NAMES_THREAD
        events |= RUBY_EVENT_THREAD_END;
#endif
        rb_add_event_hook(sdb_thread_event_hook, events, Qnil);
#ifdef HAVE_RB_INTERNAL_THREAD_ADD_EVENT_HOOK
        rb_internal_thread_add_event_hook(sdb_thread_event,
                                          RUBY_INTERNAL_THREAD_EVENT_READY | RUBY_INTERNAL_THREAD_EVENT_RESUMED |
                                          RUBY_INTERNAL_THREAD_EVENT_SUSPENDED | RUBY_INTERNAL_THREAD_EVENT_EXITED,
                                          NULL);
#endif
        pthread_atfork(NULL, NULL, sdb_tls_atfork_child);
        sdb.hooked = 1;
    }
    __atomic_store_n(&sdb.hdr->status, SDB_STATUS_ENABLED, __ATOMIC_RELEASE);
    return Qnil;
}

static VALUE
sdb_enabled_p(VALUE self)
{
    (void)self;
    return sdb.enabled && sdb.hdr && sdb.hdr->status == SDB_STATUS_ENABLED ? Qtrue : Qfalse;
}

static VALUE
sdb_registry_path(VALUE self)
{
    (void)self;
    return sdb.hdr && sdb.path[0] ? rb_str_new_cstr(sdb.path) : Qnil;
}

/* The gem's state (slots, spans, its Hash of endpoint names, the spare) is the main Ractor's, used
 * under its GVL. Another Ractor runs in parallel with it, under a lock of its own: whatever it
 * calls of the gem must touch none of that. Its threads have no slot (event hooks are per Ractor),
 * so it has nothing to publish either. Told apart by a Ractor-local value only the main Ractor
 * holds (set at require, which runs in the main Ractor: ruby/ractor.h's public API). */
static rb_ractor_local_key_t sdb_main_ractor_key;

int
sdb_in_main_ractor(void)
{
    VALUE v = Qfalse;
    return rb_ractor_local_storage_value_lookup(sdb_main_ractor_key, &v) && v == Qtrue;
}

void
Init_sdb_ext(void)
{
    VALUE mSdb = rb_define_module("Sdb");
    VALUE sing = rb_singleton_class(mSdb);
    const char *priv[] = { "__open", "__enabled?", "__registry_path" };
    size_t i;

    sdb_main_ractor_key = rb_ractor_local_storage_value_newkey();
    rb_ractor_local_storage_value_set(sdb_main_ractor_key, Qtrue);
    sdb_id_alive_p = rb_intern("alive?");
    sdb_id_name = rb_intern("name");
    sdb_id_warn = rb_intern("warn");
    sdb_id_native_thread_id = rb_intern("native_thread_id");
    sdb.threads_holder = rb_obj_hide(TypedData_Wrap_Struct(rb_cObject, &sdb_threads_type, &sdb) /* not NULL: Ruby marks only data with a pointer */);
    rb_gc_register_mark_object(sdb.threads_holder);
    sdb.strings = rb_obj_hide(rb_hash_new());
    rb_gc_register_mark_object(sdb.strings);
    rb_define_singleton_method(mSdb, "__open", sdb_open, 0); /* the main Ractor's alone (require) */
    /* What an app may call in any Ractor: Ruby raises Ractor::UnsafeError in a non-main Ractor for a
     * C method defined before this. In one, the spans are no-ops and the rest only reads. */
    rb_ext_ractor_safe(true);
    {
        VALUE spans = rb_define_module_under(mSdb, "Spans");
        rb_define_singleton_method(spans, "current", sdb_spans_current, 0);
        rb_define_singleton_method(spans, "open", sdb_spans_open, -1);
        rb_define_singleton_method(spans, "trace_ids", sdb_spans_trace_ids, -1);
        rb_define_singleton_method(spans, "close", sdb_spans_close, 5);
        rb_define_const(mSdb, "KIND_REQUEST", INT2FIX(SDB_KIND_REQUEST));
        rb_define_const(mSdb, "KIND_JOB", INT2FIX(SDB_KIND_JOB));
        rb_define_const(mSdb, "KIND_LABEL", INT2FIX(SDB_KIND_LABEL));
    }

    rb_define_singleton_method(mSdb, "__enabled?", sdb_enabled_p, 0);
    rb_define_singleton_method(mSdb, "__registry_path", sdb_registry_path, 0);
    for (i = 0; i < sizeof(priv) / sizeof(priv[0]); i++)
        rb_funcall(sing, rb_intern("private"), 1, ID2SYM(rb_intern(priv[i])));
    rb_define_const(mSdb, "SLOT_MAIN", INT2FIX(SDB_SLOT_MAIN));
    rb_define_const(mSdb, "SLOT_ADOPTED", INT2FIX(SDB_SLOT_ADOPTED));
}
