"""The shared library of mesh-provisioner, one sub-package per concern, each reached through its
surface (its `__init__`), stacked so that each imports only those below it:

- `registry.provider`: the provider SDK, for a domain's provider program.
- `registry.edge`: a program's edge (settings, NATS contexts);
  `registry.serving`: answering a verb as a NATS service.
- `registry.wire`: the NATS wire layer (the bus, KV, feeds, walks, leases, the verb's client);
  `registry.access`: the parties and their grants (static accounts or JWTs).
- `registry.contract`: the wire contract as data (escaping, keys, buckets, placeholders, the
  catalogue, the models of every value and answer, the bounded readers of JSON and of the
  operator's files); `registry.runtime`: how a program runs (logging, signals, terminal-safe
  text, a `/metrics` endpoint).
- `registry.errors`: the one error tree under all of them.

The order is an import contract in pyproject.toml (`registry-concerns`).
"""
