"""The --cluster URL and the cluster settings: what parses, and the error for what does not."""

from __future__ import annotations

import pytest

from stratalog.server.cluster.endpoints import Endpoint, parse_cluster_url, uses_tls
from stratalog.server.cluster.errors import ClusterConfigError
from stratalog.server.cluster.layout import ClusterKeys, decode_json
from stratalog.server.settings import SettingsError, load_settings


def test_endpoints_in_order() -> None:
    assert parse_cluster_url("etcd://127.0.0.1:2379") == [Endpoint("127.0.0.1", 2379)]
    assert parse_cluster_url("etcd://a:1, b:2,[::1]:3/") == [
        Endpoint("a", 1), Endpoint("b", 2), Endpoint("::1", 3)]
    assert str(Endpoint("::1", 3)) == "[::1]:3"
    # TLS: the same endpoints behind etcds://.
    assert parse_cluster_url("etcds://a:1,b:2") == [Endpoint("a", 1), Endpoint("b", 2)]
    assert uses_tls("etcds://a:1") and not uses_tls("etcd://a:1")


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:2379", "127.0.0.1:2379", "etcd://", "etcd://host", "etcd://host:0",
    "etcd://host:70000", "etcd://:2379", "etcd://a:1,,b:2", "etcd://[::1]2379",
    "etcds://", "etcds://host", "https://host:2379",
])
def test_bad_urls_are_refused_naming_the_problem(url: str) -> None:
    with pytest.raises(ClusterConfigError) as raised:
        parse_cluster_url(url)
    assert repr(url) in str(raised.value)


def test_cluster_settings() -> None:
    settings = load_settings(environ={}, overrides={
        "cluster": "etcd://127.0.0.1:2379", "node.id": "3", "cluster.session.timeout.ms": "9000",
    })
    assert (settings.cluster, settings.node_id, settings.cluster_session_timeout_ms) == (
        "etcd://127.0.0.1:2379", 3, 9000)
    assert load_settings(environ={}).cluster == ""  # a single server by default
    defaults = load_settings(environ={})
    assert (defaults.cluster_session_timeout_ms, defaults.default_replication_factor,
            defaults.unclean_leader_election_enable) == (3000, 0, False)  # 0: min(3, live)
    kafka_names = load_settings(environ={}, overrides={
        "default.replication.factor": "3", "unclean.leader.election.enable": "true",
    })
    assert kafka_names.default_replication_factor == 3
    assert kafka_names.unclean_leader_election_enable is True
    # A single server may keep any node id (it is not in a producer id there).
    assert load_settings(environ={}, overrides={"node_id": str(2**23)}).node_id == 2**23
    for overrides, named in [
        ({"cluster": "zk://h:1"}, "setting 'cluster'"),
        ({"node_id": "-1"}, "node_id"),
        ({"advertised_listen": "h:0"}, "advertised_listen"),
        ({"cluster_prefix": "stratalog"}, "cluster_prefix"),
        ({"cluster_session_timeout_ms": "500"}, "cluster_session_timeout_ms"),
        ({"default_replication_factor": "-1"}, "default_replication_factor"),
        # Producer ids carry the node id above 40 bits of counter: int64 bounds it.
        ({"cluster": "etcd://h:1", "node_id": str(2**23)}, "node_id' must be <= 8388607"),
    ]:
        with pytest.raises(SettingsError, match=named):
            load_settings(environ={}, overrides=overrides)


def test_etcd_security_settings_go_together_and_need_etcds_for_tls() -> None:
    tls = load_settings(environ={}, overrides={
        "cluster": "etcds://h:1", "etcd_ca_file": "ca.pem", "etcd_cert_file": "c.pem",
        "etcd_key_file": "k.pem", "etcd_username": "u", "etcd_password_file": "p",
    })
    assert (tls.etcd_ca_file, tls.etcd_username) == ("ca.pem", "u")
    for overrides, named in [
        ({"cluster": "etcds://h:1", "etcd_cert_file": "c.pem"},
         "'etcd_cert_file' and 'etcd_key_file' go together"),
        ({"cluster": "etcd://h:1", "etcd_username": "u"},
         "'etcd_username' and 'etcd_password_file' go together"),
        ({"cluster": "etcd://h:1", "etcd_ca_file": "ca.pem"},
         "setting 'etcd_ca_file' is for TLS to etcd, but 'cluster' is 'etcd://h:1': write"
         " etcds://"),
        ({"cluster": "etcd://h:1", "etcd_cert_file": "c.pem", "etcd_key_file": "k.pem"},
         "setting 'etcd_cert_file' is for TLS"),
    ]:
        with pytest.raises(SettingsError, match=named):
            load_settings(environ={}, overrides=overrides)


def test_key_layout() -> None:
    keys = ClusterKeys("/stratalog")
    assert keys.broker(7) == b"/stratalog/brokers/7"
    assert keys.broker(7).startswith(keys.brokers_prefix)
    assert keys.controller == b"/stratalog/controller"
    assert keys.controller_epoch == b"/stratalog/controller_epoch"
    assert keys.acls == b"/stratalog/acls"
    assert decode_json(b'{"node_id": 1}') == {"node_id": 1}
    assert decode_json(b"not json") == {} and decode_json(b"[1]") == {}
