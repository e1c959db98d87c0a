"""The `nats` CLI's context files as this project reads and writes them, and what the dev loop says
about its own."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from pydantic import SecretStr

from mesh_dev.loop import advertised, welcome
from registry.edge import DEV_CONTEXT, NatsContext, NatsContexts
from registry.errors import SettingsError


@pytest.mark.parametrize(
    ("environ", "folder"),
    [
        pytest.param({"XDG_CONFIG_HOME": "/x", "HOME": "/h"}, Path("/x/nats"), id="XDG_CONFIG_HOME first"),
        pytest.param({"HOME": "/h"}, Path("/h/.config/nats"), id="else ~/.config"),
        pytest.param({"XDG_CONFIG_HOME": "", "HOME": "/h"}, Path("/h/.config/nats"), id="an empty XDG_CONFIG_HOME"),
    ],
)
def test_the_folder_is_where_the_nats_cli_keeps_it(environ: dict[str, str], folder: Path) -> None:
    found = NatsContexts.of(environ)
    assert found is not None and found.folder == folder


def test_without_home_there_are_no_contexts() -> None:
    assert NatsContexts.of({}) is None


def test_a_written_context_is_read_back_by_the_nats_clis_names_and_readable_by_its_owner_only(tmp_path: Path) -> None:
    contexts = NatsContexts(tmp_path / "nats")
    written = NatsContext(url="nats://a:4222", user="ops", password=SecretStr("s3cret"), mesh_provisioner_dev_pid=7)
    path = contexts.write("lab", written)
    assert json.loads(path.read_text()) == {
        "url": "nats://a:4222",
        "user": "ops",
        "password": "s3cret",
        "mesh_provisioner_dev_pid": 7,
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert contexts.read("lab") == written
    assert [p.name for p in path.parent.iterdir()] == ["lab.json"]  # no partial file left beside it


def test_the_dev_loop_removes_its_own_context_and_leaves_a_later_ones(tmp_path: Path) -> None:
    contexts = NatsContexts(tmp_path / "nats")
    contexts.write(DEV_CONTEXT, NatsContext(url="nats://later:4222", mesh_provisioner_dev_pid=os.getpid() + 1))
    contexts.remove_own(DEV_CONTEXT, os.getpid())
    assert contexts.read(DEV_CONTEXT).url == "nats://later:4222"
    with advertised(contexts, "nats://mine:4222", tmp_path / "state"):
        assert (contexts.read(DEV_CONTEXT).url, contexts.dev()) == ("nats://mine:4222", contexts.read(DEV_CONTEXT))
    assert not contexts.path(DEV_CONTEXT).exists()


def test_the_welcome_says_how_the_tools_find_the_dev_bus(tmp_path: Path) -> None:
    contexts = NatsContexts(tmp_path / "nats")
    plain = welcome("nats://127.0.0.1:4321", tmp_path, contexts)
    (tmp_path / "nats").mkdir()
    (tmp_path / "nats" / "context.txt").write_text("prod\n")
    after_prod = welcome("nats://127.0.0.1:4321", tmp_path, contexts)
    assert f"through the nats context {DEV_CONTEXT} ({contexts.path(DEV_CONTEXT)})" in plain
    assert "  mesh-provisioner query needs --node node-1\n" in plain
    assert f"  mesh-provisioner query needs --node node-1 --context {DEV_CONTEXT}\n" in after_prod
    assert "  mesh-provisioner query needs --node node-1 --server nats://127.0.0.1:4321\n" in welcome(
        "nats://127.0.0.1:4321", tmp_path, None
    )


def test_a_context_file_that_is_a_device_or_past_its_bound_is_refused_unread(tmp_path: Path) -> None:
    contexts = NatsContexts(tmp_path / "nats")
    contexts.path("endless").parent.mkdir(parents=True)
    contexts.path("endless").symlink_to("/dev/zero")
    (contexts.folder / "context.txt").symlink_to("/dev/zero")
    with pytest.raises(SettingsError, match="it is a character device, not a regular file"):
        contexts.read("endless")
    with pytest.raises(SettingsError, match="it is a character device, not a regular file"):
        contexts.selected()
    contexts.path("large").write_text(" " * (64 * 1024 + 1))
    with pytest.raises(SettingsError, match="larger than the 65,536 bytes"):
        contexts.read("large")
