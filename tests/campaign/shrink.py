"""Shrink a misread program: python shrink.py base.jsonl SEED [stream]
Predicate: some phase misread (|diff| > 1 us); with 'stream', some phase read on a stream other
than its truth's (the side-stream misattribution)."""

from __future__ import annotations

import copy
import json
import sys
import tempfile

import campaign

TMP = tempfile.mkdtemp(dir=None)


def strip(prog):
    return [[(n, tid, cur, [op[1:] if isinstance(op[0], int) else op for op in ops], *rest) for n, tid, cur, ops, *rest in cyc]
            for cyc in prog]


def norm(prog):
    return [[tuple(json_t(x) for x in ph) for ph in cyc] for cyc in prog]


def json_t(x):
    if isinstance(x, list) and x and isinstance(x[0], list):
        return [tuple(json_t(y) for y in op) for op in x]
    return x


def bad(prog, say, check_stream, need_stream, cycles=False):
    try:
        diffs = campaign.misread(prog, say, check_stream, TMP, cycles)
    except Exception:
        return False
    if need_stream == "cycle":  # a cycle's GPU time misread
        return any("cyc" in d for d in diffs)
    diffs = [d for d in diffs if "i" in d]
    if need_stream == "around":  # read on side S forked in the phase, with work on C both before the fork and after it
        flat = [ph for cyc in prog for ph in cyc]
        def around(ops, c, s):
            ks = [j for j, op in enumerate(ops) if op[0] in ("k", "g", "cp") and op[1] == c]
            fk = [j for j, op in enumerate(ops) if op[0] == "w" and op[1] == s and op[2] == c]
            return bool(ks and fk and min(ks) < min(fk) and max(ks) > min(fk))
        return any(d["truth_stream"] != d["read_stream"] and around(flat[d["i"]][3], d["truth_stream"], d["read_stream"])
                   for d in diffs if d["i"] < len(flat))
    if need_stream == "joinlater":  # 'around', and S joined into C in a later phase of the same cycle
        flat = [(ci, pi, ph) for ci, cyc in enumerate(prog) for pi, ph in enumerate(cyc)]
        def around(ops, c, s):
            ks = [j for j, op in enumerate(ops) if op[0] in ("k", "g", "cp") and op[1] == c]
            fk = [j for j, op in enumerate(ops) if op[0] == "w" and op[1] == s and op[2] == c]
            return bool(ks and fk and min(ks) < max(fk) and max(ks) > max(fk))
        def later(i, c, s):
            ci, pi, _ = flat[i]
            return any(op[0] == "w" and op[1] == c and op[2] == s for ph in prog[ci][pi + 1:] for op in ph[3])
        return any(d["truth_stream"] != d["read_stream"] and around(flat[d["i"]][2][3], d["truth_stream"], d["read_stream"])
                   and later(d["i"], d["truth_stream"], d["read_stream"]) for d in diffs if d["i"] < len(flat))
    if need_stream == "fwdstream":  # read on side S it forked off C, with a kernel on C after the fork, S joined into C later
        flat = [(ci, pi, ph) for ci, cyc in enumerate(prog) for pi, ph in enumerate(cyc)]
        def shape(i, c, s):
            ops = flat[i][2][3]
            fk = [j for j, op in enumerate(ops) if op[0] == "w" and op[1] == s and op[2] == c]
            ks = [j for j, op in enumerate(ops) if op[0] in ("k", "g") and op[1] == c]
            later = [op for (_, _, ph) in flat[i + 1:] for op in ph[3] if op[0] == "w" and op[1] == c and op[2] == s]
            return bool(fk and ks and max(ks) > min(fk) and later)
        return any(d["truth_stream"] != d["read_stream"] and shape(d["i"], d["truth_stream"], d["read_stream"]) for d in diffs if d["i"] < len(flat))
    if need_stream == "fork":  # read on a side stream the phase itself forked off its current stream
        flat = [ph for cyc in prog for ph in cyc]
        return any(d["truth_stream"] != d["read_stream"] and any(op[0] == "w" and op[1] == d["read_stream"] and op[2] == d["truth_stream"]
                                                                 for op in flat[d["i"]][3]) for d in diffs if d["i"] < len(flat))
    if need_stream:
        return any(d["truth_stream"] != d["read_stream"] for d in diffs)
    return bool(diffs)


def shrink(prog, pred):
    prog = copy.deepcopy(prog)
    changed = True
    while changed:
        changed = False
        # cycles
        for ci in range(len(prog) - 1, -1, -1):
            if len(prog) > 1:
                cand = prog[:ci] + prog[ci + 1:]
                if pred(cand):
                    prog, changed = cand, True
        # phase positions across all cycles
        for pi in range(len(prog[0]) - 1, -1, -1):
            if len(prog[0]) > 1 and all(len(c) == len(prog[0]) for c in prog):
                cand = [c[:pi] + c[pi + 1:] for c in prog]
                if pred(cand):
                    prog, changed = cand, True
        # ops
        for ci in range(len(prog)):
            for pi in range(len(prog[ci])):
                oi = len(prog[ci][pi][3]) - 1
                while oi >= 0:
                    ph = prog[ci][pi]
                    ops = ph[3][:oi] + ph[3][oi + 1:]
                    cand = copy.deepcopy(prog)
                    cand[ci][pi] = (*ph[:3], ops, *ph[4:])
                    if pred(cand):
                        prog, changed = cand, True
                    oi -= 1
        # durations: round / shorten
        for ci in range(len(prog)):
            for pi in range(len(prog[ci])):
                for oi, op in enumerate(prog[ci][pi][3]):
                    for j, v in enumerate(op):
                        if j >= 2 and isinstance(v, int) and not isinstance(v, bool) and v > 1 and op[0] in ("k", "cp", "item", "hcp", "gap"):
                            if op[0] == "hcp" and j != 3:
                                continue
                            if op[0] == "cp" and j == 3:
                                continue
                            for nv in sorted({1, 10, 50, 100, round(v, -2) or 100, v // 2}):
                                if nv >= v:
                                    continue
                                cand = copy.deepcopy(prog)
                                o = list(op)
                                o[j] = nv
                                ph = cand[ci][pi]
                                new_ops = list(ph[3])
                                new_ops[oi] = tuple(o)
                                cand[ci][pi] = (*ph[:3], new_ops, *ph[4:])
                                if pred(cand):
                                    prog, changed = cand, True
                                    break
    return prog


if __name__ == "__main__":
    src, seed = sys.argv[1], int(sys.argv[2])
    need_stream = sys.argv[3] if len(sys.argv) > 3 else False
    rec = [json.loads(l) for l in open(src) if json.loads(l)["seed"] == seed][0]
    say, check, cycles = rec["say"], rec["kind"] == "switch_said" or rec["kw"].get("stream_switch", False), rec.get("cycles", False)
    prog = norm(strip(rec["prog"]))
    pred = lambda p: bad(p, say, check, need_stream, cycles)
    assert pred(prog)
    small = shrink(prog, pred)
    print(repr(small))
    truth, got, warns, ct, cg = campaign.run_prog(small, say, TMP, cycles=True)
    for t, g in zip(truth, got):
        print(t, g, "" if abs(t[2] - g[2]) <= 1 and t[3] == g[3] else "<-- MISREAD")
    if cycles:
        for t, g in zip(ct, cg):
            print("cycle", t, g, "" if abs(t[1] - g[1]) <= 1 else "<-- MISREAD")
