"""Every writer a party: each domain of the catalogue that writes a bucket of its own (the config
domain its values, the controller its assignments mirror) gets an account importing that bucket
alone, named after the domain, in both configurations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from registry.access import (
    Grants,
    Kind,
    MeshParties,
    Party,
    account_jwt_path,
    claims_of,
    creds_path,
    derive_grants,
    issue_grants,
    load_party_map,
    seed_path,
)
from registry.access.grants import Import
from registry.contract import load_catalogue
from registry.errors import SettingsError

CONFIG = Party(kind=Kind.WRITER, name="config")
PLACEMENT = Party(kind=Kind.WRITER, name="placement")


def issue(parties: MeshParties, domains_file: Path | None = None) -> Grants:
    domains = load_catalogue(domains_file)
    return derive_grants(
        domains,
        nodes=parties.nodes,
        providers=parties.providers,
        operators=parties.operators,
        writers=parties.writers,
        user_keys={p: f"U{p.label}" for p in parties.all(domains)},
    )


def writers_of(grants: Grants) -> dict[str, list[Import]]:
    return {g.party.label: list(g.imports) for g in grants.parties if g.party.kind == Kind.WRITER}


def owning(bucket: str) -> list[Import]:
    """What a writer of `bucket` imports: its keys put, deleted and read, one by one or in a batch."""
    return [
        Import(kind="service", subject=f"$KV.{bucket}.>", why=f"put and delete in its own {bucket}"),
        Import(kind="service", subject=f"$JS.API.DIRECT.GET.KV_{bucket}.$KV.{bucket}.>", why=f"get its own {bucket}"),
        Import(
            kind="service",
            subject=f"$JS.API.DIRECT.GET.KV_{bucket}",
            stream_reply=True,
            why=f"read all of its own {bucket} in one batch",
        ),
    ]


def test_each_writing_domain_of_the_catalogue_imports_its_own_bucket_and_nothing_else() -> None:
    grants = issue(MeshParties(nodes=["n1"], providers=["postgres"], operators=["ops"]))
    assert writers_of(grants) == {
        "writer-config": owning("mesh-config_values"),
        "writer-placement": owning("mesh-controller_assignments"),
    }
    assert all(g.account == g.party.label for g in grants.parties if g.party.kind == Kind.WRITER)


@pytest.mark.parametrize(
    ("writers", "labels"),
    [
        (["placement"], ["writer-placement"]),
        ([], []),
        (["config", "placement", "config"], ["writer-config", "writer-placement"]),
    ],
    ids=["the controller alone", "none", "a name given twice counts once"],
)
def test_the_writers_named_are_the_only_writer_parties(writers: list[str], labels: list[str]) -> None:
    assert list(writers_of(issue(MeshParties(nodes=["n1"], writers=writers)))) == labels


@pytest.mark.parametrize(
    "writer",
    ["vault-secrets", "bound", "collected", "nope"],
    ids=["a verb", "a provider's bucket", "the collect bucket", "unknown"],
)
def test_a_writer_that_writes_no_bucket_of_its_own_is_a_settings_error(writer: str) -> None:
    with pytest.raises(SettingsError, match=f"{writer!r} is no domain of the catalogue writing a bucket") as raised:
        issue(MeshParties(nodes=["n1"], writers=[writer]))
    assert "(those are: 'config', 'placement')" in str(raised.value)


def test_the_domains_file_decides_which_domains_write_and_where(tmp_path: Path) -> None:
    domains = tmp_path / "domains.toml"
    domains.write_text(
        "[domains.config]\nmodule = 'mesh-config'\nkinds = ['config']\nbucket = 'site-config'\nkey = '<name>'\n"
        "[domains.flags]\nmodule = 'mesh-flags'\nkinds = ['flag']\nbucket = 'mesh-flags_values'\nkey = '<name>'\n"
        "[domains.placement]\nmodule = 'mesh-controller'\nkinds = []\n"
        "bucket = 'mesh-controller_assignments'\nkey = '<node>.<module>'\n"
    )
    grants = issue(MeshParties(nodes=["n1"]), domains)
    assert writers_of(grants) == {"writer-config": owning("site-config"), "writer-flags": owning("mesh-flags_values")}


def test_a_writer_follows_the_party_pattern_in_files_and_in_both_configurations(tmp_path: Path) -> None:
    grants = issue_grants(tmp_path, MeshParties(nodes=["n1"], writers=["config"]), jwt=True)
    grant = next(g for g in grants.parties if g.party == CONFIG)
    assert seed_path(tmp_path, CONFIG).name == "writer-config.nk" and seed_path(tmp_path, CONFIG).exists()
    assert creds_path(tmp_path, CONFIG.label).exists() and (tmp_path / "account-writer-config.nk").exists()
    claims = claims_of(account_jwt_path(tmp_path, CONFIG.label).read_text().strip())
    assert [i["subject"] for i in claims["nats"]["imports"]] == [i.subject for i in grant.imports]
    assert '"writer-config" {' in (tmp_path / "accounts.conf").read_text()
    written = json.loads((tmp_path / "grants.json").read_text())
    assert {"kind": "writer", "name": "config"} in [p["party"] for p in written["parties"]]

    parties = load_party_map(tmp_path / "grants.json")
    for account in (CONFIG.label, grant.account_key):
        assert parties.who_asks({"Nats-Request-Info": json.dumps({"acc": account})}) == CONFIG
    assert not CONFIG.sees_the_mesh


def test_the_command_line_may_name_the_writers() -> None:
    assert MeshParties.named(["n1"], [], [], writers=["config"]).writers == ["config"]
    assert MeshParties.named(["n1"], [], []).writers is None
