"""Service steps: their logic against a fake systemctl, their behaviour against this machine's."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

import pytest

from mesh_host.applying import services as services_module
from mesh_host.applying.apply import ApplyFailed, Host, Report, apply
from mesh_host.applying.footprint import Before, OwnedService, load
from mesh_host.applying.roots import Root
from mesh_host.applying.services import Systemctl, UnitState
from mesh_host.declaration import parse_declaration
from mesh_host.runner import Runner, run
from tests.mesh_host.fake_systemctl import FakeSystemctl, FakeUnit

HOME = PurePosixPath("/home/operator")


def declared(*resources: Mapping[str, object]) -> str:
    return json.dumps({"declaration": 1, "resources": list(resources)})


def service(unit: str = "app.service", state: str = "running", *, enabled: bool = True) -> dict[str, object]:
    return {"type": "service", "unit": unit, "state": state, "enabled": enabled}


def applied(text: str, state: Path, runner: Runner, *, root: Root | None = None, dry_run: bool = False) -> Report:
    """Services on the machine's root (only systemctl is touched, through `runner`), or under `root`."""
    host = Host(root or Root(), state, HOME, runner, services=None if root is None else True)
    return apply(parse_declaration(text, "test.json"), host, dry_run=dry_run)


def test_a_unit_is_brought_to_running_and_enabled_then_left_alone(tmp_path: Path) -> None:
    systemctl = FakeSystemctl({"app.service": FakeUnit()})
    report = applied(declared(service()), tmp_path, systemctl)
    assert [event.what for event in report.changes] == ["enabled", "started"]
    assert systemctl.acts == [("enable", "--", "app.service"), ("start", "--", "app.service")]
    assert load(tmp_path).owned == (
        OwnedService(unit="app.service", state="running", enabled=True, before=Before(running=False, enabled=False)),
    )
    systemctl.calls.clear()
    assert applied(declared(service()), tmp_path, systemctl).changes == ()
    assert systemctl.acts == []


def test_a_unit_is_stopped_and_disabled_when_so_declared(tmp_path: Path) -> None:
    systemctl = FakeSystemctl({"app.service": FakeUnit(active="active", unit_file="enabled")})
    report = applied(declared(service(state="stopped", enabled=False)), tmp_path, systemctl)
    assert [event.what for event in report.changes] == ["disabled", "stopped"]


def test_a_unit_that_does_not_exist_is_not_a_stopped_one_it_fails_the_step(tmp_path: Path) -> None:
    systemctl = FakeSystemctl()
    with pytest.raises(ApplyFailed) as failed:
        applied(declared(service(state="stopped", enabled=False)), tmp_path, systemctl)
    assert failed.value.where == "resources[0]"
    assert "no such unit here (LoadState=not-found" in failed.value.why
    assert systemctl.acts == [] and load(tmp_path).owned == ()


@pytest.mark.parametrize(
    ("unit", "said"),
    [
        (FakeUnit(load="masked", unit_file="masked"), "it is masked (LoadState=masked"),
        (FakeUnit(load="error"), "its unit does not load (LoadState=error"),
        (
            FakeUnit(unit_file="static"),
            "it cannot be enabled (LoadState=loaded ActiveState=inactive UnitFileState=static)",
        ),
    ],
    ids=["masked", "not loading", "static declared enabled"],
)
def test_a_unit_that_cannot_be_as_declared_fails_the_step_saying_what_it_is(
    tmp_path: Path, unit: FakeUnit, said: str
) -> None:
    with pytest.raises(ApplyFailed, match=said.replace("(", r"\(").replace(")", r"\)")):
        applied(declared(service()), tmp_path, FakeSystemctl({"app.service": unit}))


def test_a_static_unit_declared_not_enabled_is_only_started(tmp_path: Path) -> None:
    systemctl = FakeSystemctl({"app.service": FakeUnit(unit_file="static")})
    assert [e.what for e in applied(declared(service(enabled=False)), tmp_path, systemctl).changes] == ["started"]


def test_a_unit_that_fails_once_started_fails_the_step(tmp_path: Path) -> None:
    systemctl = FakeSystemctl({"app.service": FakeUnit(fails_to_start=True)})
    with pytest.raises(ApplyFailed, match="systemctl did as asked, yet it is LoadState=loaded ActiveState=failed"):
        applied(declared(service()), tmp_path, systemctl)


def test_a_failed_service_step_stops_the_apply_before_the_next(tmp_path: Path) -> None:
    systemctl = FakeSystemctl({"b.service": FakeUnit()})
    with pytest.raises(ApplyFailed) as failed:
        applied(declared(service("a.service"), service("b.service")), tmp_path, systemctl)
    assert failed.value.subject == "a.service" and not any("b.service" in call for call in systemctl.calls)


def test_a_service_no_longer_declared_is_returned_to_how_the_host_found_it(tmp_path: Path) -> None:
    systemctl = FakeSystemctl({"app.service": FakeUnit(), "db.service": FakeUnit(active="active")})
    applied(declared(service(), service("db.service", "stopped", enabled=True)), tmp_path, systemctl)
    systemctl.calls.clear()
    report = applied(declared(), tmp_path, systemctl)
    assert [(event.subject, event.what) for event in report.changes] == [
        ("db.service", "disabled (as the host found it)"),
        ("db.service", "started (as the host found it)"),
        ("app.service", "disabled (as the host found it)"),
        ("app.service", "stopped (as the host found it)"),
    ]
    assert load(tmp_path).owned == ()


def test_removing_a_service_whose_unit_is_gone_does_not_fail_the_apply(tmp_path: Path) -> None:
    systemctl = FakeSystemctl({"app.service": FakeUnit(), "gone.service": FakeUnit()})
    applied(declared(service(), service("gone.service")), tmp_path, systemctl)
    systemctl.units["gone.service"] = FakeUnit(load="not-found", active="active", unit_file="")  # file gone, running
    del systemctl.units["app.service"]  # file gone, stopped, forgotten by systemd
    report = applied(declared(), tmp_path, systemctl)
    assert [(event.subject, event.what) for event in report.changes] == [
        ("gone.service", "stopped (as the host found it)")
    ]
    assert [event.what.split(" (")[0] for event in report.notes] == ["its unit is gone", "its unit is gone"]
    assert ("disable", "--", "gone.service") not in systemctl.acts and load(tmp_path).owned == ()


def test_systemd_reloads_its_units_before_a_service_after_a_unit_file_changed(tmp_path: Path) -> None:
    (tmp_path / "root/etc/systemd/system").mkdir(parents=True)
    systemctl = FakeSystemctl({"app.service": FakeUnit()})
    unit_file = {"type": "file", "path": "/etc/systemd/system/app.service", "content": "[Unit]\n", "mode": "0644"}
    text = declared(unit_file, service())
    report = applied(text, tmp_path / "state", systemctl, root=Root(tmp_path / "root"))
    assert [(event.subject, event.what) for event in report.changes][1:] == [
        ("systemd", "reloaded (daemon-reload: a unit file changed)"),
        ("app.service", "enabled"),
        ("app.service", "started"),
    ]
    assert systemctl.acts[0] == ("daemon-reload",)
    systemctl.calls.clear()
    assert applied(text, tmp_path / "state", systemctl, root=Root(tmp_path / "root")).changes == ()
    assert systemctl.acts == []


def test_systemd_reloads_when_it_says_it_needs_to(tmp_path: Path) -> None:
    systemctl = FakeSystemctl({"app.service": FakeUnit(need_reload=True)})
    applied(declared(service()), tmp_path, systemctl)
    assert systemctl.acts[0] == ("daemon-reload",)


def test_under_a_root_services_are_skipped_saying_so_and_systemctl_is_never_run(tmp_path: Path) -> None:
    systemctl = FakeSystemctl({"app.service": FakeUnit()})
    host = Host(Root(tmp_path / "root"), tmp_path / "state", HOME, systemctl)
    report = apply(parse_declaration(declared(service()), "test.json"), host)
    assert report.changes == () and systemctl.calls == [] and load(tmp_path / "state").owned == ()
    assert report.notes[0].what == (
        f"skipped: services are applied on the real machine, not under --root {tmp_path / 'root'}"
    )


def test_a_dry_run_says_what_it_would_do_to_a_unit_and_does_nothing(tmp_path: Path) -> None:
    systemctl = FakeSystemctl({"app.service": FakeUnit()})
    report = applied(declared(service()), tmp_path, systemctl, dry_run=True)
    assert [event.what for event in report.changes] == ["would be enabled", "would be started"]
    assert systemctl.acts == [] and not (tmp_path / "footprint.json").exists()


def test_systemctl_down_fails_the_step_with_its_own_words(tmp_path: Path) -> None:
    down = "System has not been booted with systemd as init system (PID 1). Can't operate."
    with pytest.raises(ApplyFailed) as failed:
        applied(declared(service()), tmp_path, FakeSystemctl(down=down))
    assert failed.value.why == f"app.service: systemctl show: systemctl exited 1: {down}"


def systemd_runs_here() -> bool:
    return Path("/run/systemd/system").is_dir()  # as sd_booted(3) tells: systemd is PID 1


def test_on_this_machine_a_service_step_for_a_unit_not_here_fails_saying_why(tmp_path: Path) -> None:
    """Behaviour: whatever this machine is, the step fails, and says the truth about why."""
    unit = "mesh-host-test-no-such-unit.service"
    with pytest.raises(ApplyFailed) as failed:
        applied(declared(service(unit)), tmp_path, run)
    if systemd_runs_here():
        assert "no such unit here (LoadState=not-found" in failed.value.why
    else:
        state = run(["systemctl", "show", "--property=LoadState", "--", unit])
        assert failed.value.why == f"{unit}: systemctl show: {state.said()}"
        assert "systemctl" in failed.value.why
    assert load(tmp_path).owned == ()


def test_a_unit_state_is_judged_by_what_systemd_says() -> None:
    systemctl = Systemctl(FakeSystemctl({"a.service": FakeUnit(active="reloading", unit_file="enabled-runtime")}))
    state = systemctl.state("a.service")
    assert state == UnitState(load="loaded", active="reloading", unit_file="enabled-runtime")
    assert state.running and state.enabled and state.exists
    missing = systemctl.state("b.service")
    assert not missing.exists and not missing.running and missing.said().startswith("LoadState=not-found")


def test_a_property_the_host_stops_asking_for_is_missing_from_the_answer_and_the_step_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    systemctl = FakeSystemctl({"app.service": FakeUnit(active="active", unit_file="enabled")})
    assert applied(declared(service()), tmp_path / "asked", systemctl).changes == ()
    monkeypatch.setattr(services_module, "PROPERTIES", ("LoadState", "ActiveState", "NeedDaemonReload"))
    with pytest.raises(ApplyFailed, match=r"systemctl did as asked, yet it is .* UnitFileState=\(none\)"):
        applied(declared(service()), tmp_path / "dropped", systemctl)


@pytest.mark.parametrize(
    "argv",
    [
        ("show", "-p", "LoadState", "--", "app.service"),
        ("show", "--property=LoadState,Description", "--", "app.service"),
        ("start", "app.service"),
        ("restart", "--", "app.service"),
        ("daemon-reload", "--now"),
    ],
    ids=["a short option", "a property it does not hold", "a unit without --", "a verb", "an option"],
)
def test_the_fake_systemctl_refuses_what_it_does_not_understand(argv: tuple[str, ...]) -> None:
    with pytest.raises(AssertionError, match="the fake systemctl"):
        FakeSystemctl({"app.service": FakeUnit()})(("systemctl", "--no-ask-password", *argv))


def test_a_unit_declared_without_enabled_keeps_its_enablement_then_and_once_no_longer_declared(
    tmp_path: Path,
) -> None:
    systemctl = FakeSystemctl({"app.service": FakeUnit(unit_file="enabled")})
    running = {"id": "app", "type": "service", "unit": "app.service", "state": "running"}
    report = applied(declared(running), tmp_path, systemctl)
    assert [(event.where, event.what) for event in report.changes] == [("app", "started")]
    assert systemctl.acts == [("start", "--", "app.service")]
    (entry,) = load(tmp_path).owned
    assert isinstance(entry, OwnedService) and entry.enabled is None and entry.id == "app"
    systemctl.units["app.service"].unit_file = "disabled"  # the operator disables it: the host leaves it
    systemctl.calls.clear()
    assert applied(declared(running), tmp_path, systemctl).changes == ()
    report = applied(declared(), tmp_path, systemctl)
    assert [event.what for event in report.changes] == ["stopped (as the host found it)"]
    assert systemctl.acts == [("stop", "--", "app.service")]
