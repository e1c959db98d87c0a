"""How fast the one-file mesh-host starts: `python -m bench.host_start [--rounds N]`.

Builds the host into one file (`python -m mesh_host.build`, a subprocess: nothing here imports
mesh_host), copies it into an empty folder and runs it there with only PATH=/usr/bin:/bin, as
tests/mesh_host/test_single_file.py does: `--help` (the file unpacking its interpreter, Python
starting, the command line read: the start alone) and `apply` of a declaration holding a zstd
archive under a temporary --root (the start, then every resource type's code loaded and used).
Each is the median of N runs; the target is a start under a second.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from backports import zstd

TARGET_SECONDS = 1.0
CLEAN = {"PATH": "/usr/bin:/bin"}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.host_start", description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7, help="runs of each command (default 7)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-host-start-") as scratch:
        work = Path(scratch)
        host = _built(work)
        size = host.stat().st_size
        started = _median(lambda: _run(host, "--help"), args.rounds)
        declaration = _archive_declaration(work)
        applied = _median(lambda: _apply(host, work, declaration), args.rounds)
    met = "met" if started < TARGET_SECONDS else "NOT met"
    print(f"one-file mesh-host, {size / 2**20:.1f} MiB: --help {started:.3f} s "
          f"(target < {TARGET_SECONDS:.0f} s: {met}); apply of a zstd archive {applied:.3f} s "
          f"(medians of {args.rounds})")  # fmt: skip


def _built(work: Path) -> Path:
    out = work / "dist" / "mesh-host"
    subprocess.run([sys.executable, "-m", "mesh_host.build", "--out", str(out)], check=True, capture_output=True)
    alone = work / "empty"
    alone.mkdir()
    shutil.copy2(out, alone / "mesh-host")
    return alone / "mesh-host"


def _run(host: Path, *argv: str) -> None:
    subprocess.run([str(host), *argv], cwd=host.parent, env=CLEAN, check=True, capture_output=True)


def _archive_declaration(work: Path) -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as written:
        for index in range(20):
            data = f"member {index}\n".encode()
            info = tarfile.TarInfo(f"bin/tool-{index}")
            info.size, info.mode = len(data), 0o755
            written.addfile(info, io.BytesIO(data))
    source = work / "tool.tar.zst"
    source.write_bytes(zstd.compress(buffer.getvalue()))
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    declaration = work / "tool.json"
    resource = {"id": "tool", "type": "archive", "path": "/tool", "source": "/tool.tar.zst", "sha256": digest,
                "mode": "0755"}  # fmt: skip
    declaration.write_text(json.dumps({"declaration": 1, "resources": [resource]}))
    return declaration


def _apply(host: Path, work: Path, declaration: Path) -> None:
    root = Path(tempfile.mkdtemp(dir=work))
    shutil.copy2(work / "tool.tar.zst", root / "tool.tar.zst")
    _run(host, "apply", str(declaration), "--root", str(root), "--state", str(root / ".state"))


def _median(action: Callable[[], None], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.monotonic()
        action()
        times.append(time.monotonic() - started)
    return statistics.median(times)


if __name__ == "__main__":
    main()
