# extconf.rb - configures the sdb C extension (sdb/sdb_ext).
# Every C API the gem's C units need is checked here; a missing one stops the build
# with a sentence saying what is missing, instead of a compiler error.
require "mkmf"

def sdb_require(kind, name, *args)
  ok = kind == :header ? have_header(name, *args) : have_func(name, *args)
  return if ok
  abort "sdb: this system lacks #{name} (#{kind}); sdb needs Linux with glibc and Ruby >= 3.1 headers"
end

abort "sdb: only Linux is supported (this is #{RUBY_PLATFORM})" unless RUBY_PLATFORM.include?("linux")

sdb_require :header, "sys/mman.h"
sdb_require :header, "sys/uio.h"
sdb_require :header, "ruby/debug.h"
sdb_require :func, "process_vm_readv", ["sys/uio.h"]
sdb_require :func, "mmap", ["sys/mman.h"]
sdb_require :func, "ftruncate", ["unistd.h"]
sdb_require :func, "fchmod", ["sys/stat.h"]
sdb_require :func, "clock_gettime", ["time.h"]
sdb_require :func, "rb_profile_frames", ["ruby.h", "ruby/debug.h"]
sdb_require :func, "rb_profile_frame_path", ["ruby.h", "ruby/debug.h"]
sdb_require :func, "rb_profile_frame_first_lineno", ["ruby.h", "ruby/debug.h"]
sdb_require :func, "rb_set_end_proc", ["ruby.h"]
sdb_require :func, "rb_gc_register_mark_object", ["ruby.h"]

# Optional: Ruby >= 3.2 tells us when a native thread exits.
have_header("ruby/thread.h")
have_func("rb_internal_thread_add_event_hook", ["ruby.h", "ruby/thread.h"])

$CFLAGS << " -std=gnu11 -Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers"
create_makefile("sdb/sdb_ext")
