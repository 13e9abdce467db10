"""The ``stratalog`` command line: one module per subcommand, dispatched by ``main``.

gRPC's C core logs to stderr on its own (a failed TLS handshake prints an INFO line of
``ssl_transport_security.cc``), which would bury the command's one-line message. Unless the
user set ``GRPC_VERBOSITY`` or ``GRPC_TRACE`` (to debug gRPC itself), the command keeps that
log to errors. The core reads the variables once, when grpc is first imported, so it is done
here, before any subcommand module imports grpc (cli/connection.py words the TLS failures).
"""

import os as _os

if not {"GRPC_VERBOSITY", "GRPC_TRACE"} & _os.environ.keys():
    _os.environ["GRPC_VERBOSITY"] = "ERROR"
