"""meta.properties: Java properties text both ways, Kafka's Uuid strings, Kafka-written files."""

from __future__ import annotations

import datetime as dt
import random
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stratalog.server.storage.durable import tmp_path_for
from stratalog.server.storage.errors import CorruptCheckpointError, StorageIOError
from stratalog.server.storage.meta_properties import (
    META_PROPERTIES_FILE,
    MetaProperties,
    format_properties,
    parse_properties,
    random_kafka_uuid,
    read_meta_properties,
    uuid_from_kafka_string,
    uuid_to_kafka_string,
    write_meta_properties,
)

# As a Kafka 3.7+ KRaft broker on Java 17 writes it (Properties.store: "#", the date, then
# the entries in hash order, which is not sorted).
KAFKA_KRAFT_FILE = (
    b"#\n"
    b"#Thu Jan 11 12:53:26 UTC 2024\n"
    b"node.id=1\n"
    b"directory.id=hYf9TKXfPMzTeGUWIL0t6Q\n"
    b"version=1\n"
    b"cluster.id=4L6g3nShT-eMCtK--X86sw\n"
)
# As a ZooKeeper-era Kafka 2.8 broker wrote it (version 0, broker.id).
KAFKA_ZK_FILE = (
    b"#\n#Wed May 08 10:23:45 CST 2024\nbroker.id=2\nversion=0\ncluster.id=tfIO-Ab4PdddYjiU3pEWqw\n"
)


def write_file(directory: Path, content: bytes) -> None:
    (directory / META_PROPERTIES_FILE).write_bytes(content)


# --- Kafka's Uuid --------------------------------------------------------------------------------


def test_uuid_string_is_urlsafe_base64_of_the_16_bytes() -> None:
    value = uuid.UUID("84bf5fd2-7d6f-4ce4-8a8c-0002d06f22a9")
    text = uuid_to_kafka_string(value)
    assert len(text) == 22
    assert text == "hL9f0n1vTOSKjAAC0G8iqQ"
    assert uuid_from_kafka_string(text) == value
    # Kafka's fromString uses Java's URL decoder, which also takes the padded form.
    assert uuid_from_kafka_string(text + "==") == value


def test_known_kafka_uuid_strings() -> None:
    # Uuid.ZERO_UUID and Uuid.ONE_UUID (most significant long first).
    assert uuid_to_kafka_string(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert uuid_to_kafka_string(uuid.UUID(int=1)) == "AAAAAAAAAAAAAAAAAAAAAQ"
    assert uuid_from_kafka_string("hYf9TKXfPMzTeGUWIL0t6Q").bytes[:2] == b"\x85\x87"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("A" * 25, "too long"),
        ("AAAA", "3 bytes"),
        ("hYf9TKXfPMzTeGUWIL0t6Q+", "not URL-safe base64"),  # '+' is standard, not URL-safe
        ("hYf9TKXfPMzTeGUWIL0t/Q", "not URL-safe base64"),
        ("hYf9TKXfPMzTeGUWIL0t6", "not URL-safe base64"),  # 21 chars: not valid base64
        ("", "0 bytes"),
        ("héllo", "not URL-safe base64"),
    ],
)
def test_bad_uuid_strings(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        uuid_from_kafka_string(text)


def test_random_kafka_uuids_avoid_reserved_and_dash() -> None:
    seen = set()
    for _ in range(2000):
        value = random_kafka_uuid()
        text = uuid_to_kafka_string(value)
        assert not text.startswith("-")
        assert not (value.int >> 64 == 0 and value.int & (2**64 - 1) < 100)
        assert uuid_from_kafka_string(text) == value
        seen.add(value)
    assert len(seen) == 2000


@given(st.binary(min_size=16, max_size=16))
def test_uuid_round_trip(raw: bytes) -> None:
    value = uuid.UUID(bytes=raw)
    assert uuid_from_kafka_string(uuid_to_kafka_string(value)) == value


# --- Java properties text ------------------------------------------------------------------------


def test_format_is_kafkas_layout() -> None:
    when = dt.datetime(2024, 3, 5, 10, 21, 12, tzinfo=dt.UTC)
    text = format_properties({"version": "1", "node.id": "1", "cluster.id": "abc"}, now=when)
    assert text == "#\n#Tue Mar 05 10:21:12 UTC 2024\ncluster.id=abc\nnode.id=1\nversion=1\n"


def test_format_date_is_utc_whatever_the_zone() -> None:
    when = dt.datetime(2024, 1, 1, 1, 0, 0, tzinfo=dt.timezone(dt.timedelta(hours=5)))
    assert format_properties({}, now=when) == "#\n#Sun Dec 31 20:00:00 UTC 2023\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a=1", {"a": "1"}),
        ("a = 1", {"a": "1"}),
        ("a:1", {"a": "1"}),
        ("a 1", {"a": "1"}),
        ("a\t=\t1", {"a": "1"}),
        ("a==1", {"a": "=1"}),  # only one separator is eaten
        ("a =  = 1", {"a": "= 1"}),
        ("a", {"a": ""}),
        ("a=", {"a": ""}),
        ("a=1  ", {"a": "1  "}),  # trailing whitespace of a value is kept
        ("  a=1", {"a": "1"}),
        ("# comment\n! also\n\n   \na=1", {"a": "1"}),
        ("a=1\na=2", {"a": "2"}),  # later duplicates win
        ("a\\=b=c", {"a=b": "c"}),
        ("a\\ b=c", {"a b": "c"}),
        ("a\\:b:c", {"a:b": "c"}),
        ("a=\\u0041\\t\\n\\r\\f\\\\\\x", {"a": "A\t\n\r\f\\x"}),
        ("a=\\ud83d\\ude00", {"a": "\U0001f600"}),  # a surrogate pair joins into one character
        ("a=1\\\n   2", {"a": "12"}),  # continuation, leading whitespace skipped
        ("a=1\\\n\nb=2", {"a": "1", "b": "2"}),  # a blank line ends the continuation
        ("a=1\\\\\nb=2", {"a": "1\\", "b": "2"}),  # an escaped backslash does not continue
        ("a=1\\\n#b", {"a": "1#b"}),  # a continued line is never a comment
        ("a=1\\", {"a": "1"}),  # continuation at the end of input
        ("a=1\r\nb=2\rc=3", {"a": "1", "b": "2", "c": "3"}),
        ("#x\\\na=1", {"a": "1"}),  # a comment does not continue
        ("\fa=1", {"a": "1"}),
    ],
)
def test_parse_like_java(text: str, expected: dict[str, str]) -> None:
    assert parse_properties(text) == expected


@pytest.mark.parametrize("text", ["a=\\u12", "a=\\u12G4", "a=\\u"])
def test_parse_malformed_unicode_escape(text: str) -> None:
    with pytest.raises(CorruptCheckpointError, match=r"Malformed \\uxxxx encoding") as info:
        parse_properties("# c\n" + text, path="/d/meta.properties")
    assert info.value.line_number == 2
    assert "/d/meta.properties" in str(info.value)


property_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30
)


@given(st.dictionaries(property_text, property_text, max_size=8))
def test_format_then_parse_round_trip(props: dict[str, str]) -> None:
    text = format_properties(props)
    assert text.isascii()
    assert parse_properties(text) == props


# --- MetaProperties ------------------------------------------------------------------------------


def test_reads_a_kafka_kraft_file(tmp_path: Path) -> None:
    write_file(tmp_path, KAFKA_KRAFT_FILE)
    meta = read_meta_properties(tmp_path)
    assert meta == MetaProperties(
        cluster_id="4L6g3nShT-eMCtK--X86sw",
        node_id=1,
        directory_id=uuid_from_kafka_string("hYf9TKXfPMzTeGUWIL0t6Q"),
        version=1,
    )


def test_reads_a_kafka_zookeeper_era_file(tmp_path: Path) -> None:
    write_file(tmp_path, KAFKA_ZK_FILE)
    meta = read_meta_properties(tmp_path)
    assert meta == MetaProperties(
        cluster_id="tfIO-Ab4PdddYjiU3pEWqw", node_id=2, directory_id=None, version=0
    )


def test_version_0_without_ids_and_missing_version_means_0(tmp_path: Path) -> None:
    write_file(tmp_path, b"#\n")
    assert read_meta_properties(tmp_path) == MetaProperties(
        cluster_id=None, node_id=None, version=0
    )


def test_missing_file_reads_none(tmp_path: Path) -> None:
    assert read_meta_properties(tmp_path) is None


def test_write_then_read(tmp_path: Path) -> None:
    meta = MetaProperties.create(node_id=7, cluster_id="my-cluster")
    write_meta_properties(tmp_path, meta, now=dt.datetime(2024, 3, 5, 10, 21, 12, tzinfo=dt.UTC))
    assert read_meta_properties(tmp_path) == meta
    directory_id = uuid_to_kafka_string(meta.directory_id)
    assert (tmp_path / META_PROPERTIES_FILE).read_bytes() == (
        "#\n#Tue Mar 05 10:21:12 UTC 2024\ncluster.id=my-cluster\n"
        f"directory.id={directory_id}\nnode.id=7\nversion=1\n"
    ).encode("ascii")
    assert not tmp_path_for(tmp_path / META_PROPERTIES_FILE).exists()


def test_version_0_writes_broker_id(tmp_path: Path) -> None:
    meta = MetaProperties(cluster_id=None, node_id=3, version=0)
    write_meta_properties(tmp_path, meta)
    text = (tmp_path / META_PROPERTIES_FILE).read_text("ascii")
    assert "broker.id=3\n" in text and "node.id" not in text
    assert read_meta_properties(tmp_path) == meta


def test_create_makes_kafka_style_ids() -> None:
    meta = MetaProperties.create(node_id=1)
    assert meta.version == 1
    assert meta.cluster_id is not None and len(meta.cluster_id) == 22
    uuid_from_kafka_string(meta.cluster_id)
    assert meta.directory_id is not None
    assert MetaProperties.create(node_id=1).directory_id != meta.directory_id


def test_cluster_id_with_special_characters_round_trips(tmp_path: Path) -> None:
    meta = MetaProperties(cluster_id=" lead=ing:#!\\ü\n", node_id=0)
    write_meta_properties(tmp_path, meta)
    assert read_meta_properties(tmp_path) == meta


def test_overwrite_is_atomic_over_a_stray_tmp(tmp_path: Path) -> None:
    first = MetaProperties.create(node_id=1)
    write_meta_properties(tmp_path, first)
    tmp_path_for(tmp_path / META_PROPERTIES_FILE).write_bytes(b"version=1\nnode.id=")
    assert read_meta_properties(tmp_path) == first
    second = MetaProperties.create(node_id=2)
    write_meta_properties(tmp_path, second)
    assert read_meta_properties(tmp_path) == second


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"version=2\nnode.id=1\ncluster.id=c\n", "unknown meta.properties version 2"),
        (b"version=x\n", "version='x'"),
        (b"version=1\ncluster.id=c\n", "node.id was not found"),
        (b"version=1\nnode.id=1\n", "cluster.id was not found"),
        (b"version=1\nnode.id=one\ncluster.id=c\n", "node.id='one'"),
        (b"version=1\nnode.id=2147483648\ncluster.id=c\n", "node.id='2147483648'"),
        (b"version=1\nnode.id=" + b"9" * 5000 + b"\ncluster.id=c\n", "node.id="),
        (b"version=0\nbroker.id=x\n", "broker.id='x'"),
        (b"version=1\nnode.id=1\ncluster.id=c\ndirectory.id=nope\n", "directory.id"),
        (b"version=1\nnode.id=1\ncluster.id=c\ndirectory.id=" + b"A" * 30 + b"\n", "too long"),
        (b"version=1\nnode.id=1\ncluster.id=\\u00zz\n", "Malformed"),
    ],
)
def test_bad_files_name_the_file_and_the_problem(
    tmp_path: Path, content: bytes, fragment: str
) -> None:
    write_file(tmp_path, content)
    with pytest.raises(CorruptCheckpointError) as info:
        read_meta_properties(tmp_path)
    assert fragment in str(info.value)
    assert str(tmp_path / META_PROPERTIES_FILE) in str(info.value)
    assert info.value.path == str(tmp_path / META_PROPERTIES_FILE)


def test_unknown_keys_are_ignored(tmp_path: Path) -> None:
    write_file(tmp_path, b"version=1\nnode.id=1\ncluster.id=c\nsomething.else=x\n")
    assert read_meta_properties(tmp_path) == MetaProperties(cluster_id="c", node_id=1)


def test_latin1_bytes_are_read_as_java_reads_them(tmp_path: Path) -> None:
    # Properties.load(InputStream) decodes ISO-8859-1: byte 0xE9 is 'é', never an error.
    write_file(tmp_path, b"version=1\nnode.id=1\ncluster.id=caf\xe9\n")
    meta = read_meta_properties(tmp_path)
    assert meta is not None and meta.cluster_id == "café"


def test_a_directory_in_place_of_the_file_is_a_storage_io_error(tmp_path: Path) -> None:
    (tmp_path / META_PROPERTIES_FILE).mkdir()
    with pytest.raises(StorageIOError, match=r"meta\.properties"):
        read_meta_properties(tmp_path)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cluster_id": None, "node_id": 1},
        {"cluster_id": "c", "node_id": None},
        {"cluster_id": "c", "node_id": 1, "version": 2},
        {"cluster_id": "c", "node_id": 2**31},
        {"cluster_id": "c", "node_id": True},
        {"cluster_id": 5, "node_id": 1},
    ],
)
def test_invalid_meta_properties_are_refused(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        MetaProperties(**kwargs)


# --- Java itself as the oracle -------------------------------------------------------------------

# Loads each file given with java.util.Properties.load(InputStream), as Kafka's
# PropertiesUtils.readPropertiesFile does, and stores maps with Properties.store(Writer, ""), as
# writePropertiesFile does; strings cross as hex of their UTF-16 code units.
JAVA_ORACLE = r"""
import java.io.*;
import java.nio.charset.StandardCharsets;
import java.util.*;

public class PropsOracle {
    static String hex(String s) {
        StringBuilder b = new StringBuilder();
        for (char c : s.toCharArray()) b.append(String.format("%04x", (int) c));
        return b.toString();
    }
    static String unhex(String h) {
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < h.length(); i += 4)
            b.append((char) Integer.parseInt(h.substring(i, i + 4), 16));
        return b.toString();
    }
    public static void main(String[] args) throws Exception {
        if (args[0].equals("load")) {
            for (int i = 1; i < args.length; i++) {
                Properties p = new Properties();
                try (InputStream in = new FileInputStream(args[i])) { p.load(in); }
                StringBuilder line = new StringBuilder();
                for (String k : new TreeSet<>(p.stringPropertyNames()))
                    line.append(hex(k)).append(':').append(hex(p.getProperty(k))).append(' ');
                System.out.println(line.toString().trim());
            }
        } else {
            // store <input> <outdir>: each input line "k:v k:v ..." becomes <outdir>/<n>.properties
            List<String> lines = java.nio.file.Files.readAllLines(new File(args[1]).toPath());
            for (int n = 0; n < lines.size(); n++) {
                Properties p = new Properties();
                for (String pair : lines.get(n).trim().split(" ")) {
                    if (pair.isEmpty()) continue;
                    String[] kv = pair.split(":", -1);
                    p.setProperty(unhex(kv[0]), unhex(kv[1]));
                }
                try (OutputStream out = new FileOutputStream(new File(args[2], n + ".properties"));
                     PrintWriter w = new PrintWriter(
                         new OutputStreamWriter(out, StandardCharsets.UTF_8))) {
                    p.store(w, "");
                }
            }
        }
    }
}
"""


def _hex(text: str) -> str:
    units = text.encode("utf-16-be", "surrogatepass")
    return units.hex()


def _encode_map(props: dict[str, str]) -> str:
    return " ".join(f"{_hex(k)}:{_hex(v)}" for k, v in sorted(props.items()))


def _random_props(rng: random.Random) -> dict[str, str]:
    pieces = ["a", "Z", "0", " ", "=", ":", "#", "!", "\\", "\t", "\n", "\r", "\f", "é", "€",
              "\U0001f600", "\x00", "\x7f", "u", ".", "-"]

    def text(max_len: int) -> str:
        return "".join(rng.choice(pieces) for _ in range(rng.randint(0, max_len)))

    return {text(6): text(10) for _ in range(rng.randint(0, 5))}


@pytest.fixture(scope="module")
def java(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("java") is None:
        pytest.skip("java is not installed: the Java oracle cannot run (other tests cover this)")
    source = tmp_path_factory.mktemp("oracle") / "PropsOracle.java"
    source.write_text(JAVA_ORACLE)
    return source


def test_java_reads_what_we_write(java: Path, tmp_path: Path) -> None:
    rng = random.Random(20241025)
    cases = [_random_props(rng) for _ in range(200)]
    cases.append(MetaProperties.create(node_id=5).to_properties())
    files = []
    for index, props in enumerate(cases):
        path = tmp_path / f"{index}.properties"
        path.write_text(format_properties(props), "ascii")
        files.append(str(path))
    result = subprocess.run(
        ["java", str(java), "load", *files], capture_output=True, text=True, check=True
    )
    lines = result.stdout.split("\n")[: len(cases)]
    assert lines == [_encode_map(props) for props in cases]


def test_we_read_what_java_writes(java: Path, tmp_path: Path) -> None:
    rng = random.Random(4242)
    cases = [_random_props(rng) for _ in range(200)]
    cases.append(MetaProperties.create(node_id=5).to_properties())
    spec = tmp_path / "spec.txt"
    spec.write_text("\n".join(_encode_map(props) for props in cases) + "\n", "ascii")
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["java", str(java), "store", str(spec), str(out)], check=True)
    for index, props in enumerate(cases):
        data = (out / f"{index}.properties").read_bytes()
        # Kafka writes UTF-8 through a Writer and reads back as ISO-8859-1, so only ASCII
        # content round-trips through Kafka itself; we read as Kafka does.
        assert parse_properties(data.decode("latin-1")) == {
            k.encode("utf-8").decode("latin-1"): v.encode("utf-8").decode("latin-1")
            for k, v in props.items()
        }
    meta_file = (out / f"{len(cases) - 1}.properties").read_bytes()
    (tmp_path / META_PROPERTIES_FILE).write_bytes(meta_file)
    assert read_meta_properties(tmp_path) == MetaProperties.from_properties(
        cases[-1], path="expected"
    )
