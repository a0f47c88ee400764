"""Builds the Cython sampler; everything else is in pyproject.toml."""
from Cython.Build import cythonize
from setuptools import Extension, setup

sampler = Extension(
    "sdb_sidecar._sampler",
    sources=["sidecar/sdb_sidecar/_sampler.pyx"],
    # sdb_registry.h is shared with the gem: one definition of the registry
    include_dirs=["gem/ext/sdb", "sidecar/sdb_sidecar"],
    extra_compile_args=["-O2", "-Wno-unused-function"],
)

setup(ext_modules=cythonize([sampler], compiler_directives={"language_level": "3"}, quiet=True,
                           include_path=["sidecar"]))
