"""The detectors behind `mesh-host profile`: one module per capability, each asking the machine
something that succeeds only if the capability works, and saying how it knows.

`probe.Probe` is what a detector may ask (the runner, the files of /proc, /sys and /run, the
environment, the effective uid); `probe.Capability` is its verdict. `mesh_host.describing.profile` runs them.
"""
