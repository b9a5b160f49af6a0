from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FeeSchedule(_message.Message):
    __slots__ = ("envelope_picodollars", "byte_day_picodollars", "target_rate", "congestion_step_picodollars", "congestion_max_picodollars", "default_retention_days")
    ENVELOPE_PICODOLLARS_FIELD_NUMBER: _ClassVar[int]
    BYTE_DAY_PICODOLLARS_FIELD_NUMBER: _ClassVar[int]
    TARGET_RATE_FIELD_NUMBER: _ClassVar[int]
    CONGESTION_STEP_PICODOLLARS_FIELD_NUMBER: _ClassVar[int]
    CONGESTION_MAX_PICODOLLARS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_RETENTION_DAYS_FIELD_NUMBER: _ClassVar[int]
    envelope_picodollars: int
    byte_day_picodollars: int
    target_rate: int
    congestion_step_picodollars: int
    congestion_max_picodollars: int
    default_retention_days: int
    def __init__(self, envelope_picodollars: _Optional[int] = ..., byte_day_picodollars: _Optional[int] = ..., target_rate: _Optional[int] = ..., congestion_step_picodollars: _Optional[int] = ..., congestion_max_picodollars: _Optional[int] = ..., default_retention_days: _Optional[int] = ...) -> None: ...

class GetFeeScheduleRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetFeeScheduleResponse(_message.Message):
    __slots__ = ("node_id", "schedule")
    NODE_ID_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_FIELD_NUMBER: _ClassVar[int]
    node_id: int
    schedule: FeeSchedule
    def __init__(self, node_id: _Optional[int] = ..., schedule: _Optional[_Union[FeeSchedule, _Mapping]] = ...) -> None: ...
