"""Child process for the quiet-exit test: open a SyncWriter and a SyncReader, queue publishes
without waiting for them (``pub_nowait``), and fall off the end of the script with both open.

    python exit_open.py NSQD_TCP TOPIC COUNT

Interpreter exit closes both gracefully (``atexit``): every queued publish is sent and
acknowledged before the process ends, and nothing is printed on stderr.
"""

from __future__ import annotations

import sys

from nsqclient.sync import SyncReader, SyncWriter


def main() -> None:
    address, topic, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    writer = SyncWriter(nsqd_tcp_addresses=[address])
    reader = SyncReader(topic + "-in", "c", nsqd_tcp_addresses=[address])
    reader.start()
    for i in range(count):
        writer.pub_nowait(topic, b"m%d" % i)
    print("END", flush=True)


main()
