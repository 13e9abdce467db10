"""Compiles the Kafka listener's request path in place, with mypyc or Cython, for the spike of
docs/performance.md ("Compiled hot path (spike)"); ``--clean`` takes the compiled modules away.

Intuition: both compilers turn a ``.py`` file into an extension module of the same name. Python's
import system prefers an extension module to the source beside it (the extension loader comes
first), so a compiled build is the same package with ``.so`` files next to some ``.py`` files, and
removing them brings back the pure-Python package. The ``.py`` files are not changed.

- **mypyc** compiles the modules as one group: one shared library,
  ``stratalog/server/hot_path__mypyc*.so``, and one small shim per module. It type-checks the
  modules first (mypy) and refuses to build while any error is left; at run time it checks
  every annotated argument, return and attribute against its annotation.
- **Cython** (pure-Python mode, no ``.pxd``) compiles each module on its own, its annotations
  ignored (``annotation_typing`` off), so any module that runs under CPython compiles and
  behaves as it does there.

Our package is mapped from several folders (pyproject's ``package-dir``), and both compilers name
a module after its path, so the build runs in a private tree of symlinks shaped like the package,
as ``make lint`` does: the ``.so`` files land in the repository's folders through the symlinks.
They are gitignored (``*.so``); the generated C and object files stay in a temporary directory.

Run ``python -m benchmarks.compile_hot_path {mypyc,cython} [--modules m1,m2]`` or ``--clean``
(a build first removes the previous one). Without ``--modules``, Cython compiles every module
of ``HOT_PATH_MODULES`` and mypyc those of ``MYPYC_MODULES``.
Not concurrent with another build or with a running server of this tree: an import during
the build may see a half-written ``.so``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

__all__ = ["HOT_PATH_MODULES", "MYPYC_MODULES", "build", "clean", "compiled_files"]

_ROOT = Path(__file__).resolve().parent.parent
# The package's folders as pyproject's package-dir maps them (the subset the hot path lives in).
_PACKAGE_DIRS = {"records": "records", "server": "server"}
# The modules on a Produce's and a point read's path, largest in-process cost first
# (benchmarks/kafka_request_costs.py under cProfile).
HOT_PATH_MODULES = (
    "server.kafka.hot_messages",
    "server.broker.replica_manager",
    "server.kafka.codec",
    "server.kafka.connection",
    "server.kafka.apis.fetch",
    "server.storage.validation",
    "server.storage.log_writer",
    "server.kafka.apis.produce",
    "server.storage.segment",
    "records.batch_walk",
    "server.storage.log_file",
    "records.batch",
    "records.builder",
    "server.kafka.framing",
    "records.reader",
    "server.storage.local_log",
    "server.storage.index",
    "server.storage.segments",
    "server.storage.offset_index",
    "server.storage.partition_log",
    "server.storage.time_index",
    "records.varint",
)
# The subset mypyc compiles today, and mypyc's default (docs/performance.md, "Compiled hot path
# (spike)", says why each other module is left out: mypy errors, an unsupported statement, or
# a class whose base is a C extension type).
MYPYC_MODULES = (
    "server.kafka.framing",
    "server.storage.validation",
    "server.storage.log_writer",
    "server.storage.segments",
    "server.storage.index",
    "server.storage.offset_index",
    "server.storage.time_index",
    "server.storage.local_log",
    "records.varint",
)
# mypyc's one shared library for the group: a module of the package, so it imports as any other.
_MYPYC_GROUP = "stratalog.server.hot_path"


def _tree(scratch: Path) -> Path:
    """A package-shaped tree of symlinks to the repository's folders; returns its root."""
    package = scratch / "tree" / "stratalog"
    package.mkdir(parents=True)
    shutil.copy(_ROOT / "stratalog_pkg" / "__init__.py", package / "__init__.py")
    for name, folder in _PACKAGE_DIRS.items():
        (package / name).symlink_to(_ROOT / folder)
    return package.parent


def _module_path(module: str) -> str:
    return "stratalog/" + module.replace(".", "/") + ".py"


def _require(backend: str) -> None:
    """Exits with a line that names the missing compiler: neither is a dependency of the
    package (pip install mypy, or cython, into the virtualenv first)."""
    package = {"mypyc": "mypyc", "cython": "Cython"}[backend]
    try:
        __import__(package)
    except ImportError:
        sys.exit(f"{backend} is not installed in this virtualenv: "
                 f"pip install {'mypy' if backend == 'mypyc' else 'cython'}")


def build(backend: str, modules: tuple[str, ...]) -> list[Path]:
    """Builds ``modules`` in place with ``backend``; returns the extension files written."""
    from setuptools import setup

    _require(backend)

    with tempfile.TemporaryDirectory(prefix="stratalog-compile-") as scratch_dir:
        scratch = Path(scratch_dir)
        root = _tree(scratch)
        paths = [_module_path(m) for m in modules]
        cwd = os.getcwd()
        os.chdir(root)
        try:
            if backend == "mypyc":
                from mypyc.build import mypycify

                extensions = mypycify(
                    ["--ignore-missing-imports", "--follow-imports=silent", *paths],
                    group_name=_MYPYC_GROUP,
                    target_dir=str(scratch / "mypyc"),
                )
            else:
                from Cython.Build import cythonize

                extensions = cythonize(
                    paths,
                    build_dir=str(scratch / "cython"),
                    # Annotations are left as the hints they are in CPython: with annotation
                    # typing, an argument annotated ``bytes`` refuses a bytearray (TypeError).
                    compiler_directives={"language_level": 3, "annotation_typing": False},
                    quiet=True,
                )
            setup(
                name="stratalog-compiled",
                ext_modules=extensions,
                script_args=["build_ext", "--inplace", "--build-temp", str(scratch / "temp")],
            )
        finally:
            os.chdir(cwd)
    return compiled_files()


def compiled_files(root: Path = _ROOT) -> list[Path]:
    """The extension files this script writes under the checkout ``root``: one per hot-path
    module, and mypyc's library."""
    found = []
    for module in HOT_PATH_MODULES:
        folder, _, name = module.rpartition(".")
        found += (root / folder.replace(".", "/")).glob(name + ".*.so")
    found += (root / "server").glob("hot_path__mypyc.*.so")
    return sorted(found)


def clean(root: Path = _ROOT) -> list[Path]:
    """Removes every extension file ``build`` may have written under ``root`` (and nothing
    else: records' C speedups, ``records/_speedups*.so``, is the package's own and stays)."""
    removed = compiled_files(root)
    for path in removed:
        path.unlink()
    return removed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("backend", nargs="?", choices=("mypyc", "cython"))
    parser.add_argument("--modules", help="comma-separated, e.g. server.storage.validation")
    parser.add_argument("--clean", action="store_true", help="remove the compiled modules")
    args = parser.parse_args(argv)
    removed = clean()
    if args.clean or args.backend is None:
        print(f"removed {len(removed)} compiled modules")
        return
    default = MYPYC_MODULES if args.backend == "mypyc" else HOT_PATH_MODULES
    modules = tuple(args.modules.split(",")) if args.modules else default
    unknown = sorted(set(modules) - set(HOT_PATH_MODULES))
    if unknown:
        sys.exit(f"not a hot-path module of this script: {', '.join(unknown)}")
    written = build(args.backend, modules)
    print(f"{args.backend}: {len(written)} extension files")
    for path in written:
        print(f"  {path.relative_to(_ROOT)}")


if __name__ == "__main__":
    main()
