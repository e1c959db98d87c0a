"""`python -m bench`: every measurement side by side in one run, a table, and a JSON file of the figures.

Starts its own nats-server on loopback; needs nothing but the test install.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import anyio

from bench.cases import PARTS, Report, run_all

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run (figures not comparable)")
    parser.add_argument(
        "--out", type=Path, default=RESULTS, help=f"where to write the JSON figures (default {RESULTS})"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=PARTS,
        default=PARTS,
        metavar="PART",
        help=f"run only these parts: {', '.join(PARTS)} (default all; listing loads the keys growth measures)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mesh-bench-") as state:
        report: Report = anyio.run(run_all, Path(state), args.quick, args.only)
    print(report.table())
    report.save(args.out)
    print(f"\nfigures written to {args.out}")


if __name__ == "__main__":
    main()
