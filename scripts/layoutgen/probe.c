/* probe.c - prints the facts of one Ruby's layout, from that Ruby's own headers.
 *
 * Compiled by scripts/gen-layouts against a configured Ruby source tree (-I the tree, its include/
 * and .ext/include/<arch>) with gcc (Debian 12's gcc 12 built Debian's 3.1 and the 3.3/3.4 here), and
 * run here: every number it prints is offsetof()/sizeof() of Ruby's own structs, a constant of
 * Ruby's own enums and macros, or what Ruby's own macros and inline functions do on a fake object
 * (RSTRING_PTR/RSTRING_LEN, RCLASS_EXT, the test of rb_profile_frame_singleton_method_p). Nothing
 * here is a number about Ruby.
 *
 * Output: one "name value" line per fact; "name na" where the fact does not exist in this Ruby.
 * gen-layouts turns the facts into a row of gem/ext/sdb/sdb_layouts.h.
 *
 * Given by gen-layouts from the sources: SDB_SINGLETON_TEST, the expression vm_backtrace.c's
 * rb_profile_frame_singleton_method_p returns (on `klass`); SDB_HAVE_<X> where a struct member or
 * an enum constant exists in this Ruby (a C file cannot ask #ifdef of those).
 */
#include "ruby/ruby.h"
#include "ruby/version.h"
#include "vm_core.h"
#include "iseq.h"
#include "method.h"
#include "id.h"
#include "internal/class.h"
#ifdef SDB_HAVE_ZJIT_JIT_FRAME
#include "zjit.h"
#endif
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#define SDB_MEMBER_TYPE(type, m) __typeof__(((type *)0)->m)
#define FACT(name, value) printf("%s %lu\n", (name), (unsigned long)(value))
#define NA(name) printf("%s na\n", (name))
#define OFF(name, type, member) FACT(name, offsetof(type, member))
/* Members whose fact is named after them, each written once: MEMBERS(type, "prefix_", a, b) prints
 * "prefix_a <offsetof(type, a)>" then b's; INNER((type, member), "prefix_", a) the same for the
 * members of type's member (its offset added). EACH applies one of them to up to six members. */
#define MEMBER(type, prefix, m) FACT(prefix #m, offsetof(type, m))
#define INNER(where, prefix, m) FACT(prefix #m, offsetof where + offsetof(SDB_MEMBER_TYPE where, m))
#define MEMBERS(type, prefix, ...) EACH(MEMBER, type, prefix, __VA_ARGS__)
#define INNERS(where, prefix, ...) EACH(INNER, where, prefix, __VA_ARGS__)
#define EACH(F, a, b, ...) EACH_PICK(__VA_ARGS__, EACH6, EACH5, EACH4, EACH3, EACH2, EACH1)(F, a, b, __VA_ARGS__)
#define EACH_PICK(m1, m2, m3, m4, m5, m6, each, ...) each
#define EACH1(F, a, b, m) F(a, b, m)
#define EACH2(F, a, b, m, ...) F(a, b, m); EACH1(F, a, b, __VA_ARGS__)
#define EACH3(F, a, b, m, ...) F(a, b, m); EACH2(F, a, b, __VA_ARGS__)
#define EACH4(F, a, b, m, ...) F(a, b, m); EACH3(F, a, b, __VA_ARGS__)
#define EACH5(F, a, b, m, ...) F(a, b, m); EACH4(F, a, b, __VA_ARGS__)
#define EACH6(F, a, b, m, ...) F(a, b, m); EACH5(F, a, b, __VA_ARGS__)

static int
bit_number(unsigned long flag)
{
    return flag ? __builtin_ctzl(flag) : -1;
}

/* A bit-field inside one byte: set all its bits in a zeroed struct and find them. */
#define BITFIELD(name, type, member)                                                          \
    do {                                                                                      \
        static type z;                                                                        \
        const unsigned char *p = (const unsigned char *)&z;                                   \
        size_t i, found = 0, at = 0;                                                          \
        memset(&z, 0, sizeof z);                                                              \
        z.member = -1;                                                                        \
        for (i = 0; i < sizeof z; i++)                                                        \
            if (p[i]) { found++; at = i; }                                                    \
        if (found != 1) { fprintf(stderr, "%s: not inside one byte\n", name); return 1; }     \
        printf("%s %lu %d %u\n", (name), (unsigned long)at, bit_number(p[at]),                \
               (unsigned)(p[at] >> bit_number(p[at])));                                       \
    } while (0)

/* A fake object: flags, then words that hold their own index (a value no object holds), so a
 * macro that reads a pointer member returns which word it read, and one that computes an address
 * returns an address inside the object. */
/* The classext a reader outside the process can find: since 4.0 a class may have one per Ruby::Box,
 * and the prime one (the main box's) is the one inside the class */
#ifdef RCLASS_EXT_PRIME
#define SDB_RCLASS_EXT(c) RCLASS_EXT_PRIME(c)
#else
#define SDB_RCLASS_EXT(c) RCLASS_EXT(c)
#endif

#define FAKE_WORDS 128
static VALUE fake[FAKE_WORDS] __attribute__((aligned(64)));
#define FAKE_MARK 0x5db0000000ul

static void
fake_object(VALUE flags)
{
    size_t i;
    for (i = 0; i < FAKE_WORDS; i++) fake[i] = FAKE_MARK + i;
    fake[0] = flags;
    fake[1] = 0; /* klass */
}

/* "where" a macro's result points: an offset inside the fake object, or the word read from it */
static void
where(const char *name, const void *got, int read_a_pointer)
{
    uintptr_t g = (uintptr_t)got, base = (uintptr_t)fake;
    if (!read_a_pointer && g >= base && g < base + sizeof fake) {
        printf("%s embedded %lu\n", name, (unsigned long)(g - base));
    } else if (g >= FAKE_MARK && g < FAKE_MARK + FAKE_WORDS) {
        printf("%s pointer %lu\n", name, (unsigned long)((g - FAKE_MARK) * sizeof(VALUE)));
    } else {
        printf("%s unknown 0\n", name);
    }
}

int
main(void)
{
    printf("ruby_api_version %d.%d\n", RUBY_API_VERSION_MAJOR, RUBY_API_VERSION_MINOR);

    /* rb_thread_t */
    MEMBERS(rb_thread_t, "thread_", ec);
    BITFIELD("thread_status_bits", rb_thread_t, status);

    /* rb_execution_context_t */
    MEMBERS(rb_execution_context_t, "ec_", vm_stack, vm_stack_size, cfp, thread_ptr);

    /* rb_control_frame_t */
    FACT("cfp_size", sizeof(rb_control_frame_t));
#ifdef SDB_HAVE_CFP_UNDERSCORE_ISEQ
    /* 4.1: `_iseq`, stale in a frame ZJIT pushed (read through CFP_ISEQ: below) */
    MEMBERS(rb_control_frame_t, "cfp_", pc, sp);
    OFF("cfp_iseq", rb_control_frame_t, _iseq);
    MEMBERS(rb_control_frame_t, "cfp_", self, ep, jit_return);
#else
    MEMBERS(rb_control_frame_t, "cfp_", pc, sp, iseq, self, ep, jit_return);
#endif

    /* ZJIT's lightweight frames (4.1): a frame ZJIT pushed has its ISeq and pc in a JIT frame
     * record, which CFP_ZJIT_FRAME (zjit.h) finds through cfp->jit_return: the sentinel of a C
     * method's frame, or the address just above the native stack word holding the record's
     * address. zjit_frame_slot: how many bytes below jit_return that word is, found by running
     * CFP_ZJIT_FRAME on a fake frame. */
#ifdef SDB_HAVE_ZJIT_JIT_FRAME
#if !USE_ZJIT
#error "this tree was configured without ZJIT (USE_ZJIT 0): configure it with --enable-zjit"
#endif
    {
        static zjit_jit_frame_t marks[8];
        static VALUE words[8];
        rb_control_frame_t cfp;
        const zjit_jit_frame_t *got;
        size_t i;
        for (i = 0; i < 8; i++) words[i] = (VALUE)&marks[i];
        memset(&cfp, 0, sizeof cfp);
        cfp.jit_return = &words[4];
        got = CFP_ZJIT_FRAME(&cfp);
        if (got < marks || got >= marks + 8 || got - marks > 4) {
            fprintf(stderr, "CFP_ZJIT_FRAME reads no word below cfp->jit_return: teach probe.c\n");
            return 1;
        }
        FACT("zjit_frame_slot", (size_t)(4 - (got - marks)) * sizeof(VALUE));
    }
    MEMBERS(zjit_jit_frame_t, "zjit_frame_", pc, iseq);
    FACT("zjit_return_c_frame", ZJIT_JIT_RETURN_C_FRAME);
#else
    NA("zjit_frame_slot");
    NA("zjit_frame_pc");
    NA("zjit_frame_iseq");
    NA("zjit_return_c_frame");
#endif

    /* rb_iseq_t and rb_iseq_constant_body */
    MEMBERS(rb_iseq_t, "iseq_", body);
    MEMBERS(struct rb_iseq_constant_body, "body_", type, iseq_size, iseq_encoded);
    INNERS((struct rb_iseq_constant_body, location), "body_", pathobj, base_label, label, first_lineno);
    FACT("body_first_lineno_is_fixnum",
         __builtin_types_compatible_p(SDB_MEMBER_TYPE(struct rb_iseq_constant_body, location.first_lineno), VALUE));
    INNERS((struct rb_iseq_constant_body, insns_info), "body_insns_info_", body, positions, size);
    OFF("body_insns_info_succ_table", struct rb_iseq_constant_body, insns_info.succ_index_table);
    MEMBERS(struct rb_iseq_constant_body, "body_", parent_iseq, local_iseq, local_table_size);
    FACT("insn_info_entry_size", sizeof(struct iseq_insn_info_entry));
    MEMBERS(struct iseq_insn_info_entry, "insn_info_", line_no);
#ifdef SDB_HAVE_BUILTIN_ATTR_C_TRACE
    MEMBERS(struct rb_iseq_constant_body, "body_", builtin_attrs);
#else
    NA("body_builtin_attrs");
#endif

    /* RString, by what Ruby's own RSTRING_PTR and RSTRING_LEN read: a heap string (NOEMBED) and an
     * embedded one; an embedded length that is no word of the object lives in the flags (3.1) */
    FACT("rstring_noembed_bit", bit_number(RSTRING_NOEMBED));
    fake_object(T_STRING | RSTRING_NOEMBED);
    where("rstring_heap_ptr_at", RSTRING_PTR((VALUE)fake), 1);
    where("rstring_heap_len_at", (const void *)(uintptr_t)RSTRING_LEN((VALUE)fake), 1);
    fake_object(T_STRING);
    where("rstring_embed_ary_at", RSTRING_PTR((VALUE)fake), 0);
    where("rstring_embed_len_at", (const void *)(uintptr_t)RSTRING_LEN((VALUE)fake), 1);
#ifdef RSTRING_EMBED_LEN_SHIFT
    FACT("rstring_flags_len_shift", RSTRING_EMBED_LEN_SHIFT);
    FACT("rstring_flags_len_mask", (unsigned long)RSTRING_EMBED_LEN_MASK >> RSTRING_EMBED_LEN_SHIFT);
#else
    NA("rstring_flags_len_shift");
    NA("rstring_flags_len_mask");
#endif

    /* RArray */
    FACT("rarray_embed_bit", bit_number(RARRAY_EMBED_FLAG));
    FACT("rarray_embed_len_shift", RARRAY_EMBED_LEN_SHIFT);
    FACT("rarray_embed_len_mask", (unsigned long)RARRAY_EMBED_LEN_MASK >> RARRAY_EMBED_LEN_SHIFT);
    OFF("rarray_embed_ary", struct RArray, as.ary);
    INNERS((struct RArray, as.heap), "rarray_heap_", len, ptr);

    /* method entries */
    MEMBERS(rb_callable_method_entry_t, "me_", defined_class, def, called_id, owner);
    MEMBERS(rb_method_definition_t, "def_", original_id);

    /* classes: where RCLASS_EXT finds the classext (inside the class, or through a pointer); the
     * class path and a singleton's object, as offsets from the class (where they are members) */
    fake_object(T_CLASS);
    where("class_ext", SDB_RCLASS_EXT((VALUE)fake), 0);
#ifdef SDB_HAVE_CLASSEXT_IV_TBL
    MEMBERS(rb_classext_t, "classext_", iv_tbl);
#else
    NA("classext_iv_tbl");
#endif
#ifdef SDB_HAVE_CLASSEXT_CLASSPATH
    fake_object(T_CLASS);
    where("class_classpath", &SDB_RCLASS_EXT((VALUE)fake)->classpath, 0);
#else
    NA("class_classpath");
#endif
#ifdef RCLASS_ATTACHED_OBJECT
    fake_object(T_CLASS | FL_SINGLETON);
    where("class_attached_object", &RCLASS_ATTACHED_OBJECT((VALUE)fake), 0);
#else
    NA("class_attached_object");
#endif

    /* rb_profile_frame_singleton_method_p on an ICLASS flagged FL_SINGLETON */
    {
        VALUE klass;
        fake_object(T_ICLASS | FL_SINGLETON);
        klass = (VALUE)fake;
        FACT("singleton_any_type", (SDB_SINGLETON_TEST) == Qtrue);
    }

    FACT("fl_singleton_bit", bit_number(FL_SINGLETON));
    FACT("tlast_op_id", tLAST_OP_ID);
    FACT("qnil", Qnil);

    /* Ruby's own numbers: type tags, imemo types, frame magics and flags, the enums */
    FACT("t_mask", RUBY_T_MASK);
    FACT("t_class", RUBY_T_CLASS);
    FACT("t_module", RUBY_T_MODULE);
    FACT("t_string", RUBY_T_STRING);
    FACT("t_array", RUBY_T_ARRAY);
    FACT("t_imemo", RUBY_T_IMEMO);
    FACT("t_iclass", RUBY_T_ICLASS);
    FACT("imemo_shift", FL_USHIFT);
    FACT("imemo_mask", IMEMO_MASK);
    FACT("imemo_cref", imemo_cref);
    FACT("imemo_svar", imemo_svar);
    FACT("imemo_ment", imemo_ment);
    FACT("imemo_iseq", imemo_iseq);
    {   /* imemo_type() itself must read the type where shift and mask say */
        fake_object(RUBY_T_IMEMO | ((VALUE)imemo_ment << FL_USHIFT));
        if (imemo_type((VALUE)fake) != imemo_ment) { fprintf(stderr, "imemo_type is not (flags >> FL_USHIFT) & IMEMO_MASK\n"); return 1; }
    }
    FACT("env_flag_local", VM_ENV_FLAG_LOCAL);
    FACT("frame_flag_finish", VM_FRAME_FLAG_FINISH);
    FACT("env_prev_tag_mask", ~(unsigned long)(uintptr_t)GC_GUARDED_PTR_REF((VALUE)~0ul));
    FACT("env_data_size", VM_ENV_DATA_SIZE);
    FACT("env_me_cref", -(VM_ENV_DATA_INDEX_ME_CREF));
    FACT("env_specval", -(VM_ENV_DATA_INDEX_SPECVAL));
    FACT("env_flags", -(VM_ENV_DATA_INDEX_FLAGS));
    FACT("immediate_mask", RUBY_IMMEDIATE_MASK);
    FACT("fixnum_shift", bit_number(RB_INT2FIX(1) & ~(VALUE)RUBY_FIXNUM_FLAG));
    FACT("frame_magic_mask", VM_FRAME_MAGIC_MASK);
    FACT("frame_magic_method", VM_FRAME_MAGIC_METHOD);
    FACT("frame_magic_top", VM_FRAME_MAGIC_TOP);
    FACT("frame_magic_cfunc", VM_FRAME_MAGIC_CFUNC);
    FACT("frame_magic_ifunc", VM_FRAME_MAGIC_IFUNC);
    FACT("frame_magic_eval", VM_FRAME_MAGIC_EVAL);
    FACT("frame_magic_dummy", VM_FRAME_MAGIC_DUMMY);
    FACT("iseq_type_top", ISEQ_TYPE_TOP);
    FACT("iseq_type_method", ISEQ_TYPE_METHOD);
    FACT("iseq_type_block", ISEQ_TYPE_BLOCK);
    FACT("iseq_type_class", ISEQ_TYPE_CLASS);
    FACT("iseq_type_rescue", ISEQ_TYPE_RESCUE);
    FACT("iseq_type_ensure", ISEQ_TYPE_ENSURE);
    FACT("iseq_type_eval", ISEQ_TYPE_EVAL);
    FACT("iseq_type_main", ISEQ_TYPE_MAIN);
    FACT("iseq_type_plain", ISEQ_TYPE_PLAIN);
    BITFIELD("def_type_bits", rb_method_definition_t, type);
    OFF("def_iseq", rb_method_definition_t, body.iseq.iseqptr);
    INNERS((rb_method_definition_t, body.cfunc), "def_cfunc_", func, argc);
    FACT("method_type_iseq", VM_METHOD_TYPE_ISEQ);
    FACT("method_type_cfunc", VM_METHOD_TYPE_CFUNC);
    FACT("method_type_attrset", VM_METHOD_TYPE_ATTRSET);
    FACT("method_type_ivar", VM_METHOD_TYPE_IVAR);
    FACT("method_type_bmethod", VM_METHOD_TYPE_BMETHOD);
    FACT("method_type_zsuper", VM_METHOD_TYPE_ZSUPER);
    FACT("method_type_alias", VM_METHOD_TYPE_ALIAS);
    FACT("method_type_undef", VM_METHOD_TYPE_UNDEF);
    FACT("method_type_notimplemented", VM_METHOD_TYPE_NOTIMPLEMENTED);
    FACT("method_type_optimized", VM_METHOD_TYPE_OPTIMIZED);
    FACT("method_type_missing", VM_METHOD_TYPE_MISSING);
    FACT("method_type_refined", VM_METHOD_TYPE_REFINED);
    FACT("thread_runnable", THREAD_RUNNABLE);
    FACT("thread_stopped", THREAD_STOPPED);
    FACT("thread_stopped_forever", THREAD_STOPPED_FOREVER);
    FACT("thread_killed", THREAD_KILLED);
    MEMBERS(st_table, "st_", num_entries, entries_start, entries_bound, entries);
    FACT("id_scope_shift", RUBY_ID_SCOPE_SHIFT);
    MEMBERS(struct RBasic, "rbasic_", klass);
#ifdef RCLASS_EXT_PRIME
    fake_object(T_CLASS);
    where("rclass_super_at", &RCLASS_EXT_PRIME((VALUE)fake)->super, 0);
#else
    fake_object(T_CLASS);
    where("rclass_super_at", (const void *)RCLASS_SUPER((VALUE)fake), 1);
#endif
#ifdef SDB_HAVE_BUILTIN_ATTR_C_TRACE
    FACT("builtin_attr_c_trace", BUILTIN_ATTR_C_TRACE);
    FACT("builtin_attr_leaf", BUILTIN_ATTR_LEAF);
#else
    NA("builtin_attr_c_trace");
    NA("builtin_attr_leaf");
#endif
    return 0;
}
