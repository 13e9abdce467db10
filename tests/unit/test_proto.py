"""The committed API contract: generated modules in sync, and no breaking change since the release.

Two guarantees, each one a test that fails loudly:

1. *No drift.* ``proto/stratalog/v1/broker_pb2*.py(i)`` are exactly what ``make proto`` produces
   from ``broker.proto`` today; someone who edits the .proto without regenerating (or edits the
   generated code by hand) is told so.
2. *No breaking change.* The way ``buf breaking`` checks against a baseline: every message,
   field (number, name, type, label, type name, oneof, proto3 ``optional``, JSON name), enum and
   enum value, service and RPC (input and output types, streaming) of the v1 contract as
   released still exists unchanged in ours. The baseline is kept in the repository,
   ``tests/fixtures/proto/stratalog/v1/broker.proto`` (see the README beside it and docs/api.md,
   which says when it may move). Additions pass; removals, renumberings, renames and type
   changes fail, one line per element naming it.

Both compile with ``python -m grpc_tools.protoc`` in a subprocess, the same command the Makefile
runs, so the comparison sees what protoc sees. The checker itself is tested on small edits of the
baseline, compiled the same way.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from stratalog.v1 import broker_pb2, broker_pb2_grpc

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = PROJECT_ROOT / "proto"
OUR_PROTO = PROTO_ROOT / "stratalog" / "v1" / "broker.proto"
BASELINE_ROOT = PROJECT_ROOT / "tests" / "fixtures" / "proto"
BASELINE_PROTO = BASELINE_ROOT / "stratalog" / "v1" / "broker.proto"
# The release the baseline is, and the SHA-256 of its bytes: editing the baseline (rather than
# replacing it with a released contract, as docs/api.md describes) fails a test.
BASELINE_RELEASE = "0.1.0"
BASELINE_SHA256 = "b5a05b74b66755b3ad223a8cb2d9d93f60db297abbceb1cab29165484df3bebe"
GENERATED = ("broker_pb2.py", "broker_pb2.pyi", "broker_pb2_grpc.py")

FieldType = descriptor_pb2.FieldDescriptorProto.Type
FieldLabel = descriptor_pb2.FieldDescriptorProto.Label


def _protoc(*args: str, cwd: Path) -> None:
    """Runs grpc_tools.protoc as ``make proto`` does; fails the test with protoc's stderr."""
    result = subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"protoc {' '.join(args)} failed ({result.returncode}):\n{result.stderr}")


def _compile(proto: Path, include: Path, out_dir: Path) -> descriptor_pb2.FileDescriptorProto:
    """Compiles one .proto into a FileDescriptorProto."""
    out = out_dir / (proto.stem + ".pb")
    _protoc(f"-I{include}", f"--descriptor_set_out={out}", str(proto), cwd=out_dir)
    descriptor_set = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    assert len(descriptor_set.file) == 1, "broker.proto imports nothing; expected one file"
    return descriptor_set.file[0]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    return _compile(BASELINE_PROTO, BASELINE_ROOT, tmp_path_factory.mktemp("baseline"))


@pytest.fixture(scope="module")
def ours(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    return _compile(OUR_PROTO, PROTO_ROOT, tmp_path_factory.mktemp("ours"))


# -- 1. drift ---------------------------------------------------------------------------------


def test_generated_modules_match_a_fresh_protoc_run(tmp_path: Path) -> None:
    # Same arguments as the Makefile's `proto` target, relative to the repo, into a tmp dir.
    _protoc(
        "-Iproto",
        f"--python_out={tmp_path}",
        f"--pyi_out={tmp_path}",
        f"--grpc_python_out={tmp_path}",
        "proto/stratalog/v1/broker.proto",
        cwd=PROJECT_ROOT,
    )
    stale = []
    for name in GENERATED:
        fresh = (tmp_path / "stratalog" / "v1" / name).read_bytes()
        committed = (PROTO_ROOT / "stratalog" / "v1" / name).read_bytes()
        if fresh != committed:
            stale.append(f"{name} ({len(committed)} bytes committed, {len(fresh)} regenerated)")
    assert not stale, (
        "generated code differs from broker.proto; run `make proto` and commit: " + ", ".join(stale)
    )


@pytest.mark.parametrize("stem", ["replication", "transaction_markers"])
def test_internal_modules_match_a_fresh_protoc_run(tmp_path: Path, stem: str) -> None:
    # The internal server-to-server services (replication.proto, issue 17;
    # transaction_markers.proto, issue 29): no compatibility promise, but the committed modules
    # must be what `make proto` makes of them.
    _protoc(
        "-Iproto",
        f"--python_out={tmp_path}",
        f"--pyi_out={tmp_path}",
        f"--grpc_python_out={tmp_path}",
        f"proto/stratalog/v1/{stem}.proto",
        cwd=PROJECT_ROOT,
    )
    stale = [
        name for name in (f"{stem}_pb2.py", f"{stem}_pb2.pyi", f"{stem}_pb2_grpc.py")
        if (tmp_path / "stratalog" / "v1" / name).read_bytes()
        != (PROTO_ROOT / "stratalog" / "v1" / name).read_bytes()
    ]
    assert not stale, f"{stale} differ from {stem}.proto; run `make proto` and commit"


def test_imported_module_carries_the_descriptor_of_our_proto(
    ours: descriptor_pb2.FileDescriptorProto,
) -> None:
    # Independent of the byte comparison: what Python actually imports is our .proto's schema.
    # protoc leaves the derived json_name out of the descriptor it embeds in Python code.
    imported = descriptor_pb2.FileDescriptorProto.FromString(broker_pb2.DESCRIPTOR.serialized_pb)
    expected = descriptor_pb2.FileDescriptorProto()
    expected.CopyFrom(ours)
    for message in _messages(expected).values():
        for field in message.field:
            field.ClearField("json_name")
    assert imported == expected


def test_generated_imports_read_as_the_stratalog_v1_package() -> None:
    source = (PROTO_ROOT / "stratalog" / "v1" / "broker_pb2_grpc.py").read_text()
    assert "from stratalog.v1 import broker_pb2" in source
    assert broker_pb2_grpc.BrokerStub is not None
    assert broker_pb2.DESCRIPTOR.package == "stratalog.v1"


# -- 2. the breaking-change checker -----------------------------------------------------------


def _messages(
    file: descriptor_pb2.FileDescriptorProto,
) -> dict[str, descriptor_pb2.DescriptorProto]:
    """Every message by full name (no leading dot), nested ones (map entries included) too."""
    found: dict[str, descriptor_pb2.DescriptorProto] = {}

    def walk(prefix: str, messages) -> None:
        for message in messages:
            name = f"{prefix}.{message.name}"
            found[name] = message
            walk(name, message.nested_type)

    walk(file.package, file.message_type)
    return found


def _enums(file: descriptor_pb2.FileDescriptorProto) -> dict[str, dict[int, str]]:
    """Every enum by full name, top-level and nested: value number -> value name."""
    found = {
        f"{file.package}.{e.name}": {v.number: v.name for v in e.value} for e in file.enum_type
    }
    for name, message in _messages(file).items():
        for e in message.enum_type:
            found[f"{name}.{e.name}"] = {v.number: v.name for v in e.value}
    return found


def _type(field: descriptor_pb2.FieldDescriptorProto) -> str:
    """The field's type as the .proto spells it: ``int64``, or the full name of a message/enum."""
    if field.type in (FieldType.TYPE_MESSAGE, FieldType.TYPE_ENUM, FieldType.TYPE_GROUP):
        return field.type_name.lstrip(".")
    return FieldType.Name(field.type).removeprefix("TYPE_").lower()


def _cardinality(field: descriptor_pb2.FieldDescriptorProto) -> str:
    if field.label == FieldLabel.LABEL_REPEATED:
        return "repeated"
    if field.label == FieldLabel.LABEL_REQUIRED:
        return "required"
    return "optional" if field.proto3_optional else "singular"


def _oneof(message: descriptor_pb2.DescriptorProto, field) -> str | None:
    """The name of the real oneof a field belongs to (proto3 ``optional``'s synthetic one aside)."""
    if not field.HasField("oneof_index") or field.proto3_optional:
        return None
    return message.oneof_decl[field.oneof_index].name


def _field_changes(name: str, old_message, old, new_message, new) -> list[str]:
    """What changed in one field kept at its number; ``name`` is the field's full name."""
    element = f"field {name} ({old.number})"
    changes = []
    if _type(old) != _type(new):
        changes.append(f"{element} changed type from {_type(old)} to {_type(new)}")
    if _cardinality(old) != _cardinality(new):
        changes.append(f"{element} changed from {_cardinality(old)} to {_cardinality(new)}")
    was, now = _oneof(old_message, old), _oneof(new_message, new)
    if was != now:
        was, now = (f"oneof {o}" if o else "no oneof" for o in (was, now))
        changes.append(f"{element} moved from {was} to {now}")
    if old.json_name != new.json_name:
        changes.append(f"{element} changed JSON name from {old.json_name} to {new.json_name}")
    return changes


def _message_changes(baseline, current) -> list[str]:
    now = _messages(current)
    changes = []
    for name, old in _messages(baseline).items():
        new = now.get(name)
        if new is None:
            changes.append(f"message {name} removed")
            continue
        if old.options.map_entry != new.options.map_entry:
            changes.append(f"message {name} changed map entry from "
                           f"{old.options.map_entry} to {new.options.map_entry}")
        by_number = {f.number: f for f in new.field}
        by_name = {f.name: f for f in new.field}
        for field in old.field:
            kept = by_number.get(field.number)
            if kept is None:
                moved = by_name.get(field.name)
                if moved is not None:
                    changes.append(f"field {name}.{field.name} renumbered "
                                   f"from {field.number} to {moved.number}")
                else:
                    changes.append(f"field {name}.{field.name} ({field.number}) removed")
                continue
            if kept.name != field.name:
                changes.append(f"field {name}.{field.name} ({field.number}) renamed to {kept.name}")
            changes += _field_changes(f"{name}.{field.name}", old, field, new, kept)
        # A oneof of the baseline must not gain members: setting one clears the others.
        for index, oneof in enumerate(old.oneof_decl):
            members = sorted(f.name for f in old.field
                             if f.HasField("oneof_index") and f.oneof_index == index)
            members_now = sorted(f.name for f in new.field if _oneof(new, f) == oneof.name)
            added = [m for m in members_now if m not in members]
            if added:
                changes.append(f"oneof {name}.{oneof.name} gained {', '.join(added)}")
    return changes


def _enum_changes(baseline, current) -> list[str]:
    now = _enums(current)
    changes = []
    for name, values in _enums(baseline).items():
        new = now.get(name)
        if new is None:
            changes.append(f"enum {name} removed")
            continue
        numbers_now = {value_name: number for number, value_name in new.items()}
        for number, value_name in values.items():
            if number not in new:
                if value_name in numbers_now:
                    changes.append(f"enum value {name}.{value_name} renumbered "
                                   f"from {number} to {numbers_now[value_name]}")
                else:
                    changes.append(f"enum value {name}.{value_name} ({number}) removed")
            elif new[number] != value_name:
                changes.append(
                    f"enum value {name}.{value_name} ({number}) renamed to {new[number]}"
                )
    return changes


def _service_changes(baseline, current) -> list[str]:
    now = {f"{current.package}.{s.name}": {m.name: m for m in s.method} for s in current.service}
    changes = []
    for service in baseline.service:
        name = f"{baseline.package}.{service.name}"
        methods = now.get(name)
        if methods is None:
            changes.append(f"service {name} removed")
            continue
        for old in service.method:
            rpc = f"rpc {name}.{old.name}"
            new = methods.get(old.name)
            if new is None:
                changes.append(f"{rpc} removed")
                continue
            for side in ("input_type", "output_type"):
                was, is_now = getattr(old, side).lstrip("."), getattr(new, side).lstrip(".")
                if was != is_now:
                    changes.append(f"{rpc} changed {side.replace('_', ' ')} from {was} to {is_now}")
            for side in ("client_streaming", "server_streaming"):
                if getattr(old, side) != getattr(new, side):
                    kind = side.replace("_", " ")
                    changes.append(f"{rpc} {kind} {'removed' if getattr(old, side) else 'added'}")
    return changes


def breaking_changes(
    baseline: descriptor_pb2.FileDescriptorProto, current: descriptor_pb2.FileDescriptorProto
) -> list[str]:
    """Every way ``current`` breaks ``baseline``'s clients, one line naming each element.

    Empty when ``current`` only adds: new messages, fields, enums, values, services and RPCs.
    Fields are matched by number (the wire identity), enum values by number, messages, enums,
    services and RPCs by full name; a field or value found under its old name at another number
    is reported as renumbered rather than removed.
    """
    changes = []
    if baseline.package != current.package:
        changes.append(f"package changed from {baseline.package} to {current.package}")
    if baseline.syntax != current.syntax:
        changes.append(f"syntax changed from {baseline.syntax} to {current.syntax}")
    return (changes + _message_changes(baseline, current) + _enum_changes(baseline, current)
            + _service_changes(baseline, current))


# -- 3. ours against the released baseline ----------------------------------------------------


def test_the_baseline_is_the_released_contract() -> None:
    digest = hashlib.sha256(BASELINE_PROTO.read_bytes()).hexdigest()
    assert digest == BASELINE_SHA256, (
        f"{BASELINE_PROTO.relative_to(PROJECT_ROOT)} is not the contract released in "
        f"{BASELINE_RELEASE}: the baseline is replaced only by a released contract, never "
        "edited to make the compatibility check pass (docs/api.md, 'The baseline')"
    )


def test_package_and_syntax_match(baseline, ours) -> None:
    assert ours.package == baseline.package == "stratalog.v1"
    assert ours.syntax == baseline.syntax == "proto3"


def test_our_contract_breaks_nothing_of_the_released_one(baseline, ours) -> None:
    changes = breaking_changes(baseline, ours)
    assert not changes, (
        f"proto/stratalog/v1/broker.proto breaks the v1 contract released in {BASELINE_RELEASE} "
        "(additions are allowed; nothing may be removed, renumbered, renamed or retyped):\n"
        + "\n".join(changes)
    )


def test_the_baseline_covers_the_whole_released_contract(baseline) -> None:
    # A baseline that lost its contents would make the check pass vacuously.
    assert len(_messages(baseline)) == 28  # 25 top-level messages and 3 map entries
    assert len(_enums(baseline)) == 5
    assert [m.name for m in baseline.service[0].method] == [
        "CreateTopic", "DeleteTopic", "ListTopics", "DescribeTopic", "AlterTopicConfigs",
        "Produce", "FetchByOffset", "FetchByTimestamp", "ListOffsets", "Subscribe",
        "DeleteRecords",
    ]


# -- 4. the checker on small edits of the baseline ---------------------------------------------


@pytest.fixture(scope="module")
def baseline_text() -> str:
    return BASELINE_PROTO.read_text()


def _edited(
    baseline_text: str, tmp_path: Path, *edits: tuple[str, str]
) -> descriptor_pb2.FileDescriptorProto:
    """The baseline with each ``(old, new)`` text replaced (``old`` must occur once), compiled."""
    text = baseline_text
    for old, new in edits:
        assert text.count(old) == 1, f"edit target {old!r} occurs {text.count(old)} times"
        text = text.replace(old, new)
    proto = tmp_path / "proto" / "stratalog" / "v1" / "broker.proto"
    proto.parent.mkdir(parents=True)
    proto.write_text(text)
    return _compile(proto, tmp_path / "proto", tmp_path)


def test_the_unchanged_baseline_reports_nothing(baseline, baseline_text, tmp_path) -> None:
    assert breaking_changes(baseline, _edited(baseline_text, tmp_path)) == []


EDITS = {
    "field removed": (
        [("  bool flush = 6;", "")],
        ["field stratalog.v1.ProduceRequest.flush (6) removed"],
    ),
    "field renumbered": (
        [("bool flush = 6;", "bool flush = 16;")],
        ["field stratalog.v1.ProduceRequest.flush renumbered from 6 to 16"],
    ),
    "field retyped": (
        [("int32 max_bytes = 4;     // 0 = server default",
          "int64 max_bytes = 4;     // 0 = server default")],
        ["field stratalog.v1.FetchByOffsetRequest.max_bytes (4) changed type from int32 to int64"],
    ),
    "field renamed": (
        [("optional bytes key = 3;", "optional bytes record_key = 3;")],
        ["field stratalog.v1.Record.key (3) renamed to record_key",
         "field stratalog.v1.Record.key (3) changed JSON name from key to recordKey"],
    ),
    "field made repeated": (
        [("int64 before_offset = 3;", "repeated int64 before_offset = 3;")],
        ["field stratalog.v1.DeleteRecordsRequest.before_offset (3) "
         "changed from singular to repeated"],
    ),
    "optional dropped": (
        [("optional bytes value = 2;  // unset = null", "bytes value = 2;")],
        ["field stratalog.v1.Header.value (2) changed from optional to singular"],
    ),
    "field left its oneof": (
        [("    int64 timestamp = 4;\n  }", "  }\n  int64 timestamp = 4;")],
        ["field stratalog.v1.SubscribeRequest.timestamp (4) moved from oneof start to no oneof"],
    ),
    "oneof gained a member": (
        [("    int64 timestamp = 4;\n  }", "    int64 timestamp = 4;\n    bool latest = 8;\n  }")],
        ["oneof stratalog.v1.SubscribeRequest.start gained latest"],
    ),
    "map made a list": (
        [("map<string, string> configs = 3; //", "repeated string configs = 3; //")],
        ["field stratalog.v1.CreateTopicRequest.configs (3) changed type from "
         "stratalog.v1.CreateTopicRequest.ConfigsEntry to string",
         "message stratalog.v1.CreateTopicRequest.ConfigsEntry removed"],
    ),
    "message renamed": (
        [("repeated AbortedTransaction aborted_transactions",
          "repeated AbortedTxn aborted_transactions"),
         ("message AbortedTransaction {", "message AbortedTxn {")],
        ["field stratalog.v1.FetchResponse.aborted_transactions (10) changed type from "
         "stratalog.v1.AbortedTransaction to stratalog.v1.AbortedTxn",
         "message stratalog.v1.AbortedTransaction removed"],
    ),
    "enum value renumbered": (
        [("SHUTTING_DOWN = 13;", "SHUTTING_DOWN = 99;")],
        ["enum value stratalog.v1.ErrorReason.SHUTTING_DOWN renumbered from 13 to 99"],
    ),
    "enum value removed": (
        [("  NOT_AUTHORIZED = 15;\n", "")],
        ["enum value stratalog.v1.ErrorReason.NOT_AUTHORIZED (15) removed"],
    ),
    "enum value renamed": (
        [("  READ_COMMITTED = 1;", "  READ_COMMITTED_ONLY = 1;")],
        ["enum value stratalog.v1.IsolationLevel.READ_COMMITTED (1) "
         "renamed to READ_COMMITTED_ONLY"],
    ),
    "rpc removed": (
        [("  rpc DeleteRecords(DeleteRecordsRequest) returns (DeleteRecordsResponse);\n", "")],
        ["rpc stratalog.v1.Broker.DeleteRecords removed"],
    ),
    "rpc no longer streams": (
        [("returns (stream FetchResponse);", "returns (FetchResponse);")],
        ["rpc stratalog.v1.Broker.Subscribe server streaming removed"],
    ),
    "rpc given another request type": (
        [("rpc FetchByTimestamp(FetchByTimestampRequest)",
          "rpc FetchByTimestamp(FetchByOffsetRequest)")],
        ["rpc stratalog.v1.Broker.FetchByTimestamp changed input type from "
         "stratalog.v1.FetchByTimestampRequest to stratalog.v1.FetchByOffsetRequest"],
    ),
    "service renamed": (
        [("service Broker {", "service Broker2 {")],
        ["service stratalog.v1.Broker removed"],
    ),
}


@pytest.mark.parametrize("kind", list(EDITS))
def test_the_checker_reports_each_breaking_change(baseline, baseline_text, tmp_path, kind) -> None:
    edits, expected = EDITS[kind]
    assert breaking_changes(baseline, _edited(baseline_text, tmp_path, *edits)) == expected


def test_the_checker_lets_additions_pass(baseline, baseline_text, tmp_path) -> None:
    extended = _edited(
        baseline_text,
        tmp_path,
        ("  bool flush = 6;", "  bool flush = 6;\n  optional int32 acks = 7;"),
        ("  rpc DeleteRecords(DeleteRecordsRequest) returns (DeleteRecordsResponse);",
         "  rpc DeleteRecords(DeleteRecordsRequest) returns (DeleteRecordsResponse);\n"
         "  rpc Ping(PingRequest) returns (stream PingResponse);"),
        ("message DeleteRecordsResponse {",
         "message PingRequest {}\nmessage PingResponse { int64 time = 1; }\n"
         "enum Level { LEVEL_UNSPECIFIED = 0; }\nmessage DeleteRecordsResponse {"),
        ("  NOT_AUTHORIZED = 15;", "  NOT_AUTHORIZED = 15;\n  QUOTA_EXCEEDED = 16;"),
    )
    assert breaking_changes(baseline, extended) == []
    assert {"stratalog.v1.PingRequest", "stratalog.v1.PingResponse"} <= set(_messages(extended))


def test_the_checker_reports_several_changes_at_once(baseline, baseline_text, tmp_path) -> None:
    broken = _edited(
        baseline_text,
        tmp_path,
        ("  bool flush = 6;", ""),
        ("  rpc DeleteRecords(DeleteRecordsRequest) returns (DeleteRecordsResponse);\n", ""),
        ("int64 log_append_time = 3;", "int32 log_append_time = 3;"),
    )
    assert breaking_changes(baseline, broken) == [
        "field stratalog.v1.ProduceRequest.flush (6) removed",
        "field stratalog.v1.ProduceResponse.log_append_time (3) changed type from int64 to int32",
        "rpc stratalog.v1.Broker.DeleteRecords removed",
    ]


def test_generated_enums_hold_the_contract_error_reasons() -> None:
    # status.py and client/errors.py key their tables by these names.
    assert broker_pb2.ErrorReason.Name(broker_pb2.OFFSET_OUT_OF_RANGE) == "OFFSET_OUT_OF_RANGE"
    # 16 released reasons, then issue 12's: the producer state's 5, the coordinator's 6; then
    # issue 13's limit; then issue 17's replication reasons.
    # Issue 25: INVALID_PARTITIONS (CreatePartitions). Issue 27: the consumer groups' 16.
    # Issue 29: ElectLeaders' 3, reassignments' 2.
    assert len(broker_pb2.ErrorReason.keys()) == 16 + 5 + 6 + 1 + 9 + 1 + 16 + 3 + 2
    assert broker_pb2.ErrorReason.keys()[16:] == [
        "OUT_OF_ORDER_SEQUENCE", "INVALID_PRODUCER_EPOCH", "UNKNOWN_PRODUCER_ID",
        "INVALID_TXN_STATE", "TRANSACTION_COORDINATOR_FENCED",
        "CONCURRENT_TRANSACTIONS", "COORDINATOR_LOAD_IN_PROGRESS", "PRODUCER_FENCED",
        "INVALID_PRODUCER_ID_MAPPING", "TRANSACTIONAL_ID_NOT_FOUND", "INVALID_TRANSACTION_TIMEOUT",
        "RESOURCE_LIMIT_EXCEEDED",
        "NOT_LEADER_OR_FOLLOWER", "NOT_ENOUGH_REPLICAS", "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        "FENCED_LEADER_EPOCH", "UNKNOWN_LEADER_EPOCH", "LEADER_NOT_AVAILABLE",
        "INVALID_REPLICATION_FACTOR", "REQUEST_TIMED_OUT", "COORDINATION_UNAVAILABLE",
        "INVALID_PARTITIONS",
        "COORDINATOR_NOT_AVAILABLE", "NOT_COORDINATOR", "UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION",
        "REBALANCE_IN_PROGRESS", "FENCED_INSTANCE_ID", "MEMBER_ID_REQUIRED",
        "GROUP_MAX_SIZE_REACHED", "INCONSISTENT_GROUP_PROTOCOL", "INVALID_GROUP_ID",
        "INVALID_SESSION_TIMEOUT", "NON_EMPTY_GROUP", "GROUP_ID_NOT_FOUND",
        "UNSTABLE_OFFSET_COMMIT", "OFFSET_METADATA_TOO_LARGE", "GROUP_SUBSCRIBED_TO_TOPIC",
        "ELECTION_NOT_NEEDED", "PREFERRED_LEADER_NOT_AVAILABLE", "ELIGIBLE_LEADERS_NOT_AVAILABLE",
        "INVALID_REPLICA_ASSIGNMENT", "NO_REASSIGNMENT_IN_PROGRESS",
    ]
