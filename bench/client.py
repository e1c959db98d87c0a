"""`python -m bench.client ARGS...`: the node client's command line (`provisioner_client.cli.main`) as a
module that runs when executed, so that `bench.peak` measures a real reconcile."""

from __future__ import annotations

import sys

from provisioner_client.cli import main

if __name__ == "__main__":
    sys.exit(main())
