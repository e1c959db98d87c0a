"""The mesh file: the parties described once, read strictly; each mistake named by file, key and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from registry.access import Kind, MeshFile, MeshFileError, MeshParties, combined, issue_grants, read_mesh_file
from tests.helpers import DEPLOY


def written(tmp_path: Path, text: str | bytes) -> Path:
    path = tmp_path / "mesh.toml"
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def refusal(tmp_path: Path, text: str | bytes) -> str:
    path = written(tmp_path, text)
    with pytest.raises(MeshFileError) as refused:
        read_mesh_file(path)
    assert str(refused.value).startswith(f"mesh file {path}: "), refused.value
    return str(refused.value).removeprefix(f"mesh file {path}: ")


def test_the_deploy_example_names_the_mesh_of_deploy_mesh() -> None:
    mesh = read_mesh_file(DEPLOY / "mesh.toml")
    assert mesh.parties() == MeshParties(nodes=("n1", "n2"), providers=("postgres",), operators=("ops",))
    assert mesh.domains_file is None


def test_a_full_file_names_every_party_and_the_machines_of_each_provider(tmp_path: Path) -> None:
    mesh = read_mesh_file(
        written(
            tmp_path,
            'version = 1\nnodes = ["n1", "web.eu"]\noperators = ["ops"]\n'
            '[providers.postgres]\nmachines = ["web.eu"]\n[providers.redis]\n',
        )
    )
    assert mesh.parties() == MeshParties(
        nodes=("n1", "web.eu"), providers=("postgres", "redis"), operators=("ops",), machines={"postgres": ("web.eu",)}
    )


@pytest.mark.parametrize(
    ("line", "writers", "parties"),
    [
        pytest.param("", None, ["writer-config", "writer-placement"], id="left out: every writing domain"),
        pytest.param('writers = ["config"]', ("config",), ["writer-config"], id="named: those alone"),
        pytest.param("writers = []", (), [], id="none"),
    ],
)
def test_the_writers_are_the_domains_named_else_every_one(
    tmp_path: Path, line: str, writers: tuple[str, ...] | None, parties: list[str]
) -> None:
    mesh = read_mesh_file(written(tmp_path, f'nodes = ["n1"]\n{line}\n'))
    assert mesh.parties().writers == writers
    grants = issue_grants(tmp_path / "out", mesh.parties())
    assert [g.party.label for g in grants.parties if g.party.kind == Kind.WRITER] == parties


def test_an_empty_file_is_an_empty_mesh(tmp_path: Path) -> None:
    assert read_mesh_file(written(tmp_path, "")) == MeshFile()


def test_the_domains_file_is_found_beside_the_mesh_file(tmp_path: Path) -> None:
    mesh = read_mesh_file(written(tmp_path, 'domains_file = "domains.toml"\n'))
    assert mesh.domains_file == tmp_path / "domains.toml"
    absolute = read_mesh_file(written(tmp_path, 'domains_file = "/etc/mesh/domains.toml"\n'))
    assert absolute.domains_file == Path("/etc/mesh/domains.toml")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param('node = ["n1"]\n', "node: unknown key; known: version, nodes, providers", id="an unknown key"),
        pytest.param(
            '[providers.postgres]\nmachine = ["n1"]\n',
            "providers.postgres.machine: unknown key; known: machines",
            id="an unknown key of a provider",
        ),
        pytest.param('nodes = ["n1", "n2", "n1"]\n', "nodes: 'n1' is listed twice", id="a node listed twice"),
        pytest.param('writers = ["config", "config"]\n', "writers: 'config' is listed twice", id="a writer twice"),
        pytest.param(
            'nodes = ["n1"]\n[providers.postgres]\nmachines = ["n1", "n9"]\n',
            "providers.postgres.machines[1]: 'n9' is not one of the nodes",
            id="a machine that is not a node",
        ),
        pytest.param('nodes = "n1"\n', "nodes: Input should be a valid tuple", id="a name where a list goes"),
        pytest.param('nodes = [""]\n', "nodes[0]: String should have at least 1 character", id="an empty name"),
        pytest.param(
            f'nodes = ["{"x" * 1025}"]\n', "nodes[0]: a name is at most 1024 bytes (UTF-8)", id="a name too long"
        ),
        pytest.param(
            "nodes = [" + ", ".join(f'"n{i}"' for i in range(10_001)) + "]\n",
            "nodes: Tuple should have at most 10000 items",
            id="too many nodes",
        ),
        pytest.param(
            '[providers."my db"]\n',
            'providers."my db": a provider\'s name (it names its bucket <name>_bound): String should match',
            id="a provider name no bucket can take",
        ),
        pytest.param(
            "[limits.node]\nconnections = 1\nsubscriptions = 5\n",
            "limits.node.connections: 1 is below 2, the least for a node's client (its watch, and `status` beside "
            "it); limits.node.subscriptions: 5 is below 20",
            id="a limit below what the party's program needs",
        ),
        pytest.param(
            "[limits.vault]\npayload = 4096\n",
            f"limits.vault.payload: 4096 is below {64 * 1024 + 4096}, the least for the vault",
            id="a payload smaller than a value of the buckets",
        ),
        pytest.param(
            "[limits.node]\npayload = 134217728\n",
            "limits.node.payload: Input should be less than or equal to 67108864",
            id="a limit past what nats-server takes",
        ),
        pytest.param(
            "[limits.node]\nconnections = 0\n",
            "limits.node.connections: Input should be greater than or equal to 1",
            id="no connection at all",
        ),
        pytest.param(
            '[limits.node]\nconnections = "32"\n', "limits.node.connections: Input should be a valid integer", id="text"
        ),
        pytest.param(
            "[limits.seat]\nconnections = 32\n",
            "limits.seat: unknown key; known: node, provider, operator, writer, vault",
            id="the seat, which nothing limits",
        ),
        pytest.param(
            "[limits.node]\nleafnodes = 1\n",
            "limits.node.leafnodes: unknown key; known: connections, subscriptions, payload",
            id="a limit no party may change",
        ),
        pytest.param("version = 2\n", "version: Input should be 1", id="a version this one does not read"),
        pytest.param("nodes = [\n", "is not valid TOML: ", id="not TOML"),
        pytest.param(b'nodes = ["\xff"]\n', "cannot be read: it is not UTF-8 text", id="not UTF-8"),
        pytest.param(
            "# " + "x" * (1 << 20) + "\n",
            "cannot be read: it is larger than the 1,048,576 bytes",
            id="a file too large",
        ),
    ],
)
def test_a_mistake_is_refused_naming_the_key_and_why(tmp_path: Path, text: str | bytes, said: str) -> None:
    assert refusal(tmp_path, text).startswith(said)


def test_every_mistake_is_said_at_once_up_to_five(tmp_path: Path) -> None:
    said = refusal(tmp_path, "\n".join(f"unknown{i} = 1" for i in range(7)) + "\n")
    assert said.count("unknown key") == 5 and said.endswith("; and 2 more")


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(MeshFileError, match=r"mesh file .*absent\.toml: cannot be read: No such file"):
        read_mesh_file(tmp_path / "absent.toml")


def test_flags_add_to_the_file_each_party_once_the_files_first() -> None:
    described = MeshParties(
        nodes=("n1", "n2"), providers=("postgres",), machines={"postgres": ("n2",)}, writers=("config",)
    )
    flags = MeshParties.named(["n3", "n1"], ["postgres@n3", "redis"], ["ops"], writers=["placement", "config"])
    assert combined(described, flags) == MeshParties(
        nodes=["n1", "n2", "n3"],
        providers=["postgres", "redis"],
        operators=["ops"],
        machines={"postgres": ["n2", "n3"]},
        writers=["config", "placement"],
    )


@pytest.mark.parametrize(
    ("in_file", "in_flags", "writers"),
    [
        pytest.param(None, None, None, id="named by neither: every writing domain"),
        pytest.param(None, ["config"], ["config"], id="named by the flags alone"),
        pytest.param([], None, [], id="none, said by the file"),
        pytest.param([], ["config"], ["config"], id="none in the file, one by the flags"),
    ],
)
def test_the_writers_are_those_either_names(
    in_file: list[str] | None, in_flags: list[str] | None, writers: list[str] | None
) -> None:
    parties = combined(MeshParties(nodes=(), writers=in_file), MeshParties.named([], [], [], writers=in_flags))
    assert parties.writers == writers
