"""Kafka ACLs for dyncc: who may read and write which topic (docs/security.md, "Kafka ACLs").

    python deploy/kafka/acls.py BOOTSTRAP ROLES_FILE [--dry-run]

ROLES_FILE has one `ROLE PRINCIPAL` a line (`#` comments), e.g. `controller User:dyncc-control`;
the roles and what each may do (topic and group names from the environment, defaults in brackets):

- controller: write (create, describe its configs) the config topic DYNCC_KAFKA_CONFIG_TOPIC [dyncc-configs], read the
  status topic DYNCC_KAFKA_STATUS_TOPIC [dyncc-apply-status] in group DYNCC_KAFKA_STATUS_GROUP
  [dyncc-controller];
- agent: read the config topic (groups prefixed `dyncc-agent-`, one per host), write the status topic;
- collector: write (and create) the telemetry topic DYNCC_KAFKA_TELEMETRY_TOPIC [tcpinfo], nothing else;
- ingest: read the telemetry topic in group DYNCC_KAFKA_INGEST_GROUP [dyncc-ingest].

The broker must run an authorizer (kafka.sh with DYNCC_KAFKA_ACLS: StandardAuthorizer, super
users for the plaintext admin and controller listeners) and deny what no ACL allows (the default).
BOOTSTRAP is a listener where the caller is a super user (kafka.sh: the loopback plaintext one).
Creating a binding that exists is a no-op, so applying twice is harmless; bindings are only
added, never removed (delete one with kafka-acls.sh --remove).  Prints one line: how many
bindings for how many principals; exit 2 and one line on a bad file, 1 when the broker refuses.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

ROLES = ("controller", "agent", "collector", "ingest")
AGENT_GROUP_PREFIX = "dyncc-agent-"  # collector/agent/kafka.py: group.id dyncc-agent-<pop>-<host>

Grant = tuple[ResourceType, str, ResourcePatternType, AclOperation]


def _names() -> dict[str, str]:
    env = os.environ.get
    return {
        "config": env("DYNCC_KAFKA_CONFIG_TOPIC", "dyncc-configs"),
        "status": env("DYNCC_KAFKA_STATUS_TOPIC", "dyncc-apply-status"),
        "status_group": env("DYNCC_KAFKA_STATUS_GROUP", "dyncc-controller"),
        "telemetry": env("DYNCC_KAFKA_TELEMETRY_TOPIC", "tcpinfo"),
        "ingest_group": env("DYNCC_KAFKA_INGEST_GROUP", "dyncc-ingest"),
    }


def grants(role: str, names: dict[str, str]) -> list[Grant]:
    """What `role` may do: (resource type, name, pattern type, operation)."""
    topic, group, lit, pre = (
        ResourceType.TOPIC,
        ResourceType.GROUP,
        ResourcePatternType.LITERAL,
        ResourcePatternType.PREFIXED,
    )
    op = AclOperation
    writes = lambda name: [(topic, name, lit, o) for o in (op.WRITE, op.DESCRIBE, op.DESCRIBE_CONFIGS, op.CREATE)]  # noqa: E731
    reads = lambda name: [(topic, name, lit, o) for o in (op.READ, op.DESCRIBE)]  # noqa: E731
    if role == "controller":
        return [*writes(names["config"]), *reads(names["status"]), (group, names["status_group"], lit, op.READ)]
    if role == "agent":
        return [
            *reads(names["config"]),
            (group, AGENT_GROUP_PREFIX, pre, op.READ),
            *[(topic, names["status"], lit, o) for o in (op.WRITE, op.DESCRIBE)],
        ]
    if role == "collector":
        return writes(names["telemetry"])
    if role == "ingest":
        return [*reads(names["telemetry"]), (group, names["ingest_group"], lit, op.READ)]
    raise ValueError(f"unknown role {role!r} (one of {', '.join(ROLES)})")


def read_roles(path: Path) -> list[tuple[str, str]]:
    """(role, principal) of each line; ValueError naming the line."""
    out = []
    for n, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or parts[0] not in ROLES or not parts[1].startswith("User:") or len(parts[1]) < 6:
            raise ValueError(f"{path}:{n}: want 'ROLE User:NAME' with ROLE one of {', '.join(ROLES)}: {raw!r}")
        out.append((parts[0], parts[1]))
    return out


def bindings(roles: list[tuple[str, str]], names: dict[str, str]) -> list[AclBinding]:
    return [
        AclBinding(rtype, name, pattern, principal, "*", operation, AclPermissionType.ALLOW)
        for role, principal in roles
        for rtype, name, pattern, operation in grants(role, names)
    ]


def main(argv: list[str]) -> int:
    args = [a for a in argv if a != "--dry-run"]
    if len(args) != 2:
        print("usage: acls.py BOOTSTRAP ROLES_FILE [--dry-run]", file=sys.stderr)
        return 2
    try:
        roles = read_roles(Path(args[1]))
    except (OSError, ValueError) as exc:
        print(f"acls: {exc}", file=sys.stderr)
        return 2
    wanted = bindings(roles, _names())
    if "--dry-run" in argv:
        for b in wanted:
            print(b)
        return 0
    admin = AdminClient({"bootstrap.servers": args[0], "log_level": 0})
    try:
        for future in admin.create_acls(wanted, request_timeout=30).values():
            future.result()
    except KafkaException as exc:
        print(f"acls: the broker at {args[0]} refused the ACLs: {exc}", file=sys.stderr)
        return 1
    print(f"acls: {len(wanted)} bindings for {len({p for _, p in roles})} principals on {args[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
