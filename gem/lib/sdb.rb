# frozen_string_literal: true

# sdb: publishes this process's Ruby threads to the sdb sidecar.
#
# `require "sdb"` creates /dev/shm/sdb-<pid> (docs/registry-format.md),
# checks this Ruby's memory layout and keeps one registry slot per live
# thread: threads alive now are adopted, later ones are registered from
# inside themselves by the Thread.new/start/fork patches below and
# released by an `ensure` when they end. SDB_DISABLE=1 turns all of it off.
require "sdb/version"

module Sdb
  class << self
    # true when the registry is published and the layout check passed.
    def enabled?
      respond_to?(:__enabled?, true) ? __enabled? : false
    end

    # "/dev/shm/sdb-<pid>", or nil when no registry file exists.
    def registry_path
      respond_to?(:__registry_path, true) ? __registry_path : nil
    end
  end

  # Private machinery: nothing here is API.
  module Internal
    module_function

    # A block for Thread.new/start/fork that registers the new thread
    # first thing, runs the user's block and frees the slot however the
    # thread ends (return, raise, kill).
    def wrap(block)
      proc do |*args|
        slot = nil
        begin
          slot = Sdb.__send__(:__register_current, 0)
          block.call(*args)
        ensure
          Sdb.__send__(:__release, slot, Thread.current)
        end
      end.ruby2_keywords
    end

    def around_exec
      Sdb.__send__(:__before_exec)
      begin
        yield
      rescue Exception
        Sdb.__send__(:__after_failed_exec)
        raise
      end
    end

    def adopt_running_threads
      main = Thread.main
      Thread.list.each do |th|
        Sdb.__send__(:__adopt, th, th.equal?(main) ? Sdb::SLOT_MAIN : 0)
      end
    end
  end

  # Thread.new and subclasses' super: wrap the block.
  module ThreadPatch
    ruby2_keywords def initialize(*args, &block)
      return super unless block # plain Ruby raises ThreadError

      super(*args, &Sdb::Internal.wrap(block))
    end

    def name=(name)
      result = super
      Sdb.__send__(:__rename, self, self.name)
      result
    end
  end

  # Thread.start / Thread.fork do not call initialize: wrap them too.
  module ThreadStartPatch
    ruby2_keywords def start(*args, &block)
      return super unless block

      super(*args, &Sdb::Internal.wrap(block))
    end

    ruby2_keywords def fork(*args, &block)
      return super unless block

      super(*args, &Sdb::Internal.wrap(block))
    end
  end

  # Every fork (Kernel#fork, Process.fork, IO.popen("-")) goes through
  # Process._fork on Ruby >= 3.1: the child gets its own registry.
  module ForkPatch
    def _fork
      pid = super
      if pid == 0
        reason = Sdb.__send__(:__after_fork_child)
        warn("sdb: #{reason}", uplevel: nil) if reason
      end
      pid
    end
  end

  # exec keeps the pid: drop the registry first, put it back if exec fails.
  module ExecPatch
    def exec(*args)
      Sdb::Internal.around_exec { super }
    end
  end

  # Kernel#exec is private: keep it so.
  module KernelExecPatch
    private

    def exec(*args)
      Sdb::Internal.around_exec { super }
    end
  end
end

if ENV["SDB_DISABLE"] != "1"
  require "sdb/sdb_ext"
  sdb_reason = Sdb.__send__(:__open)
  if sdb_reason
    warn "sdb: #{sdb_reason}"
  else
    Sdb::Internal.adopt_running_threads
    Thread.prepend(Sdb::ThreadPatch)
    Thread.singleton_class.prepend(Sdb::ThreadStartPatch)
    Process.singleton_class.prepend(Sdb::ForkPatch)
    Process.singleton_class.prepend(Sdb::ExecPatch)
    Kernel.prepend(Sdb::KernelExecPatch)
    Kernel.singleton_class.prepend(Sdb::ExecPatch)
  end
end
