"""How-to "Periodic tasks", schedules at run time: the calls as written, then what they
left in the database."""

import os
from datetime import timedelta

import psycopg

import txqueue

conn = psycopg.connect(os.environ["TXQUEUE_DATABASE_URL"])

# --8<-- [start:runtime]
txqueue.create_schedule(
    conn,
    "acme_weekly_report",
    cron="0 8 * * mon",
    timezone="America/New_York",
    task="send_report",
    queue="reports",
    payload={"customer": "acme", "period": "week"},
)
txqueue.change_schedule(conn, "acme_weekly_report", cron="0 7 * * mon")  # the rest stays
txqueue.pause_schedule(conn, "acme_weekly_report")  # enqueues nothing until resumed
txqueue.resume_schedule(conn, "acme_weekly_report")  # from its next slot: none made up
for schedule in txqueue.list_schedules(conn):  # both kinds: source is "code" or "runtime"
    print(schedule.name, schedule.source, schedule.next_run)
conn.commit()  # in your transaction: the workers see it from their next look
# --8<-- [end:runtime]

made = txqueue.get_schedule(conn, "acme_weekly_report")
assert (made.source, made.cron, made.paused) == ("runtime", "0 7 * * mon", False), made
assert made.payload == {"customer": "acme", "period": "week"}, made
assert made.next_run is not None and made.next_run.weekday() == 0, made  # a Monday
assert timedelta(0) < made.next_run - made.last_run <= timedelta(weeks=1), made
txqueue.delete_schedule(conn, "acme_weekly_report")
conn.commit()
assert txqueue.list_schedules(conn) == []
