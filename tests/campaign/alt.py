"""For each misread phase read on another stream: the alternative program with that phase's
current stream set to the read one; is its trace identical, and does the reading match its truth?"""
import json, sqlite3, tempfile, sys, copy
import campaign, shrink
from engine_programs import simulate

T = tempfile.mkdtemp(dir=None)

def dump(prog, say):
    t, names, truth = simulate(prog, say_streams=say)
    p = f"{T}/d.sqlite"
    import os
    if os.path.exists(p): os.unlink(p)
    t.write(p)
    con = sqlite3.connect(p)
    out = []
    for (tab,) in con.execute("select name from sqlite_master where type='table' order by name"):
        out.append((tab, sorted(map(repr, con.execute(f"select * from {tab}").fetchall()))))
    return out

def alt_check(prog, say, diffs):
    flat_idx = [(ci, pi) for ci, c in enumerate(prog) for pi in range(len(c)) if not (c[pi][0] == "" or c[pi][0].startswith("~"))]  # (not code between phases)
    alt = copy.deepcopy(prog)
    for d in diffs:
        if d.get("i") is not None and d["truth_stream"] != d["read_stream"]:
            ci, pi = flat_idx[d["i"]]
            ph = alt[ci][pi]
            alt[ci][pi] = (ph[0], ph[1], d["read_stream"], ph[3], *ph[4:])
    same = dump(prog, say) == dump(alt, say)
    tr, got, _ = campaign.run_prog(alt, say, T)
    return same, campaign.compare(tr, got, False)

if __name__ == "__main__":
    for l in open(sys.argv[1]):
        d = json.loads(l)
        if "diffs" not in d: continue
        prog = shrink.norm(shrink.strip(d['prog']))
        same, diffs = alt_check(prog, d['say'], d['diffs'])
        print(d['seed'], d['kind'], 'identical trace:', same, 'alt misreads:', diffs)
