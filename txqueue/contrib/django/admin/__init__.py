"""txqueue in the Django admin: tasks (filtered by state, queue and name, with their
history; retry and cancel), queues (pause, resume, limits), schedules (both kinds; make,
change, pause, resume and delete those made at run time) and workflows (their steps;
cancel). Django loads this package when ``django.contrib.admin`` is installed.

Pages read the project's database through the unmanaged models; every change goes
through txqueue's own functions on that database's connection, in a transaction of its
own, and a task's history names the admin user (``by="admin:<username>"``).
"""

from . import queues, schedules, tasks, workflows

__all__ = ["queues", "schedules", "tasks", "workflows"]
