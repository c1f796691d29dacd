"""A stream as one int64: (process, device, stream) packed into a key, and dense ids over
several columns, which the stream clock, the stream choice and the boundaries share."""

from __future__ import annotations

import numpy as np


def dense_ids(*columns: np.ndarray) -> np.ndarray:
    """Per row of the equally long ``columns``, a number shared by exactly the rows that agree
    in every column (0, 1, ... in the order of the rows' sorted values)."""
    if len(columns[0]) == 0:
        return np.zeros(0, np.int64)
    order = np.lexsort(columns[::-1])
    new = np.zeros(len(order), dtype=bool)
    new[0] = True
    for c in columns:
        sc = c[order]
        new[1:] |= sc[1:] != sc[:-1]
    ids = np.empty(len(order), np.int64)
    ids[order] = np.cumsum(new) - 1
    return ids


def device_of_keys(keys: np.ndarray, row: np.ndarray) -> np.ndarray:
    """Device id of each stream row (rows >= 0)."""
    return unpack_keys(keys[row])[1]


def stream_of_keys(keys: np.ndarray, row: np.ndarray) -> np.ndarray:
    """Stream id of each stream row (rows >= 0)."""
    return unpack_keys(keys[row])[2]


def pack_keys(pid: np.ndarray, dev: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """One int64 key per (pid, device, stream): pid < 2**24 (nsys global ids), device < 2**8,
    stream ids < 2**31, in that order of significance (keys sort by process, then device)."""
    return (np.asarray(pid, np.int64) << 39) | ((np.asarray(dev, np.int64) & 0xFF) << 31) | (np.asarray(stream, np.int64) & 0x7FFFFFFF)


def unpack_keys(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``pack_keys`` undone: (pid, device, stream) of each key."""
    keys = np.asarray(keys, np.int64)
    return keys >> 39, (keys >> 31) & 0xFF, keys & 0x7FFFFFFF


def gpu_keys(keys: np.ndarray) -> np.ndarray:
    """Per key of ``pack_keys``: one int64 shared by exactly the streams of its process's device
    (pid << 8 | device)."""
    return np.asarray(keys, np.int64) >> 31


def stream_tracks(pid: np.ndarray, dev: np.ndarray, stream: np.ndarray, named: bool | None = None) -> tuple[np.ndarray, list[tuple[int | None, int, int]]]:
    """The GPU streams of one rank's ops as its timelines draw them: per row, the index of its
    stream in the returned (pid, device, stream) list, sorted by device, stream id, then pid
    (a device or stream of -1: none). A stream is a (process, device, stream id) triple, since every
    CUDA context numbers its own streams: two processes of one rank each have a stream 7 on
    device 0. The pid is None in every triple where the ops are all one process's, whose
    stream names need no pid (``named``: whether to give it, where the rows are only some of
    the rank's ops)."""
    if len(pid) == 0:
        return np.zeros(0, np.int64), []
    ids = dense_ids(dev, stream, pid)
    first = np.unique(ids, return_index=True)[1]  # (each id's first row)
    if named is None:
        named = several_processes(pid)
    return ids, [(int(pid[r]) if named else None, int(dev[r]), int(stream[r])) for r in first.tolist()]


def several_processes(pid: np.ndarray) -> bool:
    """Whether ops of these pids (int64, nulls filled alike) are more than one process's: then a
    stream's name gives its pid (``stream_tracks``)."""
    return len(pid) > 0 and not bool((pid == pid[0]).all())


def stream_label(pid: int | None, dev: int, stream: int) -> str:
    """A ``stream_tracks`` triple as a lane reads it: ``GPU0 stream 7``, ``GPU0 stream 7 pid
    100`` where the rank's ops are several processes', ``GPU0 ops without a stream``."""
    where = f"GPU{dev}" if dev >= 0 else "GPU ?"
    return (f"{where} stream {stream}" if stream >= 0 else f"{where} ops without a stream") + (f" pid {pid}" if pid is not None else "")
