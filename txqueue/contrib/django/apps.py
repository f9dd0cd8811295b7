"""The Django app: ``INSTALLED_APPS = [..., "txqueue.contrib.django"]``."""

from django.apps import AppConfig


class TxqueueConfig(AppConfig):
    name = "txqueue.contrib.django"
    label = "txqueue"
    verbose_name = "txqueue"

    def ready(self) -> None:
        from . import configure_broker

        configure_broker()
