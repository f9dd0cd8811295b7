"""The shop's tests with pytest-django: ``pytest`` (see pytest.ini)."""

# --8<-- [start:db]
from django.db import connection

from shop.models import Order
from shop.tasks import registry, send_receipt
from txqueue.testing import captured, run_tasks


def test_the_receipt_marks_its_order(db):
    order = Order.objects.create(total=7)  # in the test's transaction, never committed
    with captured(connection) as enqueued:
        send_receipt.enqueue(connection, order=order.pk)
    enqueued.assert_enqueued(send_receipt, order=order.pk)

    [ran] = run_tasks(registry, connection)
    assert ran.state == "succeeded"
    assert Order.objects.get(pk=order.pk).receipt_sent


# --8<-- [end:db]
