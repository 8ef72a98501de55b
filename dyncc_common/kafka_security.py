"""Kafka over TLS with SASL: the settings every Kafka client shares, and their librdkafka options.

`KafkaSecurity` is a settings part (dyncc_common.settings.part): its rows are flags and TOML
keys of the component that nests it (`kafka_ca = "/etc/dyncc/kafka-ca.crt"` in `[collect]`,
`--kafka-ca FILE` on the command line).  TLS is on when a CA file, a client certificate or
--kafka-tls is given; SASL when a mechanism is.  The password is read from a file or an
environment variable (never a flag or a TOML value), only when the client is built
(`librdkafka_options`), and is never part of a message, a repr or --help.  SASL PLAIN sends
the password as it is: it is refused without TLS (ConfigError).

`classify(name, text)` sorts a librdkafka error or log line into "auth", "tls", "protocol"
(a plaintext client talking to a TLS listener) or ""; `probe()` is the start check: a short
metadata round trip that raises KafkaSecurityError (a ConfigError: one line, exit 2) at the
first authentication or TLS failure and returns the reason when no broker answered (an
outage, for the caller to ride out or report).  A broker certificate that fails verification
is read once more (`certificate_out_of_date`), so an expired one is called expired, not an
untrusted CA.  Stdlib only at import (the collector imports it before numpy; `cryptography` is
imported on that failure only), and it imports nothing else of dyncc.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from typing import TYPE_CHECKING, Any, ClassVar

from dyncc_common.errors import ConfigError
from dyncc_common.settings import BOOL, PATH, STR, Settings, setting

if TYPE_CHECKING:
    from pathlib import Path  # parsed lazily by the PATH kind

__all__ = [
    "KAFKA_SECURITY_KEYS",
    "MECHANISMS",
    "KafkaSecurity",
    "KafkaSecurityError",
    "classify",
    "creation_failure",
    "describe",
    "librdkafka_options",
    "probe",
]

SECTION = "Kafka TLS and SASL"
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")


class KafkaSecurityError(ConfigError):
    """The broker refused the client's credentials or certificate, or spoke another protocol."""


def _env_name(value: str, what: str) -> str:
    if not value or not all(c.isalnum() or c == "_" for c in value) or value[0].isdigit():
        raise ConfigError(f"bad {what} {value!r}: the name of an environment variable (letters, digits, '_')")
    return value


@dataclasses.dataclass(frozen=True)
class KafkaSecurity(Settings):
    """TLS (CA, optional client certificate) and SASL (SCRAM-SHA-512, or PLAIN over TLS) for Kafka."""

    kafka_tls: bool = setting(
        False, BOOL, "connect to Kafka over TLS (implied by --kafka-ca / --kafka-cert); without --kafka-ca "
        "the system's CA certificates are trusted", section=SECTION,
    )  # fmt: skip
    kafka_ca: Path | None = setting(
        None, PATH, "CA certificate(s), PEM, that sign the brokers' certificates (turns TLS on)", section=SECTION,
        metavar="FILE",
    )  # fmt: skip
    kafka_cert: Path | None = setting(
        None, PATH, "client certificate, PEM, for brokers that require one (with --kafka-key)", section=SECTION,
        metavar="FILE",
    )  # fmt: skip
    kafka_key: Path | None = setting(
        None, PATH, "private key of --kafka-cert, PEM (unencrypted)", section=SECTION, metavar="FILE"
    )
    kafka_sasl: str | None = setting(
        None, STR, "SASL mechanism (PLAIN only over TLS)", section=SECTION, choices=MECHANISMS, metavar="MECHANISM"
    )
    kafka_user: str | None = setting(None, STR, "SASL user name", section=SECTION, metavar="NAME")
    kafka_password_file: Path | None = setting(
        None, PATH, "file holding the SASL password (its first line)", section=SECTION, metavar="FILE",
        exclusive="kafka-password",
    )  # fmt: skip
    kafka_password_env: str | None = setting(
        None, STR, "environment variable holding the SASL password", section=SECTION, metavar="VAR",
        exclusive="kafka-password", validator=_env_name,
    )  # fmt: skip

    COMPONENT: ClassVar[str] = ""

    def __post_init__(self) -> None:
        """Cross-field checks; no file is read here (librdkafka_options does)."""
        if bool(self.kafka_cert) != bool(self.kafka_key):
            raise ConfigError("--kafka-cert and --kafka-key go together")
        password = self.kafka_password_file or self.kafka_password_env
        if self.kafka_password_file and self.kafka_password_env:
            raise ConfigError("give either --kafka-password-file or --kafka-password-env, not both")
        if self.kafka_sasl is None:
            if self.kafka_user or password:
                raise ConfigError("--kafka-user and a password need --kafka-sasl SCRAM-SHA-512 (or PLAIN over TLS)")
            return
        if not self.kafka_user:
            raise ConfigError(f"--kafka-sasl {self.kafka_sasl} needs --kafka-user NAME")
        if not password:
            raise ConfigError(
                f"--kafka-sasl {self.kafka_sasl} needs --kafka-password-file FILE or --kafka-password-env VAR"
            )
        if self.kafka_sasl == "PLAIN" and not self.tls:
            raise ConfigError(
                "--kafka-sasl PLAIN sends the password in clear: use it only over TLS (--kafka-ca FILE or "
                "--kafka-tls), or use SCRAM-SHA-512"
            )

    @property
    def tls(self) -> bool:
        return bool(self.kafka_tls or self.kafka_ca or self.kafka_cert)

    @property
    def protocol(self) -> str:
        """librdkafka's security.protocol."""
        if self.kafka_sasl:
            return "sasl_ssl" if self.tls else "sasl_plaintext"
        return "ssl" if self.tls else "plaintext"


#: the dests of the KafkaSecurity rows (for `add_arguments(only=...)` of a subcommand)
KAFKA_SECURITY_KEYS = tuple(KafkaSecurity.defaults())


def _readable(path: Path, what: str) -> str:
    if not path.is_file():
        raise ConfigError(f"{what} {path}: no such file")
    if not os.access(path, os.R_OK):
        raise ConfigError(f"{what} {path}: not readable")
    return str(path)


def _password(sec: KafkaSecurity) -> str:
    if sec.kafka_password_file is not None:
        path = sec.kafka_password_file
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.readline().rstrip("\r\n")
        except (OSError, UnicodeDecodeError) as exc:
            reason = getattr(exc, "strerror", None) or type(exc).__name__
            raise ConfigError(f"--kafka-password-file {path}: cannot read it ({reason})") from None
        if not text:
            raise ConfigError(f"--kafka-password-file {path}: the first line is empty")
        return text
    name = str(sec.kafka_password_env)
    value = os.environ.get(name, "")
    if not value:
        raise ConfigError(f"--kafka-password-env {name}: the environment variable is not set or empty")
    return value


def librdkafka_options(sec: KafkaSecurity | None) -> dict[str, Any]:
    """The librdkafka settings for `sec` (reads the password; ConfigError names the bad file/variable).

    Plaintext without SASL gives {} (librdkafka's defaults), so an unchanged configuration
    builds the same client as before."""
    if sec is None or sec.protocol == "plaintext":
        return {}
    out: dict[str, Any] = {"security.protocol": sec.protocol}
    if sec.tls:
        out["ssl.endpoint.identification.algorithm"] = "https"  # the broker's name must match its certificate
        if sec.kafka_ca is not None:
            out["ssl.ca.location"] = _readable(sec.kafka_ca, "--kafka-ca")
        else:
            out["ssl.ca.location"] = "probe"  # the system's CA certificates
        if sec.kafka_cert is not None and sec.kafka_key is not None:
            out["ssl.certificate.location"] = _readable(sec.kafka_cert, "--kafka-cert")
            out["ssl.key.location"] = _readable(sec.kafka_key, "--kafka-key")
    if sec.kafka_sasl:
        out["sasl.mechanism"] = sec.kafka_sasl
        out["sasl.username"] = sec.kafka_user
        out["sasl.password"] = _password(sec)
    return out


def describe(sec: KafkaSecurity | None) -> str:
    """A short description for a start line: "TLS + SASL SCRAM-SHA-512 as dyncc" (no secret)."""
    if sec is None or sec.protocol == "plaintext":
        return "plaintext"
    parts = []
    if sec.tls:
        parts.append("mutual TLS" if sec.kafka_cert else "TLS")
    if sec.kafka_sasl:
        parts.append(f"SASL {sec.kafka_sasl} as {sec.kafka_user}")
    return " + ".join(parts)


# ---- errors --------------------------------------------------------------------------------

_AUTH_NAMES = ("_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED")
_TLS_TEXTS = ("SSL handshake failed", "SSL routines", "ssl/tls alert", "certificate verify failed")


def classify(name: str, text: str) -> str:
    """ "auth", "tls", "protocol" or "" for a librdkafka error (its name and text) or log line."""
    if name in _AUTH_NAMES or "SASL authentication error" in text or "Authentication failed" in text:
        return "auth"
    if name == "_SSL" or any(t in text for t in _TLS_TEXTS):
        return "tls"
    if "in state APIVERSION_QUERY" in text and ("Disconnected" in text or "connection closed by peer" in text):
        return "protocol"  # a plaintext client whose first request the (TLS) listener dropped
    return ""


_HINTS = {
    "auth": "SASL authentication failed (check --kafka-user and the password)",
    "tls": "TLS handshake failed (check --kafka-ca, and --kafka-cert/--kafka-key where the broker wants one)",
    "protocol": "the broker closed the connection at the first request: a TLS listener? (set --kafka-ca or "
    "--kafka-tls)",
}


def security_message(kind: str, text: str, brokers: str = "") -> str:
    """One line: what failed, what to check, and librdkafka's own words (trimmed).  A broker
    certificate that failed verification is looked at (`certificate_out_of_date`; `brokers`, or
    the broker the text names): librdkafka says only "verify that ssl.ca.location is correctly
    configured", even when it expired."""
    detail = text.split("]: ", 1)[-1]  # a log line's "FAIL [rdkafka#...] [thrd:...]: " prefix
    named = re.match(r"^(?:\w+://)?(\S+)/(?:bootstrap|\d+): ", detail)  # "sasl_ssl://host:port/bootstrap: "
    if named and not brokers:
        brokers = named.group(1)  # the broker that failed
    detail = re.sub(r"^(\w+://)?\S+/(bootstrap|\d+): ", "", detail)
    cut = detail.find(" (after ")
    if cut > 0:
        detail = detail[:cut]
    if kind == "tls" and brokers and "certificate verify failed" in detail:
        dated = certificate_out_of_date(brokers)
        if dated:
            return f"TLS handshake failed: {dated} (renew it on the broker): {detail}"
    return f"{_HINTS.get(kind, kind)}: {detail}"


def certificate_out_of_date(brokers: str, timeout: float = 2.0) -> str:
    """ "the broker's certificate (HOST:PORT) expired on DATE" (or "is not valid before DATE") for
    the first broker of `brokers` that shows one out of its validity period, else "".  A TLS
    handshake that verifies nothing, only to read the certificate; any failure gives ""."""
    import datetime as dt
    import socket
    import ssl

    from cryptography import x509  # a dependency of dyncc already; read only on this failure

    now = dt.datetime.now(dt.UTC)
    for address in brokers.split(",")[:3]:
        host, _, port = address.strip().rpartition(":")
        host = host.strip("[]")
        try:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            with (
                socket.create_connection((host, int(port)), timeout=timeout) as raw,
                context.wrap_socket(raw, server_hostname=host) as tls,
            ):
                der = tls.getpeercert(binary_form=True)
            if not der:
                continue
            cert = x509.load_der_x509_certificate(der)
        except (OSError, ValueError):
            continue
        shown = f"the broker's certificate ({host}:{port})"
        if cert.not_valid_after_utc < now:
            return f"{shown} expired on {cert.not_valid_after_utc:%Y-%m-%d %H:%M} UTC"
        if cert.not_valid_before_utc > now:
            return f"{shown} is not valid before {cert.not_valid_before_utc:%Y-%m-%d %H:%M} UTC"
    return ""


_INVALID_ARG = -186  # librdkafka's RD_KAFKA_RESP_ERR__INVALID_ARG: a client its settings cannot build


def creation_failure(exc: BaseException) -> str | None:
    """One line when `exc` is confluent_kafka's KafkaException for a client its settings cannot
    build (librdkafka's _INVALID_ARG: a client key that does not match its certificate, an
    unreadable or bad PEM file, ...); else None.  Read by name: nothing of confluent_kafka is
    imported here."""
    if type(exc).__name__ != "KafkaException" or not exc.args:
        return None
    err = exc.args[0]
    code = getattr(err, "code", None)
    if not callable(code) or code() != _INVALID_ARG:
        return None
    text = err.str() if callable(getattr(err, "str", None)) else str(err)
    if "key values mismatch" in text:
        return f"--kafka-key does not match --kafka-cert ({text})"
    return text


def probe(
    client: Any,
    kafka_log: Any,
    brokers: str,
    timeout: float,
    topic: str | None = None,
    *,
    give_up_refused: bool = False,
) -> str | None:
    """A metadata request through `client` (Producer, Consumer or AdminClient whose error_cb and
    logger are `kafka_log`, a dyncc_common.kafka_log.KafkaLog) for up to `timeout` seconds.

    Returns None once a broker answered, or the reason when none did (an outage: not an error
    here).  Raises KafkaSecurityError, one line naming the brokers, as soon as librdkafka
    reports an authentication or TLS failure (a plaintext client dropped by a TLS listener
    twice counts as one too).  give_up_refused: return the reason as soon as the connection
    was refused (nothing listens there) instead of waiting for a broker to come up."""
    deadline = time.monotonic() + timeout
    reason = "no answer"
    while True:
        left = deadline - time.monotonic()
        try:
            if topic is None:
                client.list_topics(timeout=max(min(left, 0.5), 0.05))
            else:
                client.list_topics(topic, timeout=max(min(left, 0.5), 0.05))
            return None
        except Exception as exc:  # confluent_kafka.KafkaException
            err = exc.args[0] if exc.args else exc
            reason = err.str() if hasattr(err, "str") else str(err)
        client.poll(0)  # serves error_cb and the log queue: the reason of the failure
        kind, text = kafka_log.security_failure()
        if kind:
            raise KafkaSecurityError(f"Kafka {brokers}: {security_message(kind, text, brokers)}")
        if give_up_refused and kafka_log.refused:
            return kafka_log.last_error or reason
        if time.monotonic() >= deadline:
            return kafka_log.last_error or reason
