"""The sidecar's one exception type and its exit codes (set only at the CLI boundary).

Every expected failure is an `SdbError`: one line for stderr and a distinct exit code.
"""


class Exit:
    OK = 0
    FAILED = 1             # an unexpected error (a bug: please report it)
    USAGE = 2              # bad command line (argparse)
    NO_SUCH_PROCESS = 3
    NOT_RUBY = 4
    NO_GEM = 5             # Ruby, but without `require "sdb"`
    FOREIGN_REGISTRY = 6   # registry owned by another user (or not private)
    REGISTRY_FORMAT = 7    # registry of an unknown format version, or not a registry
    OUTPUT = 8             # the output path cannot be written
    PERMISSION = 9         # not allowed to read the target's memory
    GEM_DISABLED = 10      # the gem disabled itself in the target (reason given)
    CHILD_FAILED = 11      # `record`: the program could not be started
    GEM_NOT_INSTALLED = 12  # `record`: the sdb gem is not installed for the program's Ruby


class SdbError(Exception):
    def __init__(self, message: str, code: int = Exit.FAILED):
        super().__init__(message)
        self.code = code
