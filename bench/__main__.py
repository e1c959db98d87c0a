"""`python -m bench`: every measurement side by side in one run, a table, and a JSON file of the figures.

Starts its own nats-server on loopback; needs nothing but the test install.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import anyio

from bench import cases
from bench.cases import Report
from bench.fill import FillSizes, run_fill
from bench.harness import write_json
from bench.hostile import ACTS, VALUE_SIZE
from bench.metrics import PART as METRICS
from bench.metrics import MetricsSizes, scrape_cost
from bench.rollout import RolloutSizes, run_rollout
from bench.scale import SCALE_PARTS, run_scale
from bench.sites import SitesSizes, run_sites
from bench.soak import SoakSizes, run_soak

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"
SCALE_RESULTS = RESULTS.with_name("scale-latest.json")
FILL_RESULTS = RESULTS.with_name("fill-latest.json")
SITES_RESULTS = RESULTS.with_name("sites-latest.json")
ROLLOUT_RESULTS = RESULTS.with_name("rollout-latest.json")
SOAK_RESULTS = {False: RESULTS.with_name("soak-static-latest.json"), True: RESULTS.with_name("soak-jwt-latest.json")}
PARTS = (*cases.PARTS, METRICS)  # the scrape cost last: a seat and nats-server of its own


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
        "--scale", action="store_true", help="the figures at mesh scale instead (filling the keys takes minutes)"
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
        help=f"run only these parts: {', '.join(PARTS)} (default all; listing loads the keys growth measures;"
        f" {METRICS}: scraping the seat's /metrics every second under what=registry load, a fleet of --nodes);"
        f" with --scale, of {', '.join(SCALE_PARTS)}",
    )
    add_fill_and_soak_arguments(parser)
    args = parser.parse_args()
    if args.fill:
        filling = FillSizes(
            seconds=args.seconds,
            in_headers=args.in_headers,
            fillers=args.fillers,
            value_bytes=args.value_bytes,
            jwt=args.jwt,
        )
        fill(args.out or FILL_RESULTS, filling)
        return
    if args.rollout:
        rollout(args.out or ROLLOUT_RESULTS, RolloutSizes.quick() if args.quick else RolloutSizes())
        return
    if args.sites:
        across = replace(SitesSizes.quick() if args.quick else SitesSizes(), rate=args.site_rate)
        sites(args.out or SITES_RESULTS, across)
        return
    if args.soak:
        acts = args.hostile_acts
        sizes = SoakSizes.lasting(args.minutes, nodes=args.nodes, rate=args.rate, every=args.every, acts=acts)
        soak(args.out or SOAK_RESULTS[args.jwt], sizes, jwt=args.jwt)
        return
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
            metrics_sizes = replace(MetricsSizes.quick() if args.quick else MetricsSizes(), nodes=args.nodes)
            report = anyio.run(run_parts, Path(state), args.quick, parts, metrics_sizes)
    print(report.table())
    report.save(out)
    print(f"\nfigures written to {out}")


async def run_parts(
    state: Path, quick: bool, parts: Sequence[str], metrics_sizes: MetricsSizes | None = None
) -> Report:
    """`parts` of the bench: those on the shared seat (`bench.cases`), then the scrape cost on a seat
    of its own (`bench.metrics`), at `metrics_sizes` when given."""
    on_shared_seat = [part for part in parts if part in cases.PARTS]
    report = await cases.run_all(state, quick, on_shared_seat) if on_shared_seat else Report()
    if METRICS in parts:
        sizes = metrics_sizes or (MetricsSizes.quick() if quick else MetricsSizes())
        await scrape_cost(state / METRICS, report, sizes)
    return report


def add_fill_and_soak_arguments(parser: argparse.ArgumentParser) -> None:
    """A hostile node's figures: `--fill` and `--soak`, and what they take."""
    parser.add_argument(
        "--sites",
        action="store_true",
        help="the figures across sites instead: a hub and 3 leaf-node sites, 20 ms each way between"
        " (an unchanged reconcile and what=registry at a site against at the hub; 3 x 300 nodes registering;"
        " --quick: tiny sizes)",
    )
    parser.add_argument(
        "--site-rate",
        type=float,
        default=SitesSizes.rate,
        help=f"with --sites, the nodes arriving a second at each site to register (default {SitesSizes.rate:g})",
    )
    parser.add_argument(
        "--rollout",
        action="store_true",
        help="the rollout's figures instead: a shared config change reaching 50 watching clients (10 a process) with"
        " a rollout budget of 5 and without one: the most change actions at once and the total time (--quick: tiny)",
    )
    parser.add_argument(
        "--fill",
        action="store_true",
        help="the fill instead: nodes filling the needs bucket at its default size",
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="with --fill, how long the node fills (default 60)")
    parser.add_argument("--in-headers", action="store_true", help="with --fill, the bytes in a header of each put")
    parser.add_argument("--fillers", type=int, default=1, help="with --fill, how many nodes fill at once (1 to 5)")
    parser.add_argument(
        "--value-bytes",
        type=int,
        default=VALUE_SIZE,
        help=f"with --fill, the bytes of each put (default {VALUE_SIZE:,}; small: many keys)",
    )
    parser.add_argument(
        "--soak",
        action="store_true",
        help="the multi-party soak instead: a hostile node's whole repertoire while honest nodes reconcile",
    )
    parser.add_argument("--minutes", type=float, default=5.0, help="with --soak, how long it lasts (default 5)")
    parser.add_argument(
        "--nodes",
        type=int,
        default=1000,
        help="with --soak, the honest nodes; in the metrics part, the fleet each scrape counts (default 1,000)",
    )
    parser.add_argument("--jwt", action="store_true", help="with --soak or --fill, JWT accounts instead of static ones")
    rate, every = SoakSizes.rate, SoakSizes.every
    parser.add_argument(
        "--rate", type=float, default=rate, help=f"with --soak, honest nodes arriving a second (default {rate:g})"
    )
    parser.add_argument(
        "--every",
        type=float,
        default=every,
        help=f"with --soak, seconds between a node's reconciles (default {every:g})",
    )
    parser.add_argument(
        "--hostile-acts",
        nargs="+",
        choices=ACTS,
        default=list(ACTS),
        metavar="ACT",
        help=f"with --soak, the hostile node's acts (default all: {', '.join(ACTS)}); fewer tell which one hurts",
    )


def sites(out: Path, sizes: SitesSizes) -> None:
    with tempfile.TemporaryDirectory(prefix="mesh-bench-sites-") as state:
        try:
            report, details = anyio.run(run_sites, Path(state), sizes)
        finally:
            keep_logs(Path(state), out)
    written(out, report, details)


def rollout(out: Path, sizes: RolloutSizes) -> None:
    with tempfile.TemporaryDirectory(prefix="mesh-bench-rollout-") as state:
        try:
            report, details = anyio.run(run_rollout, Path(state), sizes)
        finally:
            keep_logs(Path(state) / "mesh", out)
    written(out, report, details)


def fill(out: Path, sizes: FillSizes) -> None:
    with tempfile.TemporaryDirectory(prefix="mesh-bench-fill-") as state:
        try:
            report, details = anyio.run(run_fill, Path(state), sizes)
        finally:
            keep_logs(Path(state), out)
    written(out, report, details)


def soak(out: Path, sizes: SoakSizes, *, jwt: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="mesh-bench-soak-") as state:
        try:
            report, details = anyio.run(run_soak, Path(state), sizes, jwt)
        finally:
            keep_logs(Path(state), out)
    written(out, report, details)


def keep_logs(state: Path, out: Path) -> None:
    """The seat's and nats-server's logs beside the figures (`<out>.seat.log`, `<out>.nats-server.log`):
    the evidence of what they did."""
    for log in (state / "seat.log", state / "seats.log", state / "nats-server.log"):
        if log.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(log, out.with_suffix(f".{log.name}"))
            print(f"kept {out.with_suffix(f'.{log.name}')}")


def written(out: Path, report: Report, details: dict[str, Any]) -> None:
    print(report.table())
    write_json(out, {"figures": report.figures, **details})
    print(f"\nfigures written to {out}")


if __name__ == "__main__":
    main()
