"""Option parsing and checking, without Spark: every refusal names its option."""

from __future__ import annotations

import pytest

from stratalog.client import IsolationLevel, TopicPartition
from stratalog.spark import OptionError
from stratalog.spark.options import (
    DEFAULT_MAX_TRIGGER_DELAY_MS,
    parse_duration_ms,
    parse_read_options,
    parse_write_options,
)

SERVER = {"target": "127.0.0.1:1", "subscribe": "t"}


def batch(**options: str):
    return parse_read_options({**SERVER, **options}, streaming=False)


def stream(**options: str):
    return parse_read_options({**SERVER, **options}, streaming=True)


def test_defaults_as_spark_kafka_source():
    options = batch()
    assert options.starting.kind == "earliest" and options.ending.kind == "latest"
    assert options.fail_on_data_loss and not options.include_headers
    assert options.starting_strategy == "error"
    assert options.max_trigger_delay_ms == DEFAULT_MAX_TRIGGER_DELAY_MS
    streaming = stream()
    assert streaming.starting.kind == "latest" and streaming.ending is None
    assert streaming.connection.target == "127.0.0.1:1"


def test_isolation_level_read_committed_by_default_and_its_kafka_alias():
    assert batch().isolation_level == IsolationLevel.READ_COMMITTED and batch().read_committed
    assert stream(isolationLevel=" Read_Uncommitted ").isolation_level == (
        IsolationLevel.READ_UNCOMMITTED)
    alias = batch(**{"kafka.isolation.level": "read_uncommitted"})
    assert not alias.read_committed
    same = batch(**{"kafka.isolation.level": "read_committed", "ISOLATIONLEVEL": "read_committed"})
    assert same.read_committed
    files = parse_read_options({"path": "/data", "isolationLevel": "read_uncommitted"},
                               streaming=False)
    assert not files.read_committed


def test_keys_are_case_insensitive_and_values_checked():
    options = parse_read_options(
        {"TARGET": "h:1", "Subscribe": "a, b ,a", "STARTINGOFFSETS": "Earliest",
         "failondataloss": "FALSE", "minpartitions": "8"},
        streaming=False,
    )
    assert options.subscription.topics == ("a", "b")
    assert not options.fail_on_data_loss and options.min_partitions == 8


def test_precedence_timestamp_then_by_timestamp_then_offsets():
    both = batch(startingTimestamp="5", startingOffsetsByTimestamp='{"t":{"0":7}}',
                 startingOffsets='{"t":{"0":9}}')
    assert (both.starting.kind, both.starting.timestamp, both.starting.option) == (
        "timestamp", 5, "startingTimestamp")
    by_ts = batch(startingOffsetsByTimestamp='{"t":{"0":7}}', startingOffsets="earliest")
    assert by_ts.starting.timestamps == {TopicPartition("t", 0): 7}
    ending = batch(endingOffsets='{"t":{"0":-1,"1":12}}')
    assert ending.ending.offsets == {TopicPartition("t", 0): -1, TopicPartition("t", 1): 12}


@pytest.mark.parametrize(
    ("options", "option", "message"),
    [
        ({"assign": '{"t":[0]}'}, "assign", "only one of"),
        ({"subscribe": "", "subscribePattern": "("}, "subscribePattern", "not a valid regular expression"),
        ({"startingOffsets": "latest"}, "startingOffsets", "not allowed for batch"),
        ({"startingOffsets": '{"t":{"0":-1}}'}, "startingOffsets", r"-1 \(latest\) for t-0"),
        ({"endingOffsets": "earliest"}, "endingOffsets", "'earliest' is not allowed"),
        ({"endingOffsets": '{"t":{"0":-2}}'}, "endingOffsets", r"-2 \(earliest\) for t-0"),
        ({"startingOffsets": '{"t":{"0":-3}}'}, "startingOffsets", "must be an integer >= -2"),
        ({"startingOffsets": '{"t":{"x":1}}'}, "startingOffsets", "not a partition number"),
        ({"startingOffsets": '{"t":[1]}'}, "startingOffsets", "non-empty object of partitions"),
        ({"startingOffsets": "{nope"}, "startingOffsets", "is not valid JSON"),
        ({"startingTimestamp": "-1"}, "startingTimestamp", r"must be in \[0, "),
        ({"startingTimestamp": "soon"}, "startingTimestamp", "must be an integer"),
        ({"endingOffsetsByTimestamp": '{"t":{"0":true}}'}, "endingOffsetsByTimestamp",
         "must be an integer >= 0"),
        ({"startingOffsetsByTimestampStrategy": "oldest"}, "startingOffsetsByTimestampStrategy",
         "'error' or 'latest'"),
        ({"minPartitions": "0"}, "minPartitions", r"must be in \[1, "),
        ({"maxRecordsPerPartition": "many"}, "maxRecordsPerPartition", "must be an integer"),
        ({"failOnDataLoss": "yes"}, "failOnDataLoss", "'true' or 'false'"),
        ({"maxTriggerDelay": "5 fortnights"}, "maxTriggerDelay", "must be a duration"),
        ({"tls.rootCertificates": "/no/such/ca.pem"}, "tls.rootCertificates", "cannot read"),
        ({"requestTimeoutMs": "0"}, "requestTimeoutMs", r"must be in \[1, "),
        ({"kafka.bootstrap.servers": "x"}, "kafka.bootstrap.servers", "unknown option"),
        ({"isolationLevel": "serializable"}, "isolationLevel",
         "must be 'read_committed' or 'read_uncommitted', got 'serializable'"),
        ({"kafka.isolation.level": "committed"}, "kafka.isolation.level",
         "must be 'read_committed' or 'read_uncommitted'"),
        ({"isolationLevel": "read_committed", "kafka.isolation.level": "read_uncommitted"},
         "isolationLevel", "its alias kafka.isolation.level is 'read_uncommitted'; set only one"),
    ],
)
def test_bad_read_options(options, option, message):
    with pytest.raises(OptionError, match=message) as caught:
        batch(**options)
    assert caught.value.option == option
    assert str(caught.value).startswith(f"option '{option}': ")


@pytest.mark.parametrize("name", ["endingOffsets", "endingTimestamp", "endingOffsetsByTimestamp"])
def test_ending_options_refused_in_streams(name):
    with pytest.raises(OptionError, match=f"option '{name}': is not allowed in streaming"):
        stream(**{name: "1" if name.endswith("Timestamp") else '{"t":{"0":1}}'})


def test_streams_may_start_latest_and_assign_parses():
    options = parse_read_options(
        {"target": "h:1", "assign": '{"a":[1,0,1],"b":[2]}', "startingOffsets": '{"a":{"0":-1}}'},
        streaming=True,
    )
    assert options.subscription.assignment == (
        TopicPartition("a", 1), TopicPartition("a", 0), TopicPartition("b", 2))
    assert options.subscription.matches("b") and not options.subscription.matches("c")


def test_tls_material_is_read_on_the_driver(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\n")
    options = batch(**{"tls.rootCertificates": str(ca)})
    assert options.connection.tls and options.connection.root_certificates.startswith(b"-----")
    with pytest.raises(OptionError, match=r"tls\.certificateChain and tls\.privateKey go together"):
        batch(**{"tls.certificateChain": str(ca)})
    with pytest.raises(OptionError, match="option 'tls': is false but"):
        batch(**{"tls": "false", "tls.rootCertificates": str(ca)})


def test_durations():
    assert parse_duration_ms("x", "15m") == 900_000
    assert parse_duration_ms("x", "30 s") == 30_000
    assert parse_duration_ms("x", "250") == 250
    assert parse_duration_ms("x", "2h") == 7_200_000


def test_write_options():
    options = parse_write_options({"target": "h:1", "topic": " out ", "compression": "ZSTD",
                                   "lingerMs": "0", "checkpointLocation": "/tmp/c"})
    assert (options.topic, options.compression, options.linger_ms) == ("out", "zstd", 0)
    with pytest.raises(OptionError, match="option 'subscribe': unknown option"):
        parse_write_options({"target": "h:1", "subscribe": "t"})
    with pytest.raises(OptionError, match="option 'target': is required"):
        parse_write_options({"topic": "t"})


def test_create_topic_options():
    plain = parse_write_options({"target": "h:1", "topic": "t"})
    assert (plain.create_topic, plain.create_topic_partitions) == (False, 1)
    options = parse_write_options({"target": "h:1", "topic": "t", "createtopic": "TRUE",
                                   "createTopicPartitions": "6"})
    assert (options.create_topic, options.create_topic_partitions) == (True, 6)
    with pytest.raises(OptionError, match="option 'createTopic': needs the 'topic' option"):
        parse_write_options({"target": "h:1", "createTopic": "true"})
    with pytest.raises(OptionError, match="option 'createTopicPartitions': applies only with "
                       "createTopic=true"):
        parse_write_options({"target": "h:1", "topic": "t", "createTopicPartitions": "2"})
    with pytest.raises(OptionError, match=r"option 'createTopicPartitions': must be in \[1, "):
        parse_write_options({"target": "h:1", "topic": "t", "createTopic": "true",
                             "createTopicPartitions": "0"})


def test_transactional_write_options():
    plain = parse_write_options({"target": "h:1", "topic": "t"})
    assert plain.transactional_id_prefix is None and plain.transactional_id(3) is None
    options = parse_write_options({"target": "h:1", "topic": "t",
                                   "transactionalIdPrefix": " orders-job ",
                                   "transactionTimeoutMs": "120000"})
    assert options.transactional_id(7) == "orders-job-7"
    assert options.transaction_timeout_ms == 120_000


@pytest.mark.parametrize(
    ("options", "option", "message"),
    [
        ({"transactionalIdPrefix": "  "}, "transactionalIdPrefix", "is blank"),
        ({"transactionalIdPrefix": "x" * 32757}, "transactionalIdPrefix",
         "is 32757 bytes in UTF-8; at most 32756"),
        ({"transactionTimeoutMs": "60000"}, "transactionTimeoutMs",
         "applies to transactional writes only: set transactionalIdPrefix too"),
        ({"transactionalIdPrefix": "p", "transactionTimeoutMs": "0"}, "transactionTimeoutMs",
         r"must be in \[1, 2147483647\], got 0"),
        ({"transactionalIdPrefix": "p", "transactionTimeoutMs": "1m"}, "transactionTimeoutMs",
         "must be an integer"),
        ({"transactional.id": "p"}, "transactional.id", "unknown option"),
    ],
)
def test_bad_transactional_write_options(options, option, message):
    with pytest.raises(OptionError, match=message) as caught:
        parse_write_options({"target": "h:1", "topic": "t", **options})
    assert caught.value.option == option


def test_target_takes_a_clusters_list_like_bootstrap_servers():
    options = batch(target=" db1:50051, db2:50051,db1:50051 ")
    assert options.connection.target == "db1:50051,db2:50051"
    with pytest.raises(OptionError, match=r"option 'target': .*entry 2 is empty"):
        batch(target="db1:50051,,db2:50051")
    with pytest.raises(OptionError, match="option 'target'"):
        parse_write_options({"target": "h:1,", "topic": "t"})
