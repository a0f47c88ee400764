"""`sdb-sidecar agent`: one per host, it records every process that runs the sdb gem, in the host's
namespaces and in every container, each process tree as `attach` records it (recorder.TreeRecording),
from the moment its registry appears to its exit, and pushes its profiles. discovery: finding the
registries; cgroup: a process's container and pod; service: its service name; selection:
--include/--exclude; budget: the agent's own CPU; agent: the loop and the recordings."""
