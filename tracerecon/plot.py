"""Pictures to paste (issue 13): per rank, each phase's CPU timer against its GPU time with the
verdict, and the cycle-by-cycle GPU breakdown; a diff puts two runs side by side. Needs the
``plot`` extra (matplotlib). Colours: the Okabe-Ito palette (colour-blind safe)."""

from __future__ import annotations

import os
import re
import warnings

from tracerecon.analysis.summary import steady_phases, summarize_phases
from tracerecon.errors import plot_extra_missing
from tracerecon.model import Analysis
from tracerecon.json_text import one_line, shown_names
from tracerecon.present import verdict_label

OKABE_ITO = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000"]
CPU_COLOUR, GPU_COLOUR = OKABE_ITO[1], OKABE_ITO[0]
# The phases' colours exclude the CPU and GPU ones, so no colour means two things on one row.
PHASE_COLOURS = OKABE_ITO[2:]
# Past the six colours, each round of them gets a hatch: no two phases of a figure look alike.
PHASE_HATCHES = ["", "///", "...", "xxx", "\\\\\\", "ooo"]
VERDICT_HATCH = {"over": "//", "under": "\\\\", "agree": "", "no_gpu_work": ".."}


# Phase names longer than this are shortened in the middle on axes and legends (a full name of
# 80 characters pushed both panels into a sliver); the report and exports keep them whole.
NAME_CHARS = 24


def _pyplot():
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only: no display over ssh
        import matplotlib.pyplot as plt
    except ImportError:
        raise plot_extra_missing() from None
    return plt


def plot_runs(runs: list[tuple[str, Analysis]], out_file: str | os.PathLike) -> tuple[str, ...]:
    """One row per (run, rank): left, CPU ms against GPU ms per phase (medians; the bar's hatch
    says the verdict); right, each cycle's GPU ms stacked by phase; each column on one scale
    across rows. SVG or PNG by the suffix. Returns what the caller should say (warnings)."""
    plt = _pyplot()
    # Names and labels are the trace's text, drawn as written: no mathtext ('price$x$' drawn
    # as 'price' and an italic x; an unknown '\\cmd' between dollars stopped the plot).
    with plt.rc_context({"text.parse_math": False}), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _draw_runs(plt, runs, out_file)
    # matplotlib's own warnings (a glyph its font lacks, once per glyph and drawing) as one line
    missing = sorted({one_line(chr(int(m.group(1)))) for w in caught if (m := _NO_GLYPH.search(str(w.message)))})
    said = (f"{len(missing)} character(s) of the names are not in the plot's font and are drawn as boxes "
            f"({' '.join(missing[:8])}{' ...' if len(missing) > 8 else ''})",) if missing else ()
    others = tuple(dict.fromkeys(one_line(str(w.message)) for w in caught if not _NO_GLYPH.search(str(w.message))))
    return said + others


_NO_GLYPH = re.compile(r"Glyph (\d+) \(.*\) missing from font")


def _draw_runs(plt, runs: list[tuple[str, Analysis]], out_file: str | os.PathLike) -> None:
    from matplotlib.ticker import MaxNLocator
    rows = [(label, a, r, summarize_phases(r.phases, a.config.labels(), r.cycles)) for label, a in runs for r in a.ranks]
    # One drawn name per phase name across every panel (two names that cut alike are told apart
    # the same way in every run and rank, a run lacking one of them included).
    every = list(dict.fromkeys(p.phase for *_, phases in rows for p in phases))
    drawn_as = dict(zip(every, shown_names(every, NAME_CHARS)))
    # and one look per phase name across every panel: verify is the same colour in A and B.
    look = {name: _phase_look(i) for i, name in enumerate(every)}
    # One scale per column for every run and rank: A and B (and ranks) read against each other.
    # The narrow panel widens with its phases past four (six slanted names overlapped there).
    extra = max([len(phases) for *_, phases in rows] + [4]) - 4
    fig, axes = plt.subplots(len(rows), 2, figsize=(13 + 0.8 * extra, 3.6 * len(rows)), squeeze=False, sharey="col",
                             gridspec_kw={"width_ratios": [1 + 0.25 * extra, 2]})
    for (label, a, r, phases), (ax_bar, ax_cyc) in zip(rows, axes):
        names = [p.phase for p in phases]
        x = range(len(phases))
        cpu = [p.cpu_ms_median or 0 for p in phases]
        gpu = [p.gpu_ms_median or 0 for p in phases]
        ax_bar.bar([i - 0.2 for i in x], cpu, width=0.4, color=CPU_COLOUR, label="CPU timer (ms)")
        bars = ax_bar.bar([i + 0.2 for i in x], gpu, width=0.4, color=GPU_COLOUR, label="GPU (CUDA-event) ms")
        # Upright where the bars are many: side by side, "no_gpu_work 38/39" ran into its neighbours.
        upright = {"rotation": 90} if len(phases) > 4 else {}
        for b, p in zip(bars, phases):
            b.set_hatch(VERDICT_HATCH.get(p.dominant_verdict, ""))
            # the report's words: "under 18/34" where the cycles disagree
            ax_bar.annotate(verdict_label(p), (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=8, **upright)
        ax_bar.set_xticks(list(x), [drawn_as[n] for n in names], rotation=15 if len(names) <= 3 else 35, ha="right", rotation_mode="anchor")
        ax_bar.set_ylabel("median ms per cycle")
        # The narrow panel names the side (A, B) only: a run's full name (its files) is the wide
        # panel's title, where it fits; centred over the narrow one it ran off the figure.
        side = shown_names([label.split(" (", 1)[0]], 16)[0] + " " if label else ""  # "A (files)": "A "
        ax_bar.set_title(f"{side}rank {r.rank}: CPU timer vs GPU time\n(hatch = verdict)", fontsize=10)
        if names:
            # in the headroom above the bars (set below), never over a bar or its verdict
            ax_bar.legend(fontsize=8, loc="upper left")  # (two columns ran past a narrow panel)
        ph = steady_phases(r.phases, r.cycles).to_pydict()
        cycles = sorted({c for c in ph["cycle"] if c is not None})
        bottom = {c: 0.0 for c in cycles}
        for name, drawn in ((n, drawn_as[n]) for n in names):
            vals = {c: 0.0 for c in cycles}
            for c, n, g in zip(ph["cycle"], ph["phase"], ph["gpu_ns"]):
                if c is not None and n == name and g is not None:
                    vals[c] += g / 1e6
            ax_cyc.bar(cycles, [vals[c] for c in cycles], bottom=[bottom[c] for c in cycles], label=drawn, width=0.85, **look[name])
            for c in cycles:
                bottom[c] += vals[c]
        # (the report's cycles: those it leaves out are said, not silently missing bars)
        left = r.cycles.num_rows - len(cycles)
        ax_cyc.set_xlabel("cycle" + (f" ({left} left out, as in the report: warm-up, incomplete or empty)" if left > 0 else ""))
        ax_cyc.xaxis.set_major_locator(MaxNLocator(integer=True))  # cycles are whole numbers, even one alone
        ax_cyc.set_ylabel("GPU ms")
        ax_cyc.set_title(f"{shown_names([label], 70)[0] + ' ' if label else ''}rank {r.rank}: GPU time per cycle, by phase", fontsize=10)
        if names:
            # beside the bars, never over them
            ax_cyc.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
        else:  # (a legend of nothing is a warning from matplotlib)
            for ax in (ax_bar, ax_cyc):
                ax.text(0.5, 0.5, "no phase ranges in this rank (see the warnings)", ha="center", va="center", transform=ax.transAxes)
                ax.tick_params(labelleft=False, labelbottom=False, left=False, bottom=False)  # (a scale of nothing)
    if rows:  # headroom for the legend above the tallest bar and its verdict (one scale: every row)
        # From 0: a time is never below it (an empty panel's axis went down to -0.04).
        high = axes[0][0].get_ylim()[1] if any(phases for *_, phases in rows) else 0
        axes[0][0].set_ylim(0, high * 1.45 if high > 0 else 1)
        axes[0][1].set_ylim(bottom=0)
    fig.tight_layout()
    # Drawn beside the output and renamed over it once whole: a failure leaves no half a picture.
    out = os.fspath(out_file)
    tmp = os.path.join(os.path.dirname(out), f".{os.path.basename(out)}.tmp-{os.getpid()}")
    try:
        fig.savefig(tmp, format=os.path.basename(out).rsplit(".", 1)[-1].lower())  # (not splitext: ".svg" alone has no extension there)
        os.replace(tmp, out)
    except OSError as exc:
        from tracerecon.errors import TraceReconError

        raise TraceReconError(f"{out_file}: cannot write ({exc.strerror or exc})") from None
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)


def _phase_look(i: int) -> dict:
    """The ``i``-th phase's colour, and past the palette's end a hatch (``PHASE_HATCHES``)."""
    look = {"color": PHASE_COLOURS[i % len(PHASE_COLOURS)]}
    hatch = PHASE_HATCHES[(i // len(PHASE_COLOURS)) % len(PHASE_HATCHES)]
    if hatch:
        look.update(hatch=hatch, edgecolor="white", linewidth=0)
    return look
