"""docs/spark.md's examples, run as written on the README's data (issue 15, items 7 and 8).

A server of its own on a free port, its data directory ``data`` in the reader's directory (as
``make run`` keeps it); the README's Quick start runs first (it makes ``events``: 100,011
records, unkeyed ones spread by the sticky partitioner, which may leave a partition empty),
then every block of docs/spark.md in order, with tests/doc_blocks.py's conventions. Consecutive
Python blocks run as one script, like cells of one session (the later ones use the ``spark``
the first one made).

They run as a reader runs them, which is what broke before: no ``PYSPARK_PYTHON`` or
``PYSPARK_DRIVER_PYTHON``, and a ``python3`` first on ``PATH`` that is a Python without
stratalog or pyspark (the base interpreter with ``-I -S``), standing for the system Python a
reader's ``PATH`` has. Spark's workers used to be started with it, failing every query with
``No module named 'stratalog'``. ``SPARK_LOCAL_IP`` is the loopback address, as for every Spark
test here.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.doc_blocks import PROJECT_ROOT, SHELL_LANGUAGES, Block, Reader, blocks

from .conftest import _launch

SPARK_MD = PROJECT_ROOT / "docs" / "spark.md"
README = PROJECT_ROOT / "README.md"


def _decoy_python(directory: Path) -> Path:
    """A ``bin`` directory whose ``python3`` runs without any site-packages."""
    bin_dir = directory / "decoy-bin"
    bin_dir.mkdir()
    decoy = bin_dir / "python3"
    base = Path(sys.base_prefix) / "bin" / "python3"
    decoy.write_text(f'#!/bin/sh\nexec "{base}" -I -S "$@"\n')
    decoy.chmod(0o755)
    check = subprocess.run([str(decoy), "-c", "import pyspark"], capture_output=True, text=True)
    assert check.returncode != 0, "the decoy python3 imports pyspark: it proves nothing"
    return bin_dir


def test_spark_md_examples_on_the_readme_data(tmp_path: Path) -> None:
    directory = tmp_path / "reader"
    directory.mkdir()
    server = _launch(directory / "data")
    try:
        reader = Reader.prepare(directory, server.target)
        env = reader.env(SPARK_LOCAL_IP="127.0.0.1")
        for name in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_HOME"):
            env.pop(name, None)
        env["PATH"] = f"{_decoy_python(tmp_path)}:{env.get('PATH', '/usr/bin:/bin')}"

        for block in blocks(README, "## Quick start"):
            reader.run(block)

        ran = 0
        cells: list[Block] = []
        for block in [*blocks(SPARK_MD), None]:
            if block is not None and block.skip is None and block.language == "python":
                cells.append(block)
                continue
            if cells:
                script = "\n".join(cell.text for cell in cells)
                reader.run_python(script, cells[0].where, env=env)
                ran += len(cells)
                cells = []
            if block is not None and block.skip is None and block.language in SHELL_LANGUAGES:
                reader.run_shell(block, env=env)
                ran += 1
        assert ran >= 5, f"only {ran} blocks of docs/spark.md ran"

        upper = reader.run_python(
            "from stratalog.client import SyncClient\n"
            "with SyncClient('127.0.0.1:50051') as c:\n"
            "    t = c.describe_topic('events-upper')\n"
            "    print(t.num_partitions, sum(p.log_end_offset for p in t.partitions))\n",
            "check", env=env,
        )
        # The snippet's write made events-upper (createTopic, 3 partitions) with every record
        # of events read since the timestamp: counted here by the client library's Consumer
        # (the README's Quick start writes 100,011 and then deletes partition 0's, so the
        # number depends on how the records were spread).
        events = reader.run_python(
            "import asyncio\n"
            "from stratalog.client import Consumer\n"
            "async def count():\n"
            "    n = 0\n"
            "    async with Consumer('127.0.0.1:50051', 'events',\n"
            "                        start_timestamp_ms=1763800000000) as consumer:\n"
            "        async for _ in consumer:\n"
            "            n += 1\n"
            "    print(n)\n"
            "asyncio.run(count())\n",
            "count", env=env,
        )
        assert 0 < int(events) <= 100_011, events
        assert upper.split() == ["3", events.strip()]
    finally:
        server.process.send_signal(signal.SIGTERM)
        assert server.process.wait(30) == 0, server.log_text()[-4000:]
