"""How `make test` shares the suite between its workers (tests/support/scheduling.py), driven the
way xdist's controller drives a scheduler, with stand-in workers."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from tests.support.scheduling import ByUnit, unit_rank, worker_unit

pytestmark = pytest.mark.unit

# More units than workers, as in the suite: three modules of three tests and a tier of four (the
# largest, so xdist hands it out first).
COLLECTION = [
    *(f"tests/kafka/test_{m}.py::test_{i}" for m in "abc" for i in range(3)),
    "tests/cluster/test_x.py::test_1",
    "tests/cluster/test_y.py::test_1",
    "tests/cluster/test_y.py::test_2",
    "tests/cluster/test_z.py::test_1",
]
CLUSTER = COLLECTION[-4:]


class Worker:
    """What the scheduler uses of xdist's WorkerController."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.sent: list[str] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent += [COLLECTION[i] for i in indices]

    def shutdown(self) -> None:
        self.shutting_down = True


def scheduler(*workers: Worker) -> ByUnit:
    config = SimpleNamespace(
        getvalue=lambda name: [f"{len(workers)}*popen"] if name == "tx" else None,
        option=SimpleNamespace(loadscopereorder=True),
    )
    sched = ByUnit(config, SimpleNamespace(loadscopesched=lambda *args: None))
    for w in workers:
        sched.add_node(w)
        sched.add_node_collection(w, COLLECTION)
    sched.schedule()
    return sched


def complete(sched: ByUnit, worker: Worker, nodeid: str) -> None:
    sched.mark_test_complete(worker, COLLECTION.index(nodeid))


@pytest.mark.parametrize(
    ("nodeid", "unit"),
    [
        ("tests/kafka/test_a.py::test_1", "tests/kafka/test_a.py"),
        ("tests/kafka/test_a.py::Case::test_1", "tests/kafka/test_a.py"),
        ("tests/cluster/test_y.py::test_2[x]", "tests/cluster"),
        ("tests/flink/test_s3.py::test_1", "tests/flink/test_s3.py"),
        ("tests/test_top.py::test_1", "tests/test_top.py"),
    ],
)
def test_a_worker_gets_a_module_or_a_whole_tier_that_shares_a_build(nodeid: str, unit: str) -> None:
    assert worker_unit(nodeid) == unit


def run_all(sched: ByUnit, worker: Worker) -> None:
    """`worker` runs what it was sent, and what it is sent meanwhile, to the end."""
    done = 0
    while done < len(worker.sent):
        complete(sched, worker, worker.sent[done])
        done += 1


def test_each_unit_goes_whole_to_one_worker() -> None:
    one, two = Worker("gw0"), Worker("gw1")
    sched = scheduler(one, two)
    run_all(sched, one)
    run_all(sched, two)
    assert sorted(one.sent + two.sent) == sorted(COLLECTION)
    units = [{worker_unit(n) for n in w.sent} for w in (one, two)]
    assert not units[0] & units[1]
    assert sched.tests_finished


def test_a_worker_with_nothing_left_waits_and_takes_the_rest_of_a_crashed_workers_unit() -> None:
    one, two = Worker("gw0"), Worker("gw1")
    sched = scheduler(one, two)
    cluster, kafka = (one, two) if one.sent == CLUSTER else (two, one)
    assert cluster.sent == CLUSTER
    run_all(sched, kafka)  # the three kafka modules
    assert len(kafka.sent) == 9
    assert not kafka.shutting_down  # its queue ran dry, but it stays
    assert not sched.tests_finished

    complete(sched, cluster, CLUSTER[0])
    crashed_in = sched.remove_node(cluster)  # the worker died in its second test

    assert crashed_in == CLUSTER[1]
    assert kafka.sent[9:] == CLUSTER[1:]  # the rest of the unit, from the test it died in
    run_all(sched, kafka)
    assert sched.tests_finished  # and xdist's controller then shuts every worker down itself


def test_the_longest_units_are_handed_out_first() -> None:
    units = [
        "tests/unit/test_a.py",
        "tests/spark/test_b.py",
        "tests/kafka/test_c.py",
        "tests/flink/test_d.py",
        "tests/kafka/test_demo.py",
        "tests/cluster",
    ]
    assert sorted(units, key=unit_rank) == units[::-1]


def test_the_cluster_tier_goes_out_before_a_module_with_more_tests(monkeypatch: pytest.MonkeyPatch) -> None:
    # xdist alone hands out the unit with the most tests first: here the unit module's six.
    collection = [*(f"tests/unit/test_u.py::test_{i}" for i in range(6)), *CLUSTER]
    monkeypatch.setattr(sys.modules[__name__], "COLLECTION", collection)
    one, two = Worker("gw0"), Worker("gw1")
    sched = scheduler(one, two)
    assert one.sent == CLUSTER
    assert two.sent == collection[:6]
    run_all(sched, one)
    run_all(sched, two)
    assert sched.tests_finished
