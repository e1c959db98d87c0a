"""Cursors sealed by the key every seat derives from the credentials it shares with the others."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from provisioner.errors import CursorGone, RequestError
from provisioner.verb.cursors import Continuation, CursorSeal
from registry.access import Kind, Party
from registry.wire import BusOptions

SEED = "SUACSSL3UAHUDXKFSNVUZRF5UHPMWZ6BFDTJ7M6USDXIEDNPPQYYYCU3VY"
OTHER_SEED = "SUAAVWRZG6M5FA5VRRGWSCIHKTOJC7EWNIT4JV3FTOIPO4OBFR5WA7X5TE"
N1, N2 = Party(kind=Kind.NODE, name="n1"), Party(kind=Kind.NODE, name="n2")
BEGUN = Continuation("L", 2, {"what": "needs", "node": "n1"}, N1.label, position=41, floor=90, at_most=80)


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def seal_of(folder: Path, seed: str, clock: Clock | None = None) -> CursorSeal:
    path = folder / f"{seed[:8]}.nk"
    path.write_text(seed + "\n")
    seal = CursorSeal.of_credentials(BusOptions(nkey_seed=path), timedelta(seconds=120))
    if clock is not None:
        seal.clock = clock
    return seal


def test_a_seat_with_the_same_credentials_opens_another_seats_cursor(tmp_path: Path) -> None:
    cursor = seal_of(tmp_path, SEED).seal(BEGUN)
    opened = seal_of(tmp_path, SEED).open(cursor, {"what": "needs"}, N1)
    assert (opened.listing, opened.page, opened.position, opened.floor, opened.at_most) == ("L", 2, 41, 90, 80)


def test_a_cursor_sealed_under_another_key_is_unknown(tmp_path: Path) -> None:
    cursor = seal_of(tmp_path, OTHER_SEED).seal(BEGUN)
    with pytest.raises(CursorGone):
        seal_of(tmp_path, SEED).open(cursor, {}, N1)


def test_a_cursor_altered_in_any_character_is_unknown(tmp_path: Path) -> None:
    seal = seal_of(tmp_path, SEED)
    cursor = seal.seal(BEGUN)
    for at in range(0, len(cursor), 7):
        changed = cursor[:at] + ("A" if cursor[at] != "A" else "B") + cursor[at + 1 :]
        with pytest.raises(CursorGone):
            seal.open(changed, {}, N1)


def test_a_cursor_serves_only_the_party_that_began_its_listing(tmp_path: Path) -> None:
    seal = seal_of(tmp_path, SEED)
    cursor = seal.seal(BEGUN)
    for other in (N2, Party(kind=Kind.OPERATOR, name="ops"), None):
        with pytest.raises(CursorGone):
            seal.open(cursor, {}, other)
    assert seal.open(cursor, {}, N1).page == 2


def test_a_cursor_expires_ttl_after_the_page_that_gave_it(tmp_path: Path) -> None:
    clock = Clock()
    seal = seal_of(tmp_path, SEED, clock)
    cursor = seal.seal(BEGUN)
    clock.now += 119
    assert seal.open(cursor, {}, N1).page == 2
    clock.now += 2
    with pytest.raises(CursorGone):
        seal.open(cursor, {}, N1)


@pytest.mark.parametrize(
    "given",
    [{"what": "applied"}, {"node": "n2"}, {"what": "needs", "module": "m"}],
    ids=["another what", "another node", "a filter the listing did not have"],
)
def test_a_continuation_with_other_fields_is_refused(tmp_path: Path, given: dict[str, str]) -> None:
    seal = seal_of(tmp_path, SEED)
    with pytest.raises(RequestError) as raised:
        seal.open(seal.seal(BEGUN), given, N1)
    assert raised.value.code == "400"


def test_a_cursor_whose_last_character_differs_in_its_spare_bits_is_unknown(tmp_path: Path) -> None:
    """Base64's last character carries bits the decoder ignores: a cursor is one text, not several."""
    seal = seal_of(tmp_path, SEED)
    cursor = seal.seal(BEGUN)
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    group = alphabet.index(cursor[-1]) & ~15  # 22 characters carry 16 bytes: the last one's low 4 bits are spare
    for other in (c for c in alphabet[group : group + 16] if c != cursor[-1]):
        with pytest.raises(CursorGone):
            seal.open(cursor[:-1] + other, {}, N1)
