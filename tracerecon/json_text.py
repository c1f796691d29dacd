"""Text and JSON as tracerecon writes them (``report --json``, ``diff --json``, ``ranges --json``,
``manifest.json``, timeline names): valid UTF-8 whatever the file names (``run.json`` keeps
its names as they are: tracerecon reads them back as paths); and text shown to a person
(messages, tables, plots), with a trace's control characters as escapes (``one_line``)."""

from __future__ import annotations

import json


def parse_json(text: str | bytes):
    """``json.loads``, with a document nested too deep for Python's parser (``[[[[...``: a
    RecursionError) refused as any malformed one, with ValueError."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deep") from None


def valid_text(text: str) -> str:
    """``text`` as valid Unicode, for what is written as JSON or UTF-8: a file name that is not
    UTF-8 reaches Python with each undecodable byte as a lone surrogate (``"\\udcff"``, which
    JSON readers such as DuckDB reject); each such byte is written as a backslash escape instead
    (``bad\\xffname.sqlite``: distinct names stay distinct, unlike with U+FFFD)."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a lone surrogate that stands for no byte: escaped as itself
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


# Control characters a trace's names may hold (a newline, an escape sequence) are written as
# escapes: each message stays one line, and nothing in a trace drives the terminal.
_CONTROL = {c: f"\\x{c:02x}" for c in [*range(0x20), *range(0x7F, 0xA0)]} | {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


def one_line(text: str) -> str:
    """``text`` as shown to a person: its control characters and its invisible ones
    (``invisible``) written as escapes, and a file name's bytes that were no UTF-8 as the JSON
    writes them (``valid_text``)."""
    text = valid_text(text).translate(_CONTROL)
    if text.isascii():
        return text
    return "".join(escaped_char(c) if invisible(c) else c for c in text)


# A message to a person (a warning, an error) is cut past this many characters: a trace's
# 40,000-character range name made one warning an 83 KB line. JSON and exports keep it whole.
MESSAGE_CHARS = 2_000


def shown_message(text: str) -> str:
    """``text`` as ``one_line`` writes it, cut in the middle where longer than ``MESSAGE_CHARS``
    characters (its start and end kept, and how many of its characters were left out between;
    cut before its escapes are written, so none is split)."""
    if len(text) <= MESSAGE_CHARS:
        return one_line(text)
    head = MESSAGE_CHARS * 2 // 3
    tail = MESSAGE_CHARS - head
    return f"{one_line(text[:head])}\u2026[{len(text) - head - tail:,} characters left out]\u2026{one_line(text[-tail:])}"


def escaped_char(char: str) -> str:
    """``\\u200b`` for U+200B, ``\\U000e0001`` past the first plane (as Python and ``re`` read them)."""
    return f"\\u{ord(char):04x}" if ord(char) <= 0xFFFF else f"\\U{ord(char):08x}"


def invisible(char: str) -> bool:
    """Whether a character shows as nothing or as a plain space, or moves the text around it:
    Unicode's format characters (a zero-width space, a byte-order mark, right-to-left overrides),
    line and paragraph separators, spaces other than U+0020 (a no-break space), the rest of its
    default-ignorable characters (variation selectors, a Hangul filler), unassigned and
    private-use code points, the blank Braille pattern. Names that differ only by one read the
    same in a table, or a terminal reorders the line; shown as ``\\u200b`` they are told apart."""
    if char.isascii():
        return False
    import unicodedata  # (only for names that are not ASCII)

    code = ord(char)
    return unicodedata.category(char) in ("Cf", "Zl", "Zp", "Zs", "Cn", "Co") or any(lo <= code <= hi for lo, hi in _IGNORABLE)


# Unicode's Default_Ignorable_Code_Point ranges (DerivedCoreProperties.txt) that are not format
# characters, and U+2800 (a blank Braille pattern): drawn as nothing.
_IGNORABLE = ((0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F), (0x2800, 0x2800), (0x3164, 0x3164),
              (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0), (0xFFF0, 0xFFF8), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0000, 0xE0FFF))


def valid_json(doc):
    """``doc`` (dicts, lists, tuples, strings, numbers) with every string ``valid_text``."""
    if isinstance(doc, str):
        return valid_text(doc)
    if isinstance(doc, dict):
        return {valid_json(k): valid_json(v) for k, v in doc.items()}
    if isinstance(doc, (list, tuple)):
        return [valid_json(v) for v in doc]
    return doc


def json_text(doc, indent: int | None = 2) -> str:
    """``doc`` as the JSON tracerecon writes (``report --json``, ``diff --json``, ``ranges
    --json``, ``manifest.json``): valid UTF-8 whatever the file names (``valid_text``)."""
    return json.dumps(valid_json(doc), indent=indent)


def shown_names(names: list[str], width: int) -> list[str]:
    """``names`` as shown where room is short (a plot's axes, a table's name column): each as
    ``one_line`` writes it, cut in the middle with an ellipsis where wider than ``width``
    terminal cells (its start and end kept: engines' names differ at either end); equal names
    alike, distinct names kept distinct: where two would read alike, the later one cut shorter
    and numbered (" (2)"), still within ``width``; a name that fits is never the one numbered.
    JSON and exports keep names whole."""
    width = max(width, 4)
    texts = {name: one_line(name) for name in names}  # (control characters as escapes: no raw ESC in an SVG)
    shown: dict[str, str] = {}
    taken: set[str] = set()
    for name, text in texts.items():  # whole names first: a cut name never takes one's place
        if text not in taken and _cells(text) <= width:
            shown[name] = text
            taken.add(text)
    next_number: dict[str, int] = {}
    for name, text in texts.items():
        if name in shown:
            continue
        short = cut = _cut(text, width)
        k = next_number.get(cut, 1)  # (numbers already given for this cut: none tried twice)
        while short in taken:
            k += 1
            suffix = f" ({k})"
            short = _cut(text, max(width - len(suffix), 4)) + suffix
        next_number[cut] = k
        shown[name] = short
        taken.add(short)
    return [shown[name] for name in names]


def _cells(text: str) -> int:
    """Terminal cells ``text`` takes: two for a wide (East Asian) character, none for a
    combining mark."""
    if text.isascii():
        return len(text)
    import unicodedata

    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _cut(text: str, width: int) -> str:
    """``text`` within ``width`` cells: whole where it fits, else its start and end around an
    ellipsis (two thirds of the room to the start)."""
    if _cells(text) <= width:
        return text
    room = width - 1
    head, tail = _within(text, room * 2 // 3), _within(text[::-1], room - room * 2 // 3)[::-1]
    return head + "\u2026" + tail


def _within(text: str, cells: int) -> str:
    """The longest start of ``text`` that takes at most ``cells`` cells."""
    if text.isascii():
        return text[:cells]
    out, used = [], 0
    for c in text:
        used += _cells(c)
        if used > cells:
            break
        out.append(c)
    return "".join(out)


def gpu_label(gpu: int, cuda_device: int | None = None) -> str:
    """A GPU as a person reads it: the machine's number (nsys's TARGET_INFO_GPU id), with the
    process's CUDA number beside it where CUDA_VISIBLE_DEVICES made it another: ``2``, ``2 (CUDA 0)``."""
    return f"{gpu}" if cuda_device is None or cuda_device == gpu else f"{gpu} (CUDA {cuda_device})"
