"""What Kafka and kcat users type that is refused before any request: the whole command
(``main``) in-process, its exit code and its stderr (issue 25, item 8). The accepted spellings
run against a real server in tests/integration/test_cli_kafka_habits.py."""

from __future__ import annotations

import json

import pytest

from stratalog.cli.kafka_habits import HINTS
from stratalog.cli.main import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's usage errors
        code = exc.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "usage", "hint"),
    [
        (("consume", "t", "-G", "g"), "usage: stratalog consume ",
         "  -G: stratalog consume T --group G"),
        (("consume", "t", "--property", "print.key=true"), "usage: stratalog consume ",
         "  --property: print.key=true is --print-key"),
        (("consume", "t", "--property=print.key=true"), "usage: stratalog consume ",
         "  --property: print.key=true is --print-key"),
        (("consume", "t", "-J"), "usage: stratalog consume ", "  -J: --format json"),
        (("consume", "t", "-K:"), "usage: stratalog consume ", "  -K: --print-key"),
        (("offsets", "t", "--group", "g"), "usage: stratalog offsets ",
         "  --group: consumer groups: stratalog consume T --group G reads as a member"),
        (("groups", "--describe", "--group", "g", "--offsets"),
         "usage: stratalog groups describe ", "  --offsets: the partition table"),
        (("groups", "--reset-offsets", "--group", "g", "--topic", "t", "--by-duration", "PT1H"),
         "usage: stratalog groups reset-offsets ", "  --by-duration: --to-datetime -1h"),
        (("topics", "--alter", "--topic", "t", "--add-config", "a=1"),
         "usage: stratalog topics alter ", "  --add-config: topics alter NAME --set"),
        (("produce", "--topic", "t"), "usage: stratalog produce ",
         "  --topic: the topic is the first argument"),
        (("consume", "t", "--no-such-flag"), "usage: stratalog consume ",
         "  see stratalog consume --help"),
    ],
)
def test_unsupported_flags_print_the_subcommands_usage_and_what_to_use(capsys, args, usage,
                                                                       hint):
    code, err = run(capsys, *args)
    assert code == 2
    assert err.startswith(usage), err  # the subcommand's, not the top-level usage
    assert "error: unrecognized arguments: " in err
    assert any(line.startswith(hint) for line in err.splitlines()), err


def test_a_subcommand_specific_hint_does_not_leak_to_other_subcommands(capsys):
    # A hint keyed "<subcommand> --flag" is for that subcommand only.
    code, err = run(capsys, "consume", "t", "--partitions", "2")
    assert code == 2
    specific = [hint for key, hint in HINTS.items() if " " in key]
    assert specific and not any(hint in err for hint in specific)
    assert "see stratalog consume --help" in err


def test_every_hint_is_one_line():
    assert all("\n" not in hint for hint in HINTS.values())


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("consume", "t", "--from", "5", "--from-beginning"), ["two places to start"]),
        (("consume", "t", "-o", "s@soon"), ["s@", "soon"]),
        (("consume", "t", "-o", "stored"), ["-N (the last N records", "'stored'"]),
        (("consume", "t", "-o", "e@1", "-o", "e@2"), ["two stop times"]),
        (("consume", "t", "--from-timestamp", "-1h", "-o", "-1"), ["two places to start"]),
        (("consume", "t", "--topic", "u"), ["two topics"]),
        (("consume",), ["TOPIC (or --topic)"]),
        (("offsets", "--topic", "t", "--time", "-4"), ["--time", "'-4'"]),
        (("delete-records", "t", "--offset", "minus-two"), ["--offset takes"]),
        (("delete-records", "t"), ["give TOPIC and --offset"]),
        (("delete-records", "--offset", "3"), ["give TOPIC and --offset"]),
        (("delete-records", "--offset-json-file", "/nonexistent/offsets.json"),
         ["--offset-json-file /nonexistent/offsets.json: No such file"]),
        (("delete-records", "t", "--offset-json-file", "x.json"), ["give it alone"]),
    ],
)
def test_bad_values_are_usage_errors_naming_the_problem(capsys, args, words):
    code, err = run(capsys, *args)
    assert code == 2
    for word in words:
        assert word in err, err


@pytest.mark.parametrize(
    ("document", "words"),
    [
        ({}, "at least one entry"),
        ({"partitions": []}, "at least one entry"),
        ({"partitions": [{"topic": "t", "partition": -1, "offset": 0}]}, "partitions[0]"),
        ({"partitions": [{"topic": "t", "partition": 0, "offset": 1},
                         {"topic": "t", "partition": 1, "offset": "2"}]}, "partitions[1]"),
        ({"partitions": [{"topic": "t", "partition": 0, "offset": -2}]}, "an offset >= -1"),
        ({"partitions": [{"partition": 0, "offset": 0}]}, "expected a topic"),
        ({"partitions": [{"topic": "t", "partition": True, "offset": 0}]}, "partitions[0]"),
        ([1, 2], "at least one entry"),
    ],
)
def test_a_bad_offset_json_file_names_the_entry(capsys, tmp_path, document, words):
    path = tmp_path / "offsets.json"
    path.write_text(json.dumps(document))
    code, err = run(capsys, "delete-records", "--offset-json-file", str(path))
    assert code == 2
    assert words in err, err
    assert str(path) in err


def test_an_offset_json_file_that_is_not_json(capsys, tmp_path):
    path = tmp_path / "offsets.json"
    path.write_text("partition 0 offset 3")
    code, err = run(capsys, "delete-records", "--offset-json-file", str(path))
    assert code == 2
    assert "not JSON" in err
