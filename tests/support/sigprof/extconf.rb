# Test-only: a reference profiler taking Ruby's own innermost frame in its signal handler
# (tests/integration/test_real_programs.py builds it per Ruby into a temporary directory).
require "mkmf"
have_library("rt", "timer_create")
create_makefile("sdb_sigprof")
