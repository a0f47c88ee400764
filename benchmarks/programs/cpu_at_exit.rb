# Loaded with -r by benchmarks/boot_real.py: at exit, writes the process's own CPU time (all its
# threads, user + system, in seconds) to $SDB_BENCH_CPU_FILE. Nothing else.
at_exit { File.write(ENV.fetch("SDB_BENCH_CPU_FILE"), Process.clock_gettime(Process::CLOCK_PROCESS_CPUTIME_ID).to_s) }
