"""The runner every detector and service step goes through, against this machine's own programs."""

from __future__ import annotations

import sys
import tracemalloc

from mesh_host.runner import MAX_OUTPUT, machine_environment, run


def test_a_command_that_works_is_ok_with_its_output() -> None:
    ran = run([sys.executable, "-c", "print('hi')"])
    assert ran.ok and ran.stdout == "hi\n"


def test_a_command_that_fails_says_how_with_its_first_line() -> None:
    ran = run([sys.executable, "-c", "import sys; sys.stderr.write('no way\\nmore'); sys.exit(3)"])
    assert not ran.ok and ran.returncode == 3
    assert ran.said().endswith("exited 3: no way")


def test_a_missing_program_is_said_missing_not_raised() -> None:
    ran = run(["mesh-host-no-such-program"])
    assert ran.missing and ran.returncode is None and ran.said() == "mesh-host-no-such-program not found"


def test_a_program_that_hangs_is_cut_at_its_time() -> None:
    ran = run([sys.executable, "-c", "import time; time.sleep(30)"], timeout=0.3)
    assert ran.timed_out and ran.said().endswith("did not answer within its time")


def test_messages_read_in_the_c_locale() -> None:
    ran = run([sys.executable, "-c", "import os; print(os.environ['LC_ALL'])"])
    assert ran.stdout.strip() == "C"


def test_from_a_single_file_build_the_tools_load_the_machines_own_libraries() -> None:
    unpacked = {"LD_LIBRARY_PATH": "/tmp/_MEI123", "LD_LIBRARY_PATH_ORIG": "/opt/lib", "PATH": "/bin"}
    assert machine_environment(unpacked, frozen=True)["LD_LIBRARY_PATH"] == "/opt/lib"
    assert "LD_LIBRARY_PATH" not in machine_environment({"LD_LIBRARY_PATH": "/tmp/_MEI123"}, frozen=True)
    assert (
        machine_environment({"LD_LIBRARY_PATH": "/usr/local/lib"}, frozen=False)["LD_LIBRARY_PATH"] == "/usr/local/lib"
    )


def test_a_tool_that_says_much_is_read_no_further_than_its_bound() -> None:
    tracemalloc.start()
    try:
        ran = run(["head", "-c", "50000000", "/dev/zero"])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert ran.ok and len(ran.stdout) == MAX_OUTPUT
    assert peak < 16 * MAX_OUTPUT  # a few copies of its bound (1 MiB), never its 50 MB
