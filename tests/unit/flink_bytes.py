"""Bytes of Flink checkpoint files, written the way Flink's serializers write them, for decoder tests.

Written from Flink's sources (MetadataV2V3SerializerBase and its V2..V6 subclasses,
OperatorBackendSerializationProxy, TypeSerializerSnapshotSerializationUtil, SimpleVersionedSerialization,
KafkaPartitionSplitSerializer, Kryo 2.24's FieldSerializer) and independently of the decoder; the real
checkpoints under tests/unit/flink_fixtures pin both against Flink's own State Processor API.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

HEADER_MAGIC = 0x4960672D
SOURCE_READER_STATE = "SourceReaderState"
LEGACY_STATE = "topic-partition-offset-states"
BYTE_ARRAY_SNAPSHOT = (
    "org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer$"
    "BytePrimitiveArraySerializerSnapshot"
)
TUPLE_SNAPSHOT = "org.apache.flink.api.java.typeutils.runtime.TupleSerializerSnapshot"
KRYO_SNAPSHOT = "org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot"
LONG_SNAPSHOT = "org.apache.flink.api.common.typeutils.base.LongSerializer$LongSerializerSnapshot"
KAFKA_TOPIC_PARTITION = "org.apache.flink.streaming.connectors.kafka.internals.KafkaTopicPartition"
NO_STOPPING_OFFSET = -(2**63)
SPLIT, UNION = 0, 1
# What ObjectOutputStream writes for an object shaped like CheckpointProperties (booleans, a long[],
# a nested object with a String and an enum), printed by a five-line Java program.
JAVA_SERIALIZED_PROPERTIES = bytes.fromhex(
    "aced000573720007502450726f707300000000000000020200055a000f6469736361726446696e69736865645a000f"
    "6469736361726453756273756d65645a0006666f726365645b00036172727400025b4a4c00046b696e647400084c50"
    "244b696e643b7870010100757200025b4a782004b512b17593020000787000000002000000000000000100000000000000"
    "027372000650244b696e6400000000000000010200024c00046e616d657400124c6a6176612f6c616e672f537472696e"
    "673b4c00017374000c4c502453747261746567793b787074000a436865636b706f696e747e72000a5024537472617465"
    "677900000000000000001200007872000e6a6176612e6c616e672e456e756d00000000000000001200007870740010464f"
    "52574152445f4241434b57415244"
)


def i8(n: int) -> bytes:
    return struct.pack(">b", n)


def i16(n: int) -> bytes:
    return struct.pack(">h", n)


def i32(n: int) -> bytes:
    return struct.pack(">i", n)


def i64(n: int) -> bytes:
    return struct.pack(">q", n)


def utf(s: str) -> bytes:
    """DataOutput.writeUTF: modified UTF-8 (NUL as C0 80, surrogates one by one) after a 2-byte length."""
    out = bytearray()
    for unit in struct.unpack(
        f">{len(s.encode('utf-16-be', 'surrogatepass')) // 2}H", s.encode("utf-16-be", "surrogatepass")
    ):
        if 0 < unit < 0x80:
            out.append(unit)
        elif unit < 0x800:
            out += bytes((0xC0 | unit >> 6, 0x80 | unit & 0x3F))
        else:
            out += bytes((0xE0 | unit >> 12, 0x80 | unit >> 6 & 0x3F, 0x80 | unit & 0x3F))
    return struct.pack(">H", len(out)) + bytes(out)


# --- elements ------------------------------------------------------------------------------------


def split_element(
    topic: str, partition: int, offset: int, stopping: int = NO_STOPPING_OFFSET, version: int = 0
) -> bytes:
    """A SourceReaderState element: byte[] (int length) of SimpleVersionedSerialization of a split."""
    split = utf(topic) + i32(partition) + i64(offset) + i64(stopping)
    framed = i32(version) + i32(len(split)) + split
    return i32(len(framed)) + framed


def java_hash(s: str) -> int:
    h = 0
    units = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    return h


def kryo_varint(n: int) -> bytes:
    n &= 0xFFFFFFFF
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append(n & 0x7F | 0x80)
        n >>= 7


def kryo_zigzag(n: int) -> bytes:
    return kryo_varint((n << 1) ^ (n >> 31))


def kryo_string(s: str) -> bytes:
    if 1 < len(s) < 64 and s.isascii():
        raw = bytearray(s.encode("ascii"))
        raw[-1] |= 0x80
        return bytes(raw)
    n = len(s) + 1
    head = bytearray((0x80 | n & 0x3F | (0x40 if n > 0x3F else 0),))
    n >>= 6
    while n:
        head.append(n & 0x7F | (0x80 if n > 0x7F else 0))
        n >>= 7
    body = bytearray()
    for c in s:
        u = ord(c)
        if u <= 0x7F:
            body.append(u)
        elif u <= 0x7FF:
            body += bytes((0xC0 | u >> 6, 0x80 | u & 0x3F))
        else:
            body += bytes((0xE0 | u >> 12, 0x80 | u >> 6 & 0x3F, 0x80 | u & 0x3F))
    return bytes(head) + bytes(body)


def legacy_element(topic: str, partition: int, offset: int, registered_id: int | None = None) -> bytes:
    """Tuple2(KafkaTopicPartition via Kryo 2.24 with references, long)."""
    if registered_id is None:
        cls = kryo_varint(1) + kryo_varint(0) + kryo_string(KAFKA_TOPIC_PARTITION)
    else:
        cls = kryo_varint(registered_id + 2)
    cached = (31 * java_hash(topic) + partition) & 0xFFFFFFFF
    cached = cached - 0x1_0000_0000 if cached >= 0x8000_0000 else cached
    obj = kryo_varint(1) + kryo_zigzag(cached) + kryo_zigzag(partition) + kryo_varint(1) + kryo_string(topic)
    return cls + obj + i64(offset)


# --- operator state stream -----------------------------------------------------------------------


def snapshot(cls: str, version: int = 3, body: bytes = b"") -> bytes:
    """TypeSerializerSnapshotSerializationProxy: format version 2, class, snapshot version, body."""
    return i32(2) + utf(cls) + i32(version) + body


def legacy_serializer_snapshot() -> bytes:
    kryo_body = utf(KAFKA_TOPIC_PARTITION) + b"\x00" * 12  # registrations etc.: never read
    # Nested snapshots have no proxy format version (TypeSerializerSnapshot.writeVersionedSnapshot).
    nested = (
        i32(1333245) + i32(1) + i32(2) + utf(KRYO_SNAPSHOT) + i32(2) + kryo_body + utf(LONG_SNAPSHOT) + i32(3)
    )
    return snapshot(
        TUPLE_SNAPSHOT, 3, i32(911108) + i32(2) + utf("org.apache.flink.api.java.tuple.Tuple2") + nested
    )


@dataclass
class StateMeta:
    name: str
    serializer: bytes
    elements: Sequence[bytes]
    mode: int = SPLIT
    options: dict[str, str] = field(default_factory=dict)


def backend_stream(
    states: Sequence[StateMeta], proxy_version: int = 6, compressed: bool = False
) -> tuple[bytes, dict[str, tuple[int, tuple[int, ...]]]]:
    """OperatorBackendSerializationProxy then each state's elements; the offsets as the handle holds them."""
    out = bytearray(i32(proxy_version))
    if proxy_version >= 6:
        out += bytes((1 if compressed else 0,))
    out += i16(len(states))
    for st in states:
        out += utf(st.name) + i32(1) + i32(len(st.options))
        for k, v in st.options.items():
            out += utf(k) + utf(v)
        out += i32(1) + utf("VALUE_SERIALIZER") + st.serializer
    out += i16(0)  # broadcast states
    partitions = {}
    for st in states:
        offsets = []
        for element in st.elements:
            offsets.append(len(out))
            out += element
        partitions[st.name] = (st.mode, tuple(offsets))
    return bytes(out), partitions


# --- _metadata -----------------------------------------------------------------------------------


def bytes_handle(data: bytes, name: str = "byte-handle") -> bytes:
    return b"\x01" + utf(name) + i32(len(data)) + data


def file_handle(path: str, size: int) -> bytes:
    return b"\x02" + i64(size) + utf(path)


def relative_handle(name: str, size: int) -> bytes:
    return b"\x06" + utf(name) + i64(size)


def operator_state_handle(partitions: dict[str, tuple[int, tuple[int, ...]]], stream: bytes) -> bytes:
    out = bytearray(b"\x04" + i32(len(partitions)))
    for name, (mode, offsets) in partitions.items():
        out += utf(name) + i8(mode) + i32(len(offsets)) + b"".join(i64(o) for o in offsets)
    return bytes(out) + stream


def keyed_handle_v2(stream: bytes) -> bytes:
    """A KEY_GROUPS_HANDLE_V2 over key groups 0..1, as a window operator downstream would write."""
    return b"\x0c" + i32(0) + i32(2) + i64(0) + i64(10) + stream + utf("handle-id")


def subtask_state(version: int, managed: bytes | None, keyed: bytes | None = None) -> bytes:
    out = i32(1) + managed if managed is not None else i32(0)
    out += i32(0) + (keyed or b"\x00") + b"\x00"
    if version >= 3:
        out += i32(0) + i32(0)
    return out


def operator(
    version: int,
    subtasks: Sequence[tuple[int, bytes | None]],
    operator_id: bytes = bytes(range(16)),
    name: str = "Source: kafka",
    uid: str = "kafka-source",
    coordinator: bytes | None = None,
) -> bytes:
    out = bytearray()
    if version >= 5:
        out += utf(name) + utf(uid)
    out += operator_id + i32(len(subtasks)) + i32(128)
    if version == 2:
        out += i32(1)
    else:
        out += coordinator if coordinator is not None else b"\x00"
    out += i32(len(subtasks))
    for index, state in subtasks:
        if state is None:
            out += i32(-(index + 1))  # finished subtask
        else:
            out += i32(index) + state
    return bytes(out)


def metadata(version: int, checkpoint_id: int, operators: Sequence[bytes], master_states: int = 0) -> bytes:
    out = bytearray(i32(HEADER_MAGIC) + i32(version) + i64(checkpoint_id) + i32(master_states))
    for _ in range(master_states):
        inner = i32(1) + utf("master") + i32(3) + b"abc"
        out += i32(-0x3694E96A) + i32(len(inner)) + inner
    out += i32(len(operators))
    for op in operators:
        out += op
    if version >= 4:
        out += JAVA_SERIALIZED_PROPERTIES
    return bytes(out)


def kafka_source_checkpoint(
    version: int,
    checkpoint_id: int,
    splits_per_subtask: Sequence[Sequence[tuple[str, int, int]]],
) -> bytes:
    """A whole _metadata with a KafkaSource operator, its state inline."""
    subtasks = []
    for index, splits in enumerate(splits_per_subtask):
        stream, partitions = backend_stream(
            [
                StateMeta(
                    SOURCE_READER_STATE, snapshot(BYTE_ARRAY_SNAPSHOT), [split_element(*s) for s in splits]
                )
            ]
        )
        subtasks.append(
            (index, subtask_state(version, operator_state_handle(partitions, bytes_handle(stream))))
        )
    return metadata(version, checkpoint_id, [operator(version, subtasks)])
