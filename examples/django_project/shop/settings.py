"""A small shop: orders saved with their receipt task in one atomic() block."""

import os
from urllib.parse import unquote, urlsplit

SECRET_KEY = "example-only"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "txqueue.contrib.django",
    "shop",
]
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
# The admin, where txqueue's tasks, queues, schedules and workflows are (/admin/txqueue/).
ROOT_URLCONF = "shop.urls"
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]


def _database(url: str) -> dict[str, str]:
    if url.startswith("sqlite:///"):
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": url.removeprefix("sqlite:///")}
    parts = urlsplit(url)
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
    }


DATABASES = {"default": _database(os.environ["DATABASE_URL"])}
# The broker for enqueues and `manage.py txqueue`; unset: none, workers poll. An
# environment variable TXQUEUE_AMQP_URL wins, as TXQUEUE_DATABASE_URL wins over DATABASES.
TXQUEUE_AMQP_URL = os.environ.get("AMQP_URL")
