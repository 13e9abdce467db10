"""`stratalog dump-log --offsets-decoder` on a __consumer_offsets segment, as Kafka's tool prints it.

The expected strings are Kafka's own: DumpLogSegmentsTest.testOffsetsMessageParser
(core/src/test/scala/unit/kafka/tools/DumpLogSegmentsTest.scala). Nothing writes
__consumer_offsets segments yet, so the segment is built here with our record builder from the
records codec's encoder; the embedded consumer-protocol bytes are written with kafka-python's
oracle types, independently of our schemas.
"""

from __future__ import annotations

from pathlib import Path

from kafka.protocol.old.types import Array, Bytes, Int16, Int32, Schema, String

from stratalog.cli.main import main
from stratalog.records import BatchBuilder, build_batch
from stratalog.records.consumer_offsets import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    encode_key,
    encode_value,
    key_schema,
    value_schema,
)
from stratalog.records.control import ControlRecordType, EndTransactionMarker

TS = 1700000000000

TOPIC_PARTITIONS = Array(Schema(("topic", String()), ("partitions", Array(Int32))))
# ConsumerProtocol.serializeSubscription(new Subscription(["foo"], null, [foo-0], 0, "rack")),
# version 3, and serializeAssignment(new Assignment([foo-0])), version 3.
SUBSCRIPTION = Int16.encode(3) + Schema(
    ("topics", Array(String())), ("userData", Bytes), ("owned", TOPIC_PARTITIONS),
    ("generationId", Int32), ("rackId", String()),
).encode([["foo"], None, [["foo", [0]]], 0, "rack"])
ASSIGNMENT = Int16.encode(3) + Schema(
    ("assigned", TOPIC_PARTITIONS), ("userData", Bytes)
).encode([[["foo", [0]]], None])


def kafka_test_group(subscription: bytes, assignment: bytes) -> GroupMetadataValue:
    return GroupMetadataValue(
        protocol_type="consumer", generation=10, protocol="range", leader="member",
        members=(MemberMetadata(
            member_id="member", client_id="client", client_host="host",
            group_instance_id="instance", session_timeout_ms=100, rebalance_timeout_ms=1000,
            subscription=subscription, assignment=assignment,
        ),),
    )


def consumer_group_metadata_key(group: str) -> bytes:
    return Int16.encode(3) + key_schema(3).encode({"groupId": group}, 3)


def segment(tmp_path: Path, records: list[tuple[bytes | None, bytes | None]]) -> Path:
    directory = tmp_path / "__consumer_offsets-7"
    directory.mkdir()
    log = directory / "00000000000000000000.log"
    log.write_bytes(build_batch((TS, key, value, ()) for key, value in records))
    return log


def dump(capsys, *args: str) -> tuple[int, list[str], str]:
    code = main(["dump-log", *args])
    captured = capsys.readouterr()
    return code, captured.out.splitlines(), captured.err


def data_part(line: str) -> str:
    return line[line.index(" key: ") + 1 :]


def test_kafkas_own_examples_print_as_kafka_prints_them(tmp_path, capsys):
    records = [
        # A valid key and value.
        (consumer_group_metadata_key("group"),
         Int16.encode(0) + value_schema(3).encode({"epoch": 10}, 0)),
        # Consumer embedded protocol is parsed if possible (GroupMetadataValue's highest
        # version, 4, as Kafka's test writes it).
        (encode_key(GroupMetadataKey("group")),
         encode_value(kafka_test_group(SUBSCRIPTION, ASSIGNMENT), 4)),
        # ... and kept as base64 if malformed.
        (encode_key(GroupMetadataKey("group")),
         encode_value(kafka_test_group(b"Subscription", b"Assignment"), 4)),
        # A valid key with a tombstone.
        (consumer_group_metadata_key("group"), None),
        # An unknown record type.
        (Int16.encode(32767) + String().encode("group"),
         Int16.encode(0) + value_schema(3).encode({"epoch": 10}, 0)),
        # A value of the wrong record type (a ConsumerGroupMemberMetadataValue under type 3).
        (consumer_group_metadata_key("group"),
         Int16.encode(0) + value_schema(5).encode({}, 0)),
    ]
    log = segment(tmp_path, records)
    code, lines, err = dump(capsys, "--offsets-decoder", str(log))
    assert code == 0, err
    assert lines[0] == f"Dumping {log}"
    assert lines[2].startswith("baseOffset: 0 lastOffset: 5 count: 6 ")
    rows = lines[3:]
    assert len(rows) == 6
    for offset, row in enumerate(rows):
        assert row.startswith(f"| offset: {offset} CreateTime: {TS} keySize: ")
    assert data_part(rows[0]) == (
        'key: {"type":"3","data":{"groupId":"group"}} '
        'payload: {"version":"0","data":{"epoch":10}}'
    )
    assert data_part(rows[1]) == (
        'key: {"type":"2","data":{"group":"group"}} '
        'payload: {"version":"4","data":{"protocolType":"consumer","generation":10,'
        '"protocol":"range","leader":"member","currentStateTimestamp":-1,"members":[{'
        '"memberId":"member","groupInstanceId":"instance","clientId":"client",'
        '"clientHost":"host","rebalanceTimeout":1000,"sessionTimeout":100,"subscription":{'
        '"topics":["foo"],"userData":null,"ownedPartitions":[{"topic":"foo","partitions":[0]}],'
        '"generationId":0,"rackId":"rack"},"assignment":{"assignedPartitions":'
        '[{"topic":"foo","partitions":[0]}],"userData":null}}]}}'
    )
    assert data_part(rows[2]) == (
        'key: {"type":"2","data":{"group":"group"}} '
        'payload: {"version":"4","data":{"protocolType":"consumer","generation":10,'
        '"protocol":"range","leader":"member","currentStateTimestamp":-1,"members":[{'
        '"memberId":"member","groupInstanceId":"instance","clientId":"client",'
        '"clientHost":"host","rebalanceTimeout":1000,"sessionTimeout":100,'
        '"subscription":"U3Vic2NyaXB0aW9u","assignment":"QXNzaWdubWVudA=="}]}}'
    )
    assert data_part(rows[3]) == 'key: {"type":"3","data":{"groupId":"group"}} payload: <DELETE>'
    assert data_part(rows[4]) == "key: Unknown record type 32767 at offset 4, skipping."
    assert data_part(rows[5]).startswith(
        "key: Error at offset 5, skipping. Could not read record with version 0 from value's "
        "buffer due to: ConsumerGroupMetadataValue: "
    )
    assert " payload: " not in rows[5]


def test_the_records_a_classic_coordinator_writes(tmp_path, capsys):
    log = segment(tmp_path, [
        (encode_key(OffsetCommitKey("g", "orders", 3)),
         encode_value(OffsetCommitValue(42, "meta", TS, leader_epoch=5))),
        (encode_key(OffsetCommitKey("g", "orders", 4)),
         encode_value(OffsetCommitValue(7, "", TS, expire_timestamp_ms=TS + 1))),
        (encode_key(OffsetCommitKey("g", "orders", 3)), None),
        (encode_key(GroupMetadataKey("g")),
         encode_value(GroupMetadataValue("", 0, None, None, TS))),
    ])
    code, lines, err = dump(capsys, "--offsets-decoder", "--skip-record-metadata", str(log))
    assert code == 0, err
    assert lines[3:] == [
        '| key: {"type":"1","data":{"group":"g","topic":"orders","partition":3}} '
        'payload: {"version":"3","data":{"offset":42,"leaderEpoch":5,"metadata":"meta",'
        f'"commitTimestamp":{TS}}}}}',
        '| key: {"type":"1","data":{"group":"g","topic":"orders","partition":4}} '
        'payload: {"version":"1","data":{"offset":7,"metadata":"",'
        f'"commitTimestamp":{TS},"expireTimestamp":{TS + 1}}}}}',
        '| key: {"type":"1","data":{"group":"g","topic":"orders","partition":3}} '
        "payload: <DELETE>",
        '| key: {"type":"2","data":{"group":"g"}} '
        'payload: {"version":"3","data":{"protocolType":"","generation":0,"protocol":null,'
        f'"leader":null,"currentStateTimestamp":{TS},"members":[]}}}}',
    ]


def test_short_truncated_and_keyless_records(tmp_path, capsys):
    good_key = encode_key(OffsetCommitKey("g", "t", 0))
    log = segment(tmp_path, [
        (b"\x00", None),
        (good_key, b"\x00"),
        (good_key[:-2], None),
        (None, b"value"),
        (good_key, encode_value(OffsetCommitValue(1, "", 2))),
    ])
    code, lines, err = dump(capsys, "--offsets-decoder", "--skip-record-metadata", str(log))
    assert code == 1  # the keyless record
    assert lines[3:] == [
        "| key: Error at offset 0, skipping. Could not read version from key's buffer.",
        "| key: Error at offset 1, skipping. Could not read version from value's buffer.",
        "| key: Error at offset 2, skipping. Could not read record with version 1 from key's "
        "buffer due to: OffsetCommitKey: partition at position 8: needs 4 bytes, 2 left.",
        "",
        '| key: {"type":"1","data":{"group":"g","topic":"t","partition":0}} '
        'payload: {"version":"3","data":{"offset":1,"leaderEpoch":-1,"metadata":"",'
        '"commitTimestamp":2}}',
    ]
    assert err == (
        f"{log}: Failed to decode message at offset 3 using offset topic decoder "
        "(message had a missing key)\n"
    )


def test_control_batches_are_not_decoded(tmp_path, capsys):
    marker = EndTransactionMarker(ControlRecordType.COMMIT, 3)
    control = BatchBuilder(is_control=True, is_transactional=True, producer_id=1,
                           producer_epoch=0)
    control.append(TS, marker.encode_key(), marker.encode_value())
    directory = tmp_path / "__consumer_offsets-0"
    directory.mkdir()
    log = directory / "00000000000000000000.log"
    log.write_bytes(control.build())
    code, lines, err = dump(capsys, "--offsets-decoder", str(log))
    assert code == 0, err
    assert lines[3].endswith(" endTxnMarker: COMMIT coordinatorEpoch: 3")
    assert "key:" not in lines[3]
