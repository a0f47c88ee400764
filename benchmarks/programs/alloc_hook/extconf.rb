# Builds the measurement-only extension of benchmarks/alloc_hook_cost.py and alloc_share.py with the
# running Ruby's own mkmf (never installed: the benchmarks load it from their build directory).
require "mkmf"
abort "alloc_hook: rb_tracepoint_new is missing from this Ruby" unless have_func("rb_tracepoint_new", "ruby/debug.h")
have_func("rb_gc_obj_slot_size")                 # exported from 3.2 (variable-width slots), not declared
have_func("rb_internal_thread_add_event_hook", "ruby/thread.h") # 3.2+: who holds the GVL
$CFLAGS << " -O2 -std=gnu99"
create_makefile("alloc_hook")
