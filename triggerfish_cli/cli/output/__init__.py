"""All terminal output: tables, JSON, CSV, messages, prompts, progress.

The only package that imports rich (for progress bars and coloured diffs),
and only inside the functions that draw with it, so that a scripted call
that prints JSON, a table or a raw value never pays for it. Results go to
stdout; messages, warnings, prompts and progress go to stderr.

The parts: ``text.py`` (columns, escaped text, widths, JSON and CSV cells),
``table.py`` (the streaming table), ``layout.py`` (which columns it shows
on a terminal, how wide), and :class:`Output` built on
``base.py`` (the streams and the terminal), ``messages.py`` (stderr:
messages, prompts, progress) and ``results.py`` (stdout: rows, records,
outcomes, diffs). Commands never look at the format: they hand a result to
``result``/``result_rows`` (the document, and how to draw it for people) and
Output picks one (tests/test_architecture.py checks it).

Formats:

- ``table``: aligned columns. Rows are written as they come, a page at a
  time, so the first row appears at once and memory stays flat however many
  rows there are. Identifiers (keys, namespaces, ids, file names, times,
  levels, numbers) are never wrapped or cut. Each table declares its
  essential columns (``Column.essential``: the row's identifier and what the
  command is about), never left out, and may name the order its others give
  way in (``gives_way``). On a terminal the table fits its width: free-text
  columns (descriptions, reasons, content) are cut with ``…`` first, down to
  12 characters; then whole columns are left out: those named, in their
  order, then free text, the rightmost first, then the rest, the rightmost
  first; a table whose essential columns alone are wider than the terminal
  keeps only those, and a value wider than the terminal runs over (the
  terminal wraps it). One line on stderr names the columns left out and
  says ``-w`` shows them. The first page sets the columns and their widths
  for the whole output (a longer table gives its widest essential
  identifier column the room left, up to its width again); a later value
  wider than its column is cut with ``…``, or, an essential column's or a
  number, ends its line, and the rest of the row continues on the next line
  in its columns. Off a terminal nothing is cut or left out and widths grow
  with later pages. Either way: one header line (none with
  ``--no-headers``), then one line per row, no rules, no blank lines, no
  spaces at line ends; the totals line is shown on a terminal, or with
  ``--totals``. ``--wide`` shows every column and cuts nothing;
  ``--columns a,b`` picks the columns (any field of the JSON rows). Control
  characters in cells are shown escaped (``\\x1b``, ``\\r``, ...), so a key
  can never drive the operator's terminal. Messages (and lines of prose on
  stdout) are wrapped at spaces on a terminal.
- ``json``: one JSON document (a list of rows, or one object).
- ``jsonl``: one JSON object per line.
- ``csv``: a header line, then one line per row; booleans ``true``/``false``,
  nested values as JSON text.
"""

from __future__ import annotations

from triggerfish_cli.cli.output.results import Results


class Output(Results):
    """Writes one command's results in the chosen format."""
