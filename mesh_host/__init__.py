"""mesh-host: the one program installed by hand on a machine. It applies a declaration (folders,
files, services) and owns exactly its footprint; it decides nothing and connects to nothing.

It depends on nothing else of this repository (an import contract in pyproject.toml), so that it
can be built into one file and copied onto a bare machine.
"""
