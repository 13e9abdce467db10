"""Running the fenced examples of the documentation as written (the docs tests' shared part).

A reader copies the README's and docs/'s examples; these helpers run them the same way, so that
the docs cannot drift from what the code does (issue 15). The conventions, in the markdown:

* A fenced block is a shell block (```` ``` ````, ```` ```sh ````, ```` ```console ````) or a
  Python one (```` ```python ````); other languages (toml, json, ...) are not run.
* In a shell block, a line starting with ``$ `` is a command (a trailing ``\\`` continues it
  on the next line); the lines after it, up to the next ``$ ``, are what it prints (stdout and
  stderr together, as a terminal shows them). ``...`` stands for any text within a line, and a
  line of just ``...`` for any number of lines (none included). A command with no lines after
  it has its output unchecked. A shell block without any ``$ `` line is a list of commands,
  one a line (with ``\\`` continuations), outputs unchecked. Every command must exit 0; it
  runs under ``bash -c`` (the docs use bash's ``$'\\t'``).
* ``<!-- docs-test: skip (why) -->`` on the line just before a fence: the block is not run
  (it never ends, needs a cluster or TLS material, starts the server the test started
  already); the reason is required, so that a skipped block says why.
* ``<!-- docs-test: background (why) -->`` before a fence: the block is one command that
  starts a server and runs until Ctrl-C (what a reader runs in another shell). It runs in the
  background (:meth:`Reader.start_server`) with ``STRATALOG_LISTEN=127.0.0.1:0`` and
  ``STRATALOG_METRICS_PORT=0`` in its environment, so that it takes free ports; the blocks
  after it are run against the address it prints.

Every block is run with ``127.0.0.1:50051`` (the server's default address in the docs) replaced
by the test server's target (in the commands and in the output they show), and with
``STRATALOG_TARGET`` set to it; ``127.0.0.1:9092`` (the default Kafka listener) by the test
server's Kafka address: nothing else is changed.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DOC_TARGET = "127.0.0.1:50051"
DOC_KAFKA = "127.0.0.1:9092"
SHELL_LANGUAGES = ("", "sh", "shell", "bash", "console")
#: A command's time limit: generous; it only turns a hang into a failure.
COMMAND_TIMEOUT_S = 300.0
#: What pyspark prints when the JVM it launches exits before it answers (run_shell retries).
JVM_START_FAILURE = "JAVA_GATEWAY_EXITED"

_FENCE = re.compile(r"^```(\S*)\s*$")
_SKIP = re.compile(r"^<!-- docs-test: skip \((.+)\) -->$")
_BACKGROUND = re.compile(r"^<!-- docs-test: background \((.+)\) -->$")
_LISTENING = re.compile(r"^stratalog: listening on (\S+)$")
#: A background server's start bound: generous, it only turns a hang into a failure.
SERVER_START_TIMEOUT_S = 60.0
_MARKER = re.compile(r"^<!-- docs-test:")


@dataclass(frozen=True)
class Block:
    """One fenced block: its file, the line of its opening fence, language, text, the
    reason it is skipped (None: it runs), and whether it starts a server in the background
    (the marker's reason, else None)."""

    path: Path
    line: int
    language: str
    text: str
    skip: str | None
    background: str | None = None

    @property
    def where(self) -> str:
        inside = self.path.is_relative_to(PROJECT_ROOT)
        return f"{self.path.relative_to(PROJECT_ROOT) if inside else self.path}:{self.line}"


@dataclass(frozen=True)
class Command:
    """A shell command of a block and what it prints (None: unchecked)."""

    line: int
    text: str
    expected: str | None


def blocks(path: Path, section: str | None = None) -> list[Block]:
    """The fenced blocks of ``path`` (only those under the heading ``section``, up to the next
    heading of the same level, when given).

    Raises AssertionError for a marker this module does not understand, or one not followed
    by a fence: a typo must not silently run (or skip) a block.
    """
    lines = path.read_text().splitlines()
    if section is not None:
        start = lines.index(section)
        level = section.split(" ", 1)[0]
        end = next((i for i in range(start + 1, len(lines))
                    if lines[i].startswith(level + " ")), len(lines))
        first, lines = start, lines[start:end]
    else:
        first = 0
    found: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        skip = background = None
        if _MARKER.match(line):
            match = _SKIP.match(line)
            started = _BACKGROUND.match(line)
            assert match or started, f"{path}:{first + i + 1}: unknown docs-test marker {line!r}"
            assert i + 1 < len(lines) and _FENCE.match(lines[i + 1]), (
                f"{path}:{first + i + 1}: a docs-test marker must be just before a fence"
            )
            if match:
                skip = match.group(1)
            else:
                background = started.group(1)
            i += 1
            line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            found.append(Block(path, first + i + 1, fence.group(1).lower(),
                               "\n".join(lines[i + 1:end]) + "\n", skip, background))
            i = end
        i += 1
    return found


def commands(block: Block) -> list[Command]:
    """The shell commands of ``block``, each with its expected output."""
    raw = block.text.splitlines()
    prompted = any(line.startswith("$ ") for line in raw)
    out: list[Command] = []
    i = 0
    while i < len(raw):
        line = raw[i]
        if prompted and not line.startswith("$ "):
            raise AssertionError(f"{block.where}: output {line!r} before any $ command")
        start = i
        text = line[2:] if prompted else line
        while text.endswith("\\"):  # kept: bash joins the lines itself
            i += 1
            text += "\n" + raw[i]
        i += 1
        expected = None
        if prompted:
            output = []
            while i < len(raw) and not raw[i].startswith("$ "):
                output.append(raw[i])
                i += 1
            expected = "\n".join(output) + "\n" if output else None
        if text.strip():
            out.append(Command(block.line + 1 + start, text, expected))
    return out


def output_matches(expected: str, actual: str) -> bool:
    """Whether ``actual`` is what ``expected`` shows, with the ``...`` rules of the module
    docstring; trailing spaces are ignored."""
    pattern = ""
    for line in expected.splitlines():
        line = line.rstrip()
        if line == "...":
            pattern += r"(?:[^\n]*\n)*?"
        else:
            pattern += r"[^\n]*".join(re.escape(part) for part in line.split("...")) + r"\n"
    text = "\n".join(line.rstrip() for line in actual.splitlines()) + "\n"
    return re.fullmatch(pattern, text) is not None


@dataclass(frozen=True)
class Reader:
    """Where a reader runs the examples: a directory with ``.venv`` (a link to the Python
    environment running the tests), ``examples`` (a link to the repository's), the server's
    data directory ``data``, and the test server's target."""

    directory: Path
    target: str
    kafka: str | None = None  # the server's Kafka listener, "127.0.0.1:PORT"

    @staticmethod
    def prepare(directory: Path, target: str, kafka: str | None = None) -> Reader:
        directory.mkdir(parents=True, exist_ok=True)
        for name, source in ((".venv", Path(sys.prefix)), ("examples", PROJECT_ROOT / "examples")):
            link = directory / name
            if not link.exists():
                link.symlink_to(source, target_is_directory=True)
        return Reader(directory, target, kafka)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("STRATALOG_")}
        env["STRATALOG_TARGET"] = self.target
        env.update(extra)
        return env

    def substitute(self, text: str) -> str:
        text = text.replace(DOC_TARGET, self.target)
        return text.replace(DOC_KAFKA, self.kafka) if self.kafka else text

    def run_shell(self, block: Block, env: dict[str, str] | None = None) -> None:
        """Run every command of a shell block, in order: each must exit 0 and print what the
        block shows."""
        for command in commands(block):
            for _attempt in range(2):
                result = subprocess.run(
                    ["bash", "-c", self.substitute(command.text)], cwd=self.directory,
                    env=env or self.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    text=True, timeout=COMMAND_TIMEOUT_S,
                )
                # Spark's JVM failing to start on a loaded machine is the machine's fault, not
                # the doc's (seen twice in a whole-suite run, never alone): one more try.
                if result.returncode == 0 or JVM_START_FAILURE not in result.stdout:
                    break
            where = f"{block.path.name}:{command.line}: $ {command.text}"
            assert result.returncode == 0, (
                f"{where}\nexited {result.returncode}; it printed:\n{result.stdout[-4000:]}"
            )
            if command.expected is not None:
                assert output_matches(self.substitute(command.expected), result.stdout), (
                    f"{where}\nprinted:\n{result.stdout[-4000:]}\nthe doc shows:\n"
                    f"{command.expected}"
                )

    def run_python(self, source: str, where: str, env: dict[str, str] | None = None) -> str:
        """Run ``source`` as a script with the environment's Python (``.venv/bin/python``, as
        a reader would); it must exit 0. Returns what it printed."""
        script = self.directory / f"doc-{re.sub(r'[^a-zA-Z0-9]+', '-', where)}.py"
        script.write_text(self.substitute(source))
        result = subprocess.run(
            [str(self.directory / ".venv" / "bin" / "python"), script.name],
            cwd=self.directory, env=env or self.env(), stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True, timeout=COMMAND_TIMEOUT_S,
        )
        assert result.returncode == 0, (
            f"{where}: the example exited {result.returncode}; it printed:\n"
            f"{result.stdout[-6000:]}"
        )
        return result.stdout

    def start_server(self, block: Block, log_path: Path) -> tuple[BackgroundServer, Reader]:
        """Start a background block's command (its marker: the module docstring) in a process
        group of its own, as in another shell, on free ports; wait until it prints the
        address it listens on. Returns the server and a Reader whose target is that address.
        Its stderr (the server's log) goes to ``log_path``.

        Raises AssertionError with the log if it exits or stays silent for
        :data:`SERVER_START_TIMEOUT_S`.
        """
        [command] = commands(block)
        env = self.env(STRATALOG_LISTEN="127.0.0.1:0", STRATALOG_METRICS_PORT="0",
                       STRATALOG_KAFKA_LISTEN="127.0.0.1:0")
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                ["bash", "-c", self.substitute(command.text)], cwd=self.directory, env=env,
                stdout=subprocess.PIPE, stderr=log, start_new_session=True,
            )
        server = BackgroundServer(process, log_path, f"{block.where}: $ {command.text}")
        assert process.stdout is not None
        fd = process.stdout.fileno()
        printed = b""
        deadline = time.monotonic() + SERVER_START_TIMEOUT_S
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while True:
                for line in printed.decode(errors="replace").splitlines():
                    if match := _LISTENING.match(line.strip()):
                        return server, Reader(self.directory, match.group(1))
                remaining = deadline - time.monotonic()
                chunk = os.read(fd, 4096) if remaining > 0 and selector.select(remaining) else b""
                if not chunk:
                    server.kill()
                    raise AssertionError(f"{server.where}\nprinted no address within "
                                         f"{SERVER_START_TIMEOUT_S} s or exited; log:\n"
                                         f"{server.log_text()[-4000:]}")
                printed += chunk

    def run(self, block: Block) -> None:
        """Run one block (shell or Python); skipped and other-language blocks are not run.
        A background block is the caller's to start (:meth:`start_server`)."""
        assert block.background is None, f"{block.where}: start it with start_server()"
        if block.skip is not None:
            return
        if block.language in SHELL_LANGUAGES:
            self.run_shell(block)
        elif block.language == "python":
            self.run_python(block.text, block.where)


@dataclass
class BackgroundServer:
    """A server a background block started: its process (the leader of its process group),
    its log, and the block's place and command (for messages)."""

    process: subprocess.Popen[bytes]
    log_path: Path
    where: str

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def interrupt(self, timeout_s: float = 60.0) -> int:
        """Ctrl-C, as a terminal sends it (SIGINT to the process group); the exit code."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"{self.where}\nstill running {timeout_s} s after Ctrl-C;"
                                     f" log:\n{self.log_text()[-4000:]}") from None
        if self.process.stdout is not None:
            self.process.stdout.close()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the process group if it still runs (a failing test's teardown)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
