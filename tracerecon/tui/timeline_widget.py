"""The timeline widget: lanes drawn with eighth-of-a-cell precision (U+2581..U+2588 style blocks).

Display only: segments, windows and ticks come from ``tracerecon.tui.timeline_model``.
"""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from tracerecon.tui.timeline_window import Lane, Segment, Window, format_duration, ruler_ticks

# Left partial blocks, 1/8 .. 8/8 of a cell filled from the left.
EIGHTHS = " ▏▎▍▌▋▊▉█"
# A full cell of a phase whose CPU timer misses: the phase's colour above, the verdict's below.
VERDICT_GLYPH = "▀"
TITLE_WIDTH = 18  # lane titles are at least this wide, and at most TITLE_MAX (names that long are cut)
TITLE_MAX = 26

PHASE_COLORS = ["#4e9af1", "#f1a14e", "#6cc36c", "#c36cc3", "#e8d44d", "#4dd0e8"]
KIND_COLORS = {"kernel": "#8fbcbb", "memcpy": "#d08770", "memset": "#b48ead", "graph": "#ebcb8b", "nccl": "#bf616a", "sync": "#ff5555"}
VERDICT_MARK = {"under": "red", "over": "magenta", "agree": "green", "no_gpu_work": "grey50"}


def phase_color(name: str, order: tuple[str, ...]) -> str:
    i = order.index(name) if name in order else abs(hash(name))
    return PHASE_COLORS[i % len(PHASE_COLORS)]


def rasterize(segments: tuple[Segment, ...], w: Window, width: int) -> list[tuple[float, Segment | None]]:
    """Per cell: (fraction of the cell covered, the segment covering most of it)."""
    cells: list[list] = [[0.0, None, 0.0] for _ in range(width)]
    scale = width / w.span
    for seg in segments:
        a = (max(seg.start_ns, w.start_ns) - w.start_ns) * scale
        b = (min(seg.end_ns, w.end_ns) - w.start_ns) * scale
        if b <= a:
            b = a + 0.125  # a zero-width op is still shown as a sliver
        c = int(a)
        while c < width and c < b:
            cover = min(b, c + 1) - max(a, c)
            cell = cells[c]
            cell[0] = min(1.0, cell[0] + cover)
            if cover > cell[2]:
                cell[1], cell[2] = seg, cover
            c += 1
    return [(cv, seg) for cv, seg, _ in cells]


class Timeline(Widget, can_focus=True):
    """Lanes of one or more ranks over a time window."""

    DEFAULT_CSS = "Timeline { height: 1fr; }"

    window: reactive[Window | None] = reactive(None, always_update=True)
    lanes_by_rank: reactive[list] = reactive(list, always_update=True)
    selected: reactive[Segment | None] = reactive(None)

    class SegmentClicked(Message):
        def __init__(self, segment: Segment, rank: int) -> None:
            self.segment = segment
            self.rank = rank
            super().__init__()

    class Zoom(Message):
        def __init__(self, factor: float, center: float) -> None:
            self.factor = factor
            self.center = center
            super().__init__()

    def __init__(self, phase_order: tuple[str, ...] = (), **kw) -> None:
        super().__init__(**kw)
        self.phase_order = phase_order
        self._rows: list[tuple[int, Lane]] = []
        self._title_width = TITLE_WIDTH

    def set_view(self, window: Window, lanes_by_rank: list[tuple[int, list[Lane]]]) -> None:
        self.lanes_by_rank = lanes_by_rank
        self.window = window

    def _color(self, seg: Segment) -> str:
        if seg.kind in KIND_COLORS:
            return KIND_COLORS[seg.kind]
        return phase_color(seg.kind, self.phase_order)

    def _titles_width(self) -> int:
        """Wide enough for every lane's title (``r<rank> <title>``), within TITLE_WIDTH..TITLE_MAX."""
        longest = max((len(f"r{rank} {lane.title}") for rank, lanes in self.lanes_by_rank for lane in lanes), default=0)
        return min(max(TITLE_WIDTH, longest), TITLE_MAX)

    def render(self) -> Text:
        w = self.window
        if w is None:
            return Text("no timeline")
        tw = self._title_width = self._titles_width()
        width = max(self.size.width - tw - 1, 10)
        out = Text()
        ruler = [" "] * width
        for col, label in ruler_ticks(w, width, target=max(width // 14, 2)):
            if 0 <= col < width:
                ruler[col] = "|"
                for k, ch in enumerate(label[: max(0, width - col - 1)]):
                    if col + 1 + k < width and ruler[col + 1 + k] == " ":
                        ruler[col + 1 + k] = ch
        out.append(f"{'+' + format_duration(w.span):<{tw}} ", style="bold")
        out.append("".join(ruler) + "\n", style="dim")
        self._rows = []
        rows = [(rank, lane) for rank, lanes in self.lanes_by_rank for lane in lanes]
        room = max(self.size.height - 1, 1)  # below the ruler
        hidden = rows[room - 1:] if len(rows) > room else []
        if hidden:  # the last row says what is not shown, instead of cutting it off unsaid
            rows = rows[:room - 1]
        for rank, lane in rows:
            title = f"r{rank} {lane.title}"[:tw]
            out.append(f"{title:<{tw}} ", style="bold" if "phases" in lane.title else "")
            for cover, seg in rasterize(lane.segments, w, width):
                if seg is None or cover <= 0:
                    out.append(" ")
                    continue
                glyph = EIGHTHS[max(1, min(8, round(cover * 8)))]
                chosen = seg == self.selected or self._linked(seg, lane)
                style = Style(color=self._color(seg), bold=chosen, underline=chosen, reverse=chosen and seg != self.selected)
                if seg.verdict in ("under", "over") and "phases" in lane.title and glyph == "█":
                    glyph = VERDICT_GLYPH
                    style += Style(bgcolor=VERDICT_MARK[seg.verdict])
                out.append(glyph, style=style)
            out.append("\n")
            self._rows.append((rank, lane))
        if hidden:
            ranks = sorted({rank for rank, _ in hidden})
            which = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"
            out.append(f"+{len(hidden)} lanes not shown ({which}): a taller terminal, or r for one rank at a time", style="yellow")
        return out

    def _linked(self, seg: Segment, lane: Lane) -> bool:
        """A selected CPU wait lights up the GPU phase whose work it waited for."""
        sel = self.selected
        return bool(sel is not None and sel.kind == "sync" and sel.ref is not None and lane.gpu_phases and seg.ref == sel.ref)

    def segment_at(self, x: int, y: int) -> tuple[int, Segment] | None:
        row = y - 1
        tw = self._title_width
        if not (0 <= row < len(self._rows)) or self.window is None or x <= tw:
            return None
        rank, lane = self._rows[row]
        width = max(self.size.width - tw - 1, 10)
        t = self.window.start_ns + (x - tw - 1 + 0.5) / width * self.window.span
        best = None
        for seg in lane.segments:
            if seg.start_ns <= t <= max(seg.end_ns, seg.start_ns + self.window.span / width):
                best = seg
        return (rank, best) if best else None

    def on_click(self, event) -> None:
        hit = self.segment_at(event.x, event.y)
        if hit:
            self.selected = hit[1]
            self.post_message(self.SegmentClicked(hit[1], hit[0]))
            self.refresh()

    def _center(self, x: int) -> float:
        tw = self._title_width
        width = max(self.size.width - tw - 1, 10)
        return min(max((x - tw - 1) / width, 0.0), 1.0)

    def on_mouse_scroll_up(self, event) -> None:
        self.post_message(self.Zoom(0.8, self._center(event.x)))

    def on_mouse_scroll_down(self, event) -> None:
        self.post_message(self.Zoom(1.25, self._center(event.x)))
