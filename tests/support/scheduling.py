"""How `make test` hands the suite to its pytest-xdist workers (`-n N`, xdist's `--dist load`).

A worker gets whole units (``worker_unit``): a test module, so a module-scoped scenario starts once,
or a whole tier that shares what one session builds. xdist's own scheduler for whole scopes,
`LoadScopeScheduling`, is reused with two changes:

- the unit of a test is ``worker_unit``, not its module or class;
- a worker whose queue ran dry waits for the end of the session instead of leaving at once. xdist
  shuts an idle worker down straight away; if the other worker then dies in the middle of its unit
  (a segfault in a native library, the OOM killer), xdist puts the rest of that unit back on the
  queue, reports the test it died in as failed, and starts a replacement, but with no worker left
  alive it can stop with "Unexpectedly no active workers available" before the replacement takes
  the unit, and the tests after the crash are never run. An idle worker kept alive takes them.
  xdist still shuts every worker down itself once every test has run (`tests_finished`).

Both changes override private methods of xdist (`_split_scope`, `_reschedule`, pinned in
pyproject.toml), as its own `LoadFileScheduling` overrides `_split_scope`.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScopeScheduling

# A tier whose tests share what one session builds in the repo: the cluster tier runs `make dist`
# into build/ and starts a standalone cluster, so it runs on one worker and nothing is built twice at
# once. (The Flink tier's modules are shared out one by one: its compile into the cache takes a lock.)
WHOLE_TIERS = ("cluster",)


def worker_unit(nodeid: str) -> str:
    """What one worker gets: a whole tier above, else a test module. ``nodeid`` is relative to the
    repo: ``tests/<tier>/<file>::<test>``."""
    module = nodeid.split("::", 1)[0]
    parts = module.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 and parts[1] in WHOLE_TIERS else module


# The order units are handed out in, longest first, so that no long unit starts last and runs alone
# while the other worker idles: the cluster tier (its night scenario alone is minutes of
# spark-submits), then the demo, then the tiers from the costliest test (a Flink job, a Kafka
# stream) to the cheapest (a pure function); within a tier, xdist's own order (most tests first).
FIRST_UNITS = ("tests/cluster", "tests/kafka/test_demo.py")
TIER_ORDER = ("flink", "kafka", "spark", "browser")


def unit_rank(unit: str) -> int:
    """Where ``unit`` comes in the hand-out order (lower first)."""
    if unit in FIRST_UNITS:
        return FIRST_UNITS.index(unit)
    parts = unit.split("/")
    tier = parts[1] if len(parts) > 2 else ""
    return len(FIRST_UNITS) + (TIER_ORDER.index(tier) if tier in TIER_ORDER else len(TIER_ORDER))


class ByUnit(LoadScopeScheduling):  # type: ignore[misc]  # xdist ships no type hints
    _ordered = False

    def _split_scope(self, nodeid: str) -> str:
        return worker_unit(nodeid)

    def _assign_work_unit(self, node: Any) -> None:
        if not self._ordered:  # the queue xdist built, reordered once before the first unit goes out
            self._ordered = True
            units = sorted(self.workqueue.items(), key=lambda item: unit_rank(item[0]))  # stable
            self.workqueue.clear()
            self.workqueue.update(units)
        super()._assign_work_unit(node)

    def _reschedule(self, node: Any) -> None:
        if self.workqueue:
            super()._reschedule(node)
        # else: nothing to give; the worker stays until xdist ends the session (see above).
