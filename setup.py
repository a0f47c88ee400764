"""Builds the Cython sampler; everything else is in pyproject.toml."""
from Cython.Build import cythonize
from setuptools import Extension, setup

import glob

# The sampler: Cython glue (sidecar/sdb_sidecar/sampler/*.pyx, their seams in *.pxd) over small C units
# (sidecar/sdb_sidecar/sampler/native/*.c, each with its header and a direct test in tests/unit/test_native_units.py).
NATIVE = sorted(glob.glob("sidecar/sdb_sidecar/sampler/native/*.c"))

# The sampler's layers, one extension module each, in the order they build on each other
# (docs/internals.md, "The sampler's code"); every one gets the C units (their inline helpers reach
# into them through the .pxd seams).
MODULES = ["_registry", "_reads", "_mes", "_walk", "_states", "_slots", "_spawn", "_sampler"]

extensions = [
    Extension(
        f"sdb_sidecar.sampler.{name}",
        sources=[f"sidecar/sdb_sidecar/sampler/{name}.pyx"] + NATIVE,
        # sdb_registry.h is shared with the gem: one definition of the registry
        include_dirs=["gem/ext/sdb", "sidecar/sdb_sidecar/sampler", "sidecar/sdb_sidecar/sampler/native", "bpf"],
        extra_compile_args=["-O2", "-Wno-unused-function"],
    )
    for name in MODULES
]
# the push's samples grouped as they are cut (no C unit: it reads the samples record's bytes)
extensions.append(Extension("sdb_sidecar.push._groups", sources=["sidecar/sdb_sidecar/push/_groups.pyx"],
                            extra_compile_args=["-O2"]))

setup(ext_modules=cythonize(extensions, compiler_directives={"language_level": "3"}, quiet=True,
                           include_path=["sidecar"]))
