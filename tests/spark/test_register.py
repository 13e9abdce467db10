"""stratalog.spark.register: which Python the connector's workers run (issue 15, item 8).

The whole story (a fresh session, no PYSPARK_PYTHON, a python3 without stratalog on PATH) is
tests/spark/test_docs_spark.py's; these check the choice and that the session is left as it was.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import pytest

from stratalog.spark import _worker_python, register


@dataclass
class _Context:
    """What the choice reads of pyspark's SparkContext: its master and configuration."""

    master: str
    conf: dict[str, str] = field(default_factory=dict)

    def getConf(self) -> dict[str, str]:  # pyspark's name
        return self.conf


@pytest.mark.parametrize(
    ("master", "env", "expected"),
    [
        ("local[2]", None, sys.executable),          # the venv's python, not PATH's python3
        ("local-cluster[2,1,1024]", None, sys.executable),
        ("local[2]", "/opt/py/bin/python", None),    # the user's choice wins
        ("spark://master:7077", None, None),         # a cluster: spark.pyspark.python's job
        ("yarn", None, None),
    ],
)
def test_worker_python(monkeypatch, master, env, expected):
    if env is None:
        monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    else:
        monkeypatch.setenv("PYSPARK_PYTHON", env)
    assert _worker_python(_Context(master)) == expected
    assert _worker_python(None) is None  # Spark Connect: no SparkContext
    # spark.pyspark.python set on the session wins too.
    assert _worker_python(_Context(master, {"spark.pyspark.python": "/opt/py"})) is None


def test_register_leaves_the_session_python_alone(spark, client, server, topic_name,
                                                  monkeypatch):
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    before = spark.sparkContext.pythonExec
    register(spark)
    assert spark.sparkContext.pythonExec == before
    topic = topic_name("t")
    client.create_topic(topic, partitions=1)
    client.produce(topic, 0, [b"a", b"b"])
    rows = (spark.read.format("stratalog").option("target", server.target)
            .option("subscribe", topic).load().select("value").collect())
    assert sorted(r.value for r in rows) == [b"a", b"b"]
