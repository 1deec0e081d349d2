"""Exit codes of the trainer (docs/env-contract.md, "Exit codes") and the exceptions that
map to them. The operator's default restart policy treats 1-127 as permanent and 128+ as
retryable, so the code a failure ends with decides whether the gang is restarted.
"""

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CONFIG = 2
EXIT_PREEMPTED = 143
EXIT_RENDEZVOUS_TIMEOUT = 200
EXIT_PEER_LOST = 201


class TrainerError(Exception):
    """A failure with a known exit code and a message meant for the user."""

    exit_code = EXIT_ERROR


class ConfigError(TrainerError):
    """The job config or the environment is invalid; the message names the field."""

    exit_code = EXIT_CONFIG


class RendezvousTimeout(TrainerError):
    """Rank 0 (or, on rank 0, every peer) was not reachable within the rendezvous timeout."""

    exit_code = EXIT_RENDEZVOUS_TIMEOUT


class PeerLost(TrainerError):
    """A collective or point-to-point operation failed mid-training: a peer is gone."""

    exit_code = EXIT_PEER_LOST


class Preempted(TrainerError):
    """SIGTERM was received; a checkpoint has been written."""

    exit_code = EXIT_PREEMPTED


class ReplicaMismatch(TrainerError):
    """Replicated parameters differ across ranks (only checked with --verify-replicas)."""

    exit_code = EXIT_ERROR
