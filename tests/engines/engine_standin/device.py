"""The stand-ins' device: on ``cpu`` work is a sleep and values are plain lists; on ``cuda``
(torch with CUDA) work is a chain of matmuls queued on the current stream, values live on the
GPU, and reading one needs the engine's own non-blocking copy plus an event wait, as in the
real engines (the CPU runs one batch ahead of the GPU)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import time

ACCEPT_LOG_ENV = "STANDIN_ACCEPT_LOG"  # JSONL file: {"engine", "step", "accepted"} per step


class DeviceValue:
    """A value on the device: readable only through ``Device.copy_to_cpu`` + ``Pending.wait``."""

    def __init__(self, payload):
        self._payload = payload

    def tolist(self):
        raise RuntimeError("a device value is read on the CPU only after copy_to_cpu() and wait()")


class Pending:
    def __init__(self, read):
        self._read = read

    def wait(self) -> list:
        return self._read()


class CpuDevice:
    name = "cpu"

    def __init__(self, seed: int = 0) -> None:
        self.rng = random.Random(seed)

    def work(self, ms: float) -> None:
        time.sleep(ms / 1000.0)

    def randint(self, n: int, high: int) -> DeviceValue:
        """``n`` values in [0, high], computed "on the device"."""
        return DeviceValue([self.rng.randint(0, high) for _ in range(n)])

    def add(self, value: DeviceValue, k: int) -> DeviceValue:
        return DeviceValue([x + k for x in value._payload])

    def full(self, rows: int, cols: int, fill: int) -> DeviceValue:
        return DeviceValue([[fill] * cols for _ in range(rows)])

    def copy_to_cpu(self, value: DeviceValue) -> Pending:
        data = list(value._payload)
        return Pending(lambda: data)

    @contextlib.contextmanager
    def side_stream(self):
        yield

    def join_side_stream(self) -> None:
        pass

    def synchronize(self) -> None:
        pass


class CudaDevice:
    name = "cuda"

    def __init__(self, seed: int = 0) -> None:
        import torch

        self.torch = torch
        self.dev = torch.device("cuda")
        self.gen = torch.Generator(device=self.dev)
        self.gen.manual_seed(seed)
        self.a = torch.randn(2048, 2048, device=self.dev)
        self.b = torch.randn(2048, 2048, device=self.dev)
        self.side = torch.cuda.Stream()
        # Warm-up and calibration (synchronizes once, before any cycle).
        torch.mm(self.a, self.b)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(20):
            torch.mm(self.a, self.b)
        torch.cuda.synchronize()
        self.per_ms = max(1, int(20 / ((time.perf_counter() - t0) * 1000.0)))

    def work(self, ms: float) -> None:
        c = self.a
        for _ in range(max(1, int(ms * self.per_ms))):
            c = self.torch.mm(c, self.b)
            c = c * 1e-3

    def randint(self, n: int, high: int) -> DeviceValue:
        return DeviceValue(self.torch.randint(0, high + 1, (n,), device=self.dev, generator=self.gen))

    def add(self, value: DeviceValue, k: int) -> DeviceValue:
        return DeviceValue(value._payload + k)

    def full(self, rows: int, cols: int, fill: int) -> DeviceValue:
        return DeviceValue(self.torch.full((rows, cols), fill, device=self.dev))

    def copy_to_cpu(self, value: DeviceValue) -> Pending:
        host = self.torch.empty(value._payload.shape, dtype=value._payload.dtype, pin_memory=True)
        host.copy_(value._payload, non_blocking=True)
        ev = self.torch.cuda.Event()
        ev.record()

        def read():
            ev.synchronize()
            return host.tolist()

        return Pending(read)

    @contextlib.contextmanager
    def side_stream(self):
        self.side.wait_stream(self.torch.cuda.current_stream())
        with self.torch.cuda.stream(self.side):
            yield

    def join_side_stream(self) -> None:
        self.torch.cuda.current_stream().wait_stream(self.side)

    def synchronize(self) -> None:
        self.torch.cuda.synchronize()


def make_device(name: str, seed: int = 0):
    if name == "cuda":
        return CudaDevice(seed)
    if name != "cpu":
        raise SystemExit(f"unknown device {name!r}: cpu or cuda")
    return CpuDevice(seed)


def log_accepted(engine: str, step: int, accepted: int) -> None:
    """The engine's own log of the tokens a step accepted (the test's ground truth)."""
    path = os.environ.get(ACCEPT_LOG_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"engine": engine, "step": step, "accepted": accepted}) + "\n")
