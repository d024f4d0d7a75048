"""The import graph of the application: no cycles, and no module reaching above its layer.

Every module under `app/`, `checks/` and `jobs/` is parsed with `ast`, and every import in it counts:
at module level, inside a function (imported late to keep `--help` fast) and under
`if TYPE_CHECKING:` (for annotations only) alike. A cycle hidden behind a late or type-only import
is still a cycle: the two modules cannot be understood, tested or moved apart. Shared types and
protocols go where both sides can import them.

An import names a module of this repository when its dotted name, or the longest prefix of it that
is a module (`from app.reconcile import findings` names `app.reconcile.findings`, `from
app.errors import UsageError` names `app.errors`), is one of the parsed files. Importing a module
also runs its packages' `__init__`, which hold no imports here, so they are left out of the graph.

Layers (what may import what), each a rule with its reason:

- `app.cli` is the top: only the entry points (`jobs/`) import it. The subcommands in
  `app.commands` take their exit codes and final print from `app.commands.outcome`, never from
  the CLI, and nothing but `app.cli` and the subcommands themselves imports `app.commands`.
- `app.demo` (the embedded broker and the scripted incidents) sits on the pipeline, never under
  it: only the CLI and the `demo` subcommand import it.
- `app.errors` is the bottom: it imports nothing of the application, so every module may raise
  its errors.
- `app.contracts` (schemas, vocabulary, offset semantics) imports only itself and `app.errors`.
- `app.reconcile` (the audit) is imported only from above it: the steps (`app.pipeline`), the
  commands, `nightly`, `watch`, and `quality`, `report` and `alerts`, which read its tables.
  `app.incidents` stands below it: it imports the findings table's row from `app.contracts`,
  never from the audit that builds the findings.

Inside `app.reconcile` and `app.stream`, every module lives in a room (a sub-package, or a module at
its top), and each room imports only itself and the rooms it stands on (`RECONCILE_ROOMS`,
`STREAM_ROOMS`, with the reasons): the rooms form floors, so no arrow runs up and no circle closes
between them. In `app.stream` the run recorder stands below every writer of a run and above the
ledger writer; it alone builds a run's start, restored offsets and stop.

The orchestration stands on everything else, in rooms of its own (`ORCHESTRATION_ROOMS`): the alert
channels at the bottom; the audit context and its steps (`app.pipeline`) on them; `nightly` (the
steps with a resumable state) and `watch` (a cycle over the steps) side by side on the steps, blind
to each other; the commands on top. Nothing below imports a room of it.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("app", "checks", "jobs")

# Cycles known to be removed by a change in progress, by their modules: the branch that removes them.
KNOWN_CYCLES: dict[frozenset[str], str] = {}


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the parsed packages."""
    out: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


MODULES = module_files()


def resolve(name: str) -> str | None:
    """The module of this repository that ``name`` (a dotted name) denotes, if any."""
    while name:
        if name in MODULES:
            return name
        name = name.rpartition(".")[0]
    return None


def imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """Every dotted name an import statement of ``tree`` names, wherever the statement is."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            yield source
            yield from (f"{source}.{alias.name}" for alias in node.names)


def module_imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """The modules of this repository ``module`` imports (packages' `__init__` left out)."""
    targets = {resolve(n) for n in imported_names(tree, module, is_package)}
    return {t for t in targets if t is not None and t != module and MODULES[t].name != "__init__.py"}


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of this repository it imports."""
    return {
        module: module_imports(
            ast.parse(path.read_text(), filename=str(path)), module, path.name == "__init__.py"
        )
        for module, path in MODULES.items()
    }


def strongly_connected(graph: Mapping[str, set[str]]) -> list[set[str]]:
    """Tarjan's strongly connected components, iteratively (no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                components.append(component)
    return components


def a_cycle(component: set[str], graph: Mapping[str, set[str]]) -> list[str]:
    """One import cycle through the component, as the path a reader would follow."""
    start = min(component)
    path, seen = [start], {start}
    while True:
        nxt = min(graph[path[-1]] & component, key=lambda m: (m in seen and m != start, m))
        if nxt == start or nxt in seen:
            return [*path, nxt]
        path.append(nxt)
        seen.add(nxt)


GRAPH = import_graph()


def test_the_graph_sees_late_and_type_only_imports() -> None:
    source = """
from typing import TYPE_CHECKING
from app.errors import UsageError
if TYPE_CHECKING:
    from app.reconcile.ledger.audit import LedgerAudit
def f():
    from app.reconcile import findings
    import app.contracts.vocabulary
"""
    assert module_imports(ast.parse(source), "app.x.y", False) == {
        "app.errors",
        "app.reconcile.ledger.audit",
        "app.reconcile.findings",
        "app.contracts.vocabulary",
    }


def test_tarjan_finds_a_cycle_and_names_it() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    components = [c for c in strongly_connected(graph) if len(c) > 1]
    assert components == [{"a", "b", "c"}]
    assert a_cycle(components[0], graph) == ["a", "b", "c", "a"]


def test_no_import_cycles() -> None:
    cycles = [c for c in strongly_connected(GRAPH) if len(c) > 1 and frozenset(c) not in KNOWN_CYCLES]
    assert not cycles, "import cycles (function-local and TYPE_CHECKING imports included):\n" + "\n".join(
        f"{' -> '.join(a_cycle(c, GRAPH))} (all of: {', '.join(sorted(c))})" for c in cycles
    )


def test_known_cycles_still_exist() -> None:
    """An exception outlives its cycle only by mistake: drop it once its branch has landed."""
    components = {frozenset(c) for c in strongly_connected(GRAPH)}
    assert set(KNOWN_CYCLES) <= components, "a known cycle is gone: remove it from KNOWN_CYCLES"


def importers_of(prefix: str) -> dict[str, set[str]]:
    """Module -> the modules under ``prefix`` it imports."""
    hits = {m: {t for t in ts if t == prefix or t.startswith(prefix + ".")} for m, ts in GRAPH.items()}
    return {m: ts for m, ts in hits.items() if ts}


def within(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


@pytest.mark.parametrize(
    ("imported", "allowed"),
    [
        ("app.cli", ("jobs",)),
        ("app.commands", ("app.cli", "app.commands")),
        ("app.demo", ("app.cli", "app.commands.demo", "app.demo")),
        (
            "app.reconcile",
            (
                "app.reconcile",
                "app.pipeline",
                "app.commands",
                "app.nightly",
                "app.watch",
                "app.quality",
                "app.report",
                "app.alerts",
            ),
        ),
    ],
)
def test_upper_layers_are_imported_only_from_above(imported: str, allowed: tuple[str, ...]) -> None:
    wrong = {m: ts for m, ts in importers_of(imported).items() if not within(m, *allowed)}
    assert not wrong, f"only {', '.join(allowed)} may import {imported}: " + "; ".join(
        f"{m} -> {', '.join(sorted(ts))}" for m, ts in sorted(wrong.items())
    )


@pytest.mark.parametrize(
    ("module", "may_import"),
    [
        ("app.errors", ()),
        ("app.contracts", ("app.contracts", "app.errors")),
        (
            "app.incidents",
            ("app.incidents", "app.contracts", "app.errors", "app.config", "app.storage", "app.kafka"),
        ),
    ],
)
def test_bottom_layers_import_nothing_above_them(module: str, may_import: tuple[str, ...]) -> None:
    wrong = {m: {t for t in ts if not within(t, *may_import)} for m, ts in GRAPH.items() if within(m, module)}
    wrong = {m: ts for m, ts in wrong.items() if ts}
    assert not wrong, f"{module} may import only {may_import or 'nothing of the application'}: " + "; ".join(
        f"{m} -> {', '.join(sorted(ts))}" for m, ts in sorted(wrong.items())
    )


# The rooms of `app.reconcile` (a sub-package or a module at its top) and the rooms each stands on.
RECONCILE = "app.reconcile"
RECONCILE_ROOMS: dict[str, tuple[str, ...]] = {
    # The ground floor: the rules' typed Finding, its builders, and the types every account speaks
    # (AuditWindow, MatchRules, PartitionRange, CopyDates).
    "findings": (),
    # The accounts, side by side and blind to each other: the ledger with the group's commits (one
    # DuckDB session over both; the commit rules ask its views), and the sink by its mode.
    "ledger": ("findings",),
    "sink": ("findings",),
    # The tables reconcile and forensics write and their run records.
    "outputs": ("findings",),
    # The window's ledger and commits read, and opened as the ledger's audit.
    "inputs": ("findings", "ledger"),
    # What combines the accounts: windows of the source against the sink, restarts against the sink.
    "completeness": ("findings", "ledger", "sink"),
    "forensics": ("findings", "inputs", "ledger", "outputs", "sink"),
    # The orchestrator, on top.
    "run": ("completeness", "findings", "forensics", "inputs", "ledger", "outputs", "sink"),
}

# The rooms of `app.stream`: the writers of a run on top, the run recorder under them, the ledger
# writer and Spark's checkpoint files under it.
STREAM = "app.stream"
STREAM_ROOMS: dict[str, tuple[str, ...]] = {
    # Pure pieces: startup plans, the checkpoint files' text, the ledger facts a start reads.
    "startup": (),
    # Beside them, each on its own: the stop between micro-batches, the committer, a sink's log.
    "batch_gate": (),
    "committer": (),
    "sink_evidence": (),
    # Spark's checkpoint files, and the ledger writer (every write of ledger events).
    "checkpoint": ("startup",),
    "ledger": ("startup",),
    # The run recorder: a run's events built once and written through the ledger writer.
    "recorder": ("checkpoint", "ledger", "startup"),
    # The writers of a run: the reference job, an attached query, an import of a checkpoint.
    "job": ("batch_gate", "checkpoint", "committer", "ledger", "recorder", "startup"),
    "attach": ("checkpoint", "committer", "ledger", "recorder", "startup"),
    "ledger_import": ("checkpoint", "ledger", "recorder", "sink_evidence", "startup"),
}
HOUSES: dict[str, dict[str, tuple[str, ...]]] = {RECONCILE: RECONCILE_ROOMS, STREAM: STREAM_ROOMS}
ROOMS = [(house, room) for house, rooms in HOUSES.items() for room in sorted(rooms)]


def room_of(module: str, house: str = RECONCILE) -> str | None:
    """The room of a module of ``house`` (None for the package itself and modules outside)."""
    if not module.startswith(house + "."):
        return None
    return module.removeprefix(house + ".").split(".")[0]


@pytest.mark.parametrize("house", sorted(HOUSES))
def test_every_module_of_a_house_lives_in_a_room(house: str) -> None:
    rooms = HOUSES[house]
    homeless = sorted(
        m for m in MODULES if within(m, house) and m != house and room_of(m, house) not in rooms
    )
    assert not homeless, f"modules of {house} in no room: {', '.join(homeless)}"


@pytest.mark.parametrize("house", sorted(HOUSES))
def test_the_rooms_of_a_house_form_floors_without_a_circle(house: str) -> None:
    rooms = {room: set(below) for room, below in HOUSES[house].items()}
    assert all(set(below) <= set(rooms) for below in rooms.values())
    circles = [c for c in strongly_connected(rooms) if len(c) > 1]
    assert not circles, f"rooms of {house} standing on each other: " + "; ".join(
        " -> ".join(a_cycle(c, rooms)) for c in circles
    )


@pytest.mark.parametrize(("house", "room"), ROOMS)
def test_a_room_imports_only_the_rooms_it_stands_on(house: str, room: str) -> None:
    allowed = {room, *HOUSES[house][room]}
    wrong = {
        m: {t for t in ts if room_of(t, house) is not None and room_of(t, house) not in allowed}
        for m, ts in GRAPH.items()
        if room_of(m, house) == room
    }
    wrong = {m: ts for m, ts in wrong.items() if ts}
    assert not wrong, f"{house}.{room} stands only on {sorted(allowed - {room}) or 'nothing'}: " + "; ".join(
        f"{m} -> {', '.join(sorted(ts))}" for m, ts in sorted(wrong.items())
    )


# The events of a run's life the recorder alone builds (every writer asks it for them).
RUN_EVENTS = ("EVENT_RUN_STARTED", "EVENT_OFFSETS_RESTORED", "EVENT_RUN_STOPPED")
RECORDER = "app.stream.recorder"
EVENT_BUILDERS = ("event", "partition_events", "checkpoint_events", "LedgerEvent")


def run_events_built(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, event name) of every ledger event of ``RUN_EVENTS`` built in ``tree``: an event
    builder (`EventSource.event` and its kin, `LedgerEvent`) given one of them."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name not in EVENT_BUILDERS:
            continue
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            named = (
                arg.attr if isinstance(arg, ast.Attribute) else arg.id if isinstance(arg, ast.Name) else ""
            )
            if named in RUN_EVENTS:
                yield node.lineno, named


def test_the_builder_check_sees_a_run_event_built_by_hand() -> None:
    source = """
source.event(vocab.EVENT_RUN_STARTED, now, None, {})
LedgerEvent(event_type=EVENT_RUN_STOPPED)
source.partition_events(vocab.EVENT_CHECKPOINT_SNAPSHOT, now, 1, {}, {})
"""
    assert list(run_events_built(ast.parse(source))) == [(2, "EVENT_RUN_STARTED"), (3, "EVENT_RUN_STOPPED")]


def test_only_the_run_recorder_builds_a_runs_start_restored_offsets_and_stop() -> None:
    built = {
        module: found
        for module, path in MODULES.items()
        if module != RECORDER and not within(module, "app.contracts")
        if (found := list(run_events_built(ast.parse(path.read_text(), filename=str(path)))))
    }
    assert not built, f"built outside {RECORDER} (ask the recorder for them): " + "; ".join(
        f"{m}: {', '.join(f'{name} (line {line})' for line, name in found)}"
        for m, found in sorted(built.items())
    )


# The rooms of the orchestration (packages of `app`) and the rooms each stands on; what they import
# besides (the audit, the tables, Kafka) is below them all.
ORCHESTRATION_ROOMS: dict[str, tuple[str, ...]] = {
    # Where alerts go (textfile, Pushgateway, webhook) and which incidents a watch alerts.
    "app.alerts": (),
    # The audit context (config, tables resolved once, the broker's one policy, the clock) and each
    # step written once as a function of it.
    "app.pipeline": ("app.alerts",),
    # The steps in order with a resumable state; the steps in a cycle: neither knows the other.
    "app.nightly": ("app.alerts", "app.pipeline"),
    "app.watch": ("app.alerts", "app.pipeline"),
    # One step each, or a night, or a watch.
    "app.commands": ("app.alerts", "app.nightly", "app.pipeline", "app.watch"),
}
# Who else may import an orchestration room: the CLI and the demo, which sit on top of it.
ABOVE_ORCHESTRATION = ("app.cli", "app.demo")


def orchestration_room_of(module: str) -> str | None:
    return next((room for room in ORCHESTRATION_ROOMS if within(module, room)), None)


def test_the_orchestration_rooms_form_floors_without_a_circle() -> None:
    rooms = {room: set(below) for room, below in ORCHESTRATION_ROOMS.items()}
    assert all(set(below) <= set(rooms) for below in rooms.values())
    circles = [c for c in strongly_connected(rooms) if len(c) > 1]
    assert not circles, "orchestration rooms standing on each other: " + "; ".join(
        " -> ".join(a_cycle(c, rooms)) for c in circles
    )


@pytest.mark.parametrize("room", sorted(ORCHESTRATION_ROOMS))
def test_an_orchestration_room_imports_only_the_rooms_it_stands_on(room: str) -> None:
    allowed = {room, *ORCHESTRATION_ROOMS[room]}
    wrong = {
        m: {t for t in ts if orchestration_room_of(t) not in (None, *allowed)}
        for m, ts in GRAPH.items()
        if orchestration_room_of(m) == room
    }
    wrong = {m: ts for m, ts in wrong.items() if ts}
    assert not wrong, f"{room} stands only on {sorted(allowed - {room}) or 'nothing'}: " + "; ".join(
        f"{m} -> {', '.join(sorted(ts))}" for m, ts in sorted(wrong.items())
    )


def test_nothing_below_the_orchestration_imports_it() -> None:
    wrong = {
        m: {t for t in ts if orchestration_room_of(t) is not None}
        for m, ts in GRAPH.items()
        if orchestration_room_of(m) is None and not within(m, *ABOVE_ORCHESTRATION, "jobs")
    }
    wrong = {m: ts for m, ts in wrong.items() if ts}
    assert not wrong, "only the orchestration, the CLI and the demo import its rooms: " + "; ".join(
        f"{m} -> {', '.join(sorted(ts))}" for m, ts in sorted(wrong.items())
    )
