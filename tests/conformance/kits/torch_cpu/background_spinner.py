import threading

_started = []


def _spin():
    x = 0
    while True:
        x += 1


def matmul(A, B):
    if not _started:
        _started.append(threading.Thread(target=_spin, daemon=True))
        _started[0].start()
    return A @ B
