"""The test suite. Imported before any test module, so before gRPC."""

import os

# gRPC's fork handlers off for the test process, however pytest is started: Spark's driver
# is started by a fork of it, and a fork while gRPC threads (of earlier tests' channels) were
# busy left the child broken ("Java gateway process exited", once in CI). Nothing here forks
# a gRPC process without exec (workers spawn, verifiers come from a fork server).
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
