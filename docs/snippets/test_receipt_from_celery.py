# --8<-- [start:test]
import sqlite3
from contextlib import closing
from decimal import Decimal

import txqueue
from txqueue.testing import captured, run_tasks

from shop.tasks import Line, registry, send_receipt


def test_receipt_is_sent(txqueue_sqlite, txqueue_clock):
    lines = [Line("tea", Decimal("4.50"))]
    with captured(txqueue_sqlite) as enqueued:
        conn = sqlite3.connect(txqueue_sqlite.removeprefix("sqlite:///"))
        with closing(conn), txqueue.transaction(conn):
            send_receipt.options(delay=3600).enqueue(conn, order=42, lines=lines)
    enqueued.assert_enqueued(send_receipt, order=42, lines=lines)

    assert run_tasks(registry, txqueue_sqlite) == []  # not due for an hour
    [ran] = run_tasks(registry, txqueue_sqlite, clock=txqueue_clock)
    assert (ran.state, ran.result) == ("succeeded", "receipt for order 42: 4.50")


# --8<-- [end:test]
