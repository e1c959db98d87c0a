"""A mesh for the multi-party benchmarks (`--fill`, `--soak`): nats-server on the accounts
`mesh-provisioner grants` writes (static, or JWT), the seat as a process of its own on its own key
(as it runs for real: its CPU and memory are its own, its log a file), and how any process reaches
the mesh as any party (`Access`, which a child process is given on its command line)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client

from bench.harness import ROOT, answers, python_process
from mesh_dev.local_nats import local_nats
from registry.access import (
    SERVER_AUTH,
    Kind,
    MeshParties,
    Party,
    creds_path,
    issue_grants,
    load_jwt_auth,
    render_server_auth,
    seed_path,
)
from registry.contract import buckets
from registry.wire import BusOptions

OPERATOR = Party(kind=Kind.OPERATOR, name="ops")
SEAT = Party(kind=Kind.SEAT, name=buckets.SEAT)
SEAT_PING = f"$SRV.PING.{buckets.SEAT}"
SEAT_READY_WITHIN = 120.0  # seconds: a seat of 1,000 nodes' grants, on a loaded machine


def node(name: str) -> Party:
    return Party(kind=Kind.NODE, name=name)


@dataclass(frozen=True)
class Access:
    """How to reach the mesh as any party: the server, the folder of keys, and whether JWT mode."""

    url: str
    keys: Path
    jwt: bool = False

    def options(self, who: Party, *, request_timeout: timedelta = timedelta(seconds=30)) -> BusOptions:
        credential: dict[str, Any] = (
            {"creds": creds_path(self.keys, who.label)} if self.jwt else {"nkey_seed": seed_path(self.keys, who)}
        )
        return BusOptions(servers=(self.url,), name=who.label, request_timeout=request_timeout, **credential)

    def credentials(self, who: Party) -> dict[str, str]:
        """nats-py's own arguments for `who`'s credential."""
        if self.jwt:
            return {"user_credentials": str(creds_path(self.keys, who.label))}
        return {"nkeys_seed": str(seed_path(self.keys, who))}

    def flags(self, who: Party) -> list[str]:
        """`who`'s credential as `mesh-provisioner serve` (and `bench.echo`) take it."""
        if self.jwt:
            return ["--creds", str(creds_path(self.keys, who.label))]
        return ["--nkey", str(seed_path(self.keys, who))]

    async def raw(self, who: Party, **options: Any) -> Client:
        """nats-py itself on `who`'s key: a hostile party is not bound to our library."""
        return await nats.connect(self.url, name=who.label, **self.credentials(who), **options)

    def argv(self) -> list[str]:
        return ["--url", self.url, "--keys", str(self.keys), *(["--jwt"] if self.jwt else [])]

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--url", required=True)
        parser.add_argument("--keys", type=Path, required=True)
        parser.add_argument("--jwt", action="store_true")

    @staticmethod
    def of(args: argparse.Namespace) -> Access:
        return Access(args.url, args.keys, args.jwt)


@dataclass(frozen=True)
class RunningMesh:
    access: Access
    server_pid: int
    seat_pid: int
    seat_log: Path
    server_log: Path
    issue_seconds: float
    server_start_seconds: float
    seat_start_seconds: float


@asynccontextmanager
async def bench_mesh(
    state: Path, *, nodes: Sequence[str], jwt: bool = False, seat: Mapping[str, object] | None = None
) -> AsyncIterator[RunningMesh]:
    """nats-server on the grants issued for `nodes` and one operator (`ops`), and the seat serving
    with those grants (and `seat`'s settings) as a process of its own, until the block exits."""
    started = time.perf_counter()
    include = issued_configuration(state, nodes, jwt=jwt)
    issued = time.perf_counter() - started
    logs = state / "seat.log", state / "nats-server.log"
    started = time.perf_counter()
    async with local_nats(state / "nats", include, ready_timeout=600) as server, server_log(logs[1]):
        server_started = time.perf_counter() - started
        access = Access(server.url, state / "keys", jwt)
        started = time.perf_counter()
        async with seat_process(access, state / "grants" / "grants.json", seat or {}, logs[0]) as pid:
            timing = (issued, server_started, time.perf_counter() - started)
            yield RunningMesh(access, server.process.pid, pid, *logs, *timing)


def issued_configuration(state: Path, nodes: Sequence[str], *, jwt: bool) -> str:
    """Issues the grants (`state/grants`, the keys in `state/keys`) and writes what nats-server
    includes of them into `state/nats`; the include line."""
    keys, out, config_dir = state / "keys", state / "grants", state / "nats"
    issue_grants(out, MeshParties(nodes=nodes, operators=(OPERATOR.name,)), keys=keys, jwt=jwt)
    config_dir.mkdir(parents=True, exist_ok=True)
    if jwt:
        (config_dir / SERVER_AUTH).write_text(render_server_auth(load_jwt_auth(out), config_dir / "resolver"))
        return f"include ./{SERVER_AUTH}"
    (config_dir / "accounts.conf").write_text((out / "accounts.conf").read_text())
    return "include ./accounts.conf"


@asynccontextmanager
async def server_log(path: Path) -> AsyncIterator[None]:
    """nats-server's log lines (which `local_nats` passes on at debug level) kept in `path`: why it
    closed a connection, say."""
    handler = logging.FileHandler(path)
    source = logging.getLogger(local_nats.__module__)
    source.addHandler(handler)
    level = source.level
    source.setLevel(logging.DEBUG)
    try:
        yield
    finally:
        source.removeHandler(handler)
        source.setLevel(level)
        handler.close()


def serve_flags(settings: Mapping[str, object]) -> list[str]:
    """`mesh-provisioner serve`'s flags for `settings` (`{"node_quota_keys": 100}`: `--node-quota-keys 100`)."""
    return [part for name, value in settings.items() for part in (f"--{name.replace('_', '-')}", str(value))]


def child_environment() -> dict[str, str]:
    """This process's environment without what the seat would read from it (its settings, the
    `nats` CLI's contexts), with this checkout importable."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("NATS_", "MESH_PROVISIONER_"))}
    return kept | {"XDG_CONFIG_HOME": "/nonexistent/mesh-bench", "PYTHONPATH": str(ROOT)}


@asynccontextmanager
async def seat_process(
    access: Access, grants_file: Path, settings: Mapping[str, object], log: Path
) -> AsyncIterator[int]:
    """`mesh-provisioner serve` on the seat's key with the grants, logging to `log`; its pid, once
    it answers `$SRV.PING`."""
    args = [
        *("-m", "provisioner.commands.cli", "serve", "--nats-url", access.url),
        *access.flags(SEAT),
        *("--grants-file", str(grants_file)),
        *serve_flags(settings),
    ]
    nc = await access.raw(SEAT)
    try:
        async with python_process(
            args, ready=lambda: answers(nc, SEAT_PING), log=log, env=child_environment(), within=SEAT_READY_WITHIN
        ) as process:
            yield process.pid
    finally:
        await nc.close()


def child_command(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]
