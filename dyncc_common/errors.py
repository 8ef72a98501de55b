"""dyncc's exception tree (stdlib only: the CLI, the contract and the netlink package import it).

Every exception class dyncc defines descends from DynccError (tests/contract/test_architecture.py
checks it); where a class was a ValueError before, ValueError stays its second base.

    DynccError                          base of every dyncc error; str() is a one-line reason
    ├── ConfigError                     bad configuration or arguments: one line, exit 2
    │   └── KafkaSecurityError          dyncc_common.kafka_security: the broker refused the
    │                                   client's credentials or certificate
    ├── StoreError                      any store failure (see below)
    │   ├── StoreUnavailable            the store could not be reached or is overloaded
    │   │                               (connection refused or lost, timeouts, too many parts /
    │   │                               queries, memory limit): the same statement may succeed
    │   │                               later, so callers pause and retry it
    │   └── StoreContentError           the server refused the statement because of the data it
    │                                   carries (too large, unparsable, a value a check rejects):
    │                                   the same statement fails again, so a caller that knows
    │                                   which input it came from sets that input aside (ingest
    │                                   dead-letters the messages responsible) and goes on
    │
    │   the contract (schemas)
    ├── BatchDecodeError (+ValueError)  schemas.tcpinfo_decode: a TcpInfoBatch that is malformed
    ├── GroupDecodeError                schemas.tcpinfo_decode: a group of batches that cannot be
    │                                   decoded together (decoded one by one instead)
    ├── SignatureError                  schemas.signing: a CongestionConfig signature that fails
    │   └── UntrustedKeyError           ... because its key id is not trusted (a rotated-out key)
    ├── FrameError (+ValueError)        schemas.framing: a collector-file frame that cannot be written,
    │                                   or damage where whole frames were required (split_frames)
    │
    │   the edge (collector)
    ├── DumpError                       collector.netlink.sockdiag: a sock_diag dump failed
    │   └── DumpTimeout                 ... because the kernel did not answer in time
    ├── InvalidConfig (+ValueError)     collector.agent.plan: a config the agent refuses
    ├── RouteWriteError                 collector.agent.routes: writing or verifying a route failed
    ├── StateError                      collector.agent.state: an unreadable agent state file
    ├── BpfBuildError                   collector.agent.bpf.build: a BPF program (the agent's
    │                                   sock_ops, the lab's tc programs) did not compile
    ├── BpfProgramError (+OSError)      collector.agent.bpf.prog: a bpftool step (load, attach,
    │                                   detach) failed
    ├── BpfMapError (+OSError)          collector.agent.bpf.maps: a BPF map read or write failed
    │   └── InjectedFailure             collector.agent.bpf.apply: the failure a test asked for
    │
    │   the centre (controller)
    ├── SchemaMismatch                  controller.store.native: a table's columns differ from
    │                                   the Native block being sent
    ├── SettingsUnreadable              controller.scoring.round_settings: a round's recorded
    │                                   settings that do not make a valid settings object
    │                                   (invalid scoring settings given are a ConfigError)
    ├── PublishError                    controller.rollout.sinks: a config could not be published
    ├── LineError (+ValueError)         controller.ingest.access_log: an access-log line that does
    │                                   not parse (dead-lettered)
    ├── RecordingError                  dyncc.lab.telemetry: an unreadable lab recording
    ├── RoundFailed                     dyncc.lab.control: a lab round did not complete
    ├── TopologyError                   dyncc.lab.topology: the lab network could not be built
    ├── PathError                       dyncc.lab.paths: a path class or shaping entry is invalid
    └── DelayError                      dyncc.lab.delay: the delay relay could not start

Two private subclasses of DynccError are control flow inside one module and never leave it:
schemas.tcpinfo_decode._Unusual and collector.netlink.sockdiag_dump._Stopped.

Anything else from the store (an unknown table, bad credentials: configuration or schema)
stays a plain StoreError: not the data's fault and not transient either.  Ingest treats
it like StoreUnavailable (pause, retry, log the reason) rather than dead-letter good
messages because of a server problem.

Which ClickHouse error code becomes which of the three store errors is the store's business:
controller/store/errors.py (classify()).
"""

from __future__ import annotations


class DynccError(Exception):
    """Base of dyncc's errors; str() is a one-line reason for a person."""


class ConfigError(DynccError):
    """Bad configuration or arguments: reported as one line, exit code 2."""


class StoreError(DynccError):
    """A store operation failed; str() is a one-line reason for a person."""


class StoreUnavailable(StoreError):
    """Connection or overload trouble: retry the same statement later."""


class StoreContentError(StoreError):
    """The server refused the statement's data: retrying it unchanged fails again."""
