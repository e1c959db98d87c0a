"""Sites in the mesh file: where each node lives, read strictly; and what each site's leaf link is
permitted, derived from the catalogue and the nodes living there."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.commands.cli import main
from registry.access import (
    MeshFileError,
    MeshParties,
    Site,
    Topology,
    issue_grants,
    leaf_links,
    read_mesh_file,
)
from registry.contract import load_catalogue

HUB = '[hub]\nleafnodes = ["nats-leaf://hub.example.org:7422"]\n'


def read(tmp_path: Path, text: str) -> Topology:
    path = tmp_path / "mesh.toml"
    path.write_text(text, encoding="utf-8")
    return read_mesh_file(path).topology()


def refusal(tmp_path: Path, text: str) -> str:
    path = tmp_path / "mesh.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(MeshFileError) as refused:
        read_mesh_file(path)
    return str(refused.value).removeprefix(f"mesh file {path}: ")


def test_each_site_holds_its_nodes_and_a_node_at_no_site_lives_at_the_hub(tmp_path: Path) -> None:
    topology = read(
        tmp_path,
        f'nodes = ["n1", "n2", "n3"]\n{HUB}[sites.home]\nnodes = ["n1", "n2"]\n[sites.office]\nnodes = ["n3"]\n',
    )
    assert topology == Topology(
        hub_domain="hub",
        hub_urls=("nats-leaf://hub.example.org:7422",),
        hub_listen="0.0.0.0:7422",
        sites=(Site("home", ("n1", "n2")), Site("office", ("n3",))),
    )
    assert topology.site_of("n2") == Site("home", ("n1", "n2"))


def test_a_mesh_file_without_sites_has_every_node_at_the_hub(tmp_path: Path) -> None:
    topology = read(tmp_path, 'nodes = ["n1"]\n')
    assert topology.sites == () and topology.site_of("n1") is None


def test_the_hub_takes_its_own_domain_and_listening_address(tmp_path: Path) -> None:
    text = '[hub]\ndomain = "core"\nlisten = "10.0.0.1:7000"\nleafnodes = ["tls://hub:7000", "tls://hub2:7000"]\n'
    topology = read(tmp_path, text)
    assert (topology.hub_domain, topology.hub_listen, topology.hub_urls) == (
        "core",
        "10.0.0.1:7000",
        ("tls://hub:7000", "tls://hub2:7000"),
    )


@pytest.mark.parametrize(
    ("text", "said"),
    [
        pytest.param(
            f'nodes = ["n1"]\n{HUB}[sites.a]\nnodes = ["n1"]\n[sites.b]\nnodes = ["n1"]\n',
            "sites.b.nodes[0]: 'n1' lives at site 'a' already; a node lives at one site",
            id="a node at two sites",
        ),
        pytest.param(
            f'nodes = ["n1"]\n{HUB}[sites.a]\n',
            "sites.a.nodes: a site holds at least one node (a node at no site lives at the hub)",
            id="a site with no node",
        ),
        pytest.param(
            f'nodes = ["n1"]\n{HUB}[sites.a]\nnodes = ["n9"]\n',
            "sites.a.nodes[0]: 'n9' is not one of the nodes",
            id="a node that is not one of the nodes",
        ),
        pytest.param(
            f'nodes = ["n1"]\n{HUB}[sites."home.eu"]\nnodes = ["n1"]\n',
            'sites."home.eu": a site\'s name (its JetStream domain: letters, digits, - and _, at most 64): '
            "String should match pattern",
            id="a site name no JetStream domain can take",
        ),
        pytest.param(
            f'nodes = ["n1"]\n{HUB}[sites.{"s" * 65}]\nnodes = ["n1"]\n',
            f"sites.{'s' * 65}: a site's name (its JetStream domain: letters, digits, - and _, at most 64): "
            "String should have at most 64 characters",
            id="a site name too long",
        ),
        pytest.param(
            f'nodes = ["n1"]\n{HUB}[sites.hub]\nnodes = ["n1"]\n',
            "sites.hub: the hub's domain; a site's name is its own JetStream domain",
            id="a site named as the hub's domain",
        ),
        pytest.param(
            'nodes = ["n1"]\n[sites.a]\nnodes = ["n1"]\n',
            "hub.leafnodes: sites are named, so the URLs they dial the hub on are needed",
            id="sites without the hub's URLs",
        ),
        pytest.param(
            '[hub]\nleafnodes = ["http://hub:7422"]\n',
            "hub.leafnodes[0]: a leaf URL's scheme is one of nats-leaf://, nats://, tls://, ws://, wss://",
            id="a URL no leaf node dials",
        ),
        pytest.param(
            '[hub]\nleafnodes = ["nats-leaf://site:secret@hub:7422"]\n',
            "hub.leafnodes[0]: a leaf URL holds no credentials: the link authenticates with its own nkey",
            id="a password in a URL",
        ),
        pytest.param('[hub]\nlisten = "7422"\n', "hub.listen: is HOST:PORT", id="a port without its host"),
        pytest.param(
            '[hub]\ndomain = "a.b"\n', "hub.domain: String should match pattern", id="a hub domain with a dot"
        ),
        pytest.param(
            '[sites.a]\nnode = ["n1"]\n', "sites.a.node: unknown key; known: nodes", id="an unknown key of a site"
        ),
        pytest.param('[hub]\nurl = "x"\n', "hub.url: unknown key; known: domain, leafnodes, listen", id="of the hub"),
    ],
)
def test_a_mistake_in_the_sites_is_refused_naming_the_key_and_why(tmp_path: Path, text: str, said: str) -> None:
    assert refusal(tmp_path, text).startswith(said)


def links_of(tmp_path: Path, site: Site, *, machines: tuple[str, ...] = ()) -> tuple[set[str], set[str], set[str]]:
    """What site `site`'s data link may publish and receive, and what its vault link may publish,
    in a mesh of n1, n2 and n3 with provider postgres running on `machines`."""
    parties = MeshParties(nodes=("n1", "n2", "n3"), providers=("postgres",), machines={"postgres": machines})
    grants = issue_grants(tmp_path / "out", parties, keys=tmp_path / "keys")
    data, vault = leaf_links(
        site, hub_domain="hub", grants=grants, domains=load_catalogue(None), providers=["postgres"]
    )
    return {p.subject for p in data.publish}, {p.subject for p in data.subscribe}, {p.subject for p in vault.publish}


def test_a_site_copies_only_its_own_nodes_keys_of_a_node_keyed_bucket(tmp_path: Path) -> None:
    publish, subscribe, _ = links_of(tmp_path, Site("home", ("n1", "n2")), machines=("n1",))
    bound = {s for s in publish if "KV_postgres_bound" in s and not s.startswith("$JS.FC.")}
    assert bound == {  # the hub's durable consumer of each node's keys, reset by the site's copy
        "$JS.hub.API.CONSUMER.RESET.KV_postgres_bound.site-home-n1",
        "$JS.hub.API.CONSUMER.RESET.KV_postgres_bound.site-home-n2",
    }
    assert {s for s in subscribe if "KV_postgres_bound" in s} == {
        "$JS.S.home.KV_postgres_bound.n1",
        "$JS.S.home.KV_postgres_bound.n2",
    }
    assert "$JS.hub.API.CONSUMER.RESET.KV_mesh-provisioner_registry.site-home" in publish  # mesh-wide: whole
    assert "$JS.M.home.KV_mesh-provisioner_registry" in subscribe
    hub_api = [s.removeprefix("$JS.hub.API.") for s in publish if s.startswith("$JS.hub.API.")]
    assert all(s.startswith(("CONSUMER.RESET.", "$KV.")) for s in hub_api)  # no create, no other API
    assert not any("*" in s or ">" in s for s in hub_api if s.startswith("CONSUMER."))
    assert not {"$JS.M.>", "$JS.S.>"} & subscribe  # no other site's deliveries
    flow_control = {s for s in publish if s.startswith("$JS.FC.")}  # acknowledges: its own consumers' alone
    assert "$JS.FC.KV_postgres_bound.site-home-n1.*" in flow_control and "$JS.FC.>" not in flow_control
    assert all(".site-home" in s for s in flow_control)
    own = (".n1.>", ".n2.>", ".node.n1", ".node.n2", ".claim.*.n1", ".claim.*.n2")  # a key of the site's nodes
    assert all(s.endswith(own) for s in hub_api if s.startswith("$KV."))
    assert not any(s.startswith(("$KV.", "$JS.API.")) for s in publish)


def test_a_site_writes_its_own_nodes_keys_at_the_hub_and_nothing_else(tmp_path: Path) -> None:
    publish, subscribe, _ = links_of(tmp_path, Site("home", ("n2",)))
    writes = {s for s in publish if ".$KV." in s and "CONSUMER" not in s}
    assert writes == {
        "$JS.hub.API.$KV.mesh-provisioner_needs.n2.>",
        "$JS.hub.API.$KV.mesh-provisioner_applied.n2.>",
        "$JS.hub.API.$KV.mesh-provisioner_collect.n2.>",
        "$JS.hub.API.$KV.mesh-provisioner_leases.node.n2",
        "$JS.hub.API.$KV.mesh-provisioner_fleet.claim.*.n2",
    }
    assert "$JS.hub.API.CONSUMER.RESET.KV_mesh-provisioner_needs.site-home" in publish  # its mirror: read there
    assert not any(s.startswith("$JS.home.API.") for s in subscribe)  # the hub copies nothing from the site


def test_a_site_node_imports_its_writes_from_the_hubs_domain_onto_the_subjects_it_publishes(tmp_path: Path) -> None:
    mesh = tmp_path / "mesh.toml"
    mesh.write_text(f'nodes = ["n1"]\n{HUB}[sites.a]\nnodes = ["n1"]\n')
    out = tmp_path / "out"
    assert main(["grants", "--mesh", str(mesh), "--out", str(out)]) == 0
    site = (out / "sites" / "a.conf").read_text()
    at_the_hub = '{account: "MESH", subject: "$JS.hub.API.$KV.mesh-provisioner_needs.n1.>"}'
    assert f'{{service: {at_the_hub}, to: "$KV.mesh-provisioner_needs.n1.>"}}' in site
    assert '{service: "$JS.hub.API.$KV.mesh-provisioner_needs.n1.>", accounts: ["node-n1"]}' in site
    assert '{service: {account: "MESH", subject: "$KV.mesh-provisioner_needs.n1.>"}' not in site
    assert (
        '{service: {account: "MESH", subject: "$KV.mesh-provisioner_needs.n1.>"}' in (out / "accounts.conf").read_text()
    )


@pytest.mark.parametrize(
    ("nodes", "verbs"),
    [
        pytest.param(("n1",), {"mesh-vault.secret", "mesh-vault.consumers"}, id="a provider's machine at the site"),
        pytest.param(("n2",), {"mesh-vault.secret"}, id="no machine at the site: secrets alone"),
    ],
)
def test_the_vault_link_carries_the_verbs_the_sites_nodes_are_granted(
    tmp_path: Path, nodes: tuple[str, ...], verbs: set[str]
) -> None:
    _, _, vault = links_of(tmp_path, Site("home", nodes), machines=("n1",))
    assert vault == verbs


def test_the_command_refuses_a_mistake_in_the_sites_naming_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mesh = tmp_path / "mesh.toml"
    mesh.write_text(f'nodes = ["n1", "n2"]\n{HUB}[sites.a]\nnodes = ["n1"]\n[sites.b]\nnodes = ["n1", "n2"]\n')
    assert main(["grants", "--mesh", str(mesh), "--out", str(tmp_path / "out")]) == 2
    said = capsys.readouterr().err
    assert f"mesh file {mesh}: sites.b.nodes[0]: 'n1' lives at site 'a' already" in said
    assert not (tmp_path / "out").exists()  # refused before anything is written


def test_a_node_the_flags_add_lives_at_the_hub(tmp_path: Path) -> None:
    mesh = tmp_path / "mesh.toml"
    mesh.write_text(f'nodes = ["n1"]\n{HUB}[sites.a]\nnodes = ["n1"]\n')
    out = tmp_path / "out"
    assert main(["grants", "--mesh", str(mesh), "--out", str(out), "--node", "n2"]) == 0
    site = (out / "sites" / "a.conf").read_text()
    assert '"node-n1" {' in site and "node-n2" not in site
    assert '"node-n2" {' in (out / "sites" / "hub.conf").read_text()


def test_the_hubs_accounts_are_accounts_conf_with_the_link_users_added(tmp_path: Path) -> None:
    """hub.conf holds accounts.conf's accounts line for line, each site's link users besides, in
    the site's own account (`site-<site>`, two leaf connections); the data account and the vault's
    take no link."""
    mesh = tmp_path / "mesh.toml"
    mesh.write_text(f'nodes = ["n1", "n2"]\n{HUB}[sites.a]\nnodes = ["n1"]\n[sites.b]\nnodes = ["n2"]\n')
    out = tmp_path / "out"
    assert main(["grants", "--mesh", str(mesh), "--out", str(out)]) == 0
    accounts = (out / "accounts.conf").read_text().splitlines()
    hub = (out / "sites" / "hub.conf").read_text().splitlines()
    hub = hub[hub.index("accounts {") :]
    assert in_order(accounts[accounts.index("accounts {") :], hub)
    added = [line for line in hub if line not in accounts]
    assert sum('allowed_connection_types: ["LEAFNODE"]' in line for line in added) == 4  # data and vault, each site
    for site in ("a", "b"):
        block = hub[hub.index(f'  "site-{site}" {{') :]
        block = block[: block.index("  }")]
        assert sum("LEAFNODE" in line for line in block) == 2, site  # its two links, in its own account
        assert any("max_leafnodes: 2}" in line for line in block), site
    leafing = [line for line in accounts if "max_leafnodes" in line and "max_leafnodes: 0" not in line]
    assert len(leafing) == 2  # the sites' accounts, and no other


def in_order(wanted: list[str], lines: list[str]) -> bool:
    """Whether `wanted` are lines of `lines`, in the same order (others may stand between)."""
    found = iter(lines)
    return all(line in found for line in wanted)
