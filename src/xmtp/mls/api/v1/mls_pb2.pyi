from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class WelcomeWrapperAlgorithm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WELCOME_WRAPPER_ALGORITHM_UNSPECIFIED: _ClassVar[WelcomeWrapperAlgorithm]
    WELCOME_WRAPPER_ALGORITHM_CURVE25519: _ClassVar[WelcomeWrapperAlgorithm]
    WELCOME_WRAPPER_ALGORITHM_XWING_MLKEM_768_DRAFT_6: _ClassVar[WelcomeWrapperAlgorithm]
    WELCOME_WRAPPER_ALGORITHM_SYMMETRIC_KEY: _ClassVar[WelcomeWrapperAlgorithm]

class WelcomePointerWrapperAlgorithm(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WELCOME_POINTER_WRAPPER_ALGORITHM_UNSPECIFIED: _ClassVar[WelcomePointerWrapperAlgorithm]
    WELCOME_POINTER_WRAPPER_ALGORITHM_XWING_MLKEM_768_DRAFT_6: _ClassVar[WelcomePointerWrapperAlgorithm]
WELCOME_WRAPPER_ALGORITHM_UNSPECIFIED: WelcomeWrapperAlgorithm
WELCOME_WRAPPER_ALGORITHM_CURVE25519: WelcomeWrapperAlgorithm
WELCOME_WRAPPER_ALGORITHM_XWING_MLKEM_768_DRAFT_6: WelcomeWrapperAlgorithm
WELCOME_WRAPPER_ALGORITHM_SYMMETRIC_KEY: WelcomeWrapperAlgorithm
WELCOME_POINTER_WRAPPER_ALGORITHM_UNSPECIFIED: WelcomePointerWrapperAlgorithm
WELCOME_POINTER_WRAPPER_ALGORITHM_XWING_MLKEM_768_DRAFT_6: WelcomePointerWrapperAlgorithm

class GroupMessageInput(_message.Message):
    __slots__ = ("v1",)
    class V1(_message.Message):
        __slots__ = ("data", "sender_hmac", "should_push")
        DATA_FIELD_NUMBER: _ClassVar[int]
        SENDER_HMAC_FIELD_NUMBER: _ClassVar[int]
        SHOULD_PUSH_FIELD_NUMBER: _ClassVar[int]
        data: bytes
        sender_hmac: bytes
        should_push: bool
        def __init__(self, data: _Optional[bytes] = ..., sender_hmac: _Optional[bytes] = ..., should_push: _Optional[bool] = ...) -> None: ...
    V1_FIELD_NUMBER: _ClassVar[int]
    v1: GroupMessageInput.V1
    def __init__(self, v1: _Optional[_Union[GroupMessageInput.V1, _Mapping]] = ...) -> None: ...

class WelcomeMessageInput(_message.Message):
    __slots__ = ("v1", "welcome_pointer")
    class V1(_message.Message):
        __slots__ = ("installation_key", "data", "hpke_public_key", "wrapper_algorithm", "welcome_metadata")
        INSTALLATION_KEY_FIELD_NUMBER: _ClassVar[int]
        DATA_FIELD_NUMBER: _ClassVar[int]
        HPKE_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
        WRAPPER_ALGORITHM_FIELD_NUMBER: _ClassVar[int]
        WELCOME_METADATA_FIELD_NUMBER: _ClassVar[int]
        installation_key: bytes
        data: bytes
        hpke_public_key: bytes
        wrapper_algorithm: WelcomeWrapperAlgorithm
        welcome_metadata: bytes
        def __init__(self, installation_key: _Optional[bytes] = ..., data: _Optional[bytes] = ..., hpke_public_key: _Optional[bytes] = ..., wrapper_algorithm: _Optional[_Union[WelcomeWrapperAlgorithm, str]] = ..., welcome_metadata: _Optional[bytes] = ...) -> None: ...
    class WelcomePointer(_message.Message):
        __slots__ = ("installation_key", "welcome_pointer", "hpke_public_key", "wrapper_algorithm")
        INSTALLATION_KEY_FIELD_NUMBER: _ClassVar[int]
        WELCOME_POINTER_FIELD_NUMBER: _ClassVar[int]
        HPKE_PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
        WRAPPER_ALGORITHM_FIELD_NUMBER: _ClassVar[int]
        installation_key: bytes
        welcome_pointer: bytes
        hpke_public_key: bytes
        wrapper_algorithm: WelcomePointerWrapperAlgorithm
        def __init__(self, installation_key: _Optional[bytes] = ..., welcome_pointer: _Optional[bytes] = ..., hpke_public_key: _Optional[bytes] = ..., wrapper_algorithm: _Optional[_Union[WelcomePointerWrapperAlgorithm, str]] = ...) -> None: ...
    V1_FIELD_NUMBER: _ClassVar[int]
    WELCOME_POINTER_FIELD_NUMBER: _ClassVar[int]
    v1: WelcomeMessageInput.V1
    welcome_pointer: WelcomeMessageInput.WelcomePointer
    def __init__(self, v1: _Optional[_Union[WelcomeMessageInput.V1, _Mapping]] = ..., welcome_pointer: _Optional[_Union[WelcomeMessageInput.WelcomePointer, _Mapping]] = ...) -> None: ...

class KeyPackageUpload(_message.Message):
    __slots__ = ("key_package_tls_serialized",)
    KEY_PACKAGE_TLS_SERIALIZED_FIELD_NUMBER: _ClassVar[int]
    key_package_tls_serialized: bytes
    def __init__(self, key_package_tls_serialized: _Optional[bytes] = ...) -> None: ...

class UploadKeyPackageRequest(_message.Message):
    __slots__ = ("key_package", "is_inbox_id_credential")
    KEY_PACKAGE_FIELD_NUMBER: _ClassVar[int]
    IS_INBOX_ID_CREDENTIAL_FIELD_NUMBER: _ClassVar[int]
    key_package: KeyPackageUpload
    is_inbox_id_credential: bool
    def __init__(self, key_package: _Optional[_Union[KeyPackageUpload, _Mapping]] = ..., is_inbox_id_credential: _Optional[bool] = ...) -> None: ...
