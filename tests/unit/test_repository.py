"""The repository stands alone: nothing that builds, tests or ships it refers to a path outside it.

A fresh clone, with nothing beside it, must pass ``make test``. This test reads every file that
make, pytest and CI run — the tests and benchmarks (Python), the scripts in ``deploy/`` and
``.ci/``, ``examples/``, the Makefile, the Dockerfile, compose files and ``pyproject.toml`` — and
fails, naming file, line and text, on:

* **relative paths that climb out of the repository root.** Plain relative paths are taken from
  the repository root, the working directory of make, pytest, ``.ci/run`` and the ``deploy/``
  scripts (which ``cd`` there): ``../outside``, ``cd ..``, ``Path("../x")``. Paths anchored at the
  file itself may climb as far as the root and no further: ``$(dirname "$0")/..`` in ``.ci/run``
  is the root, ``$(dirname "$0")/../..`` is not; in a compose file ``..`` is taken from the file's
  directory, as compose does. In Python the climb is followed through the module's assignments:
  ``Path(__file__).resolve().parents[N]``, ``.parent``, ``os.path.dirname`` and ``/ ".."`` on a
  path derived from ``__file__``, so ``PROJECT_ROOT.parent / "shared"`` is caught whatever
  ``PROJECT_ROOT`` is called, and an upper-case ``*ROOT*`` name imported from elsewhere is taken
  to be the root.
* **absolute paths into one machine's checkouts or home directories:** ``/work/...``,
  ``/workspace/...``, ``/root/...``, ``/home/...``, ``/Users/...``, ``~/...``, ``$HOME``,
  ``Path.home()``, ``expanduser``.

Fine, and not reported: paths every machine has — ``/tmp``, ``/usr``, ``/etc``, ``/proc``,
``/dev``, ``/sys``, ``/var``, ``/opt``, ``/bin``, ``/lib``, ``/run``, ``/srv`` — and paths inside
an image, a chroot or a temporary directory, which follow a variable (``"$rootfs"/root/.cache``,
``f"{tmp}/home"``) or are test data never opened (``"/srv/data/t-0/0.log"`` in an error message).
A ``..`` after a variable (``$state/..``, ``tmp_path / ".."``) cannot be judged and is left alone;
so are strings that are not used as paths (``"../x"`` as an invalid topic name).

Not read: Markdown, ``tests/fixtures/`` (data: Kafka's bytes, the released .proto) and this file,
whose samples are the detector's own test cases (the last tests below).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path, PurePosixPath
from typing import NamedTuple

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
THIS_FILE = PurePosixPath("tests/unit/test_repository.py")
SCANNED = ("tests", "benchmarks", "deploy", ".ci", "examples", "Makefile", "pyproject.toml")
SKIPPED_DIRS = {"__pycache__", "fixtures", "results", ".pytest_cache", ".hypothesis"}
CONFIG_SUFFIXES = {".toml", ".yaml", ".yml", ".cfg", ".ini", ".sh"}


class Finding(NamedTuple):
    path: PurePosixPath
    line: int
    text: str
    problem: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.text!r} {self.problem}"


CLIMBS_OUT = "climbs out of the repository"
MACHINE_PATH = "is a path on one machine, outside the repository"


# -- absolute paths (every kind of file) -------------------------------------------------------

_MACHINE_DIR = re.compile(r"/(?:work|workspace|root|home|Users)(?=/|$|[\s\"'`;:,)\]}])")
_HOME = re.compile(r"(?<![\w~/.$-])~/|\$\{?HOME\b|\bPath\.home\(|\bexpanduser\(")
_PATH_END = re.compile(r"[\s\"'`;,)\]}]|$")


def _starts_a_path(line: str, slash: int) -> bool:
    """Whether the ``/`` at ``slash`` begins an absolute path, rather than continuing one.

    It continues a path after a word, a variable (``$x/``, ``{x}/``, ``$(x)/``, ``"$x"/``) or
    another slash (``http://host/home``); it begins one at the start of the line, after a space,
    ``=``, ``(``, ``[``, ``,``, ``:``, an opening quote or ``file://``.
    """
    if slash == 0 or line.endswith("file://", 0, slash):
        return True
    before = line[slash - 1]
    if before in "\"'`":
        return slash < 2 or not (line[slash - 2].isalnum() or line[slash - 2] in "_})]")
    return before.isspace() or before in "=([,:"


def _machine_paths(path: PurePosixPath, text: str) -> list[Finding]:
    findings = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in _MACHINE_DIR.finditer(line):
            if _starts_a_path(line, match.start()):
                end = _PATH_END.search(line, match.end()).start()
                findings.append(Finding(path, number, line[match.start():end], MACHINE_PATH))
        findings += [Finding(path, number, m.group(), MACHINE_PATH) for m in _HOME.finditer(line)]
    return findings


# -- climbs in shell, make and configuration files ---------------------------------------------

_CLIMB = re.compile(r"(?<![\w.~-])(?:\.\./)*\.\.(?=/|$|[\s\"'`;:)|])")
# What a climb may follow, and where it then starts from.
_FILE_ANCHOR = re.compile(
    r"(?:\$\(dirname\s+\"?\$\{?(?:0|BASH_SOURCE(?:\[0\])?)\}?\"?\)|\$\{0%/\*\})\"?/$"
)
_ROOT_ANCHOR = re.compile(r"(?:\$\(CURDIR\)|\$\{?PWD\}?|\$\(PWD\)|\$\(shell pwd\))\"?/$")


def _text_climbs(path: PurePosixPath, text: str) -> list[Finding]:
    file_dir = len(path.parts) - 1  # depth of the file's directory below the root
    relative_to_file = path.suffix in {".yaml", ".yml"}  # as compose resolves them
    findings = []
    for number, line in enumerate(text.splitlines(), 1):
        for match in _CLIMB.finditer(line):
            before = line[: match.start()]
            if _FILE_ANCHOR.search(before):
                start = file_dir
            elif _ROOT_ANCHOR.search(before):
                start = 0
            elif before.endswith("/"):
                continue  # after a variable or a relative directory: cannot be judged here
            else:
                start = file_dir if relative_to_file else 0
            if match.group().count("..") > start:
                findings.append(Finding(path, number, line.strip(), CLIMBS_OUT))
    return findings


# -- climbs in Python, followed through assignments ---------------------------------------------

ESCAPED = -1  # a path above the root; stays so whatever is joined to it
_ROOT_NAME = re.compile(r"[A-Z0-9_]*ROOT[A-Z0-9_]*")
_PATH_TYPES = {"Path", "PurePath", "PosixPath", "PurePosixPath", "pathlib.Path"}
_SAME_PATH = {"os.path.abspath", "os.path.realpath", "os.path.normpath"}
_OPENS_A_PATH = {"open", "os.chdir", "os.listdir", "os.scandir", "glob.glob", "shutil.copy",
                 "shutil.copytree", "shutil.copyfile", "os.path.exists", "os.path.isdir",
                 "os.path.isfile"}


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _walk(depth: int, relative: str) -> int:
    """Depth below the root after following ``relative`` from ``depth``; ESCAPED above it."""
    if depth == ESCAPED:
        return ESCAPED
    for part in relative.split("/"):
        if part == "..":
            depth -= 1
            if depth < 0:
                return ESCAPED
        elif part not in ("", "."):
            depth += 1
    return depth


class _PythonPaths:
    """Where each path expression of one module points: a depth below the root, or unknown.

    ``__file__`` is the module itself (as deep as its path has parts); plain relative strings
    given to ``Path()``, ``open()``, ``os.path.*`` or ``cwd=`` start at the root.
    """

    def __init__(self, path: PurePosixPath, tree: ast.Module) -> None:
        self.file = len(path.parts)
        self.names: dict[str, int | None] = {}
        assigned = {
            target.id
            for node in ast.walk(tree) if isinstance(node, ast.Assign | ast.AnnAssign)
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(target, ast.Name)
        }
        self.imported_roots = {
            alias.asname or alias.name
            for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            for alias in node.names
            if _ROOT_NAME.fullmatch(alias.asname or alias.name)
            and (alias.asname or alias.name) not in assigned
        }
        assignments = sorted(
            (node for node in ast.walk(tree) if isinstance(node, ast.Assign | ast.AnnAssign)),
            key=lambda node: (node.lineno, node.col_offset),
        )
        for node in assignments:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is None:
                continue
            for target in targets:
                if isinstance(target, ast.Name):
                    self.names[target.id] = self.depth(node.value)

    def depth(self, node: ast.AST) -> int | None:
        if isinstance(node, ast.Name):
            if node.id == "__file__":
                return self.file
            if node.id in self.names:
                return self.names[node.id]
            return 0 if node.id in self.imported_roots else None
        if isinstance(node, ast.Attribute) and node.attr == "parent":
            inner = self.depth(node.value)
            return None if inner is None else _walk(inner, "..")
        if (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute)
                and node.value.attr == "parents" and isinstance(node.slice, ast.Constant)
                and isinstance(node.slice.value, int)):
            inner, up = self.depth(node.value.value), node.slice.value + 1  # parents[0] = parent
            return None if inner is None else _walk(inner, "/".join([".."] * up))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            inner = self.depth(node.left)
            return None if inner is None else self._join(inner, [node.right])
        if isinstance(node, ast.Call):
            return self._call(node)
        return None

    def _join(self, depth: int, parts: list[ast.AST]) -> int | None:
        for part in parts:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                return ESCAPED if depth == ESCAPED else None
            depth = _walk(depth, part.value)
        return depth

    def _call(self, node: ast.Call) -> int | None:
        func = node.func
        name = _dotted(func)
        if isinstance(func, ast.Attribute) and func.attr in ("resolve", "absolute"):
            return self.depth(func.value)
        if isinstance(func, ast.Attribute) and func.attr == "joinpath":
            inner = self.depth(func.value)
            return None if inner is None else self._join(inner, list(node.args))
        if not node.args:
            return None
        first = node.args[0]
        if name in _PATH_TYPES or name in ("os.path.join", "path.join"):
            inner = self.depth(first)
            if inner is None and isinstance(first, ast.Constant) and isinstance(first.value, str):
                inner = _walk(0, first.value) if not first.value.startswith("/") else None
            return None if inner is None else self._join(inner, list(node.args[1:]))
        if name in _SAME_PATH:
            return self.depth(first)
        if name in ("os.path.dirname", "dirname"):
            inner = self.depth(first)
            return None if inner is None else _walk(inner, "..")
        return None

    def strings_used_as_paths(self, tree: ast.Module) -> list[ast.Constant]:
        """Relative string constants opened or used as a working directory (from the root)."""
        found = []
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            if _dotted(node.func) in _OPENS_A_PATH and node.args:
                found.append(node.args[0])
            found += [k.value for k in node.keywords if k.arg == "cwd"]
        return [n for n in found if isinstance(n, ast.Constant) and isinstance(n.value, str)
                and not n.value.startswith("/")]


def _python_climbs(path: PurePosixPath, source: str) -> list[Finding]:
    tree = ast.parse(source)
    paths = _PythonPaths(path, tree)
    # Where a path leaves the repository: not a name bound to such a path, nor an expression
    # built on one (their origin is reported), and each once, as its outermost expression.
    escaped = [
        node for node in ast.walk(tree)
        if paths.depth(node) == ESCAPED and not any(
            isinstance(child, ast.Name) and paths.depth(child) == ESCAPED
            for child in ast.walk(node)
        )
    ]
    escaped += [node for node in paths.strings_used_as_paths(tree)
                if _walk(0, node.value) == ESCAPED]
    inner = {id(child) for node in escaped for child in ast.walk(node) if child is not node}
    return sorted({
        Finding(path, node.lineno, ast.get_source_segment(source, node) or "", CLIMBS_OUT)
        for node in escaped if id(node) not in inner
    })


# -- the scan ----------------------------------------------------------------------------------


def _kind(path: Path) -> str | None:
    """``python``, ``text`` (shell, make, configuration) or None for a file not scanned."""
    if path.suffix == ".py":
        return "python"
    if path.name in ("Makefile", "Dockerfile") or path.suffix in CONFIG_SUFFIXES:
        return "text"
    with path.open("rb") as f:
        return "text" if f.read(2) == b"#!" else None


def find_outside_paths(path: PurePosixPath, text: str, kind: str) -> list[Finding]:
    """Every reference to a path outside the repository in one file (``path`` from the root)."""
    climbs = _python_climbs(path, text) if kind == "python" else _text_climbs(path, text)
    return sorted(set(climbs + _machine_paths(path, text)))


def scanned_files(root: Path) -> list[tuple[PurePosixPath, str]]:
    files = []
    for entry in SCANNED:
        top = root / entry
        candidates = [top] if top.is_file() else sorted(top.rglob("*"))
        for path in candidates:
            relative = PurePosixPath(path.relative_to(root).as_posix())
            if (not path.is_file() or SKIPPED_DIRS.intersection(relative.parts[:-1])
                    or relative == THIS_FILE):
                continue
            kind = _kind(path)
            if kind is not None:
                files.append((relative, kind))
    return files


def test_nothing_refers_to_a_path_outside_the_repository() -> None:
    findings = []
    for relative, kind in scanned_files(PROJECT_ROOT):
        findings += find_outside_paths(relative, (PROJECT_ROOT / relative).read_text(), kind)
    assert not findings, (
        "a fresh clone has nothing beside it; keep what these need inside the repository:\n"
        + "\n".join(map(str, findings))
    )


def test_the_scan_reads_what_make_pytest_and_ci_run() -> None:
    scanned = dict(scanned_files(PROJECT_ROOT))
    for expected, kind in [
        ("Makefile", "text"), ("pyproject.toml", "text"), (".ci/run", "text"),
        (".ci/check-java", "text"), ("deploy/docker-test.sh", "text"),
        ("deploy/compose.yaml", "text"), ("deploy/Dockerfile", "text"),
        ("tests/conftest.py", "python"), ("tests/unit/test_proto.py", "python"),
        ("benchmarks/run.py", "python"), ("deploy/healthcheck.py", "python"),
    ]:
        assert scanned.get(PurePosixPath(expected)) == kind, expected
    assert not any(p.parts[:2] == ("tests", "fixtures") for p in scanned)


# -- the detector on samples -------------------------------------------------------------------


def _found(path: str, text: str, kind: str = "python") -> list[tuple[int, str, str]]:
    return [(f.line, f.text, f.problem)
            for f in find_outside_paths(PurePosixPath(path), text, kind)]


# tests/conftest.py and tests/unit/test_proto.py as they were before the fixtures moved in (the
# sibling directory renamed: any directory beside the repository is outside it).
OLD_CONFTEST = '''\
PROJECT_ROOT = Path(__file__).resolve().parent.parent
# ../outside beside the project holds the Kafka-written fixtures.
KAFKA_WRITTEN = PROJECT_ROOT.parent / "outside" / "fixtures" / "kafka-written"
'''
OLD_TEST_PROTO = '''\
PROJECT_ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = PROJECT_ROOT / "proto"
OUR_PROTO = PROTO_ROOT / "stratalog" / "v1" / "broker.proto"
CONTRACT_PROTO = PROJECT_ROOT.parent / "outside" / "design" / "broker.proto"
'''


def test_the_detector_catches_the_project_roots_parent() -> None:
    assert _found("tests/conftest.py", OLD_CONFTEST) == [
        (3, 'PROJECT_ROOT.parent / "outside" / "fixtures" / "kafka-written"', CLIMBS_OUT)
    ]
    assert _found("tests/unit/test_proto.py", OLD_TEST_PROTO) == [
        (4, 'PROJECT_ROOT.parent / "outside" / "design" / "broker.proto"', CLIMBS_OUT)
    ]


def test_the_detector_catches_dot_dot_shared() -> None:
    assert _found("Makefile", "fixtures:\n\tcp -r ../outside/fixtures tests/\n", "text") == [
        (2, "cp -r ../outside/fixtures tests/", CLIMBS_OUT)
    ]
    assert _found(".ci/run", 'cd "$(dirname "$0")/.."\nls ../outside\n', "text") == [
        (2, "ls ../outside", CLIMBS_OUT)
    ]
    assert _found("tests/unit/test_x.py", 'PROTO = Path("../outside/design/broker.proto")\n') == [
        (1, 'Path("../outside/design/broker.proto")', CLIMBS_OUT)
    ]
    assert _found("tests/unit/test_x.py", 'data = open("../outside/x.log", "rb").read()\n') == [
        (1, '"../outside/x.log"', CLIMBS_OUT)
    ]
    assert _found("pyproject.toml", 'testpaths = ["tests", "../outside/tests"]\n', "text") == [
        (1, 'testpaths = ["tests", "../outside/tests"]', CLIMBS_OUT)
    ]


@pytest.mark.parametrize(
    ("path", "text", "kind", "flagged"),
    [
        # Climbs anchored at the file: as far as the root, not beyond.
        (".ci/run", 'cd "$(dirname "$0")/.."', "text", False),
        (".ci/run", 'cd "$(dirname "$0")/../.."', "text", True),
        ("deploy/x.sh", 'here=$(dirname "${BASH_SOURCE[0]}")/../..', "text", True),
        ("Makefile", "\tln -s $(CURDIR)/../outside x", "text", True),
        ("deploy/compose.yaml", "      context: ..", "text", False),
        ("deploy/compose.yaml", "      context: ../..", "text", True),
        ("deploy/x.sh", "cd ..", "text", True),
        ("deploy/x.sh", 'rm -rf "$state/../x"', "text", False),
        ("tests/unit/test_x.py", "ROOT = Path(__file__).resolve().parents[2]", "python", False),
        ("tests/unit/test_x.py", "ROOT = Path(__file__).resolve().parents[3]", "python", True),
        ("tests/unit/test_x.py", "X = Path(__file__).parent.parent.parent.parent", "python", True),
        ("benchmarks/x.py", "HERE = Path(__file__).parent\nUP = HERE.parent / 'docs'", "python",
         False),
        ("benchmarks/x.py", "HERE = Path(__file__).parent\nUP = HERE / '..' / '..'", "python",
         True),
        ("benchmarks/x.py", "D = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))",
         "python", False),
        ("benchmarks/x.py", "D = os.path.join(os.path.dirname(os.path.dirname(__file__)), '..')",
         "python", True),
        ("tests/unit/test_x.py", "from conftest import PROJECT_ROOT\nX = PROJECT_ROOT / '..'",
         "python", True),
        ("tests/unit/test_x.py", "X = (Path(__file__).parents[2]).joinpath('../outside')",
         "python", True),
        ("tests/unit/test_x.py", "subprocess.run(['ls'], cwd='..')", "python", True),
        # Strings that are not paths, and climbs from directories that are not the repository.
        ("tests/unit/test_x.py", 'client.create_topic("../x")', "python", False),
        ("tests/unit/test_x.py", 'other = tmp_path / ".." / "d0"', "python", False),
        ("tests/unit/test_x.py", "# ../outside beside the project", "python", False),
        # Absolute paths: machine-specific ones are flagged, system ones and in-image ones are not.
        ("tests/unit/test_x.py", 'FIXTURES = Path("/work/shared/fixtures")', "python", True),
        ("tests/unit/test_x.py", "# copied from /home/alice/kafka/data", "python", True),
        ("deploy/x.sh", "rm -rf /root/.cache", "text", True),
        ("deploy/x.sh", "cp ~/data.log x", "text", True),
        ("deploy/x.sh", 'cp "$HOME/data.log" x', "text", True),
        ("tests/unit/test_x.py", "p = Path.home() / 'x'", "python", True),
        ("deploy/x.sh", 'rm -rf "$rootfs"/root/.cache', "text", False),
        ("tests/unit/test_x.py", 'p = f"{tmp_path}/home/x"', "python", False),
        ("tests/unit/test_x.py", 'raise OSError(28, "full", "/srv/data/t-0/0.log")', "python",
         False),
        ("deploy/Dockerfile", "VOLUME /var/lib/stratalog", "text", False),
        ("deploy/x.sh", "mktemp -d /tmp/stratalog.XXXXXX; ls /usr/bin /etc /proc", "text", False),
        ("tests/unit/test_x.py", 'URL = "http://127.0.0.1:9464/home/metrics"', "python", False),
        ("pyproject.toml", 'find-links = "file:///home/alice/wheels"', "text", True),
    ],
)
def test_the_detector_on_samples(path, text, kind, flagged) -> None:
    found = _found(path, text + "\n", kind)
    assert bool(found) == flagged, found
