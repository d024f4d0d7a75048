"""The Kafka source's offsets in a Flink checkpoint or savepoint, read from its files without a JVM.

``read_checkpoint`` reads the directory's ``_metadata`` (``metadata_format``), finds the operator
holding a Kafka source's state by its state name (``SourceReaderState`` for the ``KafkaSource``,
``topic-partition-offset-states`` for the legacy ``FlinkKafkaConsumer``; whatever the operator id),
reads each subtask's operator state stream (inline in ``_metadata`` below
``state.storage.fs.memory-threshold``, else a file beside it or at the path Flink wrote) and decodes
its elements (``operator_state``). Offsets are returned as Flink stored them: the ``KafkaSource``'s
next offset to read or its sentinels, the legacy consumer's last processed offset; normalising them is
``app.contracts.offsets``' job. Anything not understood raises ``FlinkStateError``, never an offset.
The formats' facts are in CONTRACTS.md §7.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from app.contracts.vocabulary import ENGINE_FLINK_KAFKASOURCE, ENGINE_FLINK_LEGACY
from app.errors import FlinkCheckpointGoneError, FlinkStateError
from app.flink.files import metadata_location, moved_state_file_location, read_bytes, state_file_location
from app.flink.metadata_format import (
    MODE_SPLIT_DISTRIBUTE,
    MODE_UNION,
    OperatorState,
    OperatorStateHandle,
    parse_metadata,
)
from app.flink.operator_state import (
    KAFKA_STATE_NAMES,
    LEGACY_OFFSETS_STATE,
    SOURCE_READER_STATE,
    KafkaElement,
    read_kafka_elements,
)

_ENGINE_BY_STATE = {SOURCE_READER_STATE: ENGINE_FLINK_KAFKASOURCE, LEGACY_OFFSETS_STATE: ENGINE_FLINK_LEGACY}
_MODE_BY_STATE = {SOURCE_READER_STATE: MODE_SPLIT_DISTRIBUTE, LEGACY_OFFSETS_STATE: MODE_UNION}


@dataclass(frozen=True)
class SplitOffset:
    """One partition's offset as Flink stored it (``stopping_offset`` None: unbounded)."""

    topic: str
    partition: int
    raw_offset: int
    stopping_offset: int | None


@dataclass(frozen=True)
class FlinkCheckpointOffsets:
    """The Kafka source's offsets in one checkpoint or savepoint, one per partition."""

    checkpoint_id: int
    engine: str  # ENGINE_FLINK_KAFKASOURCE | ENGINE_FLINK_LEGACY
    operator_id: str
    path: str  # the checkpoint or savepoint directory
    offsets: tuple[SplitOffset, ...]  # sorted by topic, partition


def read_checkpoint(
    path: str, storage_options: Mapping[str, str] | None = None, *, operator: str | None = None
) -> FlinkCheckpointOffsets:
    """Decode the Kafka source's offsets of the checkpoint or savepoint at ``path``.

    ``path`` is the checkpoint directory (``chk-N``, a savepoint directory) or its ``_metadata``.
    ``operator`` (an operator id or uid) chooses the source when a job has several Kafka sources.
    """
    checkpoint_dir, metadata_file = metadata_location(path)

    def read_file(location: str) -> bytes:
        return read_bytes(location, storage_options)

    return decode_checkpoint(read_file(metadata_file), checkpoint_dir, metadata_file, read_file, operator)


def decode_checkpoint(
    metadata_bytes: bytes,
    checkpoint_dir: str,
    metadata_file: str,
    read_file: Callable[[str], bytes],
    operator: str | None = None,
) -> FlinkCheckpointOffsets:
    """``read_checkpoint`` on bytes already read; ``read_file`` reads the state files they name."""
    metadata = parse_metadata(metadata_bytes, metadata_file)
    candidates = [
        (op, state)
        for op in metadata.operators
        if operator is None or operator in (op.operator_id, op.uid)
        for state in _kafka_states(op, metadata_file)
    ]
    if not candidates:
        wanted = f"operator {operator!r}" if operator else "any operator"
        raise FlinkStateError(
            metadata_file, f"no Kafka source state ({' or '.join(KAFKA_STATE_NAMES)}) in {wanted}"
        )
    decoded: list[FlinkCheckpointOffsets] = []
    failures: list[FlinkStateError] = []
    for op, state in candidates:
        try:
            offsets = _read_operator_offsets(op, state, checkpoint_dir, metadata_file, read_file)
        except FlinkCheckpointGoneError:
            raise
        except FlinkStateError as exc:
            if state != SOURCE_READER_STATE:
                raise
            failures.append(exc)
            continue
        decoded.append(
            FlinkCheckpointOffsets(
                metadata.checkpoint_id, _ENGINE_BY_STATE[state], op.operator_id, checkpoint_dir, offsets
            )
        )
    if len(decoded) > 1:
        ids = ", ".join(d.operator_id for d in decoded)
        raise FlinkStateError(
            metadata_file, f"several Kafka sources ({ids}): choose one by operator id or uid"
        )
    if not decoded:
        raise failures[0]
    # Another FLIP-27 source (files, datagen) also keeps a SourceReaderState, whose splits are not
    # Kafka's: with exactly one operator decoding as Kafka, the failures are those other sources.
    # (Only the bytes of such a state are passed over so; a missing file never is.)
    return decoded[0]


def _kafka_states(op: OperatorState, metadata_file: str) -> list[str]:
    names = {
        name
        for sub in op.subtasks
        if sub.managed_operator_state is not None
        for name in sub.managed_operator_state.partitions
        if name in KAFKA_STATE_NAMES
    }
    if len(names) > 1:
        raise FlinkStateError(metadata_file, f"operator {op.operator_id} holds both {sorted(names)}")
    return sorted(names)


def _read_operator_offsets(
    op: OperatorState,
    state: str,
    checkpoint_dir: str,
    metadata_file: str,
    read_file: Callable[[str], bytes],
) -> tuple[SplitOffset, ...]:
    by_partition: dict[tuple[str, int], SplitOffset] = {}
    for sub in op.subtasks:
        handle = sub.managed_operator_state
        if handle is None:
            continue
        if state not in handle.partitions:
            # The source registers its state when it starts, so every subtask's snapshot holds it
            # (empty when the subtask reads nothing): one without it is damaged, not empty.
            raise FlinkStateError(
                metadata_file, f"subtask {sub.index} of operator {op.operator_id} has no {state} state"
            )
        partitions = handle.partitions[state]
        if partitions.mode != _MODE_BY_STATE[state]:
            raise FlinkStateError(
                metadata_file, f"{state} of operator {op.operator_id} has distribution mode {partitions.mode}"
            )
        if not partitions.offsets:
            continue
        stream, source = _state_stream(handle, checkpoint_dir, metadata_file, read_file)
        for element in read_kafka_elements(stream, state, handle.partitions, source):
            _add_unique(by_partition, element, source)
    return tuple(by_partition[key] for key in sorted(by_partition))


def _add_unique(by_partition: dict[tuple[str, int], SplitOffset], element: KafkaElement, source: str) -> None:
    key = (element.topic, element.partition)
    seen = by_partition.get(key)
    if seen is None:
        by_partition[key] = SplitOffset(*element)
    elif (seen.raw_offset, seen.stopping_offset) != (element.offset, element.stopping_offset):
        raise FlinkStateError(
            source,
            f"partition {element.topic}-{element.partition} is stored twice with different offsets "
            f"({seen.raw_offset}, {element.offset})",
        )


def _state_stream(
    handle: OperatorStateHandle,
    checkpoint_dir: str,
    metadata_file: str,
    read_file: Callable[[str], bytes],
) -> tuple[bytes, str]:
    """The bytes of an operator state stream and the name errors about them give."""
    stream = handle.stream
    if stream is None:
        raise FlinkStateError(metadata_file, "operator state handle without a state stream")
    if stream.kind == "bytes" and stream.data is not None:
        return stream.data, metadata_file
    if stream.kind in ("file", "relative") and stream.path is not None:
        location = state_file_location(checkpoint_dir, stream.path, relative=stream.kind == "relative")
        try:
            data = read_file(location)
        except FlinkCheckpointGoneError:
            moved = moved_state_file_location(checkpoint_dir, stream.path)
            if stream.kind == "relative" or moved == location:
                raise
            # A checkpoint copied or moved away from where Flink wrote it keeps its exclusive
            # state files beside _metadata, under the names Flink gave them.
            location = moved
            data = read_file(location)
        if stream.size is not None and stream.size != len(data):
            raise FlinkStateError(location, f"is {len(data)} bytes, the checkpoint recorded {stream.size}")
        return data, location
    raise FlinkStateError(
        metadata_file, f"operator state in a {stream.kind} handle (file merging) is not supported"
    )
