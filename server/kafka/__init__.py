"""The Kafka-protocol front end: kcat, librdkafka, kafka-python and aiokafka on the same logs.

It translates Kafka's requests into calls to the same serving layer, coordinators and security
as the gRPC front end (server/rpc/), and their results into Kafka's responses; it decides no
rule of its own but the protocol's (docs/kafka-protocol.md)::

    listener.py     KafkaListener: the TCP server (uvloop), its connections, bounds and TLS
    connection.py   one connection: frames in, requests served in order, answers out
    framing.py      sans-IO: a byte stream to size-prefixed request frames
    codec.py        sans-IO: headers by hand, bodies on kafka-python's schema classes
    context.py      what a handler gets: the services, the connection, the request's header
    error_codes.py  every server error to its Kafka error code (one place)
    apis/           one module per API area, each handler registered with its versions
"""

from stratalog.server.kafka.context import KafkaServices
from stratalog.server.kafka.listener import KafkaListener

__all__ = ["KafkaListener", "KafkaServices"]
