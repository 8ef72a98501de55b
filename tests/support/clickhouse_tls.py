"""A private ClickHouse 18.16 with its TLS native port and a password (deploy/clickhouse/clickhouse.sh,
DYNCC_CH_TLS_PORT and DYNCC_CH_PASSWORD_FILE) and the store URLs that reach it."""

from __future__ import annotations

import secrets
import urllib.parse
from pathlib import Path

from tests.support.private_server import PrivateServer


class TlsClickHouse:
    """The server on tcp_port (plain) .. tcp_port + 3 (TLS); `password` is a fresh random secret."""

    def __init__(self, tcp_port: int) -> None:
        self.tcp_port = tcp_port
        self.tls_port = tcp_port + 3
        self.password = f"dsec-{secrets.token_hex(12)}"
        self.server = PrivateServer(
            "clickhouse",
            DYNCC_CH_TCP_PORT=str(tcp_port),
            DYNCC_CH_HTTP_PORT=str(tcp_port + 1),
            DYNCC_CH_INTERSERVER_PORT=str(tcp_port + 2),
            DYNCC_CH_TLS_PORT=str(self.tls_port),
        )
        self.password_file = self.server.stack / "password"
        self.password_file.write_text(self.password + "\n")
        self.password_file.chmod(0o600)
        self.server.env["DYNCC_CH_PASSWORD_FILE"] = str(self.password_file)

    @property
    def ca(self) -> Path:
        """The CA that signed the server's certificate (deploy/clickhouse/tls-certs.sh)."""
        return self.server.stack / "clickhouse" / "tls" / "ca.crt"

    def start(self) -> None:
        self.server.start()

    def remove(self) -> None:
        self.server.remove()

    def url(self, database: str, *, port: int | None = None, password_file: Path | None = None, **options: str) -> str:
        """clickhouse://default@127.0.0.1:<TLS port>/database?secure=1&ca_certs=..&password_file=..
        plus `options` (an option given as "" is left out)."""
        query = {
            "secure": "1",
            "ca_certs": str(self.ca),
            "password_file": str(password_file or self.password_file),
            **options,
        }
        kept = {k: v for k, v in query.items() if v != ""}
        return f"clickhouse://default@127.0.0.1:{port or self.tls_port}/{database}?{urllib.parse.urlencode(kept)}"
