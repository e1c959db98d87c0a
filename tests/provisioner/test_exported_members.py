"""The public surface of `provisioner`: what other packages, the benchmarks and the lead rely on."""

from __future__ import annotations

import provisioner


def test_the_public_surface_is_pinned() -> None:
    assert sorted(provisioner.__all__) == [
        "CursorGone", "Participant", "ProvisionerError", "RequestError", "ServerSettings", "SettingsError",
        "Unavailable", "VerbError", "ask", "ask_page", "load_server_settings", "run_dev", "run_server",
        "until_signalled",
    ]  # fmt: skip
    for name in set(provisioner.__all__) - {"Participant"}:  # a type alias has no module of its own
        assert getattr(provisioner, name).__module__.startswith("provisioner."), name
