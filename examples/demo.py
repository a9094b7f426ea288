"""Placeholder demo: publish three messages to nsqd over HTTP and show them in ``/stats``.

Run by ``bash test_service/demo.sh``, which starts a local cluster and puts its addresses in the
environment (``NSQD_HTTP_ADDRESSES``, ...). This will be replaced by a demo of the real client.
"""

from __future__ import annotations

import os
import sys

import httpx

TOPIC = "nsqclient-demo"


def main() -> int:
    addresses = os.environ.get("NSQD_HTTP_ADDRESSES", "127.0.0.1:4151").split(",")
    nsqd = addresses[0]
    with httpx.Client(base_url=f"http://{nsqd}", timeout=5.0, trust_env=False) as http:
        for i in range(1, 4):
            body = f"hello #{i} from nsqclient's demo".encode()
            reply = http.post("/pub", params={"topic": TOPIC}, content=body)
            reply.raise_for_status()
            print(f"published to {nsqd}: {body.decode()!r} -> {reply.text}")
        stats = http.get("/stats", params={"format": "json", "topic": TOPIC}).json()
    for topic in stats["topics"]:
        print(
            f"/stats: topic {topic['topic_name']!r}: {topic['message_count']} published, "
            f"{topic['depth']} waiting for a consumer"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
