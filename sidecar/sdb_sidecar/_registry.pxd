# The gem's registry (gem/ext/sdb/sdb_registry.h, shared with the gem), and its reader.
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from sdb_sidecar._util cimport sdb_load_acquire_u64, sdb_fence_acquire

cdef extern from "sdb_registry.h" nogil:
    int SDB_REGISTRY_VERSION
    int SDB_NAME_MAX
    int SDB_STATUS_ENABLED
    struct sdb_layout:
        uint16_t thread_ec
        uint16_t thread_status
        uint16_t thread_status_shift
        uint16_t thread_status_mask
        uint16_t ec_vm_stack
        uint16_t ec_vm_stack_size
        uint16_t ec_cfp
        uint16_t ec_thread_ptr
        uint16_t cfp_size
        uint16_t cfp_pc
        uint16_t cfp_iseq
        uint16_t cfp_self
        uint16_t cfp_ep
        uint16_t cfp_jit_return
        uint16_t iseq_body
        uint16_t body_type
        uint16_t body_iseq_size
        uint16_t body_iseq_encoded
        uint16_t body_pathobj
        uint16_t body_base_label
        uint16_t body_label
        uint16_t body_first_lineno
        uint16_t body_first_lineno_is_fixnum
        uint16_t body_insns_info_body
        uint16_t body_insns_info_positions
        uint16_t body_insns_info_size
        uint16_t body_insns_info_succ_table
        uint16_t body_parent_iseq
        uint16_t body_local_iseq
        uint16_t insn_info_entry_size
        uint16_t insn_info_line_no
        uint16_t rstring_noembed_bit
        uint16_t rstring_heap_len
        uint16_t rstring_heap_ptr
        uint16_t rstring_embed_len
        uint16_t rstring_embed_ary
        uint16_t rstring_embed_len_shift
        uint16_t rstring_embed_len_mask
        uint16_t rarray_embed_bit
        uint16_t rarray_embed_len_shift
        uint16_t rarray_embed_len_mask
        uint16_t rarray_embed_ary
        uint16_t rarray_heap_len
        uint16_t rarray_heap_ptr
        uint16_t me_defined_class
        uint16_t me_def
        uint16_t me_called_id
        uint16_t me_owner
        uint16_t def_original_id
        uint16_t class_ext
        uint16_t classext_classpath
        uint16_t fl_singleton_bit
        uint16_t tlast_op_id
        uint16_t qnil
        uint16_t class_ext_ptr
        uint16_t classext_iv_tbl
        uint16_t classext_attached_object
        uint16_t singleton_any_type
        uint16_t body_builtin_attrs
        uint16_t objspace_flags
        uint16_t gc_during_bit
        uint16_t gc_dont_gc_bit
        uint16_t cfp_sp
        uint16_t body_local_table_size
        uint16_t t_mask
        uint16_t t_class
        uint16_t t_module
        uint16_t t_string
        uint16_t t_array
        uint16_t t_imemo
        uint16_t t_iclass
        uint16_t imemo_shift
        uint16_t imemo_mask
        uint16_t imemo_cref
        uint16_t imemo_svar
        uint16_t imemo_ment
        uint16_t imemo_iseq
        uint16_t env_flag_local
        uint16_t frame_flag_finish
        uint16_t env_prev_tag_mask
        uint16_t env_data_size
        uint16_t env_me_cref
        uint16_t env_specval
        uint16_t env_flags
        uint16_t immediate_mask
        uint16_t fixnum_shift
        uint16_t iseq_type_top
        uint16_t iseq_type_method
        uint16_t iseq_type_block
        uint16_t iseq_type_class
        uint16_t iseq_type_rescue
        uint16_t iseq_type_ensure
        uint16_t iseq_type_eval
        uint16_t iseq_type_main
        uint16_t iseq_type_plain
        uint16_t def_type
        uint16_t def_type_shift
        uint16_t def_type_mask
        uint16_t def_iseq
        uint16_t def_cfunc_func
        uint16_t def_cfunc_argc
        uint16_t method_type_iseq
        uint16_t method_type_cfunc
        uint16_t method_type_attrset
        uint16_t method_type_ivar
        uint16_t method_type_bmethod
        uint16_t method_type_zsuper
        uint16_t method_type_alias
        uint16_t method_type_undef
        uint16_t method_type_notimplemented
        uint16_t method_type_optimized
        uint16_t method_type_missing
        uint16_t method_type_refined
        uint16_t thread_runnable
        uint16_t thread_stopped
        uint16_t thread_stopped_forever
        uint16_t thread_killed
        uint16_t st_num_entries
        uint16_t st_entries_start
        uint16_t st_entries_bound
        uint16_t st_entries
        uint16_t st_entry_size
        uint16_t st_entry_key
        uint16_t st_entry_record
        uint16_t symbols_ids
        uint16_t id_scope_shift
        uint16_t id_entry_unit
        uint16_t id_entry_size
        uint16_t id_entry_str
        uint16_t succ_imm_entries
        uint16_t succ_imm_per_word
        uint16_t succ_imm_bits
        uint16_t succ_part
        uint16_t succ_block_size
        uint16_t succ_block_positions
        uint16_t succ_block_rank
        uint16_t succ_block_small_ranks
        uint16_t succ_small_bits
        uint16_t succ_block_bits
        uint16_t rclass_super
        uint16_t rbasic_klass
        uint16_t builtin_attr_c_trace
        uint16_t builtin_attr_leaf
        uint32_t frame_magic_mask
        uint32_t frame_magic_method
        uint32_t frame_magic_top
        uint32_t frame_magic_cfunc
        uint32_t frame_magic_ifunc
        uint32_t frame_magic_eval
        uint32_t frame_magic_dummy
        uint32_t reserved32
        uint16_t reserved16[2]
        uint64_t global_symbols_addr
        uint64_t id_classpath
        uint64_t id_tmp_classpath
        uint64_t id_attached
        uint64_t gc_flags_addr
        uint64_t running_ec_addr
        uint64_t reserved64[2]
    struct sdb_slot:
        uint64_t gen
        uint32_t live
        uint32_t native_tid
        uint64_t serial
        uint64_t thread_addr
        uint64_t ec_addr
        uint64_t start_mono_ns
        uint64_t start_wall_ns
        uint32_t state
        uint32_t flags
        char name[64]
        uint64_t span
        uint64_t span_ec
        uint64_t reserved[6]
    struct sdb_span_event:
        uint64_t seq
        uint64_t span
        uint64_t parent
        uint64_t thread_serial
        uint64_t at_ns
        uint32_t what
        uint32_t kind
        uint32_t endpoint
        uint32_t status
        char request_id[64]
        uint64_t reserved
    struct sdb_header:
        char magic[8]
        uint32_t version
        uint32_t header_size
        uint32_t slot_size
        uint32_t slot_count
        uint32_t slots_offset
        uint32_t pid
        uint32_t status
        uint32_t gc_active
        uint64_t proc_start_ticks
        uint64_t created_mono_ns
        uint64_t gen
        char ruby_version[32]
        char ruby_description[160]
        char layout_name[16]
        char disabled_reason[200]
        sdb_layout layout
        uint32_t spans_offset
        uint32_t span_count
        uint32_t strings_offset
        uint32_t strings_size
        uint64_t span_head
        uint32_t strings_used
        uint32_t strings_refused


cdef class Registry:
    """The gem's registry, mapped read-only."""
    cdef const uint8_t *base
    cdef size_t size
    cdef const sdb_header *hdr
    cdef readonly str path
    # the header's geometry, read once: the file is shared with the target, which could change
    # these words at any time; only the copies checked by check() are ever used
    cdef uint32_t slot_count, slot_size, slots_offset
    cdef uint32_t spans_offset, strings_offset, strings_size
    cdef readonly uint32_t span_count   # span ring entries (the header's, read once)
    cdef int checked


cdef object layout_problem(const sdb_layout *L)


cdef inline int copy_slot(const sdb_slot *s, sdb_slot *out, uint64_t *gen, int tries) noexcept nogil:
    """A consistent copy of slot s under its seqlock (gen even, and the same after the copy), its gen
    in *gen: 1; 0 when every one of `tries` attempts met a write."""
    cdef uint64_t g1
    cdef int t
    for t in range(tries):
        g1 = sdb_load_acquire_u64(&s.gen)
        if g1 & 1:
            continue
        memcpy(out, <const void *>s, sizeof(sdb_slot))
        sdb_fence_acquire()
        if sdb_load_acquire_u64(&s.gen) == g1:
            gen[0] = g1
            return 1
    return 0
