"""txqueue's pages in the Django admin, through Django's test client, in a TestCase: the
lists and their filters, a task's history, and every action, each checked in the
database through txqueue's own reads."""

import re
from typing import Any

from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import TestCase

import txqueue
from txqueue import Task
from txqueue.testing import run_tasks

TASKS = "/admin/txqueue/task/"


def failing() -> txqueue.Registry:
    registry = txqueue.Registry()

    @registry.task("charge", queue="billing", max_attempts=1)
    def charge(n: int) -> None:
        raise ValueError(f"card {n} declined")

    return registry


class TxqueueAdminTests(TestCase):
    def setUp(self) -> None:
        self.client.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))

    def act(self, page: str, action: str, *keys: Any) -> Any:
        """Tick ``keys`` on a list and run ``action``; the page it leads to."""
        chosen = {"action": action, "_selected_action": [str(k) for k in keys]}
        return self.client.post(page, chosen, follow=True)

    def test_tasks_are_filtered_searched_shown_with_their_history_retried_and_cancelled(
        self,
    ) -> None:
        charges = txqueue.enqueue_many(
            connection, [Task("charge", {"n": n}, queue="billing") for n in (1, 2)]
        )
        later = txqueue.enqueue(connection, Task("mail", {"to": "a"}, queue="mail", delay=600))
        run_tasks(failing(), connection)

        failed = self.client.get(TASKS, {"state": "failed"})
        self.assertEqual(failed.status_code, 200)
        for task_id in charges:
            self.assertContains(failed, str(task_id))
        self.assertNotContains(failed, str(later))
        by_queue = self.client.get(TASKS, {"queue": "mail"})
        self.assertContains(by_queue, str(later))
        self.assertNotContains(by_queue, str(charges[0]))
        self.assertContains(by_queue, "?queue=billing")  # the filter offers both queues
        self.assertContains(self.client.get(TASKS, {"q": str(later)}), str(later))
        self.assertNotContains(self.client.get(TASKS, {"q": "charge"}), str(later))

        shown = self.client.get(f"{TASKS}{charges[0]}/change/")
        self.assertContains(shown, "ValueError")
        self.assertContains(shown, "card 1 declined")
        self.assertContains(shown, "running → failed")
        self.assertNotContains(shown, 'name="_save"')  # to look at, not to edit

        retried = self.act(TASKS, "retry_selected", *charges, later)
        self.assertContains(retried, "Retried 2 (1 could not be: they had moved on).")
        self.assertEqual(txqueue.get_task(connection, charges[0]).state, "pending")
        self.assertEqual(txqueue.get_task(connection, charges[0]).events[-1].by, "admin:ops")
        cancelled = self.act(TASKS, "cancel_selected", later)
        self.assertContains(cancelled, "Cancelled 1.")
        self.assertEqual(txqueue.get_task(connection, later).state, "cancelled")
        self.assertEqual(self.client.get(f"{TASKS}add/").status_code, 403)

    def test_a_queue_is_limited_paused_and_resumed(self) -> None:
        form = {"queue": "mail", "rate": "fast", "concurrency": "2", "paused": "on"}
        refused = self.client.post("/admin/txqueue/queue/add/", form)
        self.assertContains(refused, "&#x27;fast&#x27; is not a rate")
        made = self.client.post("/admin/txqueue/queue/add/", {**form, "rate": "600/min"})
        self.assertEqual(made.status_code, 302)
        mail = txqueue.get_queue(connection, "mail")
        self.assertEqual((mail.paused, mail.rate_limit, mail.rate_period), (True, 600, 60))
        self.assertEqual(mail.concurrency, 2)
        self.assertContains(self.client.get("/admin/txqueue/queue/"), "600/min")
        changed = self.client.post(
            "/admin/txqueue/queue/mail/change/", {"rate": "", "fair_share": "on"}
        )
        self.assertEqual(changed.status_code, 302)
        mail = txqueue.get_queue(connection, "mail")
        self.assertEqual((mail.paused, mail.rate_limit, mail.fair_share), (False, None, True))
        self.assertContains(self.act("/admin/txqueue/queue/", "pause", "mail"), "Paused 1.")
        self.assertTrue(txqueue.get_queue(connection, "mail").paused)
        self.assertContains(self.act("/admin/txqueue/queue/", "resume", "mail"), "Resumed 1.")
        self.assertFalse(txqueue.get_queue(connection, "mail").paused)

    def test_a_schedule_is_made_changed_paused_and_deleted(self) -> None:
        form = {"name": "nightly", "task": "send_report", "queue": "reports"}
        form |= {"cron": "0 3 * * ", "timezone": "Europe/Paris", "payload": '{"kind": "daily"}'}
        refused = self.client.post("/admin/txqueue/schedule/add/", {**form, "cron": "3 o'clock"})
        self.assertContains(refused, "Wrong number of fields")
        made = self.client.post("/admin/txqueue/schedule/add/", {**form, "cron": "0 3 * * *"})
        self.assertEqual(made.status_code, 302)
        nightly = txqueue.get_schedule(connection, "nightly")
        self.assertEqual((nightly.source, nightly.payload), ("runtime", {"kind": "daily"}))
        listed = self.client.get("/admin/txqueue/schedule/")
        self.assertContains(listed, "nightly")
        self.assertContains(listed, "Europe/Paris")
        page = "/admin/txqueue/schedule/nightly/change/"
        changed = self.client.post(
            page, {**form, "cron": "30 4 * * *", "payload": "", "catch_up": "on"}
        )
        self.assertEqual(changed.status_code, 302)
        nightly = txqueue.get_schedule(connection, "nightly")
        self.assertEqual(
            (nightly.cron, nightly.payload, nightly.catch_up), ("30 4 * * *", None, True)
        )
        self.assertContains(self.act("/admin/txqueue/schedule/", "pause", "nightly"), "Paused 1.")
        self.assertTrue(txqueue.get_schedule(connection, "nightly").paused)
        self.assertContains(self.act("/admin/txqueue/schedule/", "resume", "nightly"), "Resumed 1.")
        wrong = self.client.post(page, {**form, "cron": "0 3 * *"})
        self.assertContains(wrong, "Wrong number of fields")  # on the form, not a 500
        deleted = self.client.post(
            "/admin/txqueue/schedule/",
            {"action": "delete_selected", "_selected_action": ["nightly"], "post": "yes"},
            follow=True,
        )
        self.assertEqual(deleted.status_code, 200)
        self.assertEqual(txqueue.list_schedules(connection), [])

    def test_a_workflow_shows_its_steps_and_is_cancelled(self) -> None:
        flow = txqueue.Workflow("nightly")
        extract = flow.add(Task("extract", queue="etl"), name="extract")
        flow.add(Task("load", queue="etl"), after=[extract], name="load")
        txqueue.enqueue_workflow(connection, flow)
        self.assertContains(self.client.get("/admin/txqueue/workflow/"), str(flow.id))
        shown = self.client.get(f"/admin/txqueue/workflow/{flow.id}/change/")
        self.assertContains(shown, "running")
        self.assertContains(shown, f"/admin/txqueue/task/{extract.id}/change/")
        self.assertContains(shown, "waiting")
        cancelled = self.act("/admin/txqueue/workflow/", "cancel_selected", flow.id)
        self.assertContains(cancelled, "Cancelled 1.")
        self.assertEqual(txqueue.get_workflow(connection, flow.id).state, "cancelled")

    def test_a_schedule_declared_in_code_is_only_paused_here(self) -> None:
        with connection.cursor() as cursor:  # what a worker writes as it starts
            cursor.execute(
                "INSERT INTO txqueue_schedules (name, task, queue, cron, timezone, last_slot,"
                " updated_at) VALUES ('hourly', 'hourly', 'default', '0 * * * *', 'UTC', %s, %s)",
                [0 if connection.vendor == "sqlite" else "2026-01-01T00:00:00Z"] * 2,
            )
        page = self.client.get("/admin/txqueue/schedule/hourly/change/")
        self.assertEqual(page.status_code, 200)
        self.assertNotContains(page, 'name="_save"')
        refused = self.client.post("/admin/txqueue/schedule/hourly/change/", {"cron": "* * * * *"})
        self.assertEqual(refused.status_code, 403)
        self.assertContains(self.act("/admin/txqueue/schedule/", "pause", "hourly"), "Paused 1.")
        self.assertEqual(txqueue.get_schedule(connection, "hourly").cron, "0 * * * *")

    def test_each_action_is_offered_under_a_label_saying_what_it_does(self) -> None:
        """The labels of each list's action menu, as a user reads them there."""
        # A list offers its actions once it has a row.
        txqueue.pause_queue(connection, "mail")
        txqueue.create_schedule(connection, "nightly", cron="0 3 * * *", task="send_report")
        offered = {
            page: re.findall(
                r'<option value="(\w+)">([^<]*)</option>',
                self.client.get(f"/admin/txqueue/{page}/").content.decode(),
            )
            for page in ("task", "queue", "schedule", "workflow")
        }
        self.assertEqual(
            offered,
            {
                "task": [
                    (
                        "retry_selected",
                        "Retry the selected tasks: those that failed or were cancelled run again",
                    ),
                    (
                        "cancel_selected",
                        "Cancel the selected tasks (running ones are asked to stop)",
                    ),
                ],
                "queue": [
                    ("pause", "Pause the selected queues"),
                    ("resume", "Resume the selected queues"),
                ],
                "schedule": [
                    ("pause", "Pause the selected schedules"),
                    ("resume", "Resume the selected schedules (from their next slot)"),
                    ("delete_selected", "Delete selected schedules"),
                ],
                "workflow": [
                    (
                        "cancel_selected",
                        "Cancel the selected workflows: their steps not ended yet are cancelled",
                    ),
                ],
            },
        )

    def test_a_user_who_may_only_look_gets_no_action(self) -> None:
        viewer = User.objects.create_user("viewer", is_staff=True)
        viewer.user_permissions.add(Permission.objects.get(codename="view_task"))
        self.client.force_login(viewer)
        [task_id] = txqueue.enqueue_many(connection, [Task("mail", queue="mail")])
        listed = self.client.get(TASKS)
        self.assertContains(listed, str(task_id))
        self.assertNotContains(listed, "cancel_selected")
        self.act(TASKS, "cancel_selected", task_id)
        self.assertEqual(txqueue.get_task(connection, task_id).state, "pending")
