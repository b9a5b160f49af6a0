from xmtp.xmtpv4.message_api import message_api_pb2 as _message_api_pb2
from google.protobuf import descriptor as _descriptor
from typing import ClassVar as _ClassVar

DESCRIPTOR: _descriptor.FileDescriptor
