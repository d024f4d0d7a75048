"""Real Flink checkpoints decode to exactly what Flink's State Processor API reads from them.

Each fixture under tests/unit/flink_fixtures/<stack>-<source>-<size>/ is a checkpoint (``chk-N``) or
savepoint directory (``_metadata`` and any state files beside it) written by a real Flink job reading
a real broker, with ``oracle-<directory>.json`` beside it: what Flink's own State Processor API read
from the same directory (``SavepointReader`` over uid ``kafka-source``, the connector's own
serializers), as ``{"checkpoint_id", "engine", "operator_id", "offsets": [{"topic", "partition",
"raw_offset", "stopping_offset"}]}``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.flink.metadata import read_checkpoint

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent / "flink_fixtures"
CHECKPOINTS = sorted(p.parent for p in FIXTURES.glob("*/*/_metadata"))


@pytest.mark.parametrize("checkpoint", CHECKPOINTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_decoder_agrees_with_the_state_processor_api(checkpoint: Path) -> None:
    oracle = json.loads((checkpoint.parent / f"oracle-{checkpoint.name}.json").read_text())
    got = read_checkpoint(str(checkpoint))
    assert (got.checkpoint_id, got.engine, got.operator_id) == (
        oracle["checkpoint_id"],
        oracle["engine"],
        oracle["operator_id"],
    )
    expected = sorted(
        (o["topic"], o["partition"], o["raw_offset"], o["stopping_offset"]) for o in oracle["offsets"]
    )
    assert [(o.topic, o.partition, o.raw_offset, o.stopping_offset) for o in got.offsets] == expected
    assert got.path == str(checkpoint)


def test_both_stacks_and_both_sources_are_pinned() -> None:
    # The fixtures must keep covering what the decoder claims: Flink 1.20 (metadata v4) with the
    # KafkaSource and the legacy consumer, Flink 2.2 (v6), checkpoints and savepoints, and 2,000
    # partitions whose state is in files beside _metadata (above the 20 kb inline threshold).
    names = {p.parent.name for p in CHECKPOINTS}
    assert {"1.20-kafkasource-small", "1.20-legacy-small", "2.2-kafkasource-small"} <= names, names
    assert any(len(list(p.iterdir())) > 1 for p in CHECKPOINTS), "no fixture with state files"
    assert {p.name.split("-")[0] for p in CHECKPOINTS} == {"chk", "savepoint"}
