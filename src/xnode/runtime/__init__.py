"""This process's resources below the use cases: the crypto threads and signing process,
and the Unix-socket link by which the workers of one node share its sequencer."""
