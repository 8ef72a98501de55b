"""The edge agent's persisted state: the last applied config and its version.

Two files in the state directory (default /var/lib/dyncc/agent-<pop>):
`applied.json` ({"pop", "version", "applied_at_ns"}) and `config.pb` (the
signed CongestionConfig in force).  Both are written atomically
(dyncc_common.files: temp file, fsync, rename).  A state that cannot be read is an error, never "version 0":
an agent that forgot its version would accept replayed older configs.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from google.protobuf.message import DecodeError

from dyncc_common.errors import DynccError
from dyncc_common.files import atomic_write
from schemas.congestion_pb2 import CongestionConfig


class StateError(DynccError):
    """The state directory holds something unreadable."""


def default_state_dir(pop: str) -> Path:
    return Path("/var/lib/dyncc") / f"agent-{pop}"


class AgentState:
    def __init__(self, directory: Path, pop: str) -> None:
        self.directory = directory
        self.pop = pop
        self.version = 0
        self.config: CongestionConfig | None = None

    @property
    def state_path(self) -> Path:
        return self.directory / "applied.json"

    @property
    def config_path(self) -> Path:
        return self.directory / "config.pb"

    @property
    def signature(self) -> bytes:
        return self.config.signature if self.config is not None else b""

    def load(self) -> AgentState:
        """Read the state if present (a fresh directory is version 0, no config)."""
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"cannot create state directory {self.directory}: {exc.strerror}") from exc
        if not self.state_path.exists():
            return self
        try:
            meta = json.loads(self.state_path.read_text())
            version = int(meta["version"])
            config = CongestionConfig.FromString(self.config_path.read_bytes())
        except (OSError, ValueError, KeyError, TypeError, DecodeError) as exc:
            raise StateError(
                f"agent state in {self.directory} is unreadable ({exc}); fix or remove it to start over"
            ) from exc
        # config.pb is written before applied.json: a newer config.pb means the second write was cut short.
        if meta.get("pop") != self.pop or config.version < version or config.pop != self.pop:
            raise StateError(
                f"agent state in {self.directory} is for POP {meta.get('pop')!r} version {version}, "
                f"config file says POP {config.pop!r} version {config.version}; fix or remove it"
            )
        self.version, self.config = int(config.version), config
        return self

    def save(self, config: CongestionConfig) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        atomic_write(self.config_path, config.SerializeToString(deterministic=True))
        meta = {"pop": self.pop, "version": int(config.version), "applied_at_ns": time.time_ns()}
        atomic_write(self.state_path, json.dumps(meta).encode())
        self.version, self.config = int(config.version), config
