"""The committed API contract: generated modules in sync, and wire-compatible with the design.

Two guarantees, each one a test that fails loudly:

1. *No drift.* ``proto/stratalog/v1/broker_pb2*.py(i)`` are exactly what ``make proto`` produces
   from ``broker.proto`` today; someone who edits the .proto without regenerating (or edits the
   generated code by hand) is told so.
2. *Wire compatibility.* Every message, field (number, name, type, label, type name, oneof,
   proto3 ``optional``), enum value and service method of the design contract
   ``<repo>/../shared/design/broker.proto`` exists identically in ours. Ours may add; it may not
   renumber, retype, rename or remove.

Both compile with ``python -m grpc_tools.protoc`` in a subprocess, the same command the Makefile
runs, so the comparison sees what protoc sees.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf import descriptor_pb2

from stratalog.v1 import broker_pb2, broker_pb2_grpc

PROJECT_ROOT = Path(__file__).resolve().parents[2]
PROTO_ROOT = PROJECT_ROOT / "proto"
OUR_PROTO = PROTO_ROOT / "stratalog" / "v1" / "broker.proto"
CONTRACT_PROTO = PROJECT_ROOT.parent / "shared" / "design" / "broker.proto"
GENERATED = ("broker_pb2.py", "broker_pb2.pyi", "broker_pb2_grpc.py")


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
def contract(tmp_path_factory: pytest.TempPathFactory) -> descriptor_pb2.FileDescriptorProto:
    if not CONTRACT_PROTO.is_file():
        pytest.fail(f"design contract not found at {CONTRACT_PROTO}")
    out_dir = tmp_path_factory.mktemp("contract")
    return _compile(CONTRACT_PROTO, CONTRACT_PROTO.parent, out_dir)


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


# -- 2. wire compatibility with the design contract ------------------------------------------


def _messages(
    file: descriptor_pb2.FileDescriptorProto,
) -> dict[str, descriptor_pb2.DescriptorProto]:
    """Every message by full name, nested ones (map entries included) too."""
    found: dict[str, descriptor_pb2.DescriptorProto] = {}

    def walk(prefix: str, messages) -> None:
        for message in messages:
            name = f"{prefix}.{message.name}"
            found[name] = message
            walk(name, message.nested_type)

    walk(f".{file.package}", file.message_type)
    return found


def _enums(file: descriptor_pb2.FileDescriptorProto) -> dict[str, dict[str, int]]:
    found = {f".{file.package}.{e.name}": {v.name: v.number for v in e.value} for e in file.enum_type}
    for name, message in _messages(file).items():
        for e in message.enum_type:
            found[f"{name}.{e.name}"] = {v.name: v.number for v in e.value}
    return found


def _field_signature(message: descriptor_pb2.DescriptorProto, field) -> tuple:
    """What a field means on the wire and in JSON: everything but its comments and options."""
    oneof = message.oneof_decl[field.oneof_index].name if field.HasField("oneof_index") else None
    return (
        field.name,
        descriptor_pb2.FieldDescriptorProto.Type.Name(field.type),
        descriptor_pb2.FieldDescriptorProto.Label.Name(field.label),
        field.type_name,
        oneof,
        field.proto3_optional,
        field.json_name,
    )


def test_package_and_syntax_match(contract, ours) -> None:
    assert ours.package == contract.package == "stratalog.v1"
    assert ours.syntax == contract.syntax == "proto3"


def _message_problems(contract, ours) -> list[str]:
    theirs_by_name, ours_by_name = _messages(contract), _messages(ours)
    problems = []
    for name, message in theirs_by_name.items():
        mine = ours_by_name.get(name)
        if mine is None:
            problems.append(f"message {name} missing")
            continue
        if message.options.map_entry != mine.options.map_entry:
            problems.append(f"message {name}: map_entry differs")
        my_fields = {f.number: f for f in mine.field}
        for field in message.field:
            my_field = my_fields.get(field.number)
            if my_field is None:
                problems.append(f"{name} field {field.number} ({field.name}) missing")
                continue
            expected = _field_signature(message, field)
            actual = _field_signature(mine, my_field)
            if expected != actual:
                problems.append(f"{name} field {field.number}: {actual} != contract {expected}")
        # A contract oneof must not gain members in ours: that changes which fields clear others.
        for index, oneof in enumerate(message.oneof_decl):
            members = {
                f.number for f in message.field
                if f.HasField("oneof_index") and f.oneof_index == index
            }
            my_members = {
                f.number for f in mine.field
                if f.HasField("oneof_index") and mine.oneof_decl[f.oneof_index].name == oneof.name
            }
            if members != my_members:
                problems.append(f"{name} oneof {oneof.name}: {my_members} != contract {members}")
    return problems


def _enum_problems(contract, ours) -> list[str]:
    my_enums = _enums(ours)
    problems = []
    for name, values in _enums(contract).items():
        mine = my_enums.get(name)
        if mine is None:
            problems.append(f"enum {name} missing")
            continue
        for value_name, number in values.items():
            if mine.get(value_name) != number:
                problems.append(f"{name}.{value_name} = {mine.get(value_name)}, contract {number}")
    return problems


def _service_problems(contract, ours) -> list[str]:
    my_services = {s.name: {m.name: m for m in s.method} for s in ours.service}
    problems = []
    for service in contract.service:
        mine = my_services.get(service.name)
        if mine is None:
            problems.append(f"service {service.name} missing")
            continue
        for method in service.method:
            my_method = mine.get(method.name)
            if my_method is None:
                problems.append(f"{service.name}.{method.name} missing")
                continue
            expected = (method.input_type, method.output_type,
                        method.client_streaming, method.server_streaming)
            actual = (my_method.input_type, my_method.output_type,
                      my_method.client_streaming, my_method.server_streaming)
            if actual != expected:
                problems.append(f"{service.name}.{method.name}: {actual} != contract {expected}")
    return problems


def _all_problems(contract, ours) -> list[str]:
    return (_message_problems(contract, ours) + _enum_problems(contract, ours)
            + _service_problems(contract, ours))


def test_every_contract_message_and_field_exists_identically(contract, ours) -> None:
    problems = _message_problems(contract, ours)
    assert not problems, "\n".join(problems)


def test_every_contract_enum_value_exists_identically(contract, ours) -> None:
    problems = _enum_problems(contract, ours)
    assert not problems, "\n".join(problems)


def test_every_contract_service_method_exists_identically(contract, ours) -> None:
    problems = _service_problems(contract, ours)
    assert not problems, "\n".join(problems)


def _message(file, name: str) -> descriptor_pb2.DescriptorProto:
    return next(m for m in file.message_type if m.name == name)


def _field(message: descriptor_pb2.DescriptorProto, name: str):
    return next(f for f in message.field if f.name == name)


def _renumber(file) -> None:
    _field(_message(file, "ProduceRequest"), "flush").number = 16


def _retype(file) -> None:
    _field(_message(file, "FetchByOffsetRequest"), "max_bytes").type = (
        descriptor_pb2.FieldDescriptorProto.TYPE_INT64
    )


def _rename(file) -> None:
    _field(_message(file, "Record"), "key").name = "record_key"


def _make_repeated(file) -> None:
    _field(_message(file, "DeleteRecordsRequest"), "before_offset").label = (
        descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
    )


def _drop_optional(file) -> None:
    _field(_message(file, "Header"), "value").proto3_optional = False


def _leave_oneof(file) -> None:
    _field(_message(file, "SubscribeRequest"), "timestamp").ClearField("oneof_index")


def _remove_nested_map(file) -> None:
    _message(file, "CreateTopicRequest").ClearField("nested_type")


def _renumber_enum_value(file) -> None:
    reason = next(e for e in file.enum_type if e.name == "ErrorReason")
    next(v for v in reason.value if v.name == "SHUTTING_DOWN").number = 99


def _stream_unary(file) -> None:
    next(m for m in file.service[0].method if m.name == "Subscribe").server_streaming = False


def _remove_method(file) -> None:
    methods = file.service[0].method
    del methods[[m.name for m in methods].index("DeleteRecords")]


@pytest.mark.parametrize(
    "breakage",
    [_renumber, _retype, _rename, _make_repeated, _drop_optional, _leave_oneof,
     _remove_nested_map, _renumber_enum_value, _stream_unary, _remove_method],
)
def test_the_comparison_catches_each_kind_of_breakage(contract, ours, breakage) -> None:
    # Guards the guard: a doctored copy of ours must be reported by the same checks.
    doctored = descriptor_pb2.FileDescriptorProto()
    doctored.CopyFrom(ours)
    breakage(doctored)
    assert _all_problems(contract, doctored)


def test_additions_are_allowed(contract, ours) -> None:
    extended = descriptor_pb2.FileDescriptorProto()
    extended.CopyFrom(ours)
    produce = _message(extended, "ProduceRequest")
    produce.field.add(name="extra", number=100, type=descriptor_pb2.FieldDescriptorProto.TYPE_BOOL,
                      label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL, json_name="extra")
    extended.message_type.add(name="Extra")
    assert _all_problems(contract, extended) == []


def test_generated_enums_hold_the_contract_error_reasons() -> None:
    # status.py and client/errors.py key their tables by these names.
    assert broker_pb2.ErrorReason.Name(broker_pb2.OFFSET_OUT_OF_RANGE) == "OFFSET_OUT_OF_RANGE"
    assert len(broker_pb2.ErrorReason.keys()) == 16
