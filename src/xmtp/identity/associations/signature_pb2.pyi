from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class RecoverableEcdsaSignature(_message.Message):
    __slots__ = ("bytes",)
    BYTES_FIELD_NUMBER: _ClassVar[int]
    bytes: bytes
    def __init__(self, bytes: _Optional[bytes] = ...) -> None: ...

class RecoverableEd25519Signature(_message.Message):
    __slots__ = ("bytes", "public_key")
    BYTES_FIELD_NUMBER: _ClassVar[int]
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    bytes: bytes
    public_key: bytes
    def __init__(self, bytes: _Optional[bytes] = ..., public_key: _Optional[bytes] = ...) -> None: ...

class SmartContractWalletSignature(_message.Message):
    __slots__ = ("account_id", "block_number", "signature")
    ACCOUNT_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_NUMBER_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    account_id: str
    block_number: int
    signature: bytes
    def __init__(self, account_id: _Optional[str] = ..., block_number: _Optional[int] = ..., signature: _Optional[bytes] = ...) -> None: ...

class RecoverablePasskeySignature(_message.Message):
    __slots__ = ("public_key", "signature", "authenticator_data", "client_data_json")
    PUBLIC_KEY_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    AUTHENTICATOR_DATA_FIELD_NUMBER: _ClassVar[int]
    CLIENT_DATA_JSON_FIELD_NUMBER: _ClassVar[int]
    public_key: bytes
    signature: bytes
    authenticator_data: bytes
    client_data_json: bytes
    def __init__(self, public_key: _Optional[bytes] = ..., signature: _Optional[bytes] = ..., authenticator_data: _Optional[bytes] = ..., client_data_json: _Optional[bytes] = ...) -> None: ...

class Signature(_message.Message):
    __slots__ = ("erc_191", "erc_6492", "installation_key", "passkey")
    ERC_191_FIELD_NUMBER: _ClassVar[int]
    ERC_6492_FIELD_NUMBER: _ClassVar[int]
    INSTALLATION_KEY_FIELD_NUMBER: _ClassVar[int]
    PASSKEY_FIELD_NUMBER: _ClassVar[int]
    erc_191: RecoverableEcdsaSignature
    erc_6492: SmartContractWalletSignature
    installation_key: RecoverableEd25519Signature
    passkey: RecoverablePasskeySignature
    def __init__(self, erc_191: _Optional[_Union[RecoverableEcdsaSignature, _Mapping]] = ..., erc_6492: _Optional[_Union[SmartContractWalletSignature, _Mapping]] = ..., installation_key: _Optional[_Union[RecoverableEd25519Signature, _Mapping]] = ..., passkey: _Optional[_Union[RecoverablePasskeySignature, _Mapping]] = ...) -> None: ...
