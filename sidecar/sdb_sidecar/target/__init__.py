"""The process recorded, seen from outside: target opens its registry (open_target) and checks it,
process watches it (pidfd, exec, exit), tree finds its descendants in procfs, symbols reads Ruby's
objects in its memory (RemoteRuby)."""
