/**********************************************************************
 * sdb_golden.c - test-only ground truth for the golden snapshot tests.
 *
 * SdbGolden.frames(thread) -> [[full_label, path, line], ...], innermost
 * first: Ruby's own rb_profile_frames view of a thread, labelled by Ruby's
 * own rb_profile_frame_full_label.
 *   - Ruby >= 3.3: rb_profile_thread_frames(thread) (the thread is parked).
 *   - Ruby 3.1 (no such API): SdbGolden.arm(:meth) sets a C-level c_call
 *     TracePoint on the calling thread (no Ruby frame of its own); when the
 *     thread calls `meth` (sleep, pop, lock, select, ...) it records
 *     rb_profile_frames there. Ruby runs that hook just before it pushes the
 *     C method's frame, so that frame is added from the TracePoint's own
 *     defined_class and method id (the rule of rb_profile_frame_full_label:
 *     class path, "." for a singleton class, "#" otherwise).
 **********************************************************************/
#include <ruby.h>
#include <ruby/debug.h>

#define GOLDEN_MAX 4096

static ID golden_id_key;

static VALUE
golden_list(VALUE *buf, int *lines, int n)
{
    VALUE out = rb_ary_new_capa(n);
    int i;
    for (i = 0; i < n; i++)
        rb_ary_push(out, rb_ary_new_from_args(3, rb_profile_frame_full_label(buf[i]),
                                              rb_profile_frame_path(buf[i]), INT2FIX(lines[i])));
    return out;
}

static VALUE
golden_class_label(VALUE klass, ID mid)
{
    VALUE name = rb_id2str(mid);
    if (NIL_P(klass) || !name) return name;
    if (FL_TEST(klass, FL_SINGLETON)) {
        VALUE obj = rb_ivar_get(klass, rb_intern("__attached__"));
        return rb_sprintf("%"PRIsVALUE".%"PRIsVALUE, rb_class_path(obj), name);
    }
    return rb_sprintf("%"PRIsVALUE"#%"PRIsVALUE, rb_class_path(klass), name);
}

static void
golden_hook(VALUE tpval, void *data)
{
    rb_trace_arg_t *arg = rb_tracearg_from_tracepoint(tpval);
    VALUE *buf;
    int *lines, n;
    VALUE list, top;
    if (SYM2ID(rb_tracearg_method_id(arg)) != (ID)(uintptr_t)data) return;
    /* the first such call only. Not rb_tracepoint_disable here: on Ruby 3.1 a hook disabled from
     * inside itself while other threads arm theirs lost some of theirs now and then (one thread in
     * ~15 runs of golden.rb under load recorded nothing) */
    if (!NIL_P(rb_thread_local_aref(rb_thread_current(), golden_id_key))) return;
    buf = ALLOC_N(VALUE, GOLDEN_MAX);
    lines = ALLOC_N(int, GOLDEN_MAX);
    n = rb_profile_frames(0, GOLDEN_MAX, buf, lines);
    list = golden_list(buf, lines, n);
    xfree(buf);
    xfree(lines);
    top = golden_class_label(rb_tracearg_defined_class(arg), SYM2ID(rb_tracearg_method_id(arg)));
    rb_ary_unshift(list, rb_ary_new_from_args(3, top, Qnil, INT2FIX(0)));
    rb_thread_local_aset(rb_thread_current(), golden_id_key, list);
}

/* SdbGolden.arm(:meth): on Rubies without rb_profile_thread_frames, record this thread's frames
 * when it next calls `meth`. A no-op where frames(thread) can ask Ruby directly. */
static VALUE
golden_arm(VALUE self, VALUE meth)
{
#ifndef HAVE_RB_PROFILE_THREAD_FRAMES
    VALUE tp = rb_tracepoint_new(rb_thread_current(), RUBY_EVENT_C_CALL, golden_hook,
                                 (void *)(uintptr_t)SYM2ID(meth));
    rb_thread_local_aset(rb_thread_current(), golden_id_key, Qnil);
    rb_tracepoint_enable(tp);
#endif
    return Qnil;
}

static VALUE
golden_frames(VALUE self, VALUE thread)
{
#ifdef HAVE_RB_PROFILE_THREAD_FRAMES
    VALUE *buf = ALLOC_N(VALUE, GOLDEN_MAX), out;
    int *lines = ALLOC_N(int, GOLDEN_MAX);
    int n = rb_profile_thread_frames(thread, 0, GOLDEN_MAX, buf, lines);
    out = golden_list(buf, lines, n);
    xfree(buf);
    xfree(lines);
    return out;
#else
    return rb_thread_local_aref(thread, golden_id_key);
#endif
}

static VALUE
golden_direct_p(VALUE self)
{
#ifdef HAVE_RB_PROFILE_THREAD_FRAMES
    return Qtrue;
#else
    return Qfalse;
#endif
}

void
Init_sdb_golden(void)
{
    VALUE m = rb_define_module("SdbGolden");
    golden_id_key = rb_intern("__sdb_golden_frames");
    rb_define_singleton_method(m, "arm", golden_arm, 1);
    rb_define_singleton_method(m, "frames", golden_frames, 1);
    rb_define_singleton_method(m, "direct?", golden_direct_p, 0);
}
