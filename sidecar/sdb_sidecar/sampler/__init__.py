"""The sampler: Cython modules that run without the GIL (_sampler's tick loop over _slots, _reads,
_mes, _walk, _states; _registry maps the target's registry; _spawn its thread) over the C units in
native/; wakeup, the eventfd its loop signals. It imports nothing of the layers above."""
