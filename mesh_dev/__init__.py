"""Development composition: what runs the whole mesh on one machine, standing above both programs.

`local_nats` (a nats-server on loopback), `standins` (the other domains of the mesh as real
participants), `demo` (a node client over `deploy/examples/`) and the `mesh-provisioner-dev`
command. It reuses `provisioner` and `provisioner_client`; neither of them imports it.
"""
