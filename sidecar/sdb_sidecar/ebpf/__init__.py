"""eBPF beside the sampler: hub (one per recording: compiles the programs beside the sampling and
attaches them for each process that joins), symbolizer (ISeqs named at birth; attach: its probes per
process; view: one process's view of it; governor: its pauses; probes, uprobe_link: where and how its
probes go), kview (Ruby 3.1: which threads ran), incontext and threadtimers (running threads' stacks
copied on their own CPU), bpfload (bcc, the programs' sources in bpf/, the compile)."""
