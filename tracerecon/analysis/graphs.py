"""Node-mode CUDA-graph launches whose nodes ran on other streams than the launch: where they
count (on the launch's stream, which waits for the whole graph)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from tracerecon.analysis.columns import graph_node_launches, is_graph_launch
from tracerecon.analysis.projection import int64s
from tracerecon.analysis.stream_keys import pack_keys


def graph_branches(ops: pa.Table, named_keys: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The nodes of node-mode CUDA-graph launches (every node kernel shares its launch call's
    correlation id) that ran on another stream than their launch: (their rows of ``ops``,
    sorted; the packed (pid, device, stream) key of their launch's stream). A capture that
    forked runs its branches on streams of the graph's own (a real H200 trace: 8 nodes on the
    launch stream, 1 on stream 142), and work queued on the launch stream after the launch
    waits for the whole graph: in the stream clock, and in choosing a phase's stream, they
    count on the launch stream. A launch's stream is one of its nodes' streams that the process
    also ran work on outside graphs or that an event record or stream wait names
    (``named_keys``, packed: a branch's stream is the graph's own, which the program never
    sees), else the one its first node ran on (the capture's origin stream, where its first
    work was captured: a capture whose first op forked has root nodes on both, and either may
    start first); ties: the stream with more of its nodes, whatever the branches hold (SGLang's
    routed experts on an alternate stream)."""
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if ops.num_rows == 0:
        return none
    sel, launch_id = graph_node_launches(ops)
    if len(sel) == 0:
        return none
    key = pack_keys(int64s(ops["pid"])[sel], int64s(ops["device_id"], -1)[sel], int64s(ops["stream_id"], -1)[sel])
    if len(np.unique(key)) == 1:
        return none
    # Nodes per (launch, stream), for ties between streams whose nodes start together.
    by_pair = np.lexsort((key, launch_id))
    new_pair = np.r_[True, (launch_id[by_pair][1:] != launch_id[by_pair][:-1]) | (key[by_pair][1:] != key[by_pair][:-1])]
    pair = np.cumsum(new_pair) - 1
    n_on = np.empty(len(sel), dtype=np.int64)
    n_on[by_pair] = np.bincount(pair)[pair]
    outside = ~is_graph_launch(ops)
    seen_keys = np.unique(np.concatenate([pack_keys(int64s(ops["pid"])[outside], int64s(ops["device_id"], -1)[outside], int64s(ops["stream_id"], -1)[outside]),
                                          np.asarray(named_keys if named_keys is not None else [], dtype=np.int64)]))
    graph_only = ~np.isin(key, seen_keys)
    # by launch, then a stream the program also uses, then first start, then more nodes
    order = np.lexsort((-n_on, int64s(ops["start_ns"])[sel], graph_only, launch_id))
    ids = launch_id[order]
    first = np.r_[True, ids[1:] != ids[:-1]]
    launch_key = np.empty(len(sel), dtype=np.int64)
    launch_key[order] = np.repeat(key[order][first], np.diff(np.r_[np.flatnonzero(first), len(order)]))
    off = launch_key != key
    return sel[off], launch_key[off]

