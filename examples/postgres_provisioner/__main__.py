"""`python -m examples.postgres_provisioner`: the same as `mesh-postgres-provisioner`."""

from examples.postgres_provisioner.cli import main

raise SystemExit(main())
