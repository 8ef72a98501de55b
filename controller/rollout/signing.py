"""Controller-side signing: load the Ed25519 private key once, sign configs with a key id.

The signature itself is schemas/signing.py (shared with the agents).
`key_id` is the first 16 hex digits of SHA-256 over the raw public key, so an
operator can tell which key signed a config (`dyncc control rollout status`).
"""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from dyncc_common.errors import ConfigError
from schemas.congestion_pb2 import CongestionConfig
from schemas.signing import generate_keypair, key_id, load_private_key, sign

__all__ = ["Signer", "key_id", "keygen"]


class Signer:
    """Signs configs with one private key; sets key_id before signing (it is covered)."""

    def __init__(self, key: Ed25519PrivateKey) -> None:
        self._key = key
        self.key_id = key_id(key.public_key())

    @classmethod
    def from_file(cls, path: Path) -> Signer:
        try:
            return cls(load_private_key(path))
        except FileNotFoundError as exc:
            raise ConfigError(f"private key {path} not found (create one: dyncc control keygen)") from exc
        except (ValueError, TypeError, OSError) as exc:
            raise ConfigError(f"cannot load private key {path}: {exc}") from exc

    def sign(self, config: CongestionConfig) -> CongestionConfig:
        config.key_id = self.key_id
        return sign(config, self._key)


def keygen(out_dir: Path, name: str = "dyncc-config", force: bool = False) -> tuple[Path, Path]:
    """Write <name>.key (0600) and <name>.pub into out_dir; refuse to overwrite unless force."""
    out_dir.mkdir(parents=True, exist_ok=True)
    private_path, public_path = out_dir / f"{name}.key", out_dir / f"{name}.pub"
    if not force:
        for path in (private_path, public_path):
            if path.exists():
                raise ConfigError(f"{path} exists; refusing to overwrite a key (use --force)")
    generate_keypair(private_path, public_path)
    return private_path, public_path
