/**********************************************************************
 * sdb_layouts.h - THE table of Ruby-version facts (one row per minor).
 *
 * Every number here comes from Ruby's own sources, as docs/ruby-internals.md
 * explains them (vX_Y_Z:file:line). SDB_NA = not sourced / does not
 * exist in that version: never guess a number. A row is checked at require
 * against Ruby's own rb_profile_frames (sdb_check.c: sdb_check_layout), so a
 * wrong row is refused, not trusted.
 *
 * Adding a Ruby version: copy the nearest row, re-read every field from
 * that version's vm_core.h / iseq.h / method.h / internal headers, set
 * `source`, keep `tested = 0` until the test suite passed on that Ruby.
 *
 * Bit fields: rstring_noembed_bit, rarray_embed_bit and fl_singleton_bit
 * are bit NUMBERS in RBasic.flags (13 means 1 << 13).
 **********************************************************************/
#ifndef SDB_LAYOUTS_H
#define SDB_LAYOUTS_H 1

#include "sdb_registry.h"

struct sdb_layout_row {
    const char *name;   /* "3.3": matched against RUBY_VERSION major.minor */
    const char *source; /* the Ruby sources the facts were read from */
    int tested;         /* 1: the gem's test suite passed on this Ruby here */
    struct sdb_layout layout;
};

/* Fields common to every row: ec, cfp head, iseq, method entries. */
#define SDB_COMMON_EC \
    .ec_vm_stack = 0, .ec_vm_stack_size = 8, .ec_cfp = 16, .ec_thread_ptr = 48
#define SDB_COMMON_CFP \
    .cfp_pc = 0, .cfp_sp = 8, .cfp_iseq = 16, .cfp_self = 24, .cfp_ep = 32
#define SDB_COMMON_ISEQ                                                    \
    .iseq_body = 16, .body_type = 0, .body_iseq_size = 4,                  \
    .body_iseq_encoded = 8, .body_pathobj = 64, .body_base_label = 72,      \
    .body_label = 80, .body_first_lineno = 88,                              \
    .insn_info_entry_size = 12, .insn_info_line_no = 0
#define SDB_COMMON_ME                                                      \
    .me_defined_class = 8, .me_def = 16, .me_called_id = 24, .me_owner = 32, \
    .def_original_id = 32
#define SDB_RSTRING_3_2_PLUS                                               \
    .rstring_noembed_bit = 13, .rstring_heap_len = 16, .rstring_heap_ptr = 24, \
    .rstring_embed_len = 16, .rstring_embed_ary = 24,                       \
    .rstring_embed_len_shift = SDB_NA, .rstring_embed_len_mask = SDB_NA
/* GC seen from outside: only where the gem cannot hook GC (3.1, see sdb_check.c sdb_hook_gc) */
#define SDB_NO_GC_WORDS \
    .objspace_flags = SDB_NA, .gc_during_bit = SDB_NA, .gc_dont_gc_bit = SDB_NA
#define SDB_RARRAY(mask)                                                   \
    .rarray_embed_bit = 13, .rarray_embed_len_shift = 15,                   \
    .rarray_embed_len_mask = (mask), .rarray_embed_ary = 16,                \
    .rarray_heap_len = 16, .rarray_heap_ptr = 32

static const struct sdb_layout_row sdb_layout_rows[] = {
    {
        "3.1",
        "v3_1_2:vm_core.h,iseq.h,method.h,include/ruby/internal/core/rstring.h,gc.c,ractor_core.h; "
        "ec@40 and status byte 92 measured here on Debian 3.1.2; local_table_size@240 measured here "
        "(the one body offset holding 0, 3 and 5 for methods of 0, 3 and 5 locals)",
        1,
        {
            .thread_ec = 40,
            /* BITFIELD status:2 after thread_id@80 and the 4-byte native tid@88;
             * measured: run=0, sleep=1 in bits 0-1 of byte 92 */
            .thread_status = 92, .thread_status_shift = 0, .thread_status_mask = 0x3,
            SDB_COMMON_EC,
            .cfp_size = 64, SDB_COMMON_CFP, .cfp_jit_return = 56,
            SDB_COMMON_ISEQ, .body_first_lineno_is_fixnum = 1,
            .body_insns_info_body = 120, .body_insns_info_positions = 128,
            .body_insns_info_size = 136, .body_insns_info_succ_table = 144,
            .body_parent_iseq = 168, .body_local_iseq = 176, .body_local_table_size = 240,
            .rstring_noembed_bit = 13, .rstring_heap_len = 16, .rstring_heap_ptr = 24,
            .rstring_embed_len = SDB_NA, .rstring_embed_ary = 16,
            .rstring_embed_len_shift = 14, .rstring_embed_len_mask = 0x1f,
            SDB_RARRAY(0x3),
            SDB_COMMON_ME,
            .class_ext = SDB_NA, .classext_classpath = SDB_NA,
            .fl_singleton_bit = 12, .tlast_op_id = 169, .qnil = 0x08,
            /* RClass {basic, super, ptr} (RVARGC off); classext {iv_index_tbl, iv_tbl}: the class
             * path and a singleton's object are ivars; checked at require (sdb_check_classes) */
            .class_ext_ptr = 24, .classext_iv_tbl = 8, .classext_attached_object = SDB_NA,
            .singleton_any_type = 1, .body_builtin_attrs = SDB_NA,
            /* gc.c: rb_objspace {malloc_params {limit, increase}; flags {mode:2, immediate_sweep:1,
             * dont_gc:1, dont_incremental:1, during_gc:1, ...}} (MALLOC_ALLOCATED_SIZE is 0):
             * flags at +16, dont_gc bit 3, during_gc bit 5; the word is proven at require */
            .objspace_flags = 16, .gc_during_bit = 5, .gc_dont_gc_bit = 3,
            .global_symbols_addr = 0,
        },
    },
    {
        "3.2",
        "v3_2_0 internal headers (vm_core.h, iseq.h); not tested here",
        0,
        {
            .thread_ec = 48,
            .thread_status = SDB_NA, .thread_status_shift = SDB_NA, .thread_status_mask = SDB_NA,
            SDB_COMMON_EC,
            .cfp_size = 64, SDB_COMMON_CFP, .cfp_jit_return = 56,
            SDB_COMMON_ISEQ, .body_first_lineno_is_fixnum = 0,
            .body_insns_info_body = 112, .body_insns_info_positions = 120,
            .body_insns_info_size = 128, .body_insns_info_succ_table = 136,
            .body_parent_iseq = 160, .body_local_iseq = 168, .body_local_table_size = SDB_NA,
            SDB_RSTRING_3_2_PLUS,
            SDB_RARRAY(SDB_NA), /* embedded-length mask of 3.2 not sourced */
            SDB_COMMON_ME,
            .class_ext = SDB_NA, .classext_classpath = SDB_NA,
            .fl_singleton_bit = 12, .tlast_op_id = 169, .qnil = SDB_NA,
            .class_ext_ptr = SDB_NA, .classext_iv_tbl = SDB_NA, .classext_attached_object = SDB_NA,
            .singleton_any_type = 1, .body_builtin_attrs = SDB_NA,
            SDB_NO_GC_WORDS, .global_symbols_addr = 0,
        },
    },
    {
        "3.3",
        "v3_3_8:vm_core.h,iseq.h,method.h,internal/class.h; ec@48 and cfp 56 measured on 3.3.8; "
        "local_table_size@232 from the DWARF of the libruby built here",
        1, /* make test passes on it here, with and without YJIT */
        {
            .thread_ec = 48,
            .thread_status = SDB_NA, .thread_status_shift = SDB_NA, .thread_status_mask = SDB_NA,
            SDB_COMMON_EC,
            .cfp_size = 56, SDB_COMMON_CFP, .cfp_jit_return = 48,
            SDB_COMMON_ISEQ, .body_first_lineno_is_fixnum = 0,
            .body_insns_info_body = 112, .body_insns_info_positions = 120,
            .body_insns_info_size = 128, .body_insns_info_succ_table = 136,
            .body_parent_iseq = 160, .body_local_iseq = 168, .body_local_table_size = 232,
            SDB_RSTRING_3_2_PLUS,
            SDB_RARRAY(0x7f),
            SDB_COMMON_ME,
            .class_ext = 32, .classext_classpath = 152,
            /* from the class: classext at +32, its as.singleton_class.attached_object at +96 (internal/class.h) */
            .class_ext_ptr = SDB_NA, .classext_iv_tbl = SDB_NA, .classext_attached_object = 128,
            .singleton_any_type = 1, .body_builtin_attrs = SDB_NA,
            .fl_singleton_bit = 12, .tlast_op_id = 169, .qnil = 0x04,
            SDB_NO_GC_WORDS, .global_symbols_addr = 0,
        },
    },
    {
        "3.4",
        "v3_4_5:vm_core.h,iseq.h,method.h,internal/class.h,vm_backtrace.c; "
        "local_table_size@232 from the DWARF of the libruby built here",
        1, /* make test passes on it here, with and without YJIT */
        {
            .thread_ec = 48,
            .thread_status = SDB_NA, .thread_status_shift = SDB_NA, .thread_status_mask = SDB_NA,
            SDB_COMMON_EC,
            .cfp_size = 56, SDB_COMMON_CFP, .cfp_jit_return = 48,
            SDB_COMMON_ISEQ, .body_first_lineno_is_fixnum = 0,
            .body_insns_info_body = 112, .body_insns_info_positions = 120,
            .body_insns_info_size = 128, .body_insns_info_succ_table = 136,
            .body_parent_iseq = 160, .body_local_iseq = 168, .body_local_table_size = 232,
            SDB_RSTRING_3_2_PLUS,
            SDB_RARRAY(0x7f),
            SDB_COMMON_ME,
            .class_ext = 32, .classext_classpath = 152,
            /* from the class: classext at +32, its as.singleton_class.attached_object at +96 (internal/class.h) */
            .class_ext_ptr = SDB_NA, .classext_iv_tbl = SDB_NA, .classext_attached_object = 128,
            /* builtin_attrs: vm_core.h, after local_iseq@168 come is_entries, call_data, variable (5 words)
             * and 7 unsigned ints; checked at require on Integer#-@ (Primitive.attr! :leaf) */
            .singleton_any_type = 0, .body_builtin_attrs = 260,
            .fl_singleton_bit = 13, .tlast_op_id = 170, .qnil = 0x04,
            SDB_NO_GC_WORDS, .global_symbols_addr = 0,
        },
    },
    {
        "4.0",
        "v4_0_0/v4_0_6 internal headers (vm_core.h, iseq.h, internal/class.h); not tested here",
        0,
        {
            .thread_ec = 48,
            .thread_status = SDB_NA, .thread_status_shift = SDB_NA, .thread_status_mask = SDB_NA,
            SDB_COMMON_EC,
            .cfp_size = 56, SDB_COMMON_CFP, .cfp_jit_return = 48,
            SDB_COMMON_ISEQ, .body_first_lineno_is_fixnum = 0,
            .body_insns_info_body = 112, .body_insns_info_positions = 120,
            .body_insns_info_size = 128, .body_insns_info_succ_table = 136,
            .body_parent_iseq = 168, .body_local_iseq = 176, .body_local_table_size = SDB_NA,
            SDB_RSTRING_3_2_PLUS,
            SDB_RARRAY(SDB_NA), /* embedded-length mask of 4.0 not sourced */
            SDB_COMMON_ME,
            .class_ext = 24, .classext_classpath = 152,
            .fl_singleton_bit = 13, .tlast_op_id = 171, .qnil = SDB_NA,
            .class_ext_ptr = SDB_NA, .classext_iv_tbl = SDB_NA, .classext_attached_object = SDB_NA,
            .singleton_any_type = 0, .body_builtin_attrs = SDB_NA,
            SDB_NO_GC_WORDS, .global_symbols_addr = 0,
        },
    },
};

#define SDB_LAYOUT_ROW_COUNT (sizeof(sdb_layout_rows) / sizeof(sdb_layout_rows[0]))

#endif /* SDB_LAYOUTS_H */
