"""A real Prometheus and node_exporter for the tests (Debian's packages; scripts/test installs them
as root): started on free loopback ports, their output in a file, stopped after the block."""

from __future__ import annotations

import json
import re
import shutil
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from anyio.abc import Process
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import DEPLOY

BOUND = 30.0
README = DEPLOY / "prometheus" / "README.md"
ROW = re.compile(r"^\| `(mesh_\w+)` \| (\w+) \|([^|]*)\|", re.MULTILINE)


def documented() -> dict[str, tuple[str, frozenset[str]]]:
    """deploy/prometheus/README.md's list of metrics: each series' type and labels, by name."""
    text = README.read_text().split("## Metrics", 1)[1].split("\n## ", 1)[0]
    return {name: (kind, frozenset(re.findall(r"`(\w+)`", labels))) for name, kind, labels in ROW.findall(text)}


Figures = dict[tuple[str, frozenset[tuple[str, str]]], float]


def samples(text: str) -> Figures:
    """Every sample of a text exposition (a scrape, a textfile), by name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(found: Figures, name: str, **labels: str) -> float:
    """The sample of `name` with exactly `labels`; KeyError when there is none."""
    return found[(name, frozenset(labels.items()))]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def program(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(
            f"{name} is missing: install Debian's prometheus and prometheus-node-exporter (scripts/test does as root)"
        )
    return found


@asynccontextmanager
async def running(command: Sequence[str], log: Path) -> AsyncIterator[Process]:
    """`command` running for the block, its output in `log` (read when a test fails)."""
    with log.open("wb") as output:
        async with running_into(command, output.fileno()) as process:
            yield process


@asynccontextmanager
async def running_into(command: Sequence[str], output: int) -> AsyncIterator[Process]:
    async with await anyio.open_process(command, stdout=output, stderr=output) as process:
        try:
            yield process
        finally:
            process.terminate()
            with anyio.move_on_after(5, shield=True):
                await process.wait()
            if process.returncode is None:
                process.kill()


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 -- a loopback URL the test made
            return answer.status, answer.read()
    except OSError:
        return 0, b""


class PrometheusApi:
    def __init__(self, port: int) -> None:
        self.base = f"http://127.0.0.1:{port}"

    async def ready(self) -> None:
        await self._until(lambda: get(f"{self.base}/-/ready")[0] == 200, "Prometheus ready")

    def value(self, query: str) -> float | None:
        status, body = get(f"{self.base}/api/v1/query?{urllib.parse.urlencode({'query': query})}")
        if status != 200:
            return None
        result = json.loads(body)["data"]["result"]
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def error_of(self, query: str) -> str | None:
        """What Prometheus says is wrong with `query` (it does not parse, say); None when it runs."""
        url = f"{self.base}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 -- a loopback URL the test made
                return None if json.loads(answer.read())["status"] == "success" else "not a success"
        except urllib.error.HTTPError as err:
            said: str = json.loads(err.read()).get("error", str(err))
            return said

    async def until(self, query: str, expected: float) -> float:
        """Waits until `query` has one sample of `expected`; the seconds it took."""
        started = time.monotonic()
        await self._until(lambda: self.value(query) == expected, f"{query} == {expected}")
        return time.monotonic() - started

    async def _until(self, check: Callable[[], bool], what: str) -> None:
        with anyio.fail_after(BOUND, reason=f"not within {BOUND} s: {what}"):
            while not await anyio.to_thread.run_sync(check):
                await anyio.sleep(0.2)


@asynccontextmanager
async def prometheus(folder: Path, config: str) -> AsyncIterator[PrometheusApi]:
    """A Prometheus of `config` (YAML) keeping its data in `folder`, ready for queries."""
    port = free_port()
    (folder / "prometheus.yml").write_text(config)
    command = [
        program("prometheus"),
        f"--config.file={folder / 'prometheus.yml'}",
        f"--storage.tsdb.path={folder / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    async with running(command, folder / "prometheus.log"):
        api = PrometheusApi(port)
        await api.ready()
        yield api
