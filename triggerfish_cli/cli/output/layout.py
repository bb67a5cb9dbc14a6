"""Which columns a table shows on a terminal, and how wide (the rules are in the
package's docstring): pure functions of the columns, their widths and the limit."""

from __future__ import annotations

from collections.abc import Sequence

from triggerfish_cli.cli.output.text import MIN_TEXT, Column, display_width, total_width


def fit_text(columns: Sequence[Column], widths: list[int], limit: int) -> list[int]:
    """Cut free-text columns (widest first, down to MIN_TEXT) until the table fits."""
    widths = list(widths)
    excess = total_width(widths) - limit
    while excess > 0:
        texts = [
            i
            for i, c in enumerate(columns)
            if c.is_text and widths[i] > max(MIN_TEXT, display_width(c.header))
        ]
        if not texts:
            break
        widest = max(texts, key=lambda i: widths[i])
        floor = max(MIN_TEXT, display_width(columns[widest].header))
        give = min(excess, widths[widest] - floor)
        widths[widest] -= give
        excess -= give
    return widths


def drop_order(shown: Sequence[Column], gives_way: Sequence[str]) -> list[int]:
    """Which columns give way, first to last: those named in ``gives_way``, in that
    order, then free text from the right, then the rest from the right. Essential
    columns never do (nor the first column of a table that declares none)."""
    declared = any(c.essential for c in shown)
    droppable = [i for i, c in enumerate(shown) if not c.essential and (declared or i)]
    named = [i for name in gives_way for i in droppable if shown[i].field == name]
    rest = [i for i in reversed(droppable) if i not in named]
    texts = [i for i in rest if shown[i].is_text]
    return named + texts + [i for i in rest if not shown[i].is_text]


def arrange(
    shown: Sequence[Column], natural: list[int], limit: int, gives_way: Sequence[str]
) -> tuple[list[int], list[int]]:
    """The columns to keep (their indexes) and their widths, for these natural widths."""

    def fit(keep: list[int]) -> list[int]:
        return fit_text([shown[i] for i in keep], [natural[i] for i in keep], limit)

    keep = list(range(len(shown)))
    widths = fit(keep)
    for index in drop_order(shown, gives_way):
        if total_width(widths) <= limit:
            break
        keep.remove(index)
        widths = fit(keep)
    return keep, cap([shown[i] for i in keep], widths, limit)


def cap(columns: Sequence[Column], widths: list[int], limit: int) -> list[int]:
    """Essential columns too wide for the terminal together are aligned to what fits.

    A longer value is still printed whole: it ends its line, and the rest of
    its row continues on the next one, each cell in its column. A left-aligned
    last column needs only its header's room: its longer values run over alone.
    """
    widths = list(widths)
    last = widths[-1] if columns[-1].is_number else display_width(columns[-1].header)
    excess = total_width([*widths[:-1], min(widths[-1], last)]) - limit
    while excess > 0:
        wider = [i for i in range(len(columns) - 1) if widths[i] > display_width(columns[i].header)]
        if not wider:
            break
        widest = max(wider, key=lambda i: widths[i])
        give = min(excess, widths[widest] - display_width(columns[widest].header))
        widths[widest] -= give
        excess -= give
    return widths


def room(columns: Sequence[Column], widths: list[int], limit: int) -> list[int]:
    """``widths`` with the room left on the terminal (up to its own width again)
    given to the widest essential identifier column that is not the last: keys
    further down a long table may be longer."""
    ids = [i for i, c in enumerate(columns[:-1]) if c.essential and not (c.is_text or c.is_number)]
    slack = limit - total_width(widths)
    widths = list(widths)
    if ids and slack > 0:
        widest = max(ids, key=lambda i: widths[i])
        widths[widest] += min(slack, widths[widest])
    return widths
