from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SubmitJobRequest(_message.Message):
    __slots__ = ("job_id", "user", "manifest_yaml", "code_key", "team")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    MANIFEST_YAML_FIELD_NUMBER: _ClassVar[int]
    CODE_KEY_FIELD_NUMBER: _ClassVar[int]
    TEAM_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    user: str
    manifest_yaml: str
    code_key: str
    team: str
    def __init__(self, job_id: _Optional[str] = ..., user: _Optional[str] = ..., manifest_yaml: _Optional[str] = ..., code_key: _Optional[str] = ..., team: _Optional[str] = ...) -> None: ...

class SubmitJobReply(_message.Message):
    __slots__ = ("job_id", "status", "warnings")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    status: str
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[str] = ..., status: _Optional[str] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class JobRef(_message.Message):
    __slots__ = ("job_id", "user", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    user: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., user: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class JobStatusReply(_message.Message):
    __slots__ = ("job_id", "status")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    status: str
    def __init__(self, job_id: _Optional[str] = ..., status: _Optional[str] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class RequeueRequest(_message.Message):
    __slots__ = ("job_id", "reason", "is_restart")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    IS_RESTART_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    reason: str
    is_restart: bool
    def __init__(self, job_id: _Optional[str] = ..., reason: _Optional[str] = ..., is_restart: _Optional[bool] = ...) -> None: ...

class ScaleRequest(_message.Message):
    __slots__ = ("job_id", "user", "learners")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    LEARNERS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    user: str
    learners: int
    def __init__(self, job_id: _Optional[str] = ..., user: _Optional[str] = ..., learners: _Optional[int] = ...) -> None: ...

class NodeInfo(_message.Message):
    __slots__ = ("name", "cpus", "memory_mb", "gpus", "gpu_type", "healthy", "state", "availability", "labels", "utilization")
    class LabelsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    HEALTHY_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    AVAILABILITY_FIELD_NUMBER: _ClassVar[int]
    LABELS_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    name: str
    cpus: float
    memory_mb: int
    gpus: int
    gpu_type: str
    healthy: bool
    state: str
    availability: str
    labels: _containers.ScalarMap[str, str]
    utilization: NodeUtilization
    def __init__(self, name: _Optional[str] = ..., cpus: _Optional[float] = ..., memory_mb: _Optional[int] = ..., gpus: _Optional[int] = ..., gpu_type: _Optional[str] = ..., healthy: _Optional[bool] = ..., state: _Optional[str] = ..., availability: _Optional[str] = ..., labels: _Optional[_Mapping[str, str]] = ..., utilization: _Optional[_Union[NodeUtilization, _Mapping]] = ...) -> None: ...

class NodeUtilization(_message.Message):
    __slots__ = ("cpus_used", "memory_mb_used", "gpu_percent", "containers", "sampled_at")
    CPUS_USED_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_USED_FIELD_NUMBER: _ClassVar[int]
    GPU_PERCENT_FIELD_NUMBER: _ClassVar[int]
    CONTAINERS_FIELD_NUMBER: _ClassVar[int]
    SAMPLED_AT_FIELD_NUMBER: _ClassVar[int]
    cpus_used: float
    memory_mb_used: int
    gpu_percent: float
    containers: int
    sampled_at: float
    def __init__(self, cpus_used: _Optional[float] = ..., memory_mb_used: _Optional[int] = ..., gpu_percent: _Optional[float] = ..., containers: _Optional[int] = ..., sampled_at: _Optional[float] = ...) -> None: ...

class NodeAvailabilityRequest(_message.Message):
    __slots__ = ("node", "availability", "user")
    NODE_FIELD_NUMBER: _ClassVar[int]
    AVAILABILITY_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    node: str
    availability: str
    user: str
    def __init__(self, node: _Optional[str] = ..., availability: _Optional[str] = ..., user: _Optional[str] = ...) -> None: ...

class ClusterReply(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[NodeInfo]
    def __init__(self, nodes: _Optional[_Iterable[_Union[NodeInfo, _Mapping]]] = ...) -> None: ...

class MetricsRequest(_message.Message):
    __slots__ = ("job_id", "user", "learner", "names", "since_step", "limit")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    LEARNER_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    SINCE_STEP_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    user: str
    learner: int
    names: _containers.RepeatedScalarFieldContainer[str]
    since_step: float
    limit: int
    def __init__(self, job_id: _Optional[str] = ..., user: _Optional[str] = ..., learner: _Optional[int] = ..., names: _Optional[_Iterable[str]] = ..., since_step: _Optional[float] = ..., limit: _Optional[int] = ...) -> None: ...

class Series(_message.Message):
    __slots__ = ("name", "steps", "values")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    name: str
    steps: _containers.RepeatedScalarFieldContainer[float]
    values: _containers.RepeatedScalarFieldContainer[float]
    def __init__(self, name: _Optional[str] = ..., steps: _Optional[_Iterable[float]] = ..., values: _Optional[_Iterable[float]] = ...) -> None: ...

class MetricsReply(_message.Message):
    __slots__ = ("job_id", "learner", "series", "truncated", "next_since_step")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    LEARNER_FIELD_NUMBER: _ClassVar[int]
    SERIES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    NEXT_SINCE_STEP_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    learner: int
    series: _containers.RepeatedCompositeFieldContainer[Series]
    truncated: bool
    next_since_step: float
    def __init__(self, job_id: _Optional[str] = ..., learner: _Optional[int] = ..., series: _Optional[_Iterable[_Union[Series, _Mapping]]] = ..., truncated: _Optional[bool] = ..., next_since_step: _Optional[float] = ...) -> None: ...

class JobProgressReply(_message.Message):
    __slots__ = ("job_id", "known", "done", "total", "unit", "percent", "rate_per_s", "remaining_s", "finish_at")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    KNOWN_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    UNIT_FIELD_NUMBER: _ClassVar[int]
    PERCENT_FIELD_NUMBER: _ClassVar[int]
    RATE_PER_S_FIELD_NUMBER: _ClassVar[int]
    REMAINING_S_FIELD_NUMBER: _ClassVar[int]
    FINISH_AT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    known: bool
    done: float
    total: float
    unit: str
    percent: float
    rate_per_s: float
    remaining_s: float
    finish_at: float
    def __init__(self, job_id: _Optional[str] = ..., known: _Optional[bool] = ..., done: _Optional[float] = ..., total: _Optional[float] = ..., unit: _Optional[str] = ..., percent: _Optional[float] = ..., rate_per_s: _Optional[float] = ..., remaining_s: _Optional[float] = ..., finish_at: _Optional[float] = ...) -> None: ...

class MetricPoint(_message.Message):
    __slots__ = ("name", "step", "value", "line", "source")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    name: str
    step: float
    value: float
    line: int
    source: str
    def __init__(self, name: _Optional[str] = ..., step: _Optional[float] = ..., value: _Optional[float] = ..., line: _Optional[int] = ..., source: _Optional[str] = ...) -> None: ...
