"""Child process for the Ctrl-C and exit tests: consume, FIN some messages, hold the others.

    python hold_messages.py MODE NSQD_TCP TOPIC CHANNEL FIN_COUNT

Prints ``READY <held>`` once it holds at least one unanswered message after FIN'ing
``FIN_COUNT``. MODE ``interrupt``: keep iterating (blocked in the reader) until SIGINT arrives.
MODE ``interrupt-run``: the same with ``reader.run(handler, threads=2)`` in the main thread.
MODE ``exit``: fall off the end of the script without closing anything (the interpreter-exit
path). MODE ``exit-run``: the same with ``run()`` workers still inside their handlers.
"""

from __future__ import annotations

import signal
import sys
import threading

from nsqclient.sync import SyncReader, SyncWriter


def main() -> None:
    mode, address, topic, channel, fin_count = sys.argv[1:6]
    # Ctrl-C as a terminal delivers it, even when started from a shell's background job, which
    # starts its commands with SIGINT ignored (Python then installs no handler for it)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    to_fin = int(fin_count)
    # an open writer too, never closed: interpreter exit must close it without hanging
    writer = SyncWriter(nsqd_tcp_addresses=[address])
    writer.pub(topic + "-side", b"side")
    reader = SyncReader(topic, channel, nsqd_tcp_addresses=[address], max_in_flight=10)
    if mode == "interrupt-run":
        import time

        first = threading.Event()

        def slow(msg: object) -> None:
            if not first.is_set():
                first.set()
                print("READY 1", flush=True)
            time.sleep(0.3)  # work in progress when Ctrl-C lands: it finishes, then FIN

        reader.run(slow, threads=2)  # in the main thread: SIGINT lands here
        return
    if mode == "exit-run":
        release = threading.Event()
        started = threading.Semaphore(0)

        def handler(msg: object) -> None:
            started.release()
            release.wait()  # never set: the handler is still running at exit

        worker = threading.Thread(target=reader.run, args=(handler,), kwargs={"threads": 2})
        worker.daemon = True
        worker.start()
        started.acquire()
        started.acquire()
        print("READY 2", flush=True)
        return
    held = []
    finished = 0
    for msg in reader:
        if finished < to_fin:
            msg.fin()
            finished += 1
            continue
        held.append(msg)
        if len(held) == 1:
            print(f"READY {len(held)}", flush=True)
            if mode == "exit":
                return  # reader and writer left open on purpose
    # MODE interrupt never gets here: SIGINT lands while the loop waits for more


if __name__ == "__main__":
    main()
