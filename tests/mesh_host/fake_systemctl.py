"""A systemctl that answers like systemd's for the units it holds, for the logic of service steps.

It understands exactly the calls the host makes and refuses any other (an AssertionError, which no
step catches): `show --property=A,B -- UNIT` answers only the properties asked, as systemd does, so
a property the host stops asking for is missing from the answer, not made up."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mesh_host.runner import DEFAULT_TIMEOUT, Ran

PROPERTY = "--property="
ACTS = ("start", "stop", "enable", "disable")


@dataclass
class FakeUnit:
    load: str = "loaded"
    active: str = "inactive"
    unit_file: str = "disabled"
    need_reload: bool = False
    fails_to_start: bool = False


@dataclass
class FakeSystemctl:
    """Units by name; a unit it does not hold is LoadState=not-found, as systemd says."""

    units: dict[str, FakeUnit] = field(default_factory=dict)
    calls: list[tuple[str, ...]] = field(default_factory=list)
    down: str = ""  # systemctl's answer to everything when systemd is not running

    @property
    def acts(self) -> list[tuple[str, ...]]:
        """The calls that change something (not `show`)."""
        return [call[2:] for call in self.calls if call[2] != "show"]

    def __call__(self, argv: Sequence[str], *, timeout: float = DEFAULT_TIMEOUT) -> Ran:
        call = tuple(argv)
        self.calls.append(call)
        assert call[:2] == ("systemctl", "--no-ask-password"), call
        if self.down:
            return Ran(call, 1, stderr=self.down)
        verb, args = call[2], call[3:]
        if verb == "daemon-reload" and not args:
            for each in self.units.values():
                each.need_reload = False
            return Ran(call, 0)
        if verb == "show" and len(args) == 3 and args[0].startswith(PROPERTY) and args[1] == "--":
            return Ran(call, 0, stdout=self._show(args[2], args[0].removeprefix(PROPERTY).split(",")))
        if verb in ACTS and len(args) == 2 and args[0] == "--":
            return self._act(call, verb, args[1])
        raise AssertionError(f"the fake systemctl does not understand {call}")

    def _show(self, unit: str, asked: list[str]) -> str:
        held = self.units.get(unit, FakeUnit(load="not-found", unit_file=""))
        said = {
            "LoadState": held.load,
            "ActiveState": held.active,
            "UnitFileState": held.unit_file,
            "NeedDaemonReload": "yes" if held.need_reload else "no",
        }
        unknown = [name for name in asked if name not in said]
        assert not unknown, f"the fake systemctl holds no property {unknown}"
        return "".join(f"{name}={said[name]}\n" for name in asked)

    def _act(self, call: tuple[str, ...], verb: str, unit: str) -> Ran:
        held = self.units.get(unit)
        if held is None or (verb in ("enable", "disable") and held.load == "not-found"):
            return Ran(call, 1, stderr=f"Failed to {verb} unit: Unit file {unit} does not exist.")
        if verb == "start":
            held.active = "failed" if held.fails_to_start else "active"
        elif verb == "stop":
            held.active = "inactive"
        elif verb in ("enable", "disable"):
            held.unit_file = f"{verb}d"
        return Ran(call, 0)
