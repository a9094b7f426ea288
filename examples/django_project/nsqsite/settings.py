"""Settings of the example project: no database, one app (``events``), NSQ from the environment."""

from __future__ import annotations

import os

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
INSTALLED_APPS = ["events"]
MIDDLEWARE: list[str] = []
ROOT_URLCONF = "nsqsite.urls"
WSGI_APPLICATION = "nsqsite.wsgi.application"
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True

# where events go: nsqd TCP addresses (comma-separated) and the topic
NSQD_TCP_ADDRESSES = os.environ.get("NSQD_TCP_ADDRESSES", "127.0.0.1:4150").split(",")
NSQ_TOPIC = os.environ.get("NSQ_TOPIC", "django-events")
