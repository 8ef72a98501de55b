"""Ed25519 signing and verification of CongestionConfig messages.

The signature covers the deterministic serialization of the config with its
`signature` field cleared.  The controller signs (private key); edge agents
verify with the public key.  Keys are stored as raw 32-byte values in PEM
(PKCS8 / SubjectPublicKeyInfo) files written by `dyncc control keygen`.

Keys rotate: a config carries the id of the key that signed it (`key_id`, covered by the
signature; `key_id()` = the first 16 hex digits of SHA-256 over the raw public key) and an
agent trusts a `KeySet` (every key it was given, by id).  A config whose key id is not in
the set is refused naming that id; a config without a key id (older stores and recordings)
verifies when any trusted key verifies it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
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


class UntrustedKeyError(SignatureError):
    """A config signed by a key id the verifier does not trust (e.g. a key removed by a rotation)."""


def key_id(public_key: Ed25519PublicKey) -> str:
    """The key's id: the first 16 hex digits of SHA-256 over the raw 32-byte public key."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


class KeySet:
    """The public keys a verifier trusts, by key id (at least one)."""

    def __init__(self, keys: Iterable[Ed25519PublicKey]) -> None:
        self.keys: dict[str, Ed25519PublicKey] = {key_id(k): k for k in keys}
        if not self.keys:
            raise ValueError("no public key to trust")

    @classmethod
    def load(cls, paths: Iterable[Path] = (), directory: Path | None = None) -> KeySet:
        """The keys of PEM files `paths` and of every *.pem / *.pub file in `directory`
        (ValueError / OSError naming the file that cannot be read)."""
        files = list(paths)
        if directory is not None:
            try:
                found = sorted(p for p in directory.iterdir() if p.suffix in (".pem", ".pub") and p.is_file())
            except OSError as exc:
                raise ValueError(f"{directory}: {exc.strerror or exc}") from exc
            if not found:
                raise ValueError(f"no *.pem or *.pub public key in {directory}")
            files.extend(found)
        keys = []
        for path in files:
            try:
                keys.append(load_public_key(path))
            except (OSError, ValueError) as exc:
                raise ValueError(f"{path}: {getattr(exc, 'strerror', None) or exc}") from exc
        return cls(keys)

    @property
    def ids(self) -> list[str]:
        return sorted(self.keys)

    def __contains__(self, kid: object) -> bool:
        return kid in self.keys

    def verify(self, config: CongestionConfig) -> None:
        """SignatureError unless a trusted key signed `config`: the key of its key id, or with no
        key id (configs signed before key ids) any trusted key.  UntrustedKeyError names the id."""
        if not config.signature:
            raise SignatureError("config is unsigned")
        payload = signed_payload(config)
        if config.key_id:
            key = self.keys.get(config.key_id)
            if key is None:
                raise UntrustedKeyError(
                    f"config is signed by key {config.key_id}, which is not trusted here "
                    f"(trusted: {', '.join(self.ids)})"
                )
            candidates = [key]
        else:
            candidates = list(self.keys.values())
        for key in candidates:
            try:
                key.verify(config.signature, payload)
                return
            except InvalidSignature:
                continue
        by = f"key {config.key_id}" if config.key_id else f"any of {len(candidates)} trusted keys"
        raise SignatureError(f"config signature does not verify with {by} (tampered or wrong key)")


def verify(config: CongestionConfig, public_key: Ed25519PublicKey | KeySet) -> None:
    """SignatureError unless `config` is signed by `public_key` (one key, or a KeySet)."""
    if isinstance(public_key, KeySet):
        public_key.verify(config)
        return
    if not config.signature:
        raise SignatureError("config is unsigned")
    try:
        public_key.verify(config.signature, signed_payload(config))
    except InvalidSignature as exc:
        raise SignatureError("config signature does not verify (tampered or wrong key)") from exc


def generate_keypair(private_path: Path, public_path: Path) -> str:
    """Write a new Ed25519 key pair (the private key file is mode 0600); returns its key id."""
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
    return key_id(key.public_key())


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
