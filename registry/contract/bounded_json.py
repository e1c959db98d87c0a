"""The one JSON reader of both programs, bounded in depth and size.

Everything either program parses comes from somewhere it does not control: verb requests, values
of any bucket (a provider's `_bound`, the placement mirror, the registry), the verb's and the
vault's answers, manifests, the ledger and the client's remembered state (each file read no further
than its bound: `registry.contract.bounded_file`, `provisioner_client.state.files`).
`read_json` refuses, before parsing:

- a text longer than `max_bytes` (by default `MAX_BYTES`, 1 MiB; a verb page is allowed
  `MAX_PAGE_BYTES`, the largest NATS payload);
- arrays and objects nested deeper than `max_depth` (by default `MAX_DEPTH`, 64) levels, counted
  outside strings, so Python's recursive parser and encoder never see such a document;

and, while parsing, `NaN` and `Infinity`, which are not JSON, and a lone surrogate (`"\ud800"`, an
escape of no character, which no UTF-8 text can hold and the pages' parser refuses: a node's value
holding one would make every listing of it unreadable). It raises `JsonRefused` with the
reason, which never quotes the text: a caller turns it into a 400, a malformed key, a pending
reason or a manifest error naming the key or the file, never a crash.
"""

from __future__ import annotations

import json
import re
from itertools import accumulate

MAX_BYTES = 1024 * 1024
MAX_PAGE_BYTES = 64 * 1024 * 1024
MAX_DEPTH = 64

_NOT_MARKS = bytes(b for b in range(256) if b not in b'"[]{}')
_NOT_OPENERS = bytes(b for b in range(256) if b not in b"[{")
_STARTS = frozenset(b'{["-0123456789tfnNI')  # a JSON text's first byte past white space (NaN, Infinity: said)
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}


class JsonRefused(ValueError):
    """A JSON text that is too large, too deep or not JSON; `reason` never quotes it."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


def read_json(data: bytes | str, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> object:
    """`data` parsed, if it is at most `max_bytes` long and `max_depth` levels deep."""
    raw = data.encode("utf-8", errors="surrogatepass") if isinstance(data, str) else data
    if len(raw) > max_bytes:
        raise JsonRefused(f"it is {len(raw):,} bytes long, more than the {max_bytes:,} allowed")
    start = len(raw) - len(raw.lstrip(b" \t\r\n"))
    if start < len(raw) and raw[start] not in _STARTS:
        # No JSON text starts so: refused as parsing it whole would, parsing one character (a
        # hostile node's listing of 64 KiB values that are not JSON was parsed through, each time).
        return _decoded(raw, characters=start + 1)
    check_json(raw, max_bytes=max_bytes, max_depth=max_depth)
    parsed = _decoded(raw)
    if _SURROGATE_ESCAPE.search(raw) is not None and _holds_lone_surrogate(parsed):
        raise JsonRefused("it holds a lone surrogate escape (such as \\ud800), which is no character")
    return parsed


def check_json(raw: bytes, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH) -> None:
    """Refuses `raw` (`JsonRefused`) when longer than `max_bytes` or nested deeper than `max_depth`,
    without parsing it: for a file pydantic's own parser then reads (grants.json, sites.json)."""
    if len(raw) > max_bytes:
        raise JsonRefused(f"it is {len(raw):,} bytes long, more than the {max_bytes:,} allowed")
    if len(raw.translate(None, delete=_NOT_OPENERS)) > max_depth:  # counted in C: settles most texts at once
        depth = nesting(raw, stop_past=max_depth)
        if depth > max_depth:
            raise JsonRefused(f"it nests at least {depth} levels deep, more than the {max_depth} allowed")


def _decoded(raw: bytes, *, characters: int | None = None) -> object:
    """`raw` parsed as strict JSON (its first `characters` only, when given); `JsonRefused` saying why not."""
    try:
        return _STRICT.decode(raw.decode("utf-8")[:characters])
    except RecursionError:  # unreachable after the depth check; kept so no input can crash a caller
        raise JsonRefused("it nests too deep") from None
    except UnicodeDecodeError:
        raise JsonRefused("it is not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise JsonRefused(f"it is not valid JSON: {_short(err)}") from None
    except ValueError as err:  # e.g. an integer of more digits than Python converts
        raise JsonRefused(f"it is not usable JSON: {_short(err)}") from None


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _holds_lone_surrogate(document: object) -> bool:
    """Whether a string of `document` (a name or a value) holds half a surrogate pair."""
    pending = [document]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, str) and not item.isascii():
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return True
    return False


def _refuse_constant(name: str) -> object:
    raise ValueError(f"{name} is not JSON")


_STRICT = json.JSONDecoder(parse_constant=_refuse_constant)


def nesting(raw: bytes, *, stop_past: int | None = None) -> int:
    """How deep arrays and objects nest in `raw`, ignoring brackets inside strings; with
    `stop_past`, the first depth past it once reached (a request 10,000 levels deep was stepped
    through whole, 2.5 ms, in the verb's handler that every party's requests pass through).

    Done in C as far as it goes (a verb page holds thousands of strings; a regular expression
    over them took 6 µs an entry): escaped backslashes and quotes are dropped, then everything
    but quotes and brackets, and what lies between a quote and the next is a string."""
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = raw.translate(None, delete=_NOT_MARKS)
    brackets = b"".join(marks.split(b'"')[::2])
    depths = accumulate(map(_STEP.__getitem__, brackets))
    if stop_past is None:
        return max(depths, default=0)
    deepest = 0
    for depth in depths:
        if depth > deepest:
            deepest = depth
            if deepest > stop_past:
                break
    return deepest


def _short(err: ValueError) -> str:
    text = str(err)
    return text if len(text) <= 200 else text[:200] + "..."
