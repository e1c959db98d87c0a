"""The bus parses message headers as nats-py does, faster (`registry.wire.nats_internals.header_lines`),
and tells a delete marker from its raw header block as nats-py's parse would (`is_delete_marker`)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from nats.aio.client import Client

from registry.wire.feed import is_delete_marker
from registry.wire.nats_internals import header_lines as _header_lines

LINES = st.lists(
    st.tuples(
        st.sampled_from(["Nats-Subject", "KV-Operation", "a b", "tab\there", " padded ", "", "x\x1cy", "naïve"]),
        st.sampled_from([":", ": ", ":\t", ""]),
        st.sampled_from(["", "value", " spaced ", "caf\u00e9", "a:b"]),
    )
)


def test_direct_get_headers_are_read_as_nats_py_reads_them() -> None:
    raw = b"Nats-Stream: KV_b\r\nNats-Subject: $KV.b.n1.a\r\nNats-Sequence: 42\r\nKV-Operation: DEL\r\n\r\n"
    assert _header_lines(raw) == Client._parse_header_lines(raw)
    assert _header_lines(raw)["Nats-Sequence"] == "42"


@given(LINES)
def test_any_header_block_is_read_as_nats_py_reads_it(lines: list[tuple[str, str, str]]) -> None:
    raw = "\r\n".join(name + sep + value for name, sep, value in lines).encode() + b"\r\n\r\n"
    assert _header_lines(raw) == Client._parse_header_lines(raw)


@given(st.binary(max_size=200))
def test_any_bytes_are_read_as_nats_py_reads_them(raw: bytes) -> None:
    assert _header_lines(raw) == Client._parse_header_lines(raw)


@given(st.text(alphabet=st.sampled_from(list(":\r\n \t\x0b\x0c\x1c\x85ab-")), max_size=80))
def test_any_ascii_block_is_read_as_nats_py_reads_it(text: str) -> None:
    raw = text.encode("utf-8")
    assert _header_lines(raw) == Client._parse_header_lines(raw)


MARKER_LINES = st.lists(
    st.tuples(
        st.sampled_from(["KV-Operation", " KV-Operation", "X-KV-Operation", "kv-operation", "Nats-Subject"]),
        st.sampled_from([":", ": ", ":\t"]),
        st.sampled_from(["DEL", "PURGE", " DEL ", "DELETE", "PUT", ""]),
    ),
    max_size=4,
)


@given(MARKER_LINES)
def test_a_delete_marker_is_told_from_its_raw_block_as_from_nats_py_s_parse(lines: list[tuple[str, str, str]]) -> None:
    block = "NATS/1.0\r\n" + "".join(f"{name}{sep}{value}\r\n" for name, sep, value in lines) + "\r\n"
    parsed = Client._parse_header_lines(block.encode()[len("NATS/1.0\r\n") :])
    assert is_delete_marker(block.encode()) == (parsed.get("KV-Operation") in ("DEL", "PURGE"))
    assert is_delete_marker(parsed) == is_delete_marker(block.encode())


def test_a_block_without_the_header_is_no_delete_marker() -> None:
    assert not is_delete_marker(b"NATS/1.0\r\nNats-Expected-Last-Subject-Sequence: 41\r\n\r\n")
    assert not is_delete_marker(b"")
