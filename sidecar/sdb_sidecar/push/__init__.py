"""Pushing profiles while recording (attach/record --push): at each interval the samples the
recording wrote meanwhile become named profiles (cutter: the profile library, in-process), each
destination's protocol encodes them (pyroscope, otlp), a bounded queue holds them (queue) and a
thread sends them (transport), off the sampling path. config: what --push asks for (its
options: commands.common.add_push_arguments)."""
