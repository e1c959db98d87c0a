"""Removing a node: every key of that node, and nothing of any other node, judged by
the data (revision and content of what stays), through the function and the command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from mesh_dev.local_nats import LocalNats
from provisioner.commands.removal import remove_node
from registry.contract import Bucket, buckets
from registry.wire import Bus, KvItem, put, snapshot
from tests.helpers import clean_environment

VALUE = b'{"v":1}'
SEEDED: dict[Bucket, list[str]] = {
    buckets.NEEDS: ["n1.web.config.a", "n1.bad", "n2.web.config.a", "a=2Eb.web.config.x", "a.web.config.x"],
    buckets.APPLIED: ["n1.web", "n2.web", "a=2Eb.web", "a.web"],
    buckets.COLLECT: ["n1.shell=3Azsh.web", "n2.shell=3Azsh.web", "a=2Eb.c.web", "a.c.web"],
}


@pytest.fixture
async def seeded(server: LocalNats, bus: Bus) -> Bus:
    for bucket, keys in SEEDED.items():
        for key in keys:
            await put(bus, bucket, key, VALUE)
    return bus


async def contents(bus: Bus) -> dict[str, dict[str, KvItem]]:
    return {bucket.name: {item.key: item for item in await snapshot(bus, bucket)} for bucket in SEEDED}


def without(everything: dict[str, dict[str, KvItem]], node_token: str) -> dict[str, dict[str, KvItem]]:
    return {
        name: {k: v for k, v in items.items() if not k.startswith(f"{node_token}.")}
        for name, items in everything.items()
    }


async def test_removing_a_node_deletes_its_keys_and_leaves_the_others_as_they_were(seeded: Bus) -> None:
    before = await contents(seeded)
    removed = await remove_node(seeded, "n1")
    assert removed == {
        buckets.NEEDS.name: ["n1.bad", "n1.web.config.a"],
        buckets.APPLIED.name: ["n1.web"],
        buckets.COLLECT.name: ["n1.shell=3Azsh.web"],
    }
    assert await contents(seeded) == without(before, "n1")


async def test_a_node_named_a_dot_b_removes_only_its_escaped_prefix(seeded: Bus) -> None:
    before = await contents(seeded)
    removed = await remove_node(seeded, "a.b")
    assert sorted(key for keys in removed.values() for key in keys) == [
        "a=2Eb.c.web",
        "a=2Eb.web",
        "a=2Eb.web.config.x",
    ]
    after = await contents(seeded)
    assert after == without(before, "a=2Eb")
    assert "a.web.config.x" in after[buckets.NEEDS.name]


async def test_removing_a_node_with_no_keys_removes_nothing(seeded: Bus) -> None:
    before = await contents(seeded)
    assert await remove_node(seeded, "n3") == {}
    assert await contents(seeded) == before


async def remove_command(url: str, *args: str) -> tuple[int, str, str]:
    command = [sys.executable, "-m", "provisioner.commands.cli", "remove-node", *args, "--nats-url", url]
    result = await anyio.run_process(command, check=False, env=clean_environment(), stdin=subprocess.DEVNULL)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


async def test_the_command_removes_with_yes_and_says_what_it_removed(seeded: Bus, server: LocalNats) -> None:
    code, out, _ = await remove_command(server.url, "n2", "--yes")
    assert code == 0
    assert out.splitlines() == [
        f"removed {buckets.NEEDS.name} n2.web.config.a",
        f"removed {buckets.APPLIED.name} n2.web",
        f"removed {buckets.COLLECT.name} n2.shell=3Azsh.web",
        "removed 3 keys of node 'n2'",
    ]
    assert all(not key.startswith("n2.") for items in (await contents(seeded)).values() for key in items)


async def test_the_command_says_what_it_removed_as_json(seeded: Bus, server: LocalNats) -> None:
    code, out, err = await remove_command(server.url, "n2", "--yes", "--json")
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "node": "n2",
        "removed": {
            buckets.NEEDS.name: ["n2.web.config.a"],
            buckets.APPLIED.name: ["n2.web"],
            buckets.COLLECT.name: ["n2.shell=3Azsh.web"],
        },
        "account_deleted": None,
    }
    code, out, _ = await remove_command(server.url, "n2", "--yes", "--json")
    assert (code, json.loads(out)) == (0, {"node": "n2", "removed": {}, "account_deleted": None})


async def test_the_command_without_yes_off_a_terminal_removes_nothing(seeded: Bus, server: LocalNats) -> None:
    before = await contents(seeded)
    code, out, err = await remove_command(server.url, "n2")
    assert code == 2
    assert f"{buckets.APPLIED.name} n2.web" in out
    assert "--yes" in err
    assert await contents(seeded) == before


async def test_the_command_with_nothing_to_remove_exits_0(server: LocalNats, tmp_path: Path) -> None:
    code, out, _ = await remove_command(server.url, "n9", "--yes")
    assert (code, out.startswith("nothing to remove")) == (0, True)
