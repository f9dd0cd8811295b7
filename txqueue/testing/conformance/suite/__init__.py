"""Every test of the conformance suite, and the fixtures they take, in one namespace: a
test module that star-imports this package runs them all on the ``store_kind`` of its
conftest.py. One module per part of a store's duties."""

from types import ModuleType

from . import (
    atomic,
    batches,
    claims,
    connection,
    dashboard,
    enqueue,
    history,
    leaders,
    listing,
    manage,
    outcomes,
    presence,
    queues,
    recovery,
    release,
    schedules,
    step_claims,
    steps,
    transitions,
    upkeep,
    workflow_lists,
    workflow_races,
    workflows,
)

MODULES: tuple[ModuleType, ...] = (
    enqueue,
    batches,
    claims,
    outcomes,
    atomic,
    steps,
    release,
    upkeep,
    recovery,
    manage,
    listing,
    queues,
    schedules,
    workflows,
    step_claims,
    workflow_races,
    workflow_lists,
    transitions,
    history,
    presence,
    leaders,
    dashboard,
    connection,
)


def _tests_and_fixtures(module: ModuleType) -> dict[str, object]:
    """What pytest collects from a module: its tests, and the fixtures they take."""
    return {
        name: value
        for name, value in vars(module).items()
        if name.startswith("test_")
        or hasattr(value, "_pytestfixturefunction")
        or type(value).__name__ == "FixtureFunctionDefinition"
    }


_FOUND = {name: value for module in MODULES for name, value in _tests_and_fixtures(module).items()}
globals().update(_FOUND)
__all__ = sorted(_FOUND)
