/**********************************************************************
 * sdb_registry.h - the shared-memory thread registry, byte for byte.
 *
 * Written by the gem (the C units in gem/ext/sdb/) inside the Ruby process, read
 * by the sidecar (sidecar/sdb_sidecar/sampler/_sampler.pyx, sidecar/.../registry.py)
 * from another process. This header is the one definition both sides
 * compile against; docs/registry-format.md explains it in prose.
 *
 * File: /dev/shm/sdb-<pid>, mode 0600, owned by the Ruby process's user.
 *   [struct sdb_header][padding to slots_offset][slot 0][slot 1]...
 *   [span event 0 at spans_offset]...[string table at strings_offset]
 *
 * Slots are guarded by a seqlock: `gen` is odd while the gem writes the
 * slot and is bumped again (to even) when the write is done. A reader
 * copies the slot, re-reads gen, and trusts the copy only if gen was even
 * and unchanged. Every registration, rename and release bumps gen, so a
 * reader that saw (gen, serial) at the start of a stack read and sees the
 * same pair afterwards knows the thread stayed registered meanwhile.
 *
 * Change anything here => bump SDB_REGISTRY_VERSION (readers refuse a
 * version they do not know, with a message that says so).
 **********************************************************************/
#ifndef SDB_REGISTRY_H
#define SDB_REGISTRY_H 1

#include <stdint.h>

#define SDB_REGISTRY_MAGIC "SDBREG\0\0" /* 8 bytes */
#define SDB_REGISTRY_VERSION 5
#define SDB_REGISTRY_PREFIX "/dev/shm/sdb-"
#define SDB_DEFAULT_SLOTS 1024
#define SDB_NAME_MAX 64

/* header.status */
#define SDB_STATUS_STARTING 0 /* file made, layout not yet checked */
#define SDB_STATUS_ENABLED 1  /* layout checked: readers may sample */
#define SDB_STATUS_DISABLED 2 /* gem refused to run: see disabled_reason */

/* slot.flags */
#define SDB_SLOT_MAIN 0x1    /* the process's main thread */
#define SDB_SLOT_ADOPTED 0x2 /* alive before require "sdb": released by sweep, not by ensure */

/* slot.state: what the thread is doing (kept current on Ruby >= 3.2) in the low 8 bits
 * (SDB_STATE_MASK); above them (bits 8-31) a count of the times the thread took the GVL,
 * wrapping. A thread that is blocked or waiting for the GVL runs no Ruby, so while this word
 * is unchanged and its state is one of those two, its stack is the one last read. */
#define SDB_STATE_MASK 0xffu
#define SDB_STATE_RUNS_SHIFT 8
#define SDB_STATE_UNKNOWN 0
#define SDB_STATE_RUNNING 1  /* holds the GVL, running Ruby */
#define SDB_STATE_GVL_WAIT 2 /* ready, waiting for the GVL */
#define SDB_STATE_BLOCKED 3  /* released the GVL: sleep, IO, lock, queue */

/* Units of work (spans): a web request, a job, a block given to Sdb.label. */
#define SDB_SPAN_EVENTS 4096   /* ring entries (a power of two) */
#define SDB_STRINGS_SIZE 65536 /* string table bytes */
#define SDB_STRING_MAX 1024    /* a longer endpoint is not interned (it would have to be cut) */
#define SDB_REQUEST_ID_MAX 64  /* request_id bytes, NUL included: a longer id is not kept */
/* A begin event's request_id bytes hold the span's trace context instead (an end's hold the request
 * id): the W3C trace id (16 bytes) at SDB_TRACE_ID_AT, then the span id (8 bytes) at
 * SDB_TRACE_SPAN_AT, binary; all zero: none (W3C Trace Context: an all-zero id is invalid). */
#define SDB_TRACE_ID_AT 0
#define SDB_TRACE_ID_LEN 16
#define SDB_TRACE_SPAN_AT 16
#define SDB_TRACE_SPAN_LEN 8
#define SDB_SERVICE_MAX 128    /* service_name bytes, NUL included: a longer name is not published */
/* sdb_span_event.what */
#define SDB_SPAN_BEGIN 1
#define SDB_SPAN_END 2
/* sdb_span_event.kind */
#define SDB_KIND_REQUEST 1     /* a web request (the Rack middleware) */
#define SDB_KIND_JOB 2         /* a background job (the Sidekiq middleware) */
#define SDB_KIND_LABEL 3       /* Sdb.label { } */

/*
 * Everything a reader needs to know about the running Ruby's memory
 * layout. Filled by the gem from its table of Ruby versions
 * (gem/ext/sdb/sdb_layouts.h) and checked at require against Ruby's own
 * rb_profile_frames. All offsets are in bytes. 0xffff = not available.
 */
#define SDB_NA 0xffffu
/* Ruby's prefix of the paths of its own internal .rb files (vm_backtrace.c is_internal_location; the
 * generator checks every tree's against it): see the layout's internal_path_c_trace */
#define SDB_INTERNAL_PATH_PREFIX "<internal:"
struct sdb_layout {
    /* rb_thread_t */
    uint16_t thread_ec;          /* th->ec (pointer to the running fiber's ec) */
    uint16_t thread_status;      /* byte holding th->status (a bitfield) */
    uint16_t thread_status_shift;
    uint16_t thread_status_mask;
    /* rb_execution_context_t */
    uint16_t ec_vm_stack;
    uint16_t ec_vm_stack_size;   /* in VALUEs */
    uint16_t ec_cfp;
    uint16_t ec_thread_ptr;
    /* rb_control_frame_t */
    uint16_t cfp_size;
    uint16_t cfp_pc;
    uint16_t cfp_iseq;
    uint16_t cfp_self;
    uint16_t cfp_ep;
    uint16_t cfp_jit_return;
    /* rb_iseq_t and its body */
    uint16_t iseq_body;
    uint16_t body_type;
    uint16_t body_iseq_size;     /* uint32, in VALUEs */
    uint16_t body_iseq_encoded;
    uint16_t body_pathobj;
    uint16_t body_base_label;
    uint16_t body_label;
    uint16_t body_first_lineno;
    uint16_t body_first_lineno_is_fixnum; /* 1: a Fixnum VALUE, 0: a C int */
    uint16_t body_insns_info_body;
    uint16_t body_insns_info_positions;
    uint16_t body_insns_info_size;
    uint16_t body_insns_info_succ_table;
    uint16_t body_parent_iseq;
    uint16_t body_local_iseq;
    uint16_t insn_info_entry_size;
    uint16_t insn_info_line_no;
    /* RString / RArray */
    uint16_t rstring_noembed_bit;
    uint16_t rstring_heap_len;
    uint16_t rstring_heap_ptr;
    uint16_t rstring_embed_len;  /* SDB_NA: length lives in the flags */
    uint16_t rstring_embed_ary;
    uint16_t rstring_embed_len_shift; /* when the length lives in the flags */
    uint16_t rstring_embed_len_mask;
    uint16_t rarray_embed_bit;
    uint16_t rarray_embed_len_shift;
    uint16_t rarray_embed_len_mask;
    uint16_t rarray_embed_ary;
    uint16_t rarray_heap_len;
    uint16_t rarray_heap_ptr;
    /* method entries */
    uint16_t me_defined_class;
    uint16_t me_def;
    uint16_t me_called_id;
    uint16_t me_owner;
    uint16_t def_original_id;
    uint16_t class_ext;          /* SDB_NA before 3.3 */
    uint16_t classext_classpath;
    uint16_t fl_singleton_bit;
    uint16_t tlast_op_id;
    uint16_t qnil;
    /* class paths and singletons (naming a method entry's class) */
    uint16_t class_ext_ptr;      /* RClass -> rb_classext_t* (3.1; SDB_NA when embedded at class_ext) */
    uint16_t classext_iv_tbl;    /* st_table* of the class's ivars, holding __classpath__ (3.1) */
    uint16_t classext_attached_object; /* a singleton's attached object (3.3+; SDB_NA: an ivar) */
    uint16_t singleton_any_type; /* 1: FL_SINGLETON is tested on any defined_class, an ICLASS too
                                  * (rb_profile_frame_singleton_method_p before 3.4); 0: T_CLASS only */
    uint16_t body_builtin_attrs; /* rb_iseq_constant_body.builtin_attrs (3.4+; C_TRACE 0x08: shown as a C method) */
    /* GC seen from outside (3.1, where the gem hooks no GC: see gc_flags_addr) */
    uint16_t objspace_flags;     /* offset of rb_objspace.flags (a 32-bit bitfield word) */
    uint16_t gc_during_bit;      /* bit number of flags.during_gc in that word */
    uint16_t gc_dont_gc_bit;     /* bit number of flags.dont_gc (the gem proves the word with it) */
    /* the caller/callee link (sampler: a frame left behind is not the callee of the frame below it) */
    uint16_t cfp_sp;             /* rb_control_frame_t.sp */
    uint16_t body_local_table_size; /* rb_iseq_constant_body.local_table_size (uint32) */
    /* Ruby's own numbers, so no reader writes one (docs/ruby-internals.md "Ruby's numbers").
     * type tags: enum ruby_value_type (include/ruby/internal/value_type.h); a type is flags & t_mask */
    uint16_t t_mask;
    uint16_t t_class;
    uint16_t t_module;
    uint16_t t_string;
    uint16_t t_array;
    uint16_t t_imemo;
    uint16_t t_iclass;
    /* imemo types (internal/imemo.h): an imemo's type is (flags >> imemo_shift) & imemo_mask */
    uint16_t imemo_shift;        /* FL_USHIFT */
    uint16_t imemo_mask;         /* IMEMO_MASK */
    uint16_t imemo_cref;
    uint16_t imemo_svar;
    uint16_t imemo_ment;
    uint16_t imemo_iseq;
    /* env flags (vm_core.h): bits of ep[0] */
    uint16_t env_flag_local;     /* VM_ENV_FLAG_LOCAL: a method's (not a block's) env */
    uint16_t frame_flag_finish;  /* VM_FRAME_FLAG_FINISH: the frame returns to C */
    uint16_t env_prev_tag_mask;  /* GC_GUARDED_PTR_REF's tag bits: the previous ep is ep[-1] & ~it */
    uint16_t env_data_size;      /* VM_ENV_DATA_SIZE: a method's ep is its caller's sp + locals + it words */
    uint16_t env_me_cref;        /* words below ep (-VM_ENV_DATA_INDEX_ME_CREF): the method entry or cref */
    uint16_t env_specval;        /* words below ep (-VM_ENV_DATA_INDEX_SPECVAL): the previous ep (tagged) */
    uint16_t env_flags;          /* words below ep (-VM_ENV_DATA_INDEX_FLAGS): the frame magic and flags */
    /* special constants (include/ruby/internal/special_consts.h) */
    uint16_t immediate_mask;     /* RUBY_IMMEDIATE_MASK: v & it != 0 is no heap object */
    uint16_t fixnum_shift;       /* a Fixnum's value is v >> it (INT2FIX) */
    /* enum rb_iseq_type (vm_core.h): rb_iseq_constant_body.type */
    uint16_t iseq_type_top;
    uint16_t iseq_type_method;
    uint16_t iseq_type_block;
    uint16_t iseq_type_class;
    uint16_t iseq_type_rescue;
    uint16_t iseq_type_ensure;
    uint16_t iseq_type_eval;
    uint16_t iseq_type_main;
    uint16_t iseq_type_plain;
    /* rb_method_definition_t (method.h): its type bit-field and bodies */
    uint16_t def_type;           /* byte holding the type bit-field */
    uint16_t def_type_shift;
    uint16_t def_type_mask;
    uint16_t def_iseq;           /* body.iseq.iseqptr (an rb_iseq_t*) */
    uint16_t def_cfunc_func;     /* body.cfunc.func */
    uint16_t def_cfunc_argc;     /* body.cfunc.argc (int) */
    /* rb_method_type_t (method.h) */
    uint16_t method_type_iseq;
    uint16_t method_type_cfunc;
    uint16_t method_type_attrset;
    uint16_t method_type_ivar;
    uint16_t method_type_bmethod;
    uint16_t method_type_zsuper;
    uint16_t method_type_alias;
    uint16_t method_type_undef;
    uint16_t method_type_notimplemented;
    uint16_t method_type_optimized;
    uint16_t method_type_missing;
    uint16_t method_type_refined;
    /* enum rb_thread_status (vm_core.h): th->status */
    uint16_t thread_runnable;
    uint16_t thread_stopped;
    uint16_t thread_stopped_forever;
    uint16_t thread_killed;
    /* struct st_table (ruby/st.h) and st_table_entry (st.c): a class's ivars on 3.1 */
    uint16_t st_num_entries;
    uint16_t st_entries_start;
    uint16_t st_entries_bound;
    uint16_t st_entries;
    uint16_t st_entry_size;
    uint16_t st_entry_key;
    uint16_t st_entry_record;
    /* the symbol table (symbol.h rb_symbols_t, symbol.c, id.h): an ID's name */
    uint16_t symbols_ids;        /* rb_symbols_t.ids: an Array of chunks */
    uint16_t id_scope_shift;     /* RUBY_ID_SCOPE_SHIFT: serial = id >> it (id > tlast_op_id) */
    uint16_t id_entry_unit;      /* ID_ENTRY_UNIT: serials per chunk */
    uint16_t id_entry_size;      /* ID_ENTRY_SIZE: items per serial ([String, Symbol]) */
    uint16_t id_entry_str;       /* ID_ENTRY_STR: the String's index among them */
    /* the succinct line index (iseq.c struct succ_index_table, succ_index_lookup) */
    uint16_t succ_imm_entries;   /* IMMEDIATE_TABLE_SIZE: positions ranked in imm_part */
    uint16_t succ_imm_per_word;  /* of them per uint64 of imm_part */
    uint16_t succ_imm_bits;      /* bits per immediate rank */
    uint16_t succ_part;          /* offsetof(succ_index_table, succ_part) */
    uint16_t succ_block_size;    /* sizeof(struct succ_dict_block) */
    uint16_t succ_block_positions; /* positions per block (bits of succ_dict_block.bits) */
    uint16_t succ_block_rank;    /* succ_dict_block.rank (unsigned int) */
    uint16_t succ_block_small_ranks; /* succ_dict_block.small_block_ranks */
    uint16_t succ_small_bits;    /* bits per small-block rank in it */
    uint16_t succ_block_bits;    /* succ_dict_block.bits */
    /* classes and ISeq attributes */
    uint16_t rclass_super;       /* the superclass, from the class (RCLASS_SUPER) */
    uint16_t rbasic_klass;       /* RBasic.klass: an object's class */
    uint16_t builtin_attr_c_trace; /* BUILTIN_ATTR_C_TRACE (3.4+; SDB_NA before) */
    uint16_t builtin_attr_leaf;  /* BUILTIN_ATTR_LEAF (where body_builtin_attrs is; SDB_NA before) */
    /* frame magics (vm_core.h VM_FRAME_MAGIC_*): ep[0] & frame_magic_mask */
    uint32_t frame_magic_mask;
    uint32_t frame_magic_method;
    uint32_t frame_magic_top;
    uint32_t frame_magic_cfunc;
    uint32_t frame_magic_ifunc;
    uint32_t frame_magic_eval;
    uint32_t frame_magic_dummy;
    /* rb_objspace, before 3.2 (where the gem hooks no GC): the mode bits of its flags word, their
     * value while a sweep is in progress, and the offset of profile.count (GCs started) */
    uint16_t gc_mode_mask;
    uint16_t gc_mode_sweeping;
    uint16_t objspace_count;
    /* frames Ruby's backtraces show as a C method's (took reserved space: 0 in an older gem's file) */
    uint16_t internal_path_c_trace; /* 1: every frame of an ISeq whose path begins with
                                  * SDB_INTERNAL_PATH_PREFIX, at its caller (4.0+); 0: not (3.4:
                                  * builtin_attr_c_trace only) */
    uint64_t global_symbols_addr; /* &ruby_global_symbols when known, else 0 */
    /* IDs of the hidden ivars that hold a class path and a singleton's object where they are
     * ivars (3.1), found at require and checked there on a class of the gem's own; 0: none */
    uint64_t id_classpath;       /* __classpath__ */
    uint64_t id_tmp_classpath;   /* __tmp_classpath__ */
    uint64_t id_attached;        /* __attached__ */
    /* Found and proven at require (sdb_check.c: sdb_find_gc_words), 0 when not: the sidecar reads both
     * words with every tick, and a thread whose ec is the running ec while during_gc is set is
     * the one collecting. */
    uint64_t gc_flags_addr;      /* &objspace->flags */
    uint64_t running_ec_addr;    /* &main_ractor->threads.running_ec (the ec that last took the GVL) */
    /* Whether a GC sweep can have freed an object while the sidecar read it (symbols.py: RemoteRuby.gc_calm).
     * 3.3+: the gem's count of sweep starts and ends, odd while one is in progress (its GC hook);
     * before 3.2: &objspace->profile.count, read with the mode in objspace->flags (gc_flags_addr).
     * 0: not known. */
    uint64_t gc_sweeps_addr;
    uint64_t gc_count_addr;
    /* ZJIT's lightweight frames (4.1+; SDB_NA before, version 5): a frame ZJIT pushed has a stale
     * ISeq and pc in the control frame, the real ones in a JIT frame record (zjit.h: CFP_ZJIT_FRAME).
     * Its jit_return is zjit_return_c_frame for a C method's frame (no ISeq, no pc), else the address
     * zjit_frame_slot bytes above the native stack word that holds the record's address. */
    uint16_t zjit_frame_slot;
    uint16_t zjit_frame_pc;      /* zjit_jit_frame_t.pc */
    uint16_t zjit_frame_iseq;    /* zjit_jit_frame_t.iseq */
    uint16_t zjit_return_c_frame; /* ZJIT_JIT_RETURN_C_FRAME */
    /* The ID table's chunks as a T_DATA (4.1+; SDB_NA where a chunk is an Array, version 5): the
     * chunk's data pointer (RTypedData.data) to an rb_darray of id_entry_size-word entries: its
     * length word and where its entries begin (symbol.c, darray.h) */
    uint16_t id_chunk_data;
    uint16_t id_chunk_len;
    uint16_t id_chunk_entries;
    uint16_t reserved_v5;
    /* &rb_zjit_entry, found by the gem where the row has lightweight frames, else 0: nonzero there once
     * ZJIT is on (then it stays on, and YJIT cannot be: a frame with a jit_return is ZJIT's) */
    uint64_t zjit_entry_addr;
};

struct sdb_slot {
    uint64_t gen;            /* seqlock generation; odd while written */
    uint32_t live;           /* 1 while the thread is registered */
    uint32_t native_tid;     /* Linux tid (gettid) */
    uint64_t serial;         /* unique per registration in this process; 1, 2, ... */
    uint64_t thread_addr;    /* rb_thread_t* */
    uint64_t ec_addr;        /* &th->ec: read the running ec from here at every sample */
    uint64_t start_mono_ns;  /* CLOCK_MONOTONIC at registration */
    uint64_t start_wall_ns;  /* CLOCK_REALTIME at registration */
    uint32_t state;          /* SDB_STATE_* | runs << 8: stores by the thread itself, outside the seqlock */
    uint32_t flags;          /* SDB_SLOT_* */
    char name[SDB_NAME_MAX]; /* NUL-terminated, truncated UTF-8 */
    /* The unit of work the thread is in: stored by the thread itself (GVL held), outside the
     * seqlock: span_ec first, then span (release). A reader trusts span only for a stack read on
     * the ec (fiber) span_ec names, with span the same before and after the read. */
    uint64_t span;           /* the span's serial (sdb_span_event.span), 0: none */
    uint64_t span_ec;        /* the rb_execution_context_t* (fiber) that began it */
    uint64_t reserved[6];
};

/* One event of the span ring: event i (0, 1, ...) lives at ring[i % span_count]. Written by the
 * gem with the GVL held (one writer at a time): seq = 2i+1, release fence, the fields, then
 * seq = 2i+2 (release) and header.span_head = i+1 (release). A reader copies entry i and trusts
 * it only if seq was 2i+2 before and after the copy; an entry overwritten before it was read is
 * lost (and counted by the reader). */
struct sdb_span_event {
    uint64_t seq;
    uint64_t span;           /* the span's serial: 1, 2, ... per process, never reused */
    uint64_t parent;         /* begin: the span the thread was in (nested Sdb.label), 0: none */
    uint64_t thread_serial;  /* begin: the thread's slot serial (0: the thread has no slot) */
    uint64_t at_ns;          /* CLOCK_MONOTONIC of the begin or the end */
    uint32_t what;           /* SDB_SPAN_BEGIN, SDB_SPAN_END */
    uint32_t kind;           /* SDB_KIND_* */
    uint32_t endpoint;       /* string id: offset + 1 of its entry in the string table; 0: none */
    uint32_t status;         /* end: the HTTP status; a job: 0 done, 1 raised; 0: unknown */
    char request_id[SDB_REQUEST_ID_MAX]; /* end: NUL-terminated; empty: none. begin: the trace
                             * context (SDB_TRACE_ID_AT, SDB_TRACE_SPAN_AT), zeros: none */
    uint64_t reserved;
};


struct sdb_header {
    char magic[8];            /* SDB_REGISTRY_MAGIC */
    uint32_t version;         /* SDB_REGISTRY_VERSION */
    uint32_t header_size;     /* sizeof(struct sdb_header) */
    uint32_t slot_size;       /* sizeof(struct sdb_slot) */
    uint32_t slot_count;
    uint32_t slots_offset;    /* byte offset of slot 0 in the file */
    uint32_t pid;
    uint32_t status;          /* SDB_STATUS_* */
    uint32_t gc_active;       /* 1 while the VM is in GC (the gem's GC_ENTER/GC_EXIT hook, 3.3+), else 0 */
    uint64_t proc_start_ticks; /* field 22 of /proc/<pid>/stat: tells a reused pid apart */
    uint64_t created_mono_ns;
    uint64_t gen;             /* bumped after every slot change */
    char ruby_version[32];    /* RUBY_VERSION, e.g. "3.3.8" */
    char ruby_description[160]; /* RUBY_DESCRIPTION (says +YJIT when on) */
    char layout_name[16];     /* which table row is in use, e.g. "3.3" */
    char disabled_reason[200];
    struct sdb_layout layout;
    /* spans: the event ring and the string table (endpoint names) */
    uint32_t spans_offset;    /* byte offset of the ring (64-byte aligned) */
    uint32_t span_count;      /* its entries: SDB_SPAN_EVENTS */
    uint32_t strings_offset;  /* byte offset of the string table: entries [uint32 len][len bytes], 4-aligned */
    uint32_t strings_size;    /* its bytes */
    uint64_t span_head;       /* events written so far */
    uint32_t strings_used;    /* bytes of the table in use: stored (release) after an entry is complete */
    uint32_t strings_refused; /* endpoints not interned (table full, or longer than SDB_STRING_MAX) */
    /* the app's service name (version 4): SDB_SERVICE_NAME, else OTEL_SERVICE_NAME, read at require;
     * NUL-terminated; empty: none given (or longer than SDB_SERVICE_MAX - 1 bytes: never cut) */
    char service_name[SDB_SERVICE_MAX];
};

#endif /* SDB_REGISTRY_H */
