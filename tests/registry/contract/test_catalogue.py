"""The domain catalogue: the built-in answers, an operator's domains file, and compilation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from registry.contract import (
    BUILT_IN,
    KINDS,
    BucketAnswer,
    Domain,
    VerbAnswer,
    buckets,
    compile_registry,
    load_catalogue,
    registry_values,
)
from registry.errors import CatalogueError

DEPLOY_DOMAINS = Path(__file__).resolve().parents[3] / "deploy" / "domains.toml"
CONTRACT_KINDS = {
    "config",
    "secret",
    "bound",
    "consumers",
    "collected",
    "shell",
    "environment",
    "contribution",
    "dir",
    "access",
    "port",
    "seat",
    "machine",
}


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "domains.toml"
    path.write_text(text)
    return path


def test_the_built_in_catalogue_answers_exactly_the_contracts_kinds() -> None:
    registry = compile_registry(load_catalogue())
    assert set(registry) == CONTRACT_KINDS
    assert set(KINDS) == CONTRACT_KINDS
    assert all(entry.kind == kind and entry.module for kind, entry in registry.items())


@pytest.mark.parametrize("kind", ["secret", "consumers"])
def test_secrets_and_consumers_are_asked_of_a_verb_never_a_bucket(kind: str) -> None:
    entry = compile_registry(load_catalogue())[kind]
    assert isinstance(entry.answer, VerbAnswer)
    assert entry.module == "mesh-vault"
    assert "bucket" not in json.loads(registry_values(load_catalogue())[kind])["answer"]


@pytest.mark.parametrize(
    ("kinds", "module", "bucket", "key", "read"),
    [
        pytest.param(["config"], "mesh-config", "mesh-config_values", "<name>", "value", id="config from its bucket"),
        pytest.param(
            ["bound"],
            "<provider>",
            "<provider>_bound",
            "<node>.<module>.<provision>[.<local>]",
            "value",
            id="bound from the provider's own bucket",
        ),
        pytest.param(
            ["collected", "shell", "environment", "contribution"],
            buckets.PREFIX,
            buckets.COLLECT.name,
            "<node>.<collection>.<contributor>",
            "items",
            id="collections from the collect bucket",
        ),
        pytest.param(
            ["dir", "access", "port", "seat", "machine"],
            "mesh-controller",
            "mesh-controller_assignments",
            "<node>.<module>",
            "plan",
            id="placement from the controller's assignments",
        ),
    ],
)
def test_bucket_kinds_name_their_module_bucket_and_key_shape(
    kinds: list[str], module: str, bucket: str, key: str, read: str
) -> None:
    registry = compile_registry(load_catalogue())
    for kind in kinds:
        answer = registry[kind].answer
        assert isinstance(answer, BucketAnswer)
        assert (registry[kind].module, answer.bucket, answer.key, answer.read) == (module, bucket, key, read)


def test_shell_environment_and_contribution_read_the_collection_of_the_same_name() -> None:
    registry = compile_registry(load_catalogue())
    for kind in ("shell", "environment", "contribution"):
        answer = registry[kind].answer
        assert isinstance(answer, BucketAnswer)
        assert answer.parts == {"collection": "<kind>:<name>"}
    collected = registry["collected"].answer
    assert isinstance(collected, BucketAnswer)
    assert collected.name == "<collection>"


def test_a_file_adds_overrides_and_removes_domains(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        """
        [domains.pki]
        module = "mesh-pki"
        kinds = ["cert"]
        verb = "mesh-pki.cert"

        [domains.config]
        module = "other-config"
        kinds = ["config"]
        bucket = "other_values"
        key = "<module>.<name>"

        [domains.placement]
        module = "mesh-controller"
        kinds = []
        bucket = "mesh-controller_assignments"
        key = "<node>.<module>"
        """,
    )
    registry = compile_registry(load_catalogue(path))
    assert set(registry) == CONTRACT_KINDS - {"dir", "access", "port", "seat", "machine"} | {"cert"}
    assert registry["cert"].answer == VerbAnswer(subject="mesh-pki.cert")
    assert registry["config"].module == "other-config"
    assert registry["config"].answer == BucketAnswer(bucket="other_values", key="<module>.<name>")
    assert registry["secret"] == compile_registry(BUILT_IN)["secret"]


def test_an_overriding_domain_replaces_the_built_in_one_whole(tmp_path: Path) -> None:
    path = _write(tmp_path, '[domains.vault-secrets]\nmodule = "my-vault"\nkinds = ["secret"]\nverb = "my-vault.get"\n')
    entry = compile_registry(load_catalogue(path))["secret"]
    assert (entry.module, entry.answer) == ("my-vault", VerbAnswer(subject="my-vault.get"))


def test_the_example_domains_file_of_deploy_loads() -> None:
    registry = compile_registry(load_catalogue(DEPLOY_DOMAINS))
    assert set(registry) >= CONTRACT_KINDS


def test_the_commented_examples_of_deploy_domains_load_too(tmp_path: Path) -> None:
    text = re.sub(r"(?m)^# (\[domains\.|\[collections\]|[a-z]+ = )", r"\1", DEPLOY_DOMAINS.read_text())
    assert len(re.findall(r"(?m)^\[domains\.", text)) == 4
    registry = compile_registry(load_catalogue(_write(tmp_path, text)))
    assert "consumers" not in registry
    assert "db" in registry
    collected = registry["collected"].answer
    assert isinstance(collected, BucketAnswer) and collected.shared == ("ssh-known-hosts",)


def test_a_shared_collection_is_shared_by_every_domain_listing_collections(tmp_path: Path) -> None:
    registry = compile_registry(load_catalogue(_write(tmp_path, '[collections]\nshared = ["keys", "shell:zsh:x"]\n')))
    listing = {kind: entry.answer for kind, entry in registry.items() if getattr(entry.answer, "read", "") == "items"}
    assert set(listing) == {"collected", "shell", "environment", "contribution"}
    for answer in listing.values():
        assert isinstance(answer, BucketAnswer)
        assert answer.shared == ("keys", "shell:zsh:x")
        assert answer.shares("keys") and not answer.shares("other")
    assert (
        b"shared" in registry_values(load_catalogue(_write(tmp_path, '[collections]\nshared = ["k"]\n')))["collected"]
    )


def test_an_answer_sharing_nothing_is_the_same_bytes_as_before_sharing_existed() -> None:
    values = registry_values(load_catalogue())
    assert all(b"shared" not in value for value in values.values())


BAD_FILES = [
    pytest.param("[domains.pki\n", None, None, "is not valid TOML", id="bad TOML"),
    pytest.param('[domain.pki]\nmodule = "x"\n', None, None, "unknown top-level table 'domain'", id="a misspelt table"),
    pytest.param("domains = 3\n", None, None, "must be a table", id="domains that is not a table"),
    pytest.param(
        '[domains.pki]\nmodule = "m"\nkinds = ["cert"]\nverb = "v"\ncolour = "red"\n',
        "pki",
        "colour",
        "Extra inputs are not permitted",
        id="an unknown field",
    ),
    pytest.param('[domains.pki]\nmodule = "m"\nverb = "v"\n', "pki", "kinds", "Field required", id="no kinds"),
    pytest.param(
        '[domains.pki]\nmodule = "m"\nkinds = "cert"\nverb = "v"\n',
        "pki",
        "kinds",
        "valid tuple",
        id="kinds that is not a list",
    ),
    pytest.param(
        '[domains.pki]\nmodule = "m"\nkinds = ["cert"]\nverb = "v"\nbucket = "b"\nkey = "<name>"\n',
        "pki",
        "verb",
        "give exactly one of 'verb'",
        id="both verb and bucket",
    ),
    pytest.param(
        '[domains.pki]\nmodule = "m"\nkinds = ["cert"]\n',
        "pki",
        "bucket",
        "give exactly one of 'verb'",
        id="neither verb nor bucket",
    ),
    pytest.param(
        '[domains.pki]\nmodule = "m"\nkinds = ["cert"]\nbucket = "b"\n',
        "pki",
        "key",
        "needs 'key'",
        id="a bucket without its key",
    ),
    pytest.param(
        '[domains.pki]\nmodule = "m"\nkinds = ["cert"]\nverb = "v"\nkey = "<name>"\n',
        "pki",
        "key",
        "a verb answer takes no 'key'",
        id="a verb with a key",
    ),
    pytest.param(
        '[domains.pki]\nmodule = "m"\nkinds = ["cert"]\nbucket = "<owner>_certs"\nkey = "<name>"\n',
        "pki",
        "bucket",
        "unknown field <owner>",
        id="an unknown template field in the bucket",
    ),
    pytest.param(
        '[domains.pki]\nmodule = "m"\nkinds = ["cert"]\nbucket = "b"\nkey = "<node>.<colour>"\n',
        "pki",
        "key",
        "unknown field <colour>",
        id="an unknown template field in the key",
    ),
    pytest.param(
        '[domains.pki]\nmodule = "<team>"\nkinds = ["cert"]\nverb = "v"\n',
        "pki",
        "module",
        "unknown field <team>",
        id="an unknown template field in the module",
    ),
    pytest.param(
        '[domains.pki]\nmodule = "m"\nkinds = ["cert"]\nbucket = "b"\nkey = "<name>"\nparts = { a = "<b>" }\n',
        "pki",
        "parts.a",
        "unknown field <b>",
        id="an unknown template field in a part",
    ),
    pytest.param(
        '[domains.pki]\nmodule = "m"\nkinds = ["cert"]\nbucket = "b"\nkey = "<node>..<name>"\n',
        "pki",
        "key",
        "an empty token",
        id="a key shape that does not read",
    ),
    pytest.param(
        '[domains.pki]\nmodule = "m"\nkinds = ["cert"]\nverb = "v"\nname = "oops"\n',
        "pki",
        "name",
        "expected <field>s joined by ':'",
        id="a name pattern that does not read",
    ),
    pytest.param(
        '[domains.pki]\nmodule = "m"\nkinds = ["cert", "secret"]\nverb = "v"\n',
        "pki",
        "kinds",
        "kind 'secret' is answered by 'vault-secrets' too",
        id="a kind answered twice",
    ),
    pytest.param('[collections]\nshared = "keys"\n', None, "collections.shared", "valid tuple", id="shared not a list"),
    pytest.param('[collections]\nshared = [""]\n', None, "collections.shared.0", "at least 1", id="an empty name"),
    pytest.param('[collections]\nshare = ["k"]\n', None, "collections.share", "Extra inputs", id="a misspelt field"),
    pytest.param(
        '[domains.pki]\nmodule = "m"\nkinds = ["cert"]\nbucket = "b"\nkey = "<name>"\nshared = ["k"]\n',
        "pki",
        "shared",
        "only collections are shared",
        id="a shared bucket that is no collection",
    ),
    pytest.param(
        '[domains.config]\nmodule = "m"\nkinds = ["config", "secret"]\nverb = "v"\n',
        "config",
        "kinds",
        "kind 'secret' is answered by",
        id="a kind answered twice is blamed on the file",
    ),
]


@pytest.mark.parametrize(("text", "domain", "field", "reason"), BAD_FILES)
def test_a_bad_domains_file_names_file_domain_and_field(
    tmp_path: Path, text: str, domain: str | None, field: str | None, reason: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(CatalogueError, match=re.escape(reason)) as caught:
        load_catalogue(path)
    assert (caught.value.source, caught.value.domain, caught.value.field) == (str(path), domain, field)
    assert str(caught.value).startswith(str(path))


def test_a_missing_domains_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(CatalogueError, match="cannot be read") as caught:
        load_catalogue(tmp_path / "absent.toml")
    assert caught.value.source == str(tmp_path / "absent.toml")


def test_compiling_twice_gives_the_same_bytes() -> None:
    assert registry_values(load_catalogue()) == registry_values(load_catalogue())


@given(st.permutations(list(BUILT_IN.items())))
def test_compiled_bytes_do_not_depend_on_dict_order(domains: list[tuple[str, Domain]]) -> None:
    assert registry_values(dict(domains)) == registry_values(BUILT_IN)


def test_registry_values_are_compact_json_with_sorted_keys() -> None:
    for value in registry_values(load_catalogue()).values():
        document = json.loads(value)
        assert value == json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def test_parts_in_any_order_compile_to_the_same_bytes(tmp_path: Path) -> None:
    head = '[domains.x]\nmodule = "m"\nkinds = ["x"]\nbucket = "b"\nkey = "<a>.<b>"\n'
    one = load_catalogue(_write(tmp_path, head + 'parts = { a = "<kind>", b = "<name>" }\n'))
    two = load_catalogue(_write(tmp_path, head + 'parts = { b = "<name>", a = "<kind>" }\n'))
    assert registry_values(one)["x"] == registry_values(two)["x"]
