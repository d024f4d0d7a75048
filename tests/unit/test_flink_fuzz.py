"""Fuzz of app.flink.metadata: damaged checkpoint files raise FlinkStateError, never decode silently wrong.

The rules, for every sample (synthetic ones from flink_bytes and the real checkpoints in flink_fixtures):

- a truncation at any byte of ``_metadata`` or of a state file raises ``FlinkStateError``;
- random bit flips either raise ``FlinkStateError`` or decode; a decoded result that differs from the
  undamaged one is allowed only when a flipped byte lies in a *value* field: the checkpoint id, the
  operator id, or the bytes of a stored split/element (topic, partition, offsets). Those bytes carry no
  redundancy Flink could check either; a flip anywhere else (framing, lengths, counts, tags, handles,
  serializer meta info, element offsets) must raise or leave the result unchanged;
- random bytes, bare or after a valid header, raise ``FlinkStateError``;
- nothing ever raises another exception type.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.errors import FlinkStateError
from app.flink.metadata import FlinkCheckpointOffsets, decode_checkpoint
from app.flink.operator_state import NO_STOPPING_OFFSET
from tests.unit import flink_bytes as fb

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "flink_fixtures"
CHECKPOINT_DIR = "/checkpoints/chk-7"
METADATA_FILE = f"{CHECKPOINT_DIR}/_metadata"


@dataclass(frozen=True)
class Sample:
    name: str
    metadata: bytes
    files: dict[str, bytes]  # state files by the location the decoder asks for


def synthetic_samples() -> list[Sample]:
    splits = [[("orders", 0, 5), ("orders", 1, 9_000_000_000)], [("événements", 2, -2)], []]
    samples = [Sample(f"kafkasource-v{v}", fb.kafka_source_checkpoint(v, 7, splits), {}) for v in (4, 6)]
    legacy = []
    for index, (topic, partition, offset, registered) in enumerate(
        [("orders", 0, 41, None), ("orders", 1, 77, 12), ("payments", 0, -915, 12)]
    ):
        stream, partitions = fb.backend_stream(
            [
                fb.StateMeta(
                    fb.LEGACY_STATE,
                    fb.legacy_serializer_snapshot(),
                    [fb.legacy_element(topic, partition, offset, registered)],
                    mode=fb.UNION,
                )
            ]
        )
        handle = fb.operator_state_handle(partitions, fb.bytes_handle(stream))
        legacy.append((index, fb.subtask_state(4, handle)))
    samples.append(Sample("legacy-v4", fb.metadata(4, 7, [fb.operator(4, legacy)]), {}))
    stream, partitions = fb.backend_stream(
        [
            fb.StateMeta(
                fb.SOURCE_READER_STATE,
                fb.snapshot(fb.BYTE_ARRAY_SNAPSHOT),
                [fb.split_element("orders", p, 1000 + p) for p in range(4)],
            )
        ]
    )
    handle = fb.operator_state_handle(partitions, fb.relative_handle("state-file", len(stream)))
    samples.append(
        Sample(
            "kafkasource-file",
            fb.metadata(6, 7, [fb.operator(6, [(0, fb.subtask_state(6, handle))])]),
            {f"{CHECKPOINT_DIR}/state-file": stream},
        )
    )
    return samples


def fixture_samples() -> list[Sample]:
    """The real checkpoints under flink_fixtures (each ``<name>/chk-N`` with its files)."""
    samples = []
    for metadata in sorted(FIXTURES.glob("*/*/_metadata")):
        directory = metadata.parent
        files = {
            f"{CHECKPOINT_DIR}/{f.name}": f.read_bytes() for f in directory.iterdir() if f.name != "_metadata"
        }
        samples.append(Sample(f"{directory.parent.name}/{directory.name}", metadata.read_bytes(), files))
    return samples


SAMPLES = synthetic_samples() + fixture_samples()


def decode(metadata: bytes, files: dict[str, bytes]) -> FlinkCheckpointOffsets:
    def read_file(location: str) -> bytes:
        # Real fixtures carry the absolute paths of where Flink wrote them: map them by file name.
        name = location.rsplit("/", 1)[-1]
        key = f"{CHECKPOINT_DIR}/{name}"
        if key not in files:
            raise FlinkStateError(location, "no such file in the sample")
        return files[key]

    return decode_checkpoint(metadata, CHECKPOINT_DIR, METADATA_FILE, read_file)


def outcome(metadata: bytes, files: dict[str, bytes]) -> FlinkCheckpointOffsets | FlinkStateError:
    try:
        return decode(metadata, files)
    except FlinkStateError as exc:
        return exc
    # any other exception escapes and fails the test


def value_patterns(result: FlinkCheckpointOffsets) -> Iterator[bytes]:
    """The stored bytes of each decoded element: where a flip may change a value undetectably."""
    yield bytes.fromhex(result.operator_id)
    for o in result.offsets:
        stop = NO_STOPPING_OFFSET if o.stopping_offset is None else o.stopping_offset
        yield fb.utf(o.topic) + fb.i32(o.partition) + fb.i64(o.raw_offset) + fb.i64(stop)
        whole = fb.legacy_element(o.topic, o.partition, o.raw_offset, registered_id=0)
        yield whole[2:]  # after the class id and the reference marker: hash, partition, topic, offset


def value_regions(data: bytes, result: FlinkCheckpointOffsets, with_checkpoint_id: bool) -> list[range]:
    regions = [range(8, 16)] if with_checkpoint_id else []
    for pattern in value_patterns(result):
        at = data.find(pattern)
        while at >= 0:
            regions.append(range(at, at + len(pattern)))
            at = data.find(pattern, at + 1)
    return regions


def flip(data: bytes, rng: random.Random) -> tuple[bytes, list[int]]:
    damaged = bytearray(data)
    positions = [rng.randrange(len(data)) for _ in range(rng.randrange(1, 4))]
    for pos in positions:
        damaged[pos] ^= 1 << rng.randrange(8)
    return bytes(damaged), positions


def cut_points(size: int) -> list[int]:
    """Every byte of a small file; of a large one (2,000 partitions), 150 spread cuts and its tail."""
    if size <= 8_192:
        return list(range(size))
    return sorted(set(range(0, size, size // 150)) | set(range(size - 32, size)))


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_truncation_at_every_byte_raises(sample: Sample) -> None:
    decode(sample.metadata, sample.files)
    for cut in cut_points(len(sample.metadata)):
        with pytest.raises(FlinkStateError):
            decode(sample.metadata[:cut], sample.files)
    for location, content in sample.files.items():
        for cut in cut_points(len(content)):
            with pytest.raises(FlinkStateError):
                decode(sample.metadata, {**sample.files, location: content[:cut]})


def check_flips(sample: Sample, target: str, rounds: int) -> None:
    original = decode(sample.metadata, sample.files)
    data = sample.metadata if target == "_metadata" else sample.files[target]
    regions = value_regions(data, original, with_checkpoint_id=target == "_metadata")
    rng = random.Random(f"{sample.name}:{target}")
    silent = []
    for _ in range(rounds):
        damaged, positions = flip(data, rng)
        if target == "_metadata":
            got = outcome(damaged, sample.files)
        else:
            got = outcome(sample.metadata, {**sample.files, target: damaged})
        if isinstance(got, FlinkStateError) or got == original:
            continue
        if not any(pos in region for pos in positions for region in regions):
            silent.append((positions, got))
    assert not silent, f"flips outside value fields changed the result: {silent[:3]}"


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_bit_flips_raise_or_change_only_values(sample: Sample) -> None:
    large = max([len(sample.metadata), *map(len, sample.files.values())]) > 8_192
    check_flips(sample, "_metadata", 40 if large else 600)
    for location in sample.files:
        check_flips(sample, location, 40 if large else 300)


def test_random_bytes_raise() -> None:
    rng = random.Random(36)
    header = fb.i32(fb.HEADER_MAGIC)
    for _ in range(2_000):
        garbage = rng.randbytes(rng.randrange(0, 200))
        if rng.random() < 0.7:
            garbage = header + fb.i32(rng.choice([2, 3, 4, 5, 6])) + garbage
        with pytest.raises(FlinkStateError):
            decode(garbage, {})


def test_fixtures_carry_their_oracle() -> None:
    # Each real checkpoint is committed with the State Processor API's answer beside it.
    for metadata in FIXTURES.glob("*/*/_metadata"):
        oracle = metadata.parent.parent / f"oracle-{metadata.parent.name}.json"
        assert json.loads(oracle.read_text())["offsets"], oracle
