"""docs/groups.md's example of driving the coordinator runs, and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[4] / "docs" / "groups.md"


def test_the_group_coordinator_example_runs_as_documented():
    section = DOC.read_text().split("## The group coordinator", 1)[1]
    [example] = re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(example, f"{DOC}:python", "exec"), {})
    assert printed.getvalue().splitlines() == [
        "MEMBER_ID_REQUIRED",
        "b'orders-0'",
        "42",
        "['GroupMetadataRecord', 'OffsetCommitRecord']",
    ]
