"""Example programs standing on the `registry` library: providers of the mesh, made real."""
