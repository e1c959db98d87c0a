"""The mesh-provisioner server: keeps the registry bucket compiled from the domain catalogue and
serves the read-only verb `mesh-provisioner.provisioning` over the four buckets of the contract.

Modules, one concept each: `settings` (flags, environment, config file), `buckets` (making sure
the buckets exist), `registry_sync` (catalogue → registry bucket), `verb` (request validation and
listing), `paging` (answers split by bytes, cursors), `service` (the micro service, concurrency,
shutdown), `server` (the task group that runs it all), `dev` (a local nats-server plus the server),
`query` (asking the verb and following pages), `logs` and `cli`.
"""
