# Test-only: Ruby's own view of a thread's frames (tests/integration/test_golden_*.py builds
# this per Ruby into a temporary directory; it is never installed).
require "mkmf"
have_func("rb_profile_thread_frames", ["ruby.h", "ruby/debug.h"])
create_makefile("sdb_golden")
