from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PrefixEntry(_message.Message):
    __slots__ = ("prefix", "algorithm", "duty_cycle", "flap_ratio", "median_delivery_rate", "median_min_rtt_ms", "reason", "lock")
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    DUTY_CYCLE_FIELD_NUMBER: _ClassVar[int]
    FLAP_RATIO_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_DELIVERY_RATE_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_MIN_RTT_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    LOCK_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    algorithm: str
    duty_cycle: float
    flap_ratio: float
    median_delivery_rate: float
    median_min_rtt_ms: float
    reason: str
    lock: bool
    def __init__(self, prefix: _Optional[str] = ..., algorithm: _Optional[str] = ..., duty_cycle: _Optional[float] = ..., flap_ratio: _Optional[float] = ..., median_delivery_rate: _Optional[float] = ..., median_min_rtt_ms: _Optional[float] = ..., reason: _Optional[str] = ..., lock: _Optional[bool] = ...) -> None: ...

class CongestionConfig(_message.Message):
    __slots__ = ("schema_version", "pop", "version", "created_at_ns", "round_id", "entries", "kill_switch", "key_id", "target_hosts", "switch_threshold_bytes", "signature")
    SCHEMA_VERSION_FIELD_NUMBER: _ClassVar[int]
    POP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    ROUND_ID_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    KILL_SWITCH_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_HOSTS_FIELD_NUMBER: _ClassVar[int]
    SWITCH_THRESHOLD_BYTES_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    schema_version: int
    pop: str
    version: int
    created_at_ns: int
    round_id: str
    entries: _containers.RepeatedCompositeFieldContainer[PrefixEntry]
    kill_switch: bool
    key_id: str
    target_hosts: _containers.RepeatedScalarFieldContainer[str]
    switch_threshold_bytes: int
    signature: bytes
    def __init__(self, schema_version: _Optional[int] = ..., pop: _Optional[str] = ..., version: _Optional[int] = ..., created_at_ns: _Optional[int] = ..., round_id: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[PrefixEntry, _Mapping]]] = ..., kill_switch: _Optional[bool] = ..., key_id: _Optional[str] = ..., target_hosts: _Optional[_Iterable[str]] = ..., switch_threshold_bytes: _Optional[int] = ..., signature: _Optional[bytes] = ...) -> None: ...

class HostHealth(_message.Message):
    __slots__ = ("mem_available_bytes", "load1", "load5", "tcp_sockets", "available_congestion_controls", "owned_routes", "enforce", "bpf_attached", "bpf_selected", "bpf_switched")
    MEM_AVAILABLE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LOAD1_FIELD_NUMBER: _ClassVar[int]
    LOAD5_FIELD_NUMBER: _ClassVar[int]
    TCP_SOCKETS_FIELD_NUMBER: _ClassVar[int]
    AVAILABLE_CONGESTION_CONTROLS_FIELD_NUMBER: _ClassVar[int]
    OWNED_ROUTES_FIELD_NUMBER: _ClassVar[int]
    ENFORCE_FIELD_NUMBER: _ClassVar[int]
    BPF_ATTACHED_FIELD_NUMBER: _ClassVar[int]
    BPF_SELECTED_FIELD_NUMBER: _ClassVar[int]
    BPF_SWITCHED_FIELD_NUMBER: _ClassVar[int]
    mem_available_bytes: int
    load1: float
    load5: float
    tcp_sockets: int
    available_congestion_controls: _containers.RepeatedScalarFieldContainer[str]
    owned_routes: int
    enforce: str
    bpf_attached: bool
    bpf_selected: int
    bpf_switched: int
    def __init__(self, mem_available_bytes: _Optional[int] = ..., load1: _Optional[float] = ..., load5: _Optional[float] = ..., tcp_sockets: _Optional[int] = ..., available_congestion_controls: _Optional[_Iterable[str]] = ..., owned_routes: _Optional[int] = ..., enforce: _Optional[str] = ..., bpf_attached: _Optional[bool] = ..., bpf_selected: _Optional[int] = ..., bpf_switched: _Optional[int] = ...) -> None: ...

class ApplyStatus(_message.Message):
    __slots__ = ("host", "pop", "version", "result", "routes_added", "routes_removed", "routes_kept", "errors", "health", "reported_at_ns", "applied_version")
    class Result(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        RESULT_UNSPECIFIED: _ClassVar[ApplyStatus.Result]
        APPLIED: _ClassVar[ApplyStatus.Result]
        FAILED_ROLLED_BACK: _ClassVar[ApplyStatus.Result]
        REFUSED: _ClassVar[ApplyStatus.Result]
        UNCHANGED: _ClassVar[ApplyStatus.Result]
    RESULT_UNSPECIFIED: ApplyStatus.Result
    APPLIED: ApplyStatus.Result
    FAILED_ROLLED_BACK: ApplyStatus.Result
    REFUSED: ApplyStatus.Result
    UNCHANGED: ApplyStatus.Result
    HOST_FIELD_NUMBER: _ClassVar[int]
    POP_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ROUTES_ADDED_FIELD_NUMBER: _ClassVar[int]
    ROUTES_REMOVED_FIELD_NUMBER: _ClassVar[int]
    ROUTES_KEPT_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    HEALTH_FIELD_NUMBER: _ClassVar[int]
    REPORTED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    APPLIED_VERSION_FIELD_NUMBER: _ClassVar[int]
    host: str
    pop: str
    version: int
    result: ApplyStatus.Result
    routes_added: int
    routes_removed: int
    routes_kept: int
    errors: _containers.RepeatedScalarFieldContainer[str]
    health: HostHealth
    reported_at_ns: int
    applied_version: int
    def __init__(self, host: _Optional[str] = ..., pop: _Optional[str] = ..., version: _Optional[int] = ..., result: _Optional[_Union[ApplyStatus.Result, str]] = ..., routes_added: _Optional[int] = ..., routes_removed: _Optional[int] = ..., routes_kept: _Optional[int] = ..., errors: _Optional[_Iterable[str]] = ..., health: _Optional[_Union[HostHealth, _Mapping]] = ..., reported_at_ns: _Optional[int] = ..., applied_version: _Optional[int] = ...) -> None: ...
