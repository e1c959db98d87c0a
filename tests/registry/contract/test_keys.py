"""Key shapes of the wire contract: build, parse back, reasons for keys out of shape, narrowing."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from nats.js import JetStreamContext

from registry.contract import Bucket, KeyShape, keys, node_token, under
from registry.errors import KeyShapeError
from registry.wire import Bus, snapshot

names = st.text(min_size=1, max_size=20)

SHAPES = [
    pytest.param(keys.REGISTRY, {"kind": "shell"}, "shell", id="registry is one kind"),
    pytest.param(
        keys.NEEDS,
        {"node": "n1", "module": "web", "kind": "shell", "name": "zsh:normal"},
        "n1.web.shell.zsh=3Anormal",
        id="needs is node, module, kind and name",
    ),
    pytest.param(keys.APPLIED, {"node": "n1", "module": "web"}, "n1.web", id="applied is node and module"),
    pytest.param(
        keys.COLLECT,
        {"node": "n1", "collection": "shell:zsh:normal", "contributor": "web"},
        "n1.shell=3Azsh=3Anormal.web",
        id="collect is node, collection and contributor",
    ),
    pytest.param(
        keys.BOUND,
        {"node": "n1", "module": "web", "provision": "db"},
        "n1.web.db",
        id="bound without its local part",
    ),
    pytest.param(
        keys.BOUND,
        {"node": "n1", "module": "web", "provision": "db", "local": "host"},
        "n1.web.db.host",
        id="bound with its local part",
    ),
]


@pytest.mark.parametrize(("shape", "parts", "key"), SHAPES)
def test_every_contract_shape_builds_and_parses_back(shape: KeyShape, parts: dict[str, str], key: str) -> None:
    assert shape.build(**parts) == key
    assert shape.parse(key) == parts


@given(node=names, module=names, kind=names, name=names)
def test_any_needs_key_round_trips(node: str, module: str, kind: str, name: str) -> None:
    parts = {"node": node, "module": module, "kind": kind, "name": name}
    key = keys.NEEDS.build(**parts)
    assert keys.NATS_KEY.fullmatch(key)
    assert len(key.split(".")) == 4
    assert keys.NEEDS.parse(key) == parts


@given(node=names, collection=names, contributor=names)
def test_any_collect_key_round_trips(node: str, collection: str, contributor: str) -> None:
    parts = {"node": node, "collection": collection, "contributor": contributor}
    assert keys.COLLECT.parse(keys.COLLECT.build(**parts)) == parts


@given(node=names, module=names)
def test_any_applied_key_round_trips(node: str, module: str) -> None:
    assert keys.APPLIED.parse(keys.APPLIED.build(node=node, module=module)) == {"node": node, "module": module}


@given(kind=names)
def test_any_registry_key_round_trips(kind: str) -> None:
    assert keys.REGISTRY.parse(keys.REGISTRY.build(kind=kind)) == {"kind": kind}


@given(node=names, module=names, provision=names, local=st.none() | names)
def test_any_bound_key_round_trips(node: str, module: str, provision: str, local: str | None) -> None:
    parts = {"node": node, "module": module, "provision": provision}
    if local is not None:
        parts["local"] = local
    key = keys.BOUND.build(**parts)
    assert len(key.split(".")) == (4 if local is not None else 3)
    assert keys.BOUND.parse(key) == parts


OUT_OF_SHAPE = [
    pytest.param(keys.NEEDS, "n1.web", "it has 2 tokens, the shape has 4", id="needs with too few tokens"),
    pytest.param(keys.NEEDS, "n1.a.b.c.d", "it has 5 tokens, the shape has 4", id="needs with too many tokens"),
    pytest.param(keys.APPLIED, "n1", "it has 1 token, the shape has 2", id="applied with one token"),
    pytest.param(keys.BOUND, "n1.web", "it has 2 tokens, the shape has 3 or 4", id="bound names both lengths"),
    pytest.param(keys.BOUND, "a.b.c.d.e", "it has 5 tokens, the shape has 3 or 4", id="bound with five tokens"),
    pytest.param(keys.NEEDS, "n1..shell.x", "token 2 is empty", id="an empty token is named by position"),
    pytest.param(keys.REGISTRY, "", "token 1 is empty", id="an empty registry key"),
    pytest.param(
        keys.NEEDS,
        "n1.web.shell.zsh=3anormal",
        "token 4 'zsh=3anormal': escape '=3a' at offset 3 must use upper-case hex",
        id="a lower-case escape names the offending token",
    ),
    pytest.param(
        keys.COLLECT,
        "n1.shell:zsh.web",
        "token 2 'shell:zsh': character ':' at offset 5 must be escaped",
        id="a raw colon names the offending token",
    ),
    pytest.param(
        keys.APPLIED,
        "n1.=41pp",
        "token 2 '=41pp': a byte is escaped that must be written plainly",
        id="an escaped safe byte names the offending token",
    ),
]


@pytest.mark.parametrize(("shape", "key", "reason"), OUT_OF_SHAPE)
def test_a_key_out_of_shape_says_why(shape: KeyShape, key: str, reason: str) -> None:
    with pytest.raises(KeyShapeError) as caught:
        shape.parse(key)
    assert caught.value.reason == reason
    assert caught.value.key == key
    assert caught.value.shape == shape.text


@pytest.mark.parametrize(
    ("shape", "parts", "missing"),
    [
        pytest.param(keys.NEEDS, {"node": "n1", "module": "web"}, "missing kind, name", id="needs without kind"),
        pytest.param(keys.APPLIED, {"module": "web"}, "missing node", id="applied without node"),
        pytest.param(keys.BOUND, {"node": "n1", "module": "w", "local": "x"}, "missing provision", id="bound"),
        pytest.param(
            keys.COLLECT,
            {"node": "n1", "collection": "c", "contributor": ""},
            "missing contributor",
            id="an empty part counts as missing",
        ),
    ],
)
def test_building_without_a_part_says_which(shape: KeyShape, parts: dict[str, str], missing: str) -> None:
    with pytest.raises(KeyShapeError, match=re.escape(missing)):
        shape.build(**parts)


@pytest.mark.parametrize(
    ("shape", "narrow", "filters"),
    [
        pytest.param(keys.NEEDS, {}, [">"], id="no narrowing keeps the whole bucket"),
        pytest.param(keys.NEEDS, {"node": "n1"}, ["n1", "n1.>"], id="a node keeps its keys and its malformed ones"),
        pytest.param(keys.NEEDS, {"node": "n1", "module": "web"}, ["n1.web", "n1.web.>"], id="node and module"),
        pytest.param(keys.NEEDS, {"module": "web"}, ["*.web", "*.web.>"], id="a module alone on every node"),
        pytest.param(keys.NEEDS, {"node": "n.1"}, ["n=2E1", "n=2E1.>"], id="narrowed names are escaped"),
        pytest.param(keys.NEEDS, {"node": None}, [">"], id="a None narrows nothing"),
        pytest.param(keys.COLLECT, {"contributor": "web"}, ["*.*.web", "*.*.web.>"], id="a collect contributor"),
        pytest.param(
            keys.COLLECT,
            {"node": "n1", "collection": "shell:zsh"},
            ["n1.shell=3Azsh", "n1.shell=3Azsh.>"],
            id="a collection on one node",
        ),
    ],
)
def test_filters_narrow_by_whole_tokens(shape: KeyShape, narrow: dict[str, str | None], filters: list[str]) -> None:
    assert shape.filters(**narrow) == filters


def test_narrowing_by_a_field_the_shape_lacks_is_refused() -> None:
    with pytest.raises(KeyShapeError, match="cannot narrow by collection"):
        keys.NEEDS.filters(collection="shell")


async def test_a_nodes_filters_keep_its_malformed_keys_and_not_a_longer_node_name(
    bus: Bus, js: JetStreamContext
) -> None:
    kv = await js.create_key_value(bucket="narrow", direct=True)
    for key in ["n1.web.shell.zsh", "n1.bad", "n1", "n10.x", "n10.web.shell.zsh", "n2.web.shell.zsh"]:
        await kv.put(key, b"{}")
    items = await snapshot(bus, Bucket("narrow", keys.NEEDS), keys.NEEDS.filters(node="n1"))
    assert sorted(item.key for item in items) == ["n1", "n1.bad", "n1.web.shell.zsh"]


def test_a_node_keyed_keys_node_token_is_its_first_as_escaped() -> None:
    assert node_token("a=2Eb.web.config.x") == "a=2Eb"
    assert node_token(under("a.b")) == "a=2Eb"


def test_a_key_is_read_off_its_own_subject_and_where_its_stream_republishes_it() -> None:
    bucket = Bucket("b", KeyShape("<node>.<module>"))
    assert bucket.key_of(bucket.subject("n1.web")) == "n1.web"
    assert bucket.key_of(bucket.live_subject("n1.web")) == "n1.web"
