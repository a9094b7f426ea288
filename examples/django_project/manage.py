#!/usr/bin/env python
"""Django's command-line utility for the nsqclient example project.

NSQD_TCP_ADDRESSES=127.0.0.1:4150 python manage.py runserver
NSQD_TCP_ADDRESSES=127.0.0.1:4150 python manage.py consume_events --count 10
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "nsqsite.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
