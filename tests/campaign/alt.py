"""For a misread program: the alternative program with every phase read on another stream set to
the read one (not only the misread phases: a neighbour's stream decides whether code between
two phases queued work on either's stream, so a phase read right on its own stream may still be
misread through a neighbour read on another, whose own time agrees); is its trace identical,
and does the reading (phases and, with ``cycles``, cycles) match its truth?"""
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

def alt_check(prog, say, diffs=None, cycles=False, keep_said=False):
    """``diffs`` is not needed: every phase read on another stream is moved to it. ``keep_said``
    (with ``say``): a phase a launcher thread launches keeps the stream its range's thread says
    (``simulate``'s sixth element: the launcher's current stream is then its own, the read one,
    while the loop's stays the one it says), so the marks and said events do not move."""
    flat_idx = [(ci, pi) for ci, c in enumerate(prog) for pi in range(len(c)) if not (c[pi][0] == "" or c[pi][0].startswith("~"))]  # (not code between phases)
    tr, got, _ = campaign.run_prog(prog, say, T)
    alt = copy.deepcopy(prog)
    for i, ((c, n, _, s), (gc, gn, _, gs)) in enumerate(zip(tr, got)):
        if (gc, gn) == (c, n) and gs != s and gs >= 0:
            ci, pi = flat_idx[i]
            ph = alt[ci][pi]
            if keep_said and say and len(ph) > 4:
                alt[ci][pi] = (ph[0], ph[1], gs, ph[3], ph[4], ph[5] if len(ph) > 5 else ph[2])
            else:
                alt[ci][pi] = (ph[0], ph[1], gs, ph[3], *ph[4:])
    same = dump(prog, say) == dump(alt, say)
    if cycles:
        tr, got, _, ct, cg = campaign.run_prog(alt, say, T, cycles=True)
        return same, campaign.compare(tr, got, False) + campaign.compare_cycles(ct, cg)
    tr, got, _ = campaign.run_prog(alt, say, T)
    return same, campaign.compare(tr, got, False)

if __name__ == "__main__":
    for l in open(sys.argv[1]):
        d = json.loads(l)
        if "diffs" not in d: continue
        prog = shrink.norm(shrink.strip(d['prog']))
        same, diffs = alt_check(prog, d['say'], d['diffs'], d.get('cycles', False))
        print(d['seed'], d['kind'], d['kw'], 'say' if d['say'] else '', 'identical trace:', same, 'alt misreads:', diffs)
        if d['say'] and not (same and not diffs):  # the launcher's current stream its own, the loop's said one kept
            same, diffs = alt_check(prog, d['say'], d['diffs'], d.get('cycles', False), keep_said=True)
            print(d['seed'], '  keep_said: identical trace:', same, 'alt misreads:', diffs)
