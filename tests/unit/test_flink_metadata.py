"""Spec for app.flink.metadata: a checkpoint's Kafka source offsets, decoded from Flink's own bytes.

The bytes are built by tests/unit/flink_bytes.py, written from Flink's serializers; the real
checkpoints of test_flink_fixtures.py pin the same decoder against Flink's State Processor API.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.contracts.vocabulary import ENGINE_FLINK_KAFKASOURCE, ENGINE_FLINK_LEGACY
from app.errors import FlinkCheckpointGoneError, FlinkStateError
from app.flink.metadata import FlinkCheckpointOffsets, SplitOffset, read_checkpoint
from tests.unit import flink_bytes as fb

pytestmark = pytest.mark.unit

SPLITS = [[("orders", 0, 5), ("orders", 1, 9)], [("orders", 2, -2)], []]
EXPECTED = (
    SplitOffset("orders", 0, 5, None),
    SplitOffset("orders", 1, 9, None),
    SplitOffset("orders", 2, -2, None),
)


def write_checkpoint(root: Path, metadata: bytes, name: str = "chk-7") -> Path:
    directory = root / name
    directory.mkdir()
    (directory / "_metadata").write_bytes(metadata)
    return directory


def kafka_source_subtask(version: int, elements: list[bytes], stream_handle: bytes | None = None) -> bytes:
    stream, partitions = fb.backend_stream(
        [fb.StateMeta(fb.SOURCE_READER_STATE, fb.snapshot(fb.BYTE_ARRAY_SNAPSHOT), elements)]
    )
    handle = stream_handle if stream_handle is not None else fb.bytes_handle(stream)
    return fb.subtask_state(version, fb.operator_state_handle(partitions, handle))


def legacy_subtask(version: int, elements: list[bytes]) -> bytes:
    stream, partitions = fb.backend_stream(
        [fb.StateMeta(fb.LEGACY_STATE, fb.legacy_serializer_snapshot(), elements, mode=fb.UNION)]
    )
    return fb.subtask_state(version, fb.operator_state_handle(partitions, fb.bytes_handle(stream)))


@pytest.mark.parametrize("version", [2, 3, 4, 5, 6])
def test_every_metadata_version_flink_still_reads(tmp_path: Path, version: int) -> None:
    directory = write_checkpoint(tmp_path, fb.kafka_source_checkpoint(version, 7, SPLITS))
    assert read_checkpoint(str(directory)) == FlinkCheckpointOffsets(
        checkpoint_id=7,
        engine=ENGINE_FLINK_KAFKASOURCE,
        operator_id="000102030405060708090a0b0c0d0e0f",
        path=str(directory),
        offsets=EXPECTED,
    )


def test_the_metadata_file_itself_or_a_file_uri_may_be_given(tmp_path: Path) -> None:
    directory = write_checkpoint(tmp_path, fb.kafka_source_checkpoint(6, 7, SPLITS))
    assert read_checkpoint(str(directory / "_metadata")).offsets == EXPECTED
    assert read_checkpoint(f"file://{directory}/").offsets == EXPECTED


@pytest.mark.parametrize("version", [1, 7, -1])
def test_an_unknown_metadata_version_names_the_file_and_the_version(tmp_path: Path, version: int) -> None:
    data = bytearray(fb.kafka_source_checkpoint(6, 7, SPLITS))
    data[4:8] = fb.i32(version)
    directory = write_checkpoint(tmp_path, bytes(data))
    with pytest.raises(FlinkStateError, match=f"unknown _metadata format version {version} ") as caught:
        read_checkpoint(str(directory))
    assert caught.value.path == str(directory / "_metadata")


def test_a_file_that_is_not_flink_metadata(tmp_path: Path) -> None:
    directory = write_checkpoint(tmp_path, b"PAR1" + bytes(64))
    with pytest.raises(FlinkStateError, match="not a Flink _metadata file"):
        read_checkpoint(str(directory))


def test_a_checkpoint_whose_files_are_gone(tmp_path: Path) -> None:
    with pytest.raises(FlinkCheckpointGoneError, match="does not exist"):
        read_checkpoint(str(tmp_path / "chk-9"))


def test_stopping_offsets_and_sentinels_are_kept_as_stored(tmp_path: Path) -> None:
    elements = [
        fb.split_element("t", 0, -3, stopping=120),
        fb.split_element("t", 1, -(2**63)),
        fb.split_element("t", 2, 2**40, stopping=-1),
    ]
    metadata = fb.metadata(6, 3, [fb.operator(6, [(0, kafka_source_subtask(6, elements))])])
    assert read_checkpoint(str(write_checkpoint(tmp_path, metadata))).offsets == (
        SplitOffset("t", 0, -3, 120),
        SplitOffset("t", 1, -(2**63), None),
        SplitOffset("t", 2, 2**40, -1),
    )


def test_topics_in_modified_utf8(tmp_path: Path) -> None:
    topic = "zé\x00\U0001f600"  # NUL and a character outside the BMP are where Java's UTF differs
    metadata = fb.metadata(
        6, 3, [fb.operator(6, [(0, kafka_source_subtask(6, [fb.split_element(topic, 4, 8)]))])]
    )
    assert read_checkpoint(str(write_checkpoint(tmp_path, metadata))).offsets == (
        SplitOffset(topic, 4, 8, None),
    )


def test_state_in_a_file_beside_metadata_relative_or_absolute(tmp_path: Path) -> None:
    stream, partitions = fb.backend_stream(
        [
            fb.StateMeta(
                fb.SOURCE_READER_STATE, fb.snapshot(fb.BYTE_ARRAY_SNAPSHOT), [fb.split_element("t", 0, 11)]
            )
        ]
    )
    directory = tmp_path / "chk-4"
    directory.mkdir()
    (directory / "4f1c-state").write_bytes(stream)
    relative = fb.operator_state_handle(partitions, fb.relative_handle("4f1c-state", len(stream)))
    absolute = fb.operator_state_handle(
        partitions, fb.file_handle(f"file:{directory}/4f1c-state", len(stream))
    )
    (directory / "_metadata").write_bytes(
        fb.metadata(4, 4, [fb.operator(4, [(0, fb.subtask_state(4, relative))])])
    )
    assert read_checkpoint(str(directory)).offsets == (SplitOffset("t", 0, 11, None),)
    (directory / "_metadata").write_bytes(
        fb.metadata(4, 4, [fb.operator(4, [(0, fb.subtask_state(4, absolute))])])
    )
    assert read_checkpoint(str(directory)).offsets == (SplitOffset("t", 0, 11, None),)
    moved = fb.operator_state_handle(
        partitions, fb.file_handle("file:/elsewhere/chk-4/4f1c-state", len(stream))
    )
    (directory / "_metadata").write_bytes(
        fb.metadata(4, 4, [fb.operator(4, [(0, fb.subtask_state(4, moved))])])
    )
    assert read_checkpoint(str(directory)).offsets == (SplitOffset("t", 0, 11, None),)  # copied checkpoint
    (directory / "4f1c-state").write_bytes(stream[:-1])
    with pytest.raises(FlinkStateError, match=r"4f1c-state: is .* bytes, the checkpoint recorded"):
        read_checkpoint(str(directory))
    (directory / "4f1c-state").unlink()
    with pytest.raises(FlinkCheckpointGoneError, match="4f1c-state"):
        read_checkpoint(str(directory))


@pytest.mark.parametrize("registered_id", [None, 0, 11, 300])
def test_legacy_consumer_union_state_through_kryo(tmp_path: Path, registered_id: int | None) -> None:
    subtasks = [
        (0, legacy_subtask(4, [fb.legacy_element("orders", 0, 41, registered_id)])),
        (1, legacy_subtask(4, [fb.legacy_element("orders", 1, -915, registered_id)])),
        (
            2,
            legacy_subtask(
                4, [fb.legacy_element("Ünïcode-topic-with-more-than-63-characters" * 2, 70_000, 2**62)]
            ),
        ),
    ]
    got = read_checkpoint(str(write_checkpoint(tmp_path, fb.metadata(4, 12, [fb.operator(4, subtasks)]))))
    assert got.engine == ENGINE_FLINK_LEGACY
    assert got.checkpoint_id == 12
    assert got.offsets == (
        SplitOffset("orders", 0, 41, None),
        SplitOffset("orders", 1, -915, None),
        SplitOffset("Ünïcode-topic-with-more-than-63-characters" * 2, 70_000, 2**62, None),
    )


def test_a_legacy_element_whose_hash_does_not_match_its_topic_partition(tmp_path: Path) -> None:
    element = bytearray(fb.legacy_element("orders", 3, 41, registered_id=0))
    cached_hash = (31 * fb.java_hash("orders") + 3) & 0xFFFFFFFF
    partition_at = 2 + len(fb.kryo_zigzag(cached_hash - 2**32 if cached_hash >= 2**31 else cached_hash))
    assert element[partition_at] == 6  # zig-zag 3
    element[partition_at] = 4  # partition 2, cachedHash still that of partition 3
    metadata = fb.metadata(4, 12, [fb.operator(4, [(0, legacy_subtask(4, [bytes(element)]))])])
    with pytest.raises(FlinkStateError, match="does not match its hash"):
        read_checkpoint(str(write_checkpoint(tmp_path, metadata)))


def test_an_unknown_split_serializer_version(tmp_path: Path) -> None:
    element = fb.split_element("t", 0, 1, version=1)
    metadata = fb.metadata(6, 3, [fb.operator(6, [(0, kafka_source_subtask(6, [element]))])])
    with pytest.raises(FlinkStateError, match="unknown KafkaPartitionSplit serializer version 1"):
        read_checkpoint(str(write_checkpoint(tmp_path, metadata)))


def test_an_unknown_state_serializer(tmp_path: Path) -> None:
    stream, partitions = fb.backend_stream(
        [
            fb.StateMeta(
                fb.SOURCE_READER_STATE, fb.snapshot("com.example.MySerializerSnapshot"), [b"\x00" * 30]
            )
        ]
    )
    handle = fb.operator_state_handle(partitions, fb.bytes_handle(stream))
    metadata = fb.metadata(6, 3, [fb.operator(6, [(0, fb.subtask_state(6, handle))])])
    with pytest.raises(
        FlinkStateError, match=r"unknown serializer for SourceReaderState: .*MySerializerSnapshot"
    ):
        read_checkpoint(str(write_checkpoint(tmp_path, metadata)))


def test_snapshot_compression_is_refused(tmp_path: Path) -> None:
    stream, partitions = fb.backend_stream(
        [
            fb.StateMeta(
                fb.SOURCE_READER_STATE, fb.snapshot(fb.BYTE_ARRAY_SNAPSHOT), [fb.split_element("t", 0, 1)]
            )
        ],
        compressed=True,
    )
    handle = fb.operator_state_handle(partitions, fb.bytes_handle(stream))
    metadata = fb.metadata(6, 3, [fb.operator(6, [(0, fb.subtask_state(6, handle))])])
    with pytest.raises(FlinkStateError, match="snappy-compressed"):
        read_checkpoint(str(write_checkpoint(tmp_path, metadata)))


def test_other_operators_and_their_keyed_state_are_stepped_over(tmp_path: Path) -> None:
    window_state = fb.keyed_handle_v2(fb.bytes_handle(b"keyed-bytes"))
    window = fb.operator(
        6,
        [(0, fb.subtask_state(6, None, keyed=window_state)), (1, None)],
        operator_id=bytes(16),
        name="window",
        uid="window",
    )
    source = fb.operator(
        6,
        [(0, kafka_source_subtask(6, [fb.split_element("t", 0, 5)]))],
        coordinator=fb.bytes_handle(b"enumerator state"),
    )
    metadata = fb.metadata(6, 3, [window, source], master_states=2)
    got = read_checkpoint(str(write_checkpoint(tmp_path, metadata)))
    assert got.operator_id == "000102030405060708090a0b0c0d0e0f"
    assert got.offsets == (SplitOffset("t", 0, 5, None),)


def test_no_kafka_source_in_the_checkpoint(tmp_path: Path) -> None:
    metadata = fb.metadata(6, 3, [fb.operator(6, [(0, fb.subtask_state(6, None))])])
    with pytest.raises(FlinkStateError, match="no Kafka source state"):
        read_checkpoint(str(write_checkpoint(tmp_path, metadata)))


def test_another_flip27_source_is_not_taken_for_kafka(tmp_path: Path) -> None:
    file_split = fb.i32(12) + fb.i32(1) + fb.i32(4) + b"path"  # a FileSource split, not a Kafka one
    files = fb.operator(6, [(0, kafka_source_subtask(6, [file_split]))], operator_id=bytes(16), uid="files")
    kafka = fb.operator(6, [(0, kafka_source_subtask(6, [fb.split_element("t", 0, 5)]))])
    got = read_checkpoint(str(write_checkpoint(tmp_path, fb.metadata(6, 3, [files, kafka]))))
    assert got.offsets == (SplitOffset("t", 0, 5, None),)


def test_two_kafka_sources_need_the_operator_named(tmp_path: Path) -> None:
    first = fb.operator(6, [(0, kafka_source_subtask(6, [fb.split_element("a", 0, 5)]))], uid="first")
    second = fb.operator(
        6, [(0, kafka_source_subtask(6, [fb.split_element("b", 0, 6)]))], operator_id=bytes(16), uid="second"
    )
    directory = str(write_checkpoint(tmp_path, fb.metadata(6, 3, [first, second])))
    with pytest.raises(FlinkStateError, match="several Kafka sources"):
        read_checkpoint(directory)
    assert read_checkpoint(directory, operator="second").offsets == (SplitOffset("b", 0, 6, None),)
    assert read_checkpoint(directory, operator=bytes(16).hex()).offsets == (SplitOffset("b", 0, 6, None),)


def test_a_partition_stored_twice(tmp_path: Path) -> None:
    same = [
        (0, kafka_source_subtask(6, [fb.split_element("t", 0, 5)])),
        (1, kafka_source_subtask(6, [fb.split_element("t", 0, 5)])),
    ]
    directory = str(write_checkpoint(tmp_path, fb.metadata(6, 3, [fb.operator(6, same)])))
    assert read_checkpoint(directory).offsets == (SplitOffset("t", 0, 5, None),)
    differing = [
        (0, kafka_source_subtask(6, [fb.split_element("t", 0, 5)])),
        (1, kafka_source_subtask(6, [fb.split_element("t", 0, 6)])),
    ]
    directory = str(write_checkpoint(tmp_path, fb.metadata(6, 3, [fb.operator(6, differing)]), "chk-8"))
    with pytest.raises(FlinkStateError, match="stored twice with different offsets"):
        read_checkpoint(directory)


# Printed by Flink 1.20.3's own TupleSerializer(KryoSerializer<KafkaTopicPartition>, LongSerializer), the
# legacy consumer's state serializer (FlinkKafkaConsumerBase.createStateSerializer), over
# flink-connector-kafka 3.4.0-1.20: the serializer snapshot written into the meta info, and elements.
FLINK_LEGACY_SERIALIZER_SNAPSHOT = bytes.fromhex(
    "0000000200436f72672e6170616368652e666c696e6b2e6170692e6a6176612e747970657574696c732e72756e74696d652e"
    "5475706c6553657269616c697a6572536e617073686f7400000003000de7040000000200266f72672e6170616368652e666c"
    "696e6b2e6170692e6a6176612e7475706c652e5475706c6532001457fd000000010000000200476f72672e6170616368652e"
    "666c696e6b2e6170692e6a6176612e747970657574696c732e72756e74696d652e6b72796f2e4b72796f53657269616c697a"
    "6572536e617073686f740000000200496f72672e6170616368652e666c696e6b2e73747265616d696e672e636f6e6e656374"
    "6f72732e6b61666b612e696e7465726e616c732e4b61666b61546f706963506172746974696f6e000004f2c69a3d70000000"
    "0200496f72672e6170616368652e666c696e6b2e73747265616d696e672e636f6e6e6563746f72732e6b61666b612e696e74"
    "65726e616c732e4b61666b61546f706963506172746974696f6e010000004b00496f72672e6170616368652e666c696e6b2e"
    "73747265616d696e672e636f6e6e6563746f72732e6b61666b612e696e7465726e616c732e4b61666b61546f706963506172"
    "746974696f6e010000004f00496f72672e6170616368652e666c696e6b2e73747265616d696e672e636f6e6e6563746f7273"
    "2e6b61666b612e696e7465726e616c732e4b61666b61546f706963506172746974696f6e0000000000296f72672e61706163"
    "68652e6176726f2e67656e657269632e47656e6572696344617461244172726179010000002b00296f72672e617061636865"
    "2e6176726f2e67656e657269632e47656e657269634461746124417272617901000000b600556f72672e6170616368652e66"
    "6c696e6b2e6170692e6a6176612e747970657574696c732e72756e74696d652e6b72796f2e53657269616c697a6572732444"
    "756d6d794176726f52656769737465726564436c6173730000000100596f72672e6170616368652e666c696e6b2e6170692e"
    "6a6176612e747970657574696c732e72756e74696d652e6b72796f2e53657269616c697a6572732444756d6d794176726f4b"
    "72796f53657269616c697a6572436c617373000004f2c69a3d7000000000000004f2c69a3d700000000000506f72672e6170"
    "616368652e666c696e6b2e6170692e636f6d6d6f6e2e747970657574696c732e626173652e4c6f6e6753657269616c697a65"
    "72244c6f6e6753657269616c697a6572536e617073686f7400000003"
)
FLINK_LEGACY_ELEMENTS = {
    ("orders", 3, 41): "0c01839998ff0806016f72646572f30000000000000029",
    ("événements", 70_000, -915623761776): "0c019ceea69a0ae0c508018bc3a976c3a96e656d656e7473ffffff2ad0922890",
    ("x", 0, 7): "0c01903a000182780000000000000007",
}


def test_the_legacy_state_as_flink_1_20_serializes_it(tmp_path: Path) -> None:
    elements = [bytes.fromhex(h) for h in FLINK_LEGACY_ELEMENTS.values()]
    assert elements[0] == fb.legacy_element("orders", 3, 41, registered_id=10)  # the builder agrees
    stream, partitions = fb.backend_stream(
        [
            fb.StateMeta(
                fb.LEGACY_STATE,
                FLINK_LEGACY_SERIALIZER_SNAPSHOT,
                elements,
                mode=fb.UNION,
                options={"KEY_OPERATOR_STATE_DISTRIBUTION_MODE": "UNION"},
            )
        ]
    )
    handle = fb.operator_state_handle(partitions, fb.bytes_handle(stream))
    metadata = fb.metadata(4, 5, [fb.operator(4, [(0, fb.subtask_state(4, handle))])])
    got = read_checkpoint(str(write_checkpoint(tmp_path, metadata)))
    assert got.engine == ENGINE_FLINK_LEGACY
    assert got.offsets == tuple(SplitOffset(t, p, o, None) for t, p, o in sorted(FLINK_LEGACY_ELEMENTS))


def test_an_element_offset_repeated_in_place_of_another(tmp_path: Path) -> None:
    # [a, b] -> [b, b] would read the last element twice and lose the first, silently: refused.
    stream, partitions = fb.backend_stream(
        [
            fb.StateMeta(
                fb.SOURCE_READER_STATE,
                fb.snapshot(fb.BYTE_ARRAY_SNAPSHOT),
                [fb.split_element("t", 0, 5), fb.split_element("t", 1, 6)],
            )
        ]
    )
    mode, (_, second) = partitions[fb.SOURCE_READER_STATE]
    handle = fb.operator_state_handle(
        {fb.SOURCE_READER_STATE: (mode, (second, second))}, fb.bytes_handle(stream)
    )
    metadata = fb.metadata(6, 3, [fb.operator(6, [(0, fb.subtask_state(6, handle))])])
    with pytest.raises(FlinkStateError, match="offsets are not increasing"):
        read_checkpoint(str(write_checkpoint(tmp_path, metadata)))


def test_a_missing_state_file_is_never_passed_over(tmp_path: Path) -> None:
    # Beside another FLIP-27 source whose splits are not Kafka's, the Kafka source's missing state file
    # is what the error names (the checkpoint is gone), not the other source's bytes.
    file_split = fb.i32(12) + fb.i32(1) + fb.i32(4) + b"path"
    files = fb.operator(6, [(0, kafka_source_subtask(6, [file_split]))], operator_id=bytes(16), uid="files")
    stream, _ = fb.backend_stream(
        [
            fb.StateMeta(
                fb.SOURCE_READER_STATE, fb.snapshot(fb.BYTE_ARRAY_SNAPSHOT), [fb.split_element("t", 0, 5)]
            )
        ]
    )
    kafka = fb.operator(
        6,
        [
            (
                0,
                kafka_source_subtask(
                    6, [fb.split_element("t", 0, 5)], fb.relative_handle("gone", len(stream))
                ),
            )
        ],
    )
    with pytest.raises(FlinkCheckpointGoneError, match="gone"):
        read_checkpoint(str(write_checkpoint(tmp_path, fb.metadata(6, 3, [files, kafka]))))
