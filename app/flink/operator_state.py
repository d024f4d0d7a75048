"""An operator state stream (DefaultOperatorStateBackend's snapshot) -> the Kafka source's elements.

The stream opens with ``OperatorBackendSerializationProxy`` (the states' meta info: names, modes and
serializer snapshots), then each state's elements back to back; the metadata's handle gives every
element's offset. Flink restores exactly so (``OperatorStateRestoreOperation``: seek to each offset,
deserialize one element), and so does this module, after checking that the state's serializer is the
one whose bytes it decodes:

- ``SourceReaderState`` (``SourceOperator``, the ``KafkaSource``): ``BytePrimitiveArraySerializer``
  elements (int length + bytes), each ``SimpleVersionedSerialization`` framing (int version, int
  length) around a ``KafkaPartitionSplitSerializer`` version 0 split: UTF topic, int partition, long
  starting offset, long stopping offset. Connector 3.4.0-1.20 and 5.0.0-2.2 write the same bytes.
- ``topic-partition-offset-states`` (the legacy ``FlinkKafkaConsumer``): ``TupleSerializer`` of a
  ``KryoSerializer<KafkaTopicPartition>`` and a ``LongSerializer``. Flink 1.20 bundles Kryo 2.24 with
  references on, whose ``FieldSerializer`` writes the fields sorted by name: ``cachedHash`` and
  ``partition`` as zig-zag varints, ``topic`` as a reference marker and a Kryo string; the offset
  follows as 8 bytes. ``cachedHash`` must equal ``31 * topic.hashCode() + partition``, which pins the
  topic and partition bytes.
"""

from __future__ import annotations

import struct
from itertools import pairwise
from typing import Final, NamedTuple

from app.errors import FlinkStateError
from app.flink.binary import DataInput, decode_modified_utf8
from app.flink.metadata_format import StatePartitions
from app.offsets_topic.decoder import java_string_hash

SOURCE_READER_STATE: Final = "SourceReaderState"
LEGACY_OFFSETS_STATE: Final = "topic-partition-offset-states"
KAFKA_STATE_NAMES: Final = (SOURCE_READER_STATE, LEGACY_OFFSETS_STATE)

# Serializer snapshot classes (their names are what the meta info stores).
_BYTE_ARRAY_SNAPSHOT: Final = (
    "org.apache.flink.api.common.typeutils.base.array.BytePrimitiveArraySerializer$"
    "BytePrimitiveArraySerializerSnapshot"
)
_TUPLE_SNAPSHOT: Final = "org.apache.flink.api.java.typeutils.runtime.TupleSerializerSnapshot"
_TUPLE2_CLASS: Final = "org.apache.flink.api.java.tuple.Tuple2"
_KRYO_SNAPSHOT: Final = "org.apache.flink.api.java.typeutils.runtime.kryo.KryoSerializerSnapshot"
_KAFKA_TOPIC_PARTITION: Final = "org.apache.flink.streaming.connectors.kafka.internals.KafkaTopicPartition"
# Snapshots whose body is empty (SimpleTypeSerializerSnapshot), so a state using one can be stepped over.
_EMPTY_BODY_SNAPSHOTS: Final = frozenset(
    {
        _BYTE_ARRAY_SNAPSHOT,
        "org.apache.flink.api.common.typeutils.base.LongSerializer$LongSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.IntSerializer$IntSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.StringSerializer$StringSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.BooleanSerializer$BooleanSerializerSnapshot",
        "org.apache.flink.api.common.typeutils.base.VoidSerializer$VoidSerializerSnapshot",
    }
)

_PROXY_VERSIONS: Final = (5, 6)  # what Flink 1.17+ still reads; 6 adds the compression flag
_SNAPSHOT_PROXY_VERSION: Final = 2  # TypeSerializerSnapshotSerializationProxy
_COMPOSITE_MAGIC: Final = 911108  # CompositeTypeSerializerSnapshot
_NESTED_MAGIC: Final = 1333245  # NestedSerializersSnapshotDelegate
_BACKEND_STATE_TYPES: Final = 4  # KEY_VALUE, OPERATOR, BROADCAST, PRIORITY_QUEUE
_SPLIT_SERIALIZER_VERSION: Final = 0  # KafkaPartitionSplitSerializer.CURRENT_VERSION, both lines
NO_STOPPING_OFFSET: Final = -(2**63)  # KafkaPartitionSplit.NO_STOPPING_OFFSET (Long.MIN_VALUE)

_SPLIT_HEAD: Final = struct.Struct(">iii")  # byte[] length, split serializer version, split length
_SPLIT_TAIL: Final = struct.Struct(">iqq")  # partition, starting offset, stopping offset
_I64: Final = struct.Struct(">q")
_U16: Final = struct.Struct(">H")

# Kryo 2.24's markers: class id 1 means "a class name follows", reference id 1 "a new object".
_KRYO_CLASS_NAME: Final = 1
_KRYO_NOT_NULL: Final = 1


class KafkaElement(NamedTuple):
    """One element of the Kafka source's state, as Flink stored it (a tuple: thousands per checkpoint)."""

    topic: str
    partition: int
    offset: int
    stopping_offset: int | None


def read_kafka_elements(
    stream: bytes, state_name: str, all_partitions: dict[str, StatePartitions], source: str
) -> list[KafkaElement]:
    """Decode ``state_name``'s elements from one subtask's operator state stream."""
    inp = DataInput(stream, source)
    _check_state_serializer(inp, state_name)
    own = all_partitions[state_name].offsets
    if any(a >= b for a, b in pairwise(own)):
        # Flink writes a state's elements in order, so its offsets only grow; one repeated would
        # read an element twice in place of another.
        raise FlinkStateError(source, f"{state_name} element offsets are not increasing: {list(own)[:8]}")
    # Elements are written back to back, state after state: each one must end where the next
    # element (of any state) starts, or at the end of the stream. A misplaced offset cannot pass.
    boundaries = sorted({o for p in all_partitions.values() for o in p.offsets} | {len(stream)})
    next_start = {boundaries[i]: boundaries[i + 1] for i in range(len(boundaries) - 1)}
    decode = _decode_split if state_name == SOURCE_READER_STATE else _decode_legacy
    elements = []
    for offset in own:
        if not inp.pos <= offset < len(stream):
            raise FlinkStateError(source, f"{state_name} element offset {offset} is outside the state stream")
        element, end = decode(stream, offset, source)
        if end != next_start[offset]:
            raise FlinkStateError(
                source,
                f"{state_name} element at byte {offset} ends at byte {end}, "
                f"but the next element starts at byte {next_start[offset]}",
            )
        elements.append(element)
    return elements


# --- meta info -----------------------------------------------------------------------------------


def _check_state_serializer(inp: DataInput, state_name: str) -> None:
    """Read the meta info up to ``state_name``'s serializer and check it is the one decoded here."""
    at = inp.pos
    version = inp.i32("operator backend serialization version")
    if version not in _PROXY_VERSIONS:
        raise inp.fail(f"unknown operator backend serialization version {version}", at)
    if version >= 6 and inp.boolean("snapshot compression flag"):
        raise inp.fail(
            "the operator state is snappy-compressed (execution.checkpointing.snapshot-compression)"
        )
    at = inp.pos
    n_states = inp.i16("number of operator states")
    if n_states < 0:
        raise inp.fail(f"number of operator states {n_states}", at)
    for _ in range(n_states):
        name = inp.utf("state name")
        at = inp.pos
        state_type = inp.i32("state backend type")
        if not 0 <= state_type < _BACKEND_STATE_TYPES:
            raise inp.fail(f"unknown state backend type {state_type} of state {name!r}", at)
        for _ in range(inp.count("number of state options", 4)):
            inp.utf("state option key")
            inp.utf("state option value")
        for _ in range(inp.count("number of serializer snapshots", 8)):
            key = inp.utf("serializer key")
            snapshot_class = _read_snapshot_head(inp)
            if name == state_name:
                _check_kafka_serializer(inp, state_name, key, snapshot_class)
                return
            if snapshot_class not in _EMPTY_BODY_SNAPSHOTS:
                raise inp.fail(
                    f"cannot step over state {name!r}: unknown serializer snapshot {snapshot_class}"
                )
    raise inp.fail(f"no meta info for state {state_name!r}")


def _read_snapshot_head(inp: DataInput) -> str:
    """TypeSerializerSnapshotSerializationProxy: proxy version, snapshot class, snapshot version."""
    at = inp.pos
    proxy_version = inp.i32("serializer snapshot format version")
    if proxy_version != _SNAPSHOT_PROXY_VERSION:
        raise inp.fail(f"unknown serializer snapshot format version {proxy_version}", at)
    snapshot_class = inp.utf("serializer snapshot class")
    inp.i32("serializer snapshot version")
    return snapshot_class


def _check_kafka_serializer(inp: DataInput, state_name: str, key: str, snapshot_class: str) -> None:
    if state_name == SOURCE_READER_STATE:
        if snapshot_class != _BYTE_ARRAY_SNAPSHOT:
            raise inp.fail(f"unknown serializer for {state_name}: {key} is {snapshot_class}")
        return
    if snapshot_class != _TUPLE_SNAPSHOT:
        raise inp.fail(f"unknown serializer for {state_name}: {key} is {snapshot_class}")
    at = inp.pos
    if inp.i32("composite snapshot magic number") != _COMPOSITE_MAGIC:
        raise inp.fail("bad composite serializer snapshot magic number", at)
    inp.i32("tuple snapshot version")
    tuple_class = inp.utf("tuple class")
    at = inp.pos
    if inp.i32("nested snapshots magic number") != _NESTED_MAGIC:
        raise inp.fail("bad nested serializer snapshots magic number", at)
    inp.i32("nested snapshots version")
    n_fields = inp.i32("number of tuple fields")
    if tuple_class != _TUPLE2_CLASS or n_fields != 2:
        raise inp.fail(f"unknown serializer for {state_name}: {tuple_class} of {n_fields} fields")
    field_class = inp.utf("first field's serializer snapshot class")  # nested: no proxy version
    inp.i32("first field's serializer snapshot version")
    type_class = inp.utf("Kryo type class") if field_class == _KRYO_SNAPSHOT else None
    if type_class != _KAFKA_TOPIC_PARTITION:
        raise inp.fail(f"unknown serializer for {state_name}: first field is {field_class} of {type_class}")


# --- elements ------------------------------------------------------------------------------------


def _decode_split(data: bytes, pos: int, source: str) -> tuple[KafkaElement, int]:
    """A SourceReaderState element: byte[] framing, version framing, KafkaPartitionSplit."""
    if pos + 14 > len(data):
        raise FlinkStateError(source, f"truncated SourceReaderState element at byte {pos}")
    length, version, split_length = _SPLIT_HEAD.unpack_from(data, pos)
    end = pos + 4 + length
    if length < 8 or end > len(data):
        raise FlinkStateError(source, f"SourceReaderState element at byte {pos}: bad length {length}")
    if version != _SPLIT_SERIALIZER_VERSION:
        raise FlinkStateError(
            source, f"unknown KafkaPartitionSplit serializer version {version} (element at byte {pos})"
        )
    topic_length = _U16.unpack_from(data, pos + 12)[0]
    if split_length != length - 8 or split_length != 2 + topic_length + 20:
        raise FlinkStateError(
            source,
            f"SourceReaderState element at byte {pos} is not a KafkaPartitionSplit "
            f"({split_length} bytes for a {topic_length}-byte topic)",
        )
    topic_start = pos + 14
    try:
        topic = decode_modified_utf8(data[topic_start : topic_start + topic_length])
    except ValueError as exc:
        raise FlinkStateError(source, f"split topic at byte {topic_start} is not modified UTF-8") from exc
    partition, offset, stopping = _SPLIT_TAIL.unpack_from(data, topic_start + topic_length)
    _check_topic_partition(topic, partition, pos, source)
    stopping_offset = None if stopping == NO_STOPPING_OFFSET else stopping
    return KafkaElement(topic, partition, offset, stopping_offset), end


def _decode_legacy(data: bytes, pos: int, source: str) -> tuple[KafkaElement, int]:
    """A topic-partition-offset-states element: Tuple2(Kryo KafkaTopicPartition, long)."""
    kryo = _KryoInput(data, pos, source)
    class_id = kryo.varint()
    if class_id == _KRYO_CLASS_NAME:
        kryo.varint()  # the class name's id in this object graph
        class_name = kryo.string()
        if class_name != _KAFKA_TOPIC_PARTITION:
            raise kryo.fail(f"Kryo class {class_name!r} is not {_KAFKA_TOPIC_PARTITION}")
    elif class_id < 2:  # 0: null
        raise kryo.fail("null KafkaTopicPartition")
    # else a registered class id: KryoSerializer registers its own type, KafkaTopicPartition, first.
    if kryo.varint() != _KRYO_NOT_NULL:
        raise kryo.fail("KafkaTopicPartition is not a new object")
    cached_hash = kryo.zigzag()
    partition = kryo.zigzag()
    if kryo.varint() != _KRYO_NOT_NULL:
        raise kryo.fail("KafkaTopicPartition topic is not a new string")
    topic = kryo.string()
    if cached_hash != _java_int(31 * java_string_hash(topic) + partition):
        raise kryo.fail(f"KafkaTopicPartition {topic}-{partition} does not match its hash {cached_hash}")
    _check_topic_partition(topic, partition, pos, source)
    end = kryo.pos + 8
    if end > len(data):
        raise kryo.fail("truncated offset")
    return KafkaElement(topic, partition, _I64.unpack_from(data, kryo.pos)[0], None), end


def _check_topic_partition(topic: str, partition: int, pos: int, source: str) -> None:
    if not topic or partition < 0:
        raise FlinkStateError(source, f"element at byte {pos}: invalid topic partition {topic!r}-{partition}")


def _java_int(n: int) -> int:
    n &= 0xFFFFFFFF
    return n - 0x1_0000_0000 if n >= 0x8000_0000 else n


class _KryoInput:
    """The few reads of Kryo 2.24's Input the legacy state needs (varints and strings)."""

    __slots__ = ("data", "pos", "source", "start")

    def __init__(self, data: bytes, pos: int, source: str) -> None:
        self.data = data
        self.pos = pos
        self.start = pos
        self.source = source

    def fail(self, reason: str) -> FlinkStateError:
        return FlinkStateError(
            self.source, f"topic-partition-offset-states element at byte {self.start}: {reason}"
        )

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise self.fail("truncated")
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        """Kryo's positive-optimised varint: up to 5 bytes, 7 bits each, low first."""
        result = 0
        for shift in (0, 7, 14, 21, 28):
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result & 0xFFFFFFFF
        raise self.fail("varint longer than 5 bytes")

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def string(self) -> str:
        """Kryo 2.24's writeString: ASCII with the last byte's high bit set, or a length and UTF-8."""
        first = self.byte()
        if not first & 0x80:
            end = self.pos - 1
            while self.data[end] < 0x80:
                end += 1
                if end >= len(self.data):
                    raise self.fail("truncated string")
            text = bytes(self.data[self.pos - 1 : end]) + bytes((self.data[end] & 0x7F,))
            self.pos = end + 1
            return text.decode("ascii")
        length = first & 0x3F
        if first & 0x40:
            for shift in (6, 13, 20, 27):
                b = self.byte()
                length |= (b & 0x7F) << shift
                if not b & 0x80:
                    break
        if length == 0:
            raise self.fail("null string")
        return self._utf8_chars(length - 1)

    def _utf8_chars(self, count: int) -> str:
        # Kryo writes each UTF-16 unit as 1, 2 or 3 bytes (surrogates one by one).
        units = []
        for _ in range(count):
            b = self.byte()
            top = b >> 4
            if top < 8:
                units.append(b)
            elif top in (12, 13):
                units.append((b & 0x1F) << 6 | self.byte() & 0x3F)
            elif top == 14:
                units.append((b & 0x0F) << 12 | (self.byte() & 0x3F) << 6 | self.byte() & 0x3F)
            else:
                raise self.fail(f"bad string byte {b:#04x}")
        return struct.pack(f">{count}H", *units).decode("utf-16-be", "surrogatepass")
