"""The shop's tests in Django's TestCase: ``manage.py test``, or pytest with pytest-django."""

# --8<-- [start:testcase]
from django.db import connection
from django.test import TestCase

from shop.orders import place_order
from shop.tasks import registry, send_receipt
from txqueue.testing import captured, run_tasks


class PlaceOrderTests(TestCase):
    def test_an_order_sends_its_receipt(self) -> None:
        with captured(connection) as enqueued:
            order = place_order(total=42)
        enqueued.assert_enqueued(send_receipt, order=order.pk)

        ran = run_tasks(registry, connection)  # in the test's transaction: sees the order
        self.assertEqual([(r.name, r.state) for r in ran], [("send_receipt", "succeeded")])
        order.refresh_from_db()
        self.assertTrue(order.receipt_sent)


# --8<-- [end:testcase]
