"""A node client managing many modules: the first reconcile, a second with nothing changed, and its memory."""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import anyio
from nats.aio.client import Client

from bench.harness import ROOT, timed
from mesh_dev.standins import ASSIGNMENT, StandIns
from provisioner_client.reconcile import ClientPlan, Report, reconcile
from registry.contract import buckets
from registry.wire import Bus, put

NODE = "bench-node"


@dataclass(frozen=True)
class Fleet:
    """`modules` manifests of `placeholders` placeholders each (10 by default) and the values they need."""

    modules: int
    folder: Path
    node: str = NODE

    def env_of(self, module: int) -> dict[str, str]:
        return {
            "SHARED_0": "${config:shared-0}",
            "SHARED_1": "${config:shared-1}",
            **{f"OWN_{j}": f"${{config:m{module}-k{j}}}" for j in range(4)},
            "STATE": "${dir:state}",
            "URL": "http://localhost:${port:http}/",
            "PASSWORD": "${secret:db-password}",
            "ALIASES": "${shell:zsh:normal}",
        }

    def write_manifests(self) -> Path:
        manifests = self.folder / "manifests"
        manifests.mkdir(parents=True, exist_ok=True)
        for module in range(self.modules):
            document = {
                "module": f"m{module}",
                "env": self.env_of(module),
                "contributes": {"shell:zsh:normal": [f"alias m{module}='cd /srv/m{module}'"]},
            }
            (manifests / f"m{module}.json").write_text(json.dumps(document, indent=1))
        return manifests

    async def write_values(self, bus: Bus, parts: StandIns) -> None:
        for name in ("shared-0", "shared-1"):
            await put(bus, parts.config, name, json.dumps(f"value of {name}").encode())
        for module in range(self.modules):
            for j in range(4):
                await put(bus, parts.config, f"m{module}-k{j}", json.dumps(f"m{module} value {j}").encode())
            plan = {"plan": {"dir": {"state": f"/var/lib/m{module}"}, "port": {"http": 8000 + module}}}
            key = ASSIGNMENT.build(node=self.node, module=f"m{module}")
            await put(bus, parts.assignments, key, json.dumps(plan).encode())


@dataclass(frozen=True)
class Run:
    """One reconcile: its time, its KV writes and files written, and how long its writes took
    (`write_seconds`: needs and collect are written at once, then applied)."""

    seconds: float
    kv_writes: int
    files_written: int
    write_seconds: float = 0.0


async def own_bucket_sequences(nc: Client) -> int:
    total = 0
    for bucket in (buckets.NEEDS, buckets.APPLIED, buckets.COLLECT):
        total += (await nc.jetstream().stream_info(bucket.stream)).state.last_seq
    return total


def file_stamps(folder: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in folder.glob("*.env")}


async def measured_reconcile(bus: Bus, nc: Client, plan: ClientPlan) -> Run:
    before_writes, before_files = await own_bucket_sequences(nc), file_stamps(plan.materialize)
    report = None

    async def run() -> None:
        nonlocal report
        report = await reconcile(bus, plan)

    seconds = await timed(run)
    assert report is not None and report.ok, report.summary() if report else "no report"
    after = file_stamps(plan.materialize)
    files = sum(1 for name, stamp in after.items() if before_files.get(name) != stamp)
    return Run(seconds, await own_bucket_sequences(nc) - before_writes, files, writing_time(report))


def writing_time(report: Report) -> float:
    """Seconds the reconcile spent writing: its needs and collect converges overlap, applied follows."""
    spent = report.write_seconds
    return max(spent.get(buckets.NEEDS.name, 0.0), spent.get(buckets.COLLECT.name, 0.0)) + spent.get(
        buckets.APPLIED.name, 0.0
    )


async def client_peak_rss_mb(url: str, manifests: Path, materialize: Path, *, node: str = NODE) -> float:
    """Peak RSS of `mesh-provisioner-client reconcile` as its own process over the same manifests
    (through `bench.client`: `provisioner_client.cli` does nothing when run as a module)."""
    report = materialize.parent / "client-peak-rss"
    command = [
        sys.executable,
        "-m",
        "bench.peak",
        str(report),
        "bench.client",
        "reconcile",
        "--node",
        node,
        "--manifests",
        str(manifests),
        "--materialize",
        str(materialize),
        "--nats-url",
        url,
        "--log-level",
        "WARNING",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = await anyio.run_process(command, cwd=ROOT, env=env, check=False, stdout=None, stderr=None)
    assert result.returncode == 0, f"the client exited {result.returncode}"
    return float(report.read_text())
