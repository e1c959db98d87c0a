"""Builds the host into one executable file with the interpreter inside (PyInstaller, one-file mode):

    python -m mesh_host.build --bundle deploy/host/node.json --out dist/mesh-host

With `--bundle` the file carries that declaration (checked first: a declaration the host would
refuse builds nothing) and `mesh-host reconcile` applies it with nothing else present; without,
it carries nothing and `reconcile` refuses. Needs the `build` extra (pip install
'mesh-provisioner[build]'). The file runs on machines of this one's platform and a glibc at least
as new as this one's.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from mesh_host.bundle import BUNDLED, stage
from mesh_host.declaration import parse_declaration, read_declaration_text
from mesh_host.errors import DeclarationRefused

NAME = "mesh-host"
SOURCE_ROOT = Path(__file__).resolve().parents[1]  # where `import mesh_host` finds this package
# Modules the host never imports that its dependencies' optional paths would take along (pydantic's
# hook takes every pydantic module: its mypy plugin, its hypothesis one, a debug helper using rich),
# 6 MiB of the file. A mesh_host module importing one of these fails in the built file (the single-
# file tests run every command). --strip takes the symbols off the libraries: 21 MiB become 11.
EXCLUDED = ("hypothesis", "mypy", "pytest", "_pytest", "rich", "pygments", "markdown_it", "tkinter")
ENTRY = "import sys\nfrom mesh_host.cli import main\nsys.exit(main(sys.argv[1:]))\n"


class BuildRefused(Exception):
    """Nothing was built: why, and what to do."""


@dataclass(frozen=True)
class Built:
    path: Path
    size: int
    carrying: str | None  # the bundled declaration's path as given, None for a default build

    def said(self) -> str:
        what = f"carrying {self.carrying}" if self.carrying else "carrying nothing (a default build: reconcile refuses)"
        return f"built {self.path}: {self.size:,} bytes ({self.size / 2**20:.1f} MiB), {what}"


def read_declaration(path: Path) -> str:
    """The declaration's text, checked as the host will parse it; `BuildRefused` when it would refuse it."""
    try:
        text = read_declaration_text(path)
        parse_declaration(text, str(path))
    except DeclarationRefused as err:
        raise BuildRefused(f"--bundle: the host would refuse it, so nothing is built: {err}") from err
    return text


def build(out: Path, bundle: Path | None = None) -> Built:
    """Builds the host into `out` (replaced atomically), carrying `bundle` when given."""
    text = read_declaration(bundle) if bundle is not None else None
    if importlib.util.find_spec("PyInstaller") is None:
        raise BuildRefused("PyInstaller is not installed: pip install 'mesh-provisioner[build]'")
    with tempfile.TemporaryDirectory(prefix="mesh-host-build-") as scratch:
        work = Path(scratch)
        entry = work / f"{NAME}.py"  # not mesh_host.py: it would hide the package
        entry.write_text(ENTRY)
        options = [f"--add-data={stage(work, text, str(bundle))}{os.pathsep}mesh_host/{BUNDLED.name}"] if text else []
        _pyinstaller(work, entry, options)
        out.parent.mkdir(parents=True, exist_ok=True)
        partial = out.with_name(f".{out.name}.partial")
        shutil.copyfile(work / "dist" / NAME, partial)
        partial.chmod(0o755)
        partial.replace(out)
    return Built(out, out.stat().st_size, str(bundle) if bundle is not None else None)


def _pyinstaller(work: Path, entry: Path, options: list[str]) -> None:
    command = [
        sys.executable,
        "-m",
        "PyInstaller",
        "--onefile",
        f"--name={NAME}",
        f"--distpath={work / 'dist'}",
        f"--workpath={work / 'build'}",
        f"--specpath={work}",
        f"--paths={SOURCE_ROOT}",
        "--noconfirm",
        "--log-level=WARN",
        "--strip",
        *(f"--exclude-module={module}" for module in EXCLUDED),
        *options,
        str(entry),
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)  # noqa: S603  # our own argv
    if done.returncode != 0:
        said = "\n".join(done.stderr.strip().splitlines()[-20:])
        raise BuildRefused(f"PyInstaller exited {done.returncode}:\n{said}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mesh_host.build",
        description="Build mesh-host into one executable file with the interpreter inside (PyInstaller).",
    )
    parser.add_argument(
        "--bundle",
        type=Path,
        metavar="FILE",
        help="a declaration the host carries: `mesh-host reconcile` applies it, `mesh-host bundle` shows it "
        "(checked first: one the host would refuse builds nothing). Without: a default build, carrying nothing",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("dist") / NAME, help="the file to write (default: %(default)s)"
    )
    args = parser.parse_args(argv)
    try:
        built = build(args.out, args.bundle)
    except BuildRefused as err:
        print(f"mesh_host.build: {err}", file=sys.stderr)
        return 2
    print(built.said())
    return 0


if __name__ == "__main__":
    sys.exit(main())
