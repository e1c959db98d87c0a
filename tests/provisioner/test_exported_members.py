"""The public surface of `provisioner`: what other packages, the benchmarks and the lead rely on."""

from __future__ import annotations

import provisioner


def test_the_public_surface_is_pinned() -> None:
    assert sorted(provisioner.__all__) == [
        "CursorGone",
        "Forbidden",
        "ProvisionerError",
        "RequestError",
        "ServerSettings",
        "Unavailable",
        "remove_node",
        "run_server",
    ]
    for name in provisioner.__all__:
        assert getattr(provisioner, name).__module__.startswith("provisioner."), name
