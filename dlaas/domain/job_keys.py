"""Per-job key material derived from a platform secret: the SSH key pair of an MPI job.

An MPI job's learners log in to each other over ssh (dlaas.learner.mpi) with a key pair of
their own job. The key is derived, not stored: HMAC-SHA256(platform secret, job id) seeds
an Ed25519 key, so every LCM replica, every redeploy of the same job and both engines give
the same key (a gang deployed in two attempts still agrees), and no store holds it. The
derivation is one-way: the key tells nothing of the platform's secret, and another job's
key cannot be computed from it. Pure (the `cryptography` package, no I/O).
"""

from __future__ import annotations

import hashlib
import hmac

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


def ssh_private_key(secret: bytes, job_id: str) -> bytes:
    """The job's SSH private key in OpenSSH's format (ssh -i reads it; ssh-keygen -y gives
    its public half)."""
    seed = hmac.new(secret, b"dlaas-mpi-ssh\0" + job_id.encode(), hashlib.sha256).digest()
    key = Ed25519PrivateKey.from_private_bytes(seed)
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
