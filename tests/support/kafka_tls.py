"""A private Kafka broker with TLS listeners (deploy/kafka/kafka.sh, DYNCC_KAFKA_TLS_PORT), for tests and bench.

Four ports from `base`: plaintext, controller, SASL_SSL (SCRAM-SHA-512) and mutual TLS.  The
certificates (deploy/tls/make-certs.sh) and the SCRAM user "dyncc" with a random password are
made in the server's own stack dir; `password_file()` writes the password for a client.
"""

from __future__ import annotations

from pathlib import Path

from tests.support.private_server import PrivateServer

BASE_PORT = 19600  # this feature's private ports: 19600-19609


class TlsKafka:
    def __init__(self, base: int = BASE_PORT) -> None:
        self.ports = {"plaintext": base, "controller": base + 1, "sasl_ssl": base + 2, "mtls": base + 3}
        self.server = PrivateServer(
            "kafka",
            DYNCC_KAFKA_PORT=str(base),
            DYNCC_KAFKA_CONTROLLER_PORT=str(base + 1),
            DYNCC_KAFKA_TLS_PORT=str(base + 2),
            DYNCC_KAFKA_MTLS_PORT=str(base + 3),
            DYNCC_KAFKA_STOP_TIMEOUT="1",  # thrown away afterwards: no need to wait for a clean shutdown
        )
        self.tls = self.server.stack / "kafka" / "tls"

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    @property
    def plaintext(self) -> str:
        return self.address("plaintext")

    @property
    def sasl_ssl(self) -> str:
        return self.address("sasl_ssl")

    @property
    def mtls(self) -> str:
        return self.address("mtls")

    @property
    def user(self) -> str:
        return (self.tls / "scram-users").read_text().split(":", 1)[0].strip()

    @property
    def password(self) -> str:
        return (self.tls / "scram-users").read_text().strip().split(":", 1)[1]

    def password_file(self, path: Path, password: str | None = None) -> Path:
        path.write_text((self.password if password is None else password) + "\n")
        path.chmod(0o600)
        return path

    def ca(self, name: str = "ca") -> Path:
        return self.tls / f"{name}.crt"

    def flags(self, password_file: Path, ca: str = "ca") -> list[str]:
        """The `dyncc` flags for the SASL_SSL listener."""
        return [
            "--kafka-ca", str(self.ca(ca)), "--kafka-sasl", "SCRAM-SHA-512", "--kafka-user", self.user,
            "--kafka-password-file", str(password_file),
        ]  # fmt: skip

    def options(self) -> dict[str, str]:
        """librdkafka options for the SASL_SSL listener (tests that build clients directly)."""
        return {
            "security.protocol": "sasl_ssl",
            "ssl.ca.location": str(self.ca()),
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": self.user,
            "sasl.password": self.password,
        }

    def start(self) -> None:
        self.server.start()

    def remove(self) -> None:
        self.server.remove()
