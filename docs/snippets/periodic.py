"""How-to "Periodic tasks": two schedules of one task, kept by a worker."""

import txqueue

registry = txqueue.Registry()


# --8<-- [start:periodic]
@registry.periodic("*/5 * * * *", payload={"older_than_days": 30})
@registry.task(queue="maintenance")
def purge_sessions(older_than_days: int) -> None: ...


# A task you already registered, on a second schedule of its own:
registry.periodic(
    "0 3 * * *", name="nightly_full_purge", timezone="Europe/Paris", payload={"older_than_days": 0}
)(purge_sessions)
# --8<-- [end:periodic]

assert [s.name for s in registry.schedules()] == ["purge_sessions", "nightly_full_purge"]
