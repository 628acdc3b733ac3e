from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GangRequest(_message.Message):
    __slots__ = ("job_id", "user", "learners", "cpus", "memory_mb", "gpus", "gpu_type", "priority", "min_learners", "max_learners", "submit_time", "team", "name")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    LEARNERS_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    GPU_TYPE_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    MIN_LEARNERS_FIELD_NUMBER: _ClassVar[int]
    MAX_LEARNERS_FIELD_NUMBER: _ClassVar[int]
    SUBMIT_TIME_FIELD_NUMBER: _ClassVar[int]
    TEAM_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    user: str
    learners: int
    cpus: float
    memory_mb: int
    gpus: int
    gpu_type: str
    priority: int
    min_learners: int
    max_learners: int
    submit_time: float
    team: str
    name: str
    def __init__(self, job_id: _Optional[str] = ..., user: _Optional[str] = ..., learners: _Optional[int] = ..., cpus: _Optional[float] = ..., memory_mb: _Optional[int] = ..., gpus: _Optional[int] = ..., gpu_type: _Optional[str] = ..., priority: _Optional[int] = ..., min_learners: _Optional[int] = ..., max_learners: _Optional[int] = ..., submit_time: _Optional[float] = ..., team: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class EnqueueReply(_message.Message):
    __slots__ = ("accepted", "reason")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    reason: str
    def __init__(self, accepted: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class LearnerAllocation(_message.Message):
    __slots__ = ("learner", "node", "gpu_indices")
    LEARNER_FIELD_NUMBER: _ClassVar[int]
    NODE_FIELD_NUMBER: _ClassVar[int]
    GPU_INDICES_FIELD_NUMBER: _ClassVar[int]
    learner: int
    node: str
    gpu_indices: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, learner: _Optional[int] = ..., node: _Optional[str] = ..., gpu_indices: _Optional[_Iterable[int]] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("job_id", "action", "cause", "allocations")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    CAUSE_FIELD_NUMBER: _ClassVar[int]
    ALLOCATIONS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    action: str
    cause: str
    allocations: _containers.RepeatedCompositeFieldContainer[LearnerAllocation]
    def __init__(self, job_id: _Optional[str] = ..., action: _Optional[str] = ..., cause: _Optional[str] = ..., allocations: _Optional[_Iterable[_Union[LearnerAllocation, _Mapping]]] = ...) -> None: ...

class ScheduleReply(_message.Message):
    __slots__ = ("decisions",)
    DECISIONS_FIELD_NUMBER: _ClassVar[int]
    decisions: _containers.RepeatedCompositeFieldContainer[Decision]
    def __init__(self, decisions: _Optional[_Iterable[_Union[Decision, _Mapping]]] = ...) -> None: ...

class JobId(_message.Message):
    __slots__ = ("job_id", "ended")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ENDED_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    ended: bool
    def __init__(self, job_id: _Optional[str] = ..., ended: _Optional[bool] = ...) -> None: ...

class SchedEmpty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QueueRequest(_message.Message):
    __slots__ = ("remaining_s",)
    class RemainingSEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    REMAINING_S_FIELD_NUMBER: _ClassVar[int]
    remaining_s: _containers.ScalarMap[str, float]
    def __init__(self, remaining_s: _Optional[_Mapping[str, float]] = ...) -> None: ...

class QueueEntry(_message.Message):
    __slots__ = ("job_id", "position", "reason", "eta_low_s", "eta_high_s")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    ETA_LOW_S_FIELD_NUMBER: _ClassVar[int]
    ETA_HIGH_S_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    position: int
    reason: str
    eta_low_s: float
    eta_high_s: float
    def __init__(self, job_id: _Optional[str] = ..., position: _Optional[int] = ..., reason: _Optional[str] = ..., eta_low_s: _Optional[float] = ..., eta_high_s: _Optional[float] = ...) -> None: ...

class QueueReply(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[QueueEntry]
    def __init__(self, entries: _Optional[_Iterable[_Union[QueueEntry, _Mapping]]] = ...) -> None: ...

class TeamQuota(_message.Message):
    __slots__ = ("team", "gpus", "cpus", "memory_mb")
    TEAM_FIELD_NUMBER: _ClassVar[int]
    GPUS_FIELD_NUMBER: _ClassVar[int]
    CPUS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    team: str
    gpus: int
    cpus: float
    memory_mb: int
    def __init__(self, team: _Optional[str] = ..., gpus: _Optional[int] = ..., cpus: _Optional[float] = ..., memory_mb: _Optional[int] = ...) -> None: ...

class TeamUsage(_message.Message):
    __slots__ = ("team", "quota_gpus", "quota_cpus", "quota_memory_mb", "guaranteed_gpus", "guaranteed_cpus", "guaranteed_memory_mb", "borrowed_gpus", "borrowed_cpus", "borrowed_memory_mb", "queued")
    TEAM_FIELD_NUMBER: _ClassVar[int]
    QUOTA_GPUS_FIELD_NUMBER: _ClassVar[int]
    QUOTA_CPUS_FIELD_NUMBER: _ClassVar[int]
    QUOTA_MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    GUARANTEED_GPUS_FIELD_NUMBER: _ClassVar[int]
    GUARANTEED_CPUS_FIELD_NUMBER: _ClassVar[int]
    GUARANTEED_MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    BORROWED_GPUS_FIELD_NUMBER: _ClassVar[int]
    BORROWED_CPUS_FIELD_NUMBER: _ClassVar[int]
    BORROWED_MEMORY_MB_FIELD_NUMBER: _ClassVar[int]
    QUEUED_FIELD_NUMBER: _ClassVar[int]
    team: str
    quota_gpus: int
    quota_cpus: float
    quota_memory_mb: int
    guaranteed_gpus: int
    guaranteed_cpus: float
    guaranteed_memory_mb: int
    borrowed_gpus: int
    borrowed_cpus: float
    borrowed_memory_mb: int
    queued: int
    def __init__(self, team: _Optional[str] = ..., quota_gpus: _Optional[int] = ..., quota_cpus: _Optional[float] = ..., quota_memory_mb: _Optional[int] = ..., guaranteed_gpus: _Optional[int] = ..., guaranteed_cpus: _Optional[float] = ..., guaranteed_memory_mb: _Optional[int] = ..., borrowed_gpus: _Optional[int] = ..., borrowed_cpus: _Optional[float] = ..., borrowed_memory_mb: _Optional[int] = ..., queued: _Optional[int] = ...) -> None: ...

class TeamsReply(_message.Message):
    __slots__ = ("teams",)
    TEAMS_FIELD_NUMBER: _ClassVar[int]
    teams: _containers.RepeatedCompositeFieldContainer[TeamUsage]
    def __init__(self, teams: _Optional[_Iterable[_Union[TeamUsage, _Mapping]]] = ...) -> None: ...
