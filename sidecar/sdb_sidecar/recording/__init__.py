"""A recording: assembly (a target opened, its sampler, its session; the descendants that appear),
session (one process: the sampler's thread, the drain loop; drainer: what the sampler gathered into
records), recorder (a tree of processes into trace files: TreeRecording, Tree), process_recording
(one process of a tree), rotation (its files), end_counts, status_line, options; snapshot and live
(what `snapshot` and `top` make of a session)."""
