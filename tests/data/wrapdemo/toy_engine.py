"""A tiny engine that knows nothing of tracerecon: `run --wrap` must give it phase ranges."""

import time


class Worker:
    def draft(self):
        time.sleep(0.002)

    def verify(self):
        time.sleep(0.003)


def main(cycles=3):
    w = Worker()
    for _ in range(cycles):
        w.draft()
        w.verify()
