"""The operator's files are read bounded (`registry.contract.bounded_file`): a file past its bound is
refused by its size, and a FIFO, a device or a folder in a file's place is refused by what it is,
without blocking and without reading it. Each reader of such a file says so in its own error,
naming the file: the settings file, the domains file, the grants, the mesh file, `sites.json`, a
`nats` context, a seed. Before, each was read whole (`Path.read_text`), and a FIFO there blocked the
program before it said a word."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

import nkeys
import pytest

from provisioner.commands.cli import main as cli_main
from provisioner.seat.server import read_grants
from provisioner.seat.settings import ServerSettings
from registry.access import read_mesh_file, read_sites_file
from registry.access.credentials import read_seed
from registry.contract import load_catalogue, read_bounded, read_bounded_text
from registry.edge import NatsContexts, load_settings
from registry.errors import RegistryError

pytestmark = pytest.mark.timeout(20)  # a reader that blocks on a FIFO fails here instead of hanging


def test_a_file_of_its_bound_is_read_and_one_byte_more_is_refused_by_its_size(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"x" * 100)
    assert read_bounded(path, 100) == b"x" * 100
    with pytest.raises(OSError, match="larger than") as refused:
        read_bounded(path, 99)
    assert refused.value.errno == errno.EFBIG
    assert refused.value.strerror == "it is larger than the 99 bytes such a file may be"


def test_a_link_to_a_regular_file_is_followed(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("held")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    assert read_bounded_text(tmp_path / "link", 10) == "held"


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (os.mkfifo, "it is a FIFO, not a regular file"),
        (lambda path: path.symlink_to("/dev/zero"), "it is a character device, not a regular file"),
        (Path.mkdir, "it is a folder, not a regular file"),
    ],
    ids=["FIFO", "link to a device", "folder"],
)
def test_what_is_not_a_regular_file_is_refused_by_what_it_is(
    tmp_path: Path, make: Callable[[Path], object], said: str
) -> None:
    path = tmp_path / "file"
    make(path)
    with pytest.raises(OSError, match="not a regular file") as refused:
        read_bounded(path, 1 << 20)
    assert refused.value.strerror == said


def test_a_text_that_is_not_utf8_is_refused_saying_where(tmp_path: Path) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"ok\xff")
    with pytest.raises(OSError, match="not UTF-8") as refused:
        read_bounded_text(path, 10)
    assert refused.value.errno == errno.EILSEQ
    assert refused.value.strerror == "it is not UTF-8 text (byte 2)"


def _settings(path: Path) -> object:
    return load_settings(ServerSettings, {}, path, {})


def _nats_context(path: Path) -> object:
    return NatsContexts(path.parent.parent).read(path.stem)


def _seed(path: Path) -> object:
    return read_seed(path, nkeys.PREFIX_BYTE_USER)


READERS: dict[str, tuple[Callable[[Path], object], str]] = {
    "settings file": (_settings, "server.toml"),
    "domains file": (load_catalogue, "domains.toml"),
    "grants file": (read_grants, "grants.json"),
    "mesh file": (read_mesh_file, "mesh.toml"),
    "sites file": (read_sites_file, "sites.json"),
    "nats context": (_nats_context, "context/dev.json"),
}


@pytest.mark.parametrize("reader", READERS, ids=list(READERS))
def test_each_reader_of_an_operators_file_refuses_a_fifo_naming_the_file(tmp_path: Path, reader: str) -> None:
    read, name = READERS[reader]
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    with pytest.raises(RegistryError) as refused:
        read(path)
    assert str(path) in str(refused.value) and "it is a FIFO, not a regular file" in str(refused.value)


@pytest.mark.parametrize("reader", READERS, ids=list(READERS))
def test_each_reader_of_an_operators_file_refuses_one_far_past_its_bound(tmp_path: Path, reader: str) -> None:
    read, name = READERS[reader]
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as file:  # sparse: 200 MiB of nothing, past every bound, takes no room
        file.truncate(200 << 20)
    with pytest.raises(RegistryError) as refused:
        read(path)
    assert str(path) in str(refused.value) and "such a file may be" in str(refused.value)


def test_a_seed_file_is_read_bounded_and_checked(tmp_path: Path) -> None:
    path = tmp_path / "n1.nk"
    os.mkfifo(path)
    with pytest.raises(OSError, match="FIFO"):
        _seed(path)
    path.unlink()
    path.write_bytes(bytes(nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_ACCOUNT)) + b"\n")
    with pytest.raises(RegistryError, match="an nkey seed of another kind"):
        _seed(path)
    path.write_bytes(b"S" * 2000)
    with pytest.raises(OSError, match="larger than the 1,024 bytes"):
        _seed(path)


@pytest.mark.parametrize(
    ("path", "make", "said"),
    [
        ("keys/node-n1.creds", os.mkfifo, "it is a FIFO, not a regular file"),
        ("out/jwt/operator.jwt", Path.mkdir, "it is a folder, not a regular file"),
        ("out/jwt/account-node-n1.jwt", os.mkfifo, "it is a FIFO, not a regular file"),
    ],
    ids=["creds", "operator JWT", "account JWT"],
)
def test_the_grants_command_refuses_a_file_of_its_own_it_cannot_read_back_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str, make: Callable[[Path], object], said: str
) -> None:
    """`grants --jwt` reads back what it wrote (JWTs, creds) to keep what is unchanged: a FIFO or a
    folder put in such a file's place is refused by what it is, without blocking."""
    argv = ["grants", "--jwt", "--out", str(tmp_path / "out"), "--keys", str(tmp_path / "keys"), "--node", "n1"]
    assert cli_main(argv) == 0
    (tmp_path / path).unlink()
    make(tmp_path / path)
    capsys.readouterr()
    assert cli_main(argv) == 2
    assert f"{tmp_path / path}: cannot be read: {said}" in capsys.readouterr().err
