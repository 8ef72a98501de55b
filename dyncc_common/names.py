"""Syntax of the names operators type on every command line: POP names, Kafka broker lists,
Kafka topic names.  Pure; a bad value raises ConfigError with a one-line reason (exit 2).

A POP name is 1-64 characters: a letter or digit, then letters, digits, '_', '.', '-'.  It is
the Kafka key of the POP's configs and part of file names (DIR/<pop>.cfg,
/var/lib/dyncc/agent-<pop>), so '/' and a leading '.' are refused.
A broker list is `host:port[,host:port...]` (IPv6 hosts in brackets, an optional
`PROTOCOL://`, a missing port means librdkafka's 9092).
"""

from __future__ import annotations

import re

from dyncc_common.errors import ConfigError

POP_NAME_BODY = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"  # the one definition: validation and config keys use it
POP_NAME = re.compile(rf"^{POP_NAME_BODY}$")
TOPIC_NAME = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_SCHEME = re.compile(r"^[A-Za-z_]+://")
_HOST = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)$")


def check_pop(name: str, what: str = "--pop") -> str:
    """`name` when it is a valid POP name, else ConfigError."""
    if not POP_NAME.match(name):
        raise ConfigError(
            f"bad {what} {name!r}: a POP name is 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit"
        )
    return name


def check_topic(name: str, what: str) -> str:
    if not TOPIC_NAME.match(name) or name in (".", ".."):
        raise ConfigError(f"bad {what} {name!r}: a Kafka topic is 1-249 letters, digits, '.', '_' or '-'")
    return name


def check_brokers(text: str, what: str = "--kafka") -> str:
    """`text` when it is a broker list host:port[,host:port...], else ConfigError."""
    items = [item.strip() for item in str(text).split(",")]
    if not text or not all(items):
        raise ConfigError(f"bad {what} {text!r}: use host:port[,host:port...]")
    for item in items:
        item = _SCHEME.sub("", item)  # librdkafka also takes PLAINTEXT://host:port
        host, port = item, "9092"
        if item.startswith("["):
            host, _, rest = item.partition("]")
            host += "]"
            if rest:
                if not rest.startswith(":"):
                    raise ConfigError(f"bad {what} {text!r}: {item!r} is not host:port")
                port = rest[1:]
        elif ":" in item:
            host, port = item.rsplit(":", 1)
        if not _HOST.match(host) or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ConfigError(f"bad {what} {text!r}: {item!r} is not host:port (port 1-65535)")
    return str(text)
