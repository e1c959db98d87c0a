"""The shared library of mesh-provisioner: escaping, key shapes, placeholders, the domain
catalogue, registry compilation, the models of bucket values, and the NATS plumbing both
programs use."""
