"""`python -m bench`: every measurement side by side in one run, a table, and a JSON file of the figures.

Starts its own nats-server on loopback; needs nothing but the test install.
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Sequence
from pathlib import Path

import anyio

from bench.cases import PARTS, Report, run_all
from bench.scale import SCALE_PARTS, run_scale

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"
SCALE_RESULTS = RESULTS.with_name("scale-latest.json")


def results_file(*, scale: bool, parts: Sequence[str]) -> Path:
    """The default file of the figures; a run of some parts only does not overwrite the whole run's."""
    whole, every = (SCALE_RESULTS, SCALE_PARTS) if scale else (RESULTS, PARTS)
    if set(parts) == set(every):
        return whole
    return whole.with_suffix(f".{'-'.join(sorted(parts))}.json")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run (figures not comparable)")
    parser.add_argument(
        "--out", type=Path, help=f"where to write the JSON figures (default {RESULTS}, with --scale {SCALE_RESULTS})"
    )
    parser.add_argument(
        "--scale", action="store_true", help="issue 10's figures at mesh scale instead (filling the keys takes minutes)"
    )
    parser.add_argument(
        "--keys",
        type=int,
        default=1_000_000,
        help="with --scale, the keys to fill the needs bucket with (default 1,000,000)",
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=sorted({*PARTS, *SCALE_PARTS}),
        metavar="PART",
        help=f"run only these parts: {', '.join(PARTS)} (default all; listing loads the keys growth measures);"
        f" with --scale, of {', '.join(SCALE_PARTS)}",
    )
    args = parser.parse_args()
    if args.scale and (args.keys < 2_000 or args.keys % 100):
        parser.error("--keys: a multiple of 100, at least 2,000")
    parts = args.only or (SCALE_PARTS if args.scale else PARTS)
    if unknown := set(parts) - set(SCALE_PARTS if args.scale else PARTS):
        parser.error(f"--only: no part {', '.join(sorted(unknown))} {'with' if args.scale else 'without'} --scale")
    out = args.out or results_file(scale=args.scale, parts=parts)
    with tempfile.TemporaryDirectory(prefix="mesh-bench-") as state:
        if args.scale:
            report: Report = anyio.run(run_scale, Path(state), args.keys, parts)
        else:
            report = anyio.run(run_all, Path(state), args.quick, parts)
    print(report.table())
    report.save(out)
    print(f"\nfigures written to {out}")


if __name__ == "__main__":
    main()
