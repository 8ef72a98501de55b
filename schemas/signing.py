"""Ed25519 signing and verification of CongestionConfig messages.

The signature covers the deterministic serialization of the config with its
`signature` field cleared.  The controller signs (private key); edge agents
verify with the public key.  Keys are stored as raw 32-byte values in PEM
(PKCS8 / SubjectPublicKeyInfo) files written by `dyncc control keygen`.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from dyncc_common.errors import DynccError
from schemas.congestion_pb2 import CongestionConfig


class SignatureError(DynccError):
    """A config is unsigned or its signature does not verify."""


def signed_payload(config: CongestionConfig) -> bytes:
    unsigned = CongestionConfig()
    unsigned.CopyFrom(config)
    unsigned.ClearField("signature")
    return unsigned.SerializeToString(deterministic=True)


def sign(config: CongestionConfig, key: Ed25519PrivateKey) -> CongestionConfig:
    """Set config.signature in place and return the config."""
    config.signature = key.sign(signed_payload(config))
    return config


def verify(config: CongestionConfig, public_key: Ed25519PublicKey) -> None:
    if not config.signature:
        raise SignatureError("config is unsigned")
    try:
        public_key.verify(config.signature, signed_payload(config))
    except InvalidSignature as exc:
        raise SignatureError("config signature does not verify (tampered or wrong key)") from exc


def generate_keypair(private_path: Path, public_path: Path) -> None:
    """Write a new Ed25519 key pair; the private key file is mode 0600."""
    key = Ed25519PrivateKey.generate()
    private_bytes = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_bytes = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(private_bytes)
    public_path.write_bytes(public_bytes)


def load_private_key(path: Path) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path} is not an Ed25519 private key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    key = serialization.load_pem_public_key(path.read_bytes())
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError(f"{path} is not an Ed25519 public key")
    return key
