/**********************************************************************
 * sdb_symbols.c - Ruby's ID table found at require, for the sidecar's C-function names.
 **********************************************************************/
#include "sdb_gem.h"

/* ---------- the ID table (for the sidecar's C-function names) ----------
 * The sidecar names a C method by its ID, through ruby_global_symbols
 * (rb_symbols_t: its ids, at the row's symbols_ids, is an Array of chunks of id_entry_unit
 * [String, Symbol] pairs, 4.1: {Symbol, String} entries of an rb_darray in a T_DATA: the row's id_*
 * fields, from symbol.c). The symbol is hidden
 * (and stripped from Debian's libruby), so find it: scan libruby's writable
 * data for a struct whose ids table yields, for two known IDs, exactly the
 * String objects rb_id2str returns. A wrong candidate cannot pass that. */
static int
sdb_array_entry(const struct sdb_layout *L, uint64_t ary, uint64_t idx, uint64_t *out)
{
    uint64_t flags, len, ptr;
    if (ary == 0 || RB_SPECIAL_CONST_P((VALUE)ary) || sdb_read_u64(ary, &flags) != 0 ||
        (flags & L->t_mask) != L->t_array) return -1;
    if (flags & (1ULL << L->rarray_embed_bit)) {
        len = (flags >> L->rarray_embed_len_shift) & L->rarray_embed_len_mask;
        ptr = ary + L->rarray_embed_ary;
    }
    else {
        if (sdb_read_u64(ary + L->rarray_heap_len, &len) != 0 || sdb_read_u64(ary + L->rarray_heap_ptr, &ptr) != 0)
            return -1;
    }
    if (idx >= len) return -1;
    return sdb_read_u64(ptr + idx * 8, out);
}

/* Word idx of a chunk of the ID table: an Array's entry, or (4.1: the row's id_chunk_data) a word
 * of the rb_darray a T_DATA chunk wraps, within its length */
static int
sdb_chunk_entry(const struct sdb_layout *L, uint64_t chunk, uint64_t idx, uint64_t *out)
{
    uint64_t flags, ary, len;
    if (L->id_chunk_data == SDB_NA) return sdb_array_entry(L, chunk, idx, out);
    if (chunk == 0 || RB_SPECIAL_CONST_P((VALUE)chunk) || sdb_read_u64(chunk, &flags) != 0 ||
        (flags & L->t_mask) != RUBY_T_DATA) return -1;
    if (sdb_read_u64(chunk + L->id_chunk_data, &ary) != 0 || ary == 0 ||
        sdb_read_u64(ary + L->id_chunk_len, &len) != 0 || idx / L->id_entry_size >= len) return -1;
    return sdb_read_u64(ary + L->id_chunk_entries + idx * 8, out);
}

static int
sdb_symbols_match(const struct sdb_layout *L, uint64_t ids, ID id)
{
    uint64_t serial = id > L->tlast_op_id ? (uint64_t)id >> L->id_scope_shift : (uint64_t)id;
    uint64_t chunk, str;
    VALUE want = rb_id2str(id);
    if (!want) return 0;
    if (sdb_array_entry(L, ids, serial / L->id_entry_unit, &chunk) != 0) return 0;
    if (sdb_chunk_entry(L, chunk, (serial % L->id_entry_unit) * L->id_entry_size + L->id_entry_str, &str) != 0) return 0;
    return str == (uint64_t)want;
}

uint64_t
sdb_find_global_symbols(const struct sdb_layout *L)
{
    char line[1024];
    uint64_t found = 0;
    ID probe1 = rb_intern("sleep"), probe2 = rb_intern("sdb_probe_for_the_symbol_table");
    FILE *maps;
    if (L->rarray_embed_len_mask == SDB_NA || L->tlast_op_id == SDB_NA) return 0;
    if (!(maps = fopen("/proc/self/maps", "re"))) return 0;
    while (!found && fgets(line, sizeof(line), maps)) {
        unsigned long lo, hi;
        char perms[8], path[512] = "";
        if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %511s", &lo, &hi, perms, path) < 3) continue;
        if (perms[0] != 'r' || perms[1] != 'w' || !strstr(path, "libruby")) continue;
        for (uint64_t a = lo; a + L->symbols_ids + 8 <= hi; a += 8) {
            uint64_t ids = *(const uint64_t *)(uintptr_t)(a + L->symbols_ids); /* our own mapped rw data */
            if (ids == 0 || (ids & L->immediate_mask) || ids == (uint64_t)Qnil) continue;
            if (sdb_symbols_match(L, ids, probe1) && sdb_symbols_match(L, ids, probe2)) {
                found = a;
                break;
            }
        }
    }
    fclose(maps);
    return found;
}
