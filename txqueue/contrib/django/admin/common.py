"""What the admin's pages share: a capped count, the database connection every change
goes through, the user a change is by, and read-only pages."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.paginator import Paginator
from django.db import connections, transaction
from django.utils.functional import cached_property
from django.utils.html import format_html

from ....errors import (
    ConfigError,
    ScheduleNotFoundError,
    TaskNotFoundError,
    TaskStateError,
    ValidationError,
)

COUNT_CAP = 10_000
"""Rows a list counts, and so pages through, at most: past them, the filters narrow it."""
RECENT = 10_000
"""The newest tasks whose queues and names the filters offer: reading every row's would
scan the table on each page."""
Html = Any  # Django's SafeString: Django ships no types
MANY = 1_000
"""Tasks or workflows an action changes at most: more is a bulk operation's
(``txqueue bulk``), in batches of its own."""


class CappedPaginator(Paginator):
    """Counts up to ``COUNT_CAP`` rows, so that a list of millions of tasks pages without
    counting them all."""

    @cached_property
    def count(self) -> int:
        return int(self.object_list[:COUNT_CAP].count())


@contextmanager
def txqueue_connection(db: str) -> Iterator[Any]:
    """The connection of Django's database ``db``, in a transaction of its own: a change's
    wake-ups leave after its commit."""
    with transaction.atomic(using=db):
        yield connections[db]


def by_user(request: Any) -> str:
    return f"admin:{request.user.get_username()}"


def each(
    model_admin: admin.ModelAdmin,
    request: Any,
    queryset: Any,
    call: Callable[[Any, Any], object],
    done: str,
) -> None:
    """``call(conn, pk)`` for each of the first ``MANY`` rows selected, one transaction
    each; those that moved on meanwhile are counted, not failed."""
    changed = passed = 0
    for pk in queryset.values_list("pk", flat=True)[:MANY]:
        try:
            with txqueue_connection(queryset.db) as conn:
                call(conn, pk)
        except (TaskStateError, TaskNotFoundError, ScheduleNotFoundError):
            passed += 1
            continue
        changed += 1
    note = f" ({passed} could not be: they had moved on)" if passed else ""
    model_admin.message_user(request, f"{done} {changed}{note}.", messages.SUCCESS)


def field_errors(form: forms.Form, call: Callable[[], object]) -> None:
    """``call()``; txqueue's refusal shown on the field it names."""
    try:
        call()
    except ValidationError as exc:
        message = str(exc).removeprefix(f"{exc.field}: ")
        form.add_error(exc.field if exc.field in form.fields else None, message)
    except ConfigError as exc:  # the periodic extra missing
        form.add_error(None, str(exc))


class ReadOnly(admin.ModelAdmin):
    """Rows to look at and act on: never added, edited by form or deleted here."""

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def get_readonly_fields(self, request: Any, obj: Any = None) -> Any:
        return self.fields or ()

    def get_actions(self, request: Any) -> Any:
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions

    def change_view(
        self, request: Any, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> Any:
        hidden = {"show_save": False, "show_save_and_continue": False}
        hidden |= {"show_save_and_add_another": False, "show_delete": False}
        return super().change_view(
            request, object_id, form_url, {**(extra_context or {}), **hidden}
        )


def pretty(value: Any) -> Html:
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, sort_keys=True))
