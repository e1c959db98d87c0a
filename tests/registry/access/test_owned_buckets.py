"""A domain of the domains file never widens a bucket the seat or a provider owns: naming a
provider's `_bound` with a key not led by `<node>` let every node read every node's bound values,
and grants said nothing. Refused (exit 2), naming the bucket, before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from provisioner.commands.cli import main
from registry.access import read_grants_file

WIDENING = {
    "a provider's bucket read whole": (
        '[domains.config]\nmodule = "mesh-config"\nkinds = ["config"]\nbucket = "postgres_bound"\n'
        'key = "<module>.<node>.<name>"\n',
        "postgres_bound, a provider's bucket, would be read whole by every node",
    ),
    "a provider's bucket given a writer": (
        '[domains.config]\nmodule = "mesh-config"\nkinds = ["config"]\nbucket = "postgres_bound"\n'
        'key = "<node>.<name>"\n',
        "domain 'config' would give its writer postgres_bound",
    ),
    "the seat's fleet given a writer": (
        '[domains.config]\nmodule = "mesh-config"\nkinds = ["config"]\nbucket = "mesh-provisioner_fleet"\n'
        'key = "<name>"\n',
        "mesh-provisioner_fleet, the seat's bucket",
    ),
}


@pytest.mark.parametrize("jwt", [False, True], ids=["static", "jwt"])
@pytest.mark.parametrize(("text", "said"), WIDENING.values(), ids=WIDENING.keys())
def test_a_domain_widening_an_owned_bucket_is_refused(
    tmp_path: Path, text: str, said: str, jwt: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    domains = tmp_path / "domains.toml"
    domains.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    argv = ["grants", "--out", str(out), "--node", "n1", "--node", "n2", "--provider", "postgres@n2"]
    assert main([*argv, "--domains-file", str(domains), *(["--jwt"] if jwt else [])]) == 2
    assert said in capsys.readouterr().err
    assert not (out / "accounts.conf").exists()


def test_the_built_in_bound_domain_is_still_read_by_each_node_under_its_own_name(tmp_path: Path) -> None:
    assert main(["grants", "--out", str(tmp_path), "--node", "n1", "--provider", "postgres@n1"]) == 0
    node = next(g for g in read_grants_file(tmp_path / "grants.json").parties if g.party.label == "node-n1")
    bound = [item.subject for item in node.imports if "postgres_bound" in item.subject]
    assert bound == ["$JS.API.DIRECT.GET.KV_postgres_bound.$KV.postgres_bound.n1.>", "$KVR.postgres_bound.n1.>"]
