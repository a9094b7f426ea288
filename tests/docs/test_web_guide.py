"""docs/guides/web.md's Django view works in a default Django project.

The page's Django block is two files of a project, so test_examples.py skips it. Here they are
written out as an app (``myapp/nsq.py``, ``myapp/views.py``) and served by Django with the CSRF
middleware a default ``startproject`` has, checking CSRF as a real request would be
(``Client(enforce_csrf_checks=True)``): a POST without a token must reach nsqd, not get a 403.
Django runs in a child process: its settings are global to a process.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nsqclient.testing.backends import NsqdServer

from .test_examples import EXAMPLES

_DRIVER = textwrap.dedent(
    """
    import json, sys
    import django
    from django.conf import settings
    from django.urls import path

    def urls():
        from myapp.views import create_order
        return [path("orders", create_order)]

    settings.configure(
        DEBUG=False,
        ALLOWED_HOSTS=["testserver"],
        SECRET_KEY="test",
        ROOT_URLCONF=__name__,
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth"],
        MIDDLEWARE=[  # startproject's, without the ones that need a database
            "django.middleware.security.SecurityMiddleware",
            "django.middleware.common.CommonMiddleware",
            "django.middleware.csrf.CsrfViewMiddleware",
            "django.middleware.clickjacking.XFrameOptionsMiddleware",
        ],
        NSQD_TCP_ADDRESSES=[sys.argv[1]],
    )
    django.setup()
    urlpatterns = urls()

    from django.test import Client
    from myapp.nsq import get_writer

    client = Client(enforce_csrf_checks=True)
    reply = client.post("/orders", data=b'{"id": 1}', content_type="application/json")
    get_writer().close()
    print(json.dumps({"status": reply.status_code, "body": reply.content.decode()}))
    """
)


def _django_block() -> str:
    [block] = [e for e in EXAMPLES if e.page == "docs/guides/web.md" and "django" in e.source]
    return block.source


@pytest.mark.timeout(60)
def test_the_django_view_passes_the_csrf_check_and_publishes(
    nsqd: NsqdServer, tmp_path: Path
) -> None:
    nsq_py, views_py = re.split(r"^# myapp/views\.py\n", _django_block(), flags=re.M)
    app = tmp_path / "myapp"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "nsq.py").write_text(nsq_py)
    (app / "views.py").write_text(views_py)
    (tmp_path / "driver.py").write_text(_DRIVER)
    done = subprocess.run(
        [sys.executable, "driver.py", nsqd.tcp_address],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=45,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    reply = json.loads(done.stdout.strip().splitlines()[-1])
    assert reply["status"] == 202, reply  # 403 without @csrf_exempt
    [topic] = nsqd.stats(topic="orders")["topics"]
    assert topic["message_count"] == 1
