from xmtp.identity.associations import association_pb2 as _association_pb2
from xmtp.identity.associations import signature_pb2 as _signature_pb2
from xmtp.mls.api.v1 import mls_pb2 as _mls_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Cursor(_message.Message):
    __slots__ = ("node_id_to_sequence_id",)
    class NodeIdToSequenceIdEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: int
        def __init__(self, key: _Optional[int] = ..., value: _Optional[int] = ...) -> None: ...
    NODE_ID_TO_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    node_id_to_sequence_id: _containers.ScalarMap[int, int]
    def __init__(self, node_id_to_sequence_id: _Optional[_Mapping[int, int]] = ...) -> None: ...

class AuthenticatedData(_message.Message):
    __slots__ = ("target_originator", "target_topic", "depends_on")
    TARGET_ORIGINATOR_FIELD_NUMBER: _ClassVar[int]
    TARGET_TOPIC_FIELD_NUMBER: _ClassVar[int]
    DEPENDS_ON_FIELD_NUMBER: _ClassVar[int]
    target_originator: int
    target_topic: bytes
    depends_on: Cursor
    def __init__(self, target_originator: _Optional[int] = ..., target_topic: _Optional[bytes] = ..., depends_on: _Optional[_Union[Cursor, _Mapping]] = ...) -> None: ...

class ClientEnvelope(_message.Message):
    __slots__ = ("aad", "group_message", "welcome_message", "upload_key_package", "identity_update")
    AAD_FIELD_NUMBER: _ClassVar[int]
    GROUP_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    WELCOME_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_KEY_PACKAGE_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_UPDATE_FIELD_NUMBER: _ClassVar[int]
    aad: AuthenticatedData
    group_message: _mls_pb2.GroupMessageInput
    welcome_message: _mls_pb2.WelcomeMessageInput
    upload_key_package: _mls_pb2.UploadKeyPackageRequest
    identity_update: _association_pb2.IdentityUpdate
    def __init__(self, aad: _Optional[_Union[AuthenticatedData, _Mapping]] = ..., group_message: _Optional[_Union[_mls_pb2.GroupMessageInput, _Mapping]] = ..., welcome_message: _Optional[_Union[_mls_pb2.WelcomeMessageInput, _Mapping]] = ..., upload_key_package: _Optional[_Union[_mls_pb2.UploadKeyPackageRequest, _Mapping]] = ..., identity_update: _Optional[_Union[_association_pb2.IdentityUpdate, _Mapping]] = ...) -> None: ...

class PayerEnvelope(_message.Message):
    __slots__ = ("unsigned_client_envelope", "payer_signature", "target_originator", "message_retention_days")
    UNSIGNED_CLIENT_ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    PAYER_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    TARGET_ORIGINATOR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_RETENTION_DAYS_FIELD_NUMBER: _ClassVar[int]
    unsigned_client_envelope: bytes
    payer_signature: _signature_pb2.RecoverableEcdsaSignature
    target_originator: int
    message_retention_days: int
    def __init__(self, unsigned_client_envelope: _Optional[bytes] = ..., payer_signature: _Optional[_Union[_signature_pb2.RecoverableEcdsaSignature, _Mapping]] = ..., target_originator: _Optional[int] = ..., message_retention_days: _Optional[int] = ...) -> None: ...

class UnsignedOriginatorEnvelope(_message.Message):
    __slots__ = ("originator_node_id", "originator_sequence_id", "originator_ns", "payer_envelope_bytes", "base_fee_picodollars", "congestion_fee_picodollars", "expiry_unixtime")
    ORIGINATOR_NODE_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGINATOR_SEQUENCE_ID_FIELD_NUMBER: _ClassVar[int]
    ORIGINATOR_NS_FIELD_NUMBER: _ClassVar[int]
    PAYER_ENVELOPE_BYTES_FIELD_NUMBER: _ClassVar[int]
    BASE_FEE_PICODOLLARS_FIELD_NUMBER: _ClassVar[int]
    CONGESTION_FEE_PICODOLLARS_FIELD_NUMBER: _ClassVar[int]
    EXPIRY_UNIXTIME_FIELD_NUMBER: _ClassVar[int]
    originator_node_id: int
    originator_sequence_id: int
    originator_ns: int
    payer_envelope_bytes: bytes
    base_fee_picodollars: int
    congestion_fee_picodollars: int
    expiry_unixtime: int
    def __init__(self, originator_node_id: _Optional[int] = ..., originator_sequence_id: _Optional[int] = ..., originator_ns: _Optional[int] = ..., payer_envelope_bytes: _Optional[bytes] = ..., base_fee_picodollars: _Optional[int] = ..., congestion_fee_picodollars: _Optional[int] = ..., expiry_unixtime: _Optional[int] = ...) -> None: ...

class BlockchainProof(_message.Message):
    __slots__ = ("transaction_hash", "node_signature")
    TRANSACTION_HASH_FIELD_NUMBER: _ClassVar[int]
    NODE_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    transaction_hash: bytes
    node_signature: _signature_pb2.RecoverableEcdsaSignature
    def __init__(self, transaction_hash: _Optional[bytes] = ..., node_signature: _Optional[_Union[_signature_pb2.RecoverableEcdsaSignature, _Mapping]] = ...) -> None: ...

class OriginatorEnvelope(_message.Message):
    __slots__ = ("unsigned_originator_envelope", "originator_signature", "blockchain_proof")
    UNSIGNED_ORIGINATOR_ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    ORIGINATOR_SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    BLOCKCHAIN_PROOF_FIELD_NUMBER: _ClassVar[int]
    unsigned_originator_envelope: bytes
    originator_signature: _signature_pb2.RecoverableEcdsaSignature
    blockchain_proof: BlockchainProof
    def __init__(self, unsigned_originator_envelope: _Optional[bytes] = ..., originator_signature: _Optional[_Union[_signature_pb2.RecoverableEcdsaSignature, _Mapping]] = ..., blockchain_proof: _Optional[_Union[BlockchainProof, _Mapping]] = ...) -> None: ...
