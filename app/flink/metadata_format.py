"""Flink's checkpoint/savepoint ``_metadata`` file (format versions 2 to 6) -> operators and state handles.

Flink 1.20 writes version 4 and Flink 2.2 version 6 (``Checkpoints.storeCheckpointMetadata``); 2, 3
and 5 are read because those versions still restore them. The layout follows Flink's
``MetadataV2V3SerializerBase`` and its V2..V6 subclasses:

    magic 0x4960672d | version | checkpoint id | master states | operator states [| properties]

Every structure is parsed, including the keyed and channel state handles no Kafka offset lives in:
nothing in the format gives the length of an operator's state, so skipping it means reading it. Only
the operator (list) state handles are kept; what they point at is read by ``operator_state``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from app.flink.binary import DataInput
from app.flink.java_serialization import skip_java_object

HEADER_MAGIC: Final = 0x4960672D
MASTER_STATE_MAGIC: Final = -0x3694E96A  # 0xc96b1696 as Java's signed int
SUPPORTED_VERSIONS: Final = (2, 3, 4, 5, 6)

# OperatorStateHandle.Mode ordinals.
MODE_SPLIT_DISTRIBUTE: Final = 0
MODE_UNION: Final = 1
MODE_BROADCAST: Final = 2
_MODES: Final = (MODE_SPLIT_DISTRIBUTE, MODE_UNION, MODE_BROADCAST)

# State handle type tags (MetadataV2V3SerializerBase).
_NULL_HANDLE: Final = 0
_BYTE_STREAM_STATE_HANDLE: Final = 1
_FILE_STREAM_STATE_HANDLE: Final = 2
_KEY_GROUPS_HANDLE: Final = 3
_PARTITIONABLE_OPERATOR_STATE_HANDLE: Final = 4
_INCREMENTAL_KEY_GROUPS_HANDLE: Final = 5
_RELATIVE_STREAM_STATE_HANDLE: Final = 6
_SAVEPOINT_KEY_GROUPS_HANDLE: Final = 7
_CHANGELOG_HANDLE: Final = 8
_CHANGELOG_BYTE_INCREMENT_HANDLE: Final = 9
_CHANGELOG_FILE_INCREMENT_HANDLE: Final = 10
_INCREMENTAL_KEY_GROUPS_HANDLE_V2: Final = 11
_KEY_GROUPS_HANDLE_V2: Final = 12
_CHANGELOG_FILE_INCREMENT_HANDLE_V2: Final = 13
_CHANGELOG_HANDLE_V2: Final = 14
_SEGMENT_FILE_HANDLE: Final = 15
_EMPTY_SEGMENT_FILE_HANDLE: Final = 16
_SEGMENT_PARTITIONABLE_OPERATOR_STATE_HANDLE: Final = 17

# ChannelStateHandleSerializerV2 type tags (metadata version 6).
_INPUT_CHANNEL_STATE_HANDLE: Final = 1
_RESULT_SUBPARTITION_STATE_HANDLE: Final = 2
_MERGED_INPUT_CHANNEL_STATE_HANDLE: Final = 3
_MERGED_RESULT_SUBPARTITION_STATE_HANDLE: Final = 4

# Nested handles (changelog) are at most a couple deep in anything Flink writes; a corrupt file
# must not recurse without bound.
_MAX_HANDLE_DEPTH: Final = 8


@dataclass(frozen=True)
class StreamHandle:
    """Where a state stream's bytes are: inline (``data``), or a file (``path``, maybe a segment of it)."""

    kind: str  # "bytes" | "file" | "relative" | "segment" | "empty-segment"
    data: bytes | None = None
    path: str | None = None
    size: int | None = None
    start: int = 0


@dataclass(frozen=True)
class StatePartitions:
    """One state's entries in an operator state stream: distribution mode and element offsets."""

    mode: int
    offsets: tuple[int, ...]


@dataclass(frozen=True)
class OperatorStateHandle:
    partitions: dict[str, StatePartitions]
    stream: StreamHandle | None


@dataclass(frozen=True)
class SubtaskState:
    index: int
    managed_operator_state: OperatorStateHandle | None


@dataclass(frozen=True)
class OperatorState:
    operator_id: str  # Flink's OperatorID as it prints it: 32 hex digits
    name: str | None
    uid: str | None
    parallelism: int
    max_parallelism: int
    subtasks: tuple[SubtaskState, ...]


@dataclass(frozen=True)
class CheckpointMetadata:
    version: int
    checkpoint_id: int
    operators: tuple[OperatorState, ...]


def parse_metadata(data: bytes, source: str) -> CheckpointMetadata:
    """Parse a whole ``_metadata`` file; ``FlinkStateError`` (naming ``source``) for anything else."""
    inp = DataInput(data, source)
    magic = inp.i32("header magic number")
    if magic != HEADER_MAGIC:
        raise inp.fail(f"not a Flink _metadata file: magic number {magic & 0xFFFFFFFF:#010x}", 0)
    version = inp.i32("metadata format version")
    if version not in SUPPORTED_VERSIONS:
        raise inp.fail(
            f"unknown _metadata format version {version} (this decoder reads versions "
            f"{SUPPORTED_VERSIONS[0]} to {SUPPORTED_VERSIONS[-1]}: Flink 1.x to 2.2)",
            4,
        )
    checkpoint_id = inp.i64("checkpoint id")
    if checkpoint_id < 0:
        raise inp.fail(f"invalid checkpoint id {checkpoint_id}", 8)
    for _ in range(inp.count("number of master states", 8)):
        _skip_master_state(inp)
    operators = tuple(
        _read_operator_state(inp, version) for _ in range(inp.count("number of operator states", 24))
    )
    _check_trailer(inp, version)
    return CheckpointMetadata(version, checkpoint_id, operators)


def _check_trailer(inp: DataInput, version: int) -> None:
    # V4+ end with the CheckpointProperties in Java serialization, which hold no state; older
    # versions end with the operators. Anything after them means the file was misread or damaged.
    if version >= 4:
        skip_java_object(inp)
    if inp.remaining():
        raise inp.fail(f"{inp.remaining()} unexpected bytes at the end of the file")


def _skip_master_state(inp: DataInput) -> None:
    at = inp.pos
    if inp.i32("master state magic number") != MASTER_STATE_MAGIC:
        raise inp.fail("bad master state magic number", at)
    n = inp.i32("master state length")
    if n <= 0:
        raise inp.fail(f"master state length {n}", at + 4)
    inp.skip(n, "master state")


def _operator_id(inp: DataInput) -> str:
    # OperatorID(lowerPart, upperPart) prints as the hex of lower then upper, big-endian: the 16 bytes.
    return inp.raw(16, "operator id").hex()


def _read_operator_state(inp: DataInput, version: int) -> OperatorState:
    name = uid = None
    if version >= 5:
        name = inp.utf("operator name") or None
        uid = inp.utf("operator uid") or None
    operator_id = _operator_id(inp)
    parallelism = inp.i32("parallelism")
    max_parallelism = inp.i32("max parallelism")
    subtasks: list[SubtaskState] = []
    if version == 2:
        inp.i32("chain length")  # unused since Flink 1.3, still in the format
        for _ in range(inp.count("number of subtask states", 4)):
            index = inp.i32("subtask index")
            subtasks.append(_read_subtask_state(inp, version, index))
    else:
        coordinator = _read_stream_handle(inp, 0)
        if coordinator is not None and coordinator.kind != "bytes":
            raise inp.fail("operator coordinator state is not an inline byte stream")
        at = inp.pos
        n = inp.i32("number of subtask states")
        if n >= 0:  # negative: the operator is fully finished and has no state
            if 4 * n > inp.remaining():
                raise inp.fail(f"number of subtask states {n} does not fit the file", at)
            for _ in range(n):
                stored = inp.i32("subtask index")
                if stored >= 0:
                    subtasks.append(_read_subtask_state(inp, version, stored))
                # a negative index is a finished subtask (-(index + 1)): no state follows
    return OperatorState(operator_id, name, uid, parallelism, max_parallelism, tuple(subtasks))


def _read_subtask_state(inp: DataInput, version: int, index: int) -> SubtaskState:
    managed = _read_operator_state_handle(inp) if inp.i32("has managed operator state") != 0 else None
    if inp.i32("has raw operator state") != 0:
        _read_operator_state_handle(inp)
    _skip_keyed_state_handle(inp, 0)  # managed keyed
    _skip_keyed_state_handle(inp, 0)  # raw keyed
    if version >= 3:
        for _ in range(inp.count("number of input channel state handles", 4)):
            _skip_channel_state_handle(inp, version)
        for _ in range(inp.count("number of output channel state handles", 4)):
            _skip_channel_state_handle(inp, version)
    return SubtaskState(index, managed)


def _read_operator_state_handle(inp: DataInput) -> OperatorStateHandle | None:
    at = inp.pos
    kind = inp.i8("operator state handle type")
    if kind == _NULL_HANDLE:
        return None
    if kind not in (_PARTITIONABLE_OPERATOR_STATE_HANDLE, _SEGMENT_PARTITIONABLE_OPERATOR_STATE_HANDLE):
        raise inp.fail(f"unknown operator state handle type {kind}", at)
    partitions: dict[str, StatePartitions] = {}
    for _ in range(inp.count("number of operator states in handle", 7)):
        state_name = inp.utf("operator state name")
        mode_at = inp.pos
        mode = inp.i8("operator state distribution mode")
        if mode not in _MODES:
            raise inp.fail(f"unknown distribution mode {mode} of state {state_name!r}", mode_at)
        offsets = inp.i64_array(inp.count(f"number of partitions of state {state_name!r}", 8), "offsets")
        if state_name in partitions:
            raise inp.fail(f"state {state_name!r} appears twice in one operator state handle")
        partitions[state_name] = StatePartitions(mode, offsets)
    if kind == _SEGMENT_PARTITIONABLE_OPERATOR_STATE_HANDLE:
        inp.utf("task-owned directory")
        inp.utf("shared directory")
        inp.boolean("empty file-merging handle")
    return OperatorStateHandle(partitions, _read_stream_handle(inp, 0))


def _read_stream_handle(inp: DataInput, depth: int) -> StreamHandle | None:
    at = inp.pos
    kind = inp.u8("stream state handle type")
    if kind == _NULL_HANDLE:
        return None
    if kind == _FILE_STREAM_STATE_HANDLE:
        size = inp.i64("file state size")
        return StreamHandle("file", path=inp.utf("file state path"), size=size)
    if kind == _BYTE_STREAM_STATE_HANDLE:
        inp.utf("byte stream handle name")
        data = inp.raw(inp.count("byte stream length"), "byte stream")
        return StreamHandle("bytes", data=data, size=len(data))
    if kind == _RELATIVE_STREAM_STATE_HANDLE:
        path = inp.utf("relative file state path")
        return StreamHandle("relative", path=path, size=inp.i64("relative file state size"))
    if kind == _KEY_GROUPS_HANDLE:
        _skip_key_group_offsets(inp)
        if depth >= _MAX_HANDLE_DEPTH:
            raise inp.fail("state handles nested too deep")
        _read_stream_handle(inp, depth + 1)
        return StreamHandle("key-groups")
    if kind == _SEGMENT_FILE_HANDLE:
        start = inp.i64("segment start")
        size = inp.i64("segment size")
        inp.i32("segment scope")
        path = inp.utf("segment file path")
        inp.utf("segment logical file id")
        return StreamHandle("segment", path=path, size=size, start=start)
    if kind == _EMPTY_SEGMENT_FILE_HANDLE:
        return StreamHandle("empty-segment", size=0)
    raise inp.fail(f"unknown stream state handle type {kind}", at)


def _skip_key_group_offsets(inp: DataInput) -> None:
    inp.i32("start key group")
    inp.skip(8 * inp.count("number of key groups", 8), "key group offsets")


def _skip_handle_and_path_list(inp: DataInput, depth: int) -> None:
    for _ in range(inp.count("number of incremental state files", 3)):
        inp.utf("incremental state local path")
        _read_stream_handle(inp, depth + 1)


def _skip_keyed_state_handle(inp: DataInput, depth: int) -> None:
    if depth >= _MAX_HANDLE_DEPTH:
        raise inp.fail("keyed state handles nested too deep")
    at = inp.pos
    kind = inp.i8("keyed state handle type")
    if kind == _NULL_HANDLE:
        return
    if kind in (_KEY_GROUPS_HANDLE, _KEY_GROUPS_HANDLE_V2, _SAVEPOINT_KEY_GROUPS_HANDLE):
        _skip_key_group_offsets(inp)
        _read_stream_handle(inp, depth + 1)
        if kind == _KEY_GROUPS_HANDLE_V2:
            inp.utf("state handle id")
    elif kind in (_INCREMENTAL_KEY_GROUPS_HANDLE, _INCREMENTAL_KEY_GROUPS_HANDLE_V2):
        inp.i64("checkpoint id")
        inp.utf("backend id")
        inp.i32("start key group")
        inp.i32("number of key groups")
        if kind == _INCREMENTAL_KEY_GROUPS_HANDLE_V2:
            inp.i64("checkpointed size")
        _read_stream_handle(inp, depth + 1)
        _skip_handle_and_path_list(inp, depth)
        _skip_handle_and_path_list(inp, depth)
        if kind == _INCREMENTAL_KEY_GROUPS_HANDLE_V2:
            inp.utf("state handle id")
    elif kind in (_CHANGELOG_HANDLE, _CHANGELOG_HANDLE_V2):
        inp.i32("start key group")
        inp.i32("number of key groups")
        inp.i64("checkpointed size")
        for _ in range(inp.count("number of materialized handles")):
            _skip_keyed_state_handle(inp, depth + 1)
        for _ in range(inp.count("number of non-materialized handles")):
            _skip_keyed_state_handle(inp, depth + 1)
        inp.i64("materialization id")
        if kind == _CHANGELOG_HANDLE_V2:
            inp.i64("checkpoint id")
        inp.utf("state handle id")
    elif kind == _CHANGELOG_BYTE_INCREMENT_HANDLE:
        inp.skip(24, "key groups and sequence numbers")
        for _ in range(inp.count("number of state changes", 8)):
            inp.i32("key group")
            inp.skip(inp.count("state change length"), "state change")
        inp.utf("state handle id")
    elif kind in (_CHANGELOG_FILE_INCREMENT_HANDLE, _CHANGELOG_FILE_INCREMENT_HANDLE_V2):
        inp.skip(8, "key groups")
        for _ in range(inp.count("number of changelog files", 9)):
            inp.i64("changelog offset")
            _read_stream_handle(inp, depth + 1)
        inp.skip(16, "state size and checkpointed size")
        inp.utf("state handle id")
        if kind == _CHANGELOG_FILE_INCREMENT_HANDLE_V2:
            inp.utf("changelog storage identifier")
    else:
        raise inp.fail(f"unknown keyed state handle type {kind}", at)


def _skip_channel_state_handle(inp: DataInput, version: int) -> None:
    # Unaligned checkpoints' in-flight data: V3-V5 write ChannelStateHandleSerializerV1 (no type tag),
    # V6 ChannelStateHandleSerializerV2 (a type tag, and merged handles).
    if version >= 6:
        at = inp.pos
        kind = inp.u8("channel state handle type")
        if kind in (_MERGED_INPUT_CHANNEL_STATE_HANDLE, _MERGED_RESULT_SUBPARTITION_STATE_HANDLE):
            inp.i32("subtask index")
            inp.i64("state size")
            _read_stream_handle(inp, 1)
            inp.skip(inp.count("merged channel offsets length"), "merged channel offsets")
            return
        if kind not in (_INPUT_CHANNEL_STATE_HANDLE, _RESULT_SUBPARTITION_STATE_HANDLE):
            raise inp.fail(f"unknown channel state handle type {kind}", at)
    inp.skip(12, "subtask index and channel info")
    inp.skip(8 * inp.count("number of channel state offsets", 8), "channel state offsets")
    inp.i64("channel state size")
    _read_stream_handle(inp, 1)
