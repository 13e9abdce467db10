""".ci/check-java, which `make test` runs first: Java 17+ or one line saying what to install.

Each case runs the real script with ``JAVA_HOME`` pointing at a directory whose ``bin/java`` prints
what some real JDK prints for ``-version`` (on stderr, as Java does); the machine's own Java is
never consulted.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
CHECK_JAVA = PROJECT_ROOT / ".ci" / "check-java"
INSTALL_HINT = "apt-get install openjdk-17-jre-headless"


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/bash", str(CHECK_JAVA)], env=env, capture_output=True, text=True, timeout=30,
        check=False,
    )


def _fake_jdk(tmp_path: Path, version_output: str) -> dict[str, str]:
    """An environment whose JAVA_HOME's bin/java prints ``version_output`` to stderr."""
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\ncat >&2 <<'EOF'\n{version_output}\nEOF\n")
    java.chmod(0o755)
    return {"PATH": os.environ["PATH"], "JAVA_HOME": str(tmp_path / "jdk")}


@pytest.mark.parametrize(
    ("output", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15\nOpenJDK Runtime Environment (build 17.0.15+6)', 17),
        ('openjdk version "21" 2023-09-19\nOpenJDK 64-Bit Server VM (build 21+35-2513)', 21),
        ('openjdk version "22-ea" 2024-03-19', 22),
        ('openjdk version "25.0.1" 2025-10-21 LTS', 25),
        ('Picked up JAVA_TOOL_OPTIONS: -Xmx1g\nopenjdk version "17.0.2" 2022-01-18', 17),
    ],
)
def test_java_17_or_newer_passes(tmp_path, output, major) -> None:
    result = _run(_fake_jdk(tmp_path, output))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"Java {major} (")
    assert result.stderr == ""


@pytest.mark.parametrize(
    ("output", "says"),
    [
        ('java version "1.8.0_392"\nJava(TM) SE Runtime Environment', 'is Java 8 ("1.8.0_392")'),
        ('openjdk version "11.0.21" 2023-10-17', 'is Java 11 ("11.0.21")'),
        ('openjdk version "16" 2021-03-16', 'is Java 16 ("16")'),
        ("No Java runtime present, requesting install.", "printed no version"),
        ('openjdk version "beta" 2021-03-16', 'printed the version "beta"'),
    ],
)
def test_older_or_unreadable_java_stops_with_one_line(tmp_path, output, says) -> None:
    result = _run(_fake_jdk(tmp_path, output))
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("make test needs Java 17+ for the Spark tests, but ")
    assert says in lines[0]
    assert INSTALL_HINT in lines[0]


def test_no_java_on_path_stops_with_one_line(tmp_path) -> None:
    # An empty PATH: the script parses with bash builtins only, so nothing else is needed.
    result = _run({"PATH": str(tmp_path)})
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "make test needs Java 17+ for the Spark tests, but there is no java on PATH: install one "
        "(Debian/Ubuntu: apt-get install openjdk-17-jre-headless; elsewhere any JDK 17+)"
    ]


def test_a_java_home_without_java_stops_with_one_line(tmp_path) -> None:
    result = _run({"PATH": os.environ["PATH"], "JAVA_HOME": str(tmp_path)})
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1
    assert f"JAVA_HOME is {tmp_path} and {tmp_path}/bin/java is not an executable" in lines[0]
    assert INSTALL_HINT in lines[0]


def test_make_test_stops_at_the_check_before_installing_anything(tmp_path) -> None:
    env = _fake_jdk(tmp_path, 'java version "1.8.0_392"')
    venv = tmp_path / "venv"
    result = subprocess.run(
        ["make", "--no-print-directory", "-C", str(PROJECT_ROOT), "test", f"VENV={venv}"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode != 0
    assert 'is Java 8 ("1.8.0_392")' in result.stderr.splitlines()[0]
    assert not venv.exists(), "make created the virtualenv before checking Java"
    assert result.stdout == ""
