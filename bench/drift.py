"""The cost of watch mode's drift poll (`provisioner_client.watch.drift`): `python -m bench.drift [--files N]`.

Writes N env files through the client's own `EnvFolder` in a temporary folder, then times one
look of `DriftWatch.drifted()` when nothing changed (an `lstat` per file: what every poll costs)
and when every file changed (an `lstat`, a read and a keyed digest per file: the worst poll), as
the median of several rounds. No bus is needed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from provisioner_client.materializing.envfile import EnvFolder
from provisioner_client.watch.drift import DriftWatch
from registry.contract import AppliedValue

ROUNDS = 15


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.drift", description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000, help="how many env files (default 1,000)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        drift, paths = _written(Path(folder) / "env", args.files)
        quiet = _median_ms(drift.drifted)
        every = _median_ms(drift.drifted, before=lambda: _touch_all(paths))
    print(
        f"{args.files:,} env files: a poll with nothing changed {quiet:.2f} ms (median of {ROUNDS}); "
        f"with every file changed {every:.2f} ms"
    )


def _written(folder: Path, count: int) -> tuple[DriftWatch, list[Path]]:
    env = EnvFolder(folder)
    applied = {}
    for index in range(count):
        module = f"module-{index:05d}"
        done = env.materialize(module, f'# module {module}\nVALUE="{index}"\nOTHER="x"\n'.encode())
        applied[module] = AppliedValue(state="applied", digest=done.digest, file=str(done.path))
    drift = DriftWatch(folder)
    drift.expect(applied)
    drift.drifted()  # the first look judges every file once
    return drift, [Path(a.file) for a in applied.values() if a.file]


def _touch_all(paths: list[Path]) -> None:
    now = time.time_ns()
    for path in paths:
        os.utime(path, ns=(now, now))


def _median_ms(look: Callable[[], object], before: Callable[[], None] | None = None) -> float:
    times = []
    for _ in range(ROUNDS):
        if before is not None:
            before()
        start = time.perf_counter()
        look()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


if __name__ == "__main__":
    main()
