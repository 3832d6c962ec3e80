"""Render a GAIA task's attachment as plain text an LLM can read.

One entry point, :func:`read_file`, picks a reader by the file's suffix
(case-insensitive) and cuts the result at ``max_chars`` with a trailing note
saying how much was left out::

    >>> from pathlib import Path
    >>> p = Path("/tmp/agentspec_demo.csv")
    >>> _ = p.write_text("name,qty\\napple,3\\n")
    >>> print(read_file(p))
    1: name | qty
    2: apple | 3

Kinds: plain text (``.txt .md .py .html .htm .xml .log``; HTML is reduced to
its visible text), ``.csv``, ``.json``/``.jsonl``, ``.xlsx``, ``.docx``,
``.pptx``, ``.pdf``, images (size and mode, plus OCR text when tesseract is
installed), and ``.zip`` (members listed, then each supported member rendered
with the same readers).  Audio is refused: transcription needs a local speech
model and none is installed.

Errors, both :class:`agentspec.errors.ConfigError` (exit status 2)::

    ConfigError
    ├── UnsupportedFile   the suffix has no reader (or its library is not installed)
    └── FileReadError     the file is missing or cannot be parsed

Every reader works on bytes in memory, so archive members are never written
to disk; the uncompressed bytes read from archives are capped
(:data:`ZIP_MAX_BYTES`) against zip bombs, and so are the XML parts of office
files (:data:`OFFICE_MAX_BYTES`, declared sizes checked before reading and
actual sizes while reading).  ``.docx`` and ``.pptx`` are stream-parsed and
stop once ``max_chars`` is reached; every read has a deadline
(:data:`READ_DEADLINE_S`), after which it stops with a :class:`FileReadError`.
"""

from __future__ import annotations

import csv
import importlib
import io
import json
import math
import re
import shutil
import time
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any
from xml.parsers import expat

from agentspec.errors import ConfigError

__all__ = ["IMAGE_MAX_PIXELS", "OFFICE_MAX_BYTES", "READ_DEADLINE_S", "SUPPORTED", "ZIP_MAX_BYTES", "FileReadError",
           "UnsupportedFile", "read_file"]

#: Most uncompressed bytes read out of one archive, nested archives included.
ZIP_MAX_BYTES = 50 * 1024 * 1024
#: Most uncompressed bytes of XML one office file (.docx, .xlsx, .pptx) may hold; its media is not counted.
#: Real attachments hold a few MB at most; a 1 MB .docx can declare 400 MB of XML.
OFFICE_MAX_BYTES = 50 * 1024 * 1024
#: Seconds one :func:`read_file` call may take before it stops with a FileReadError.
READ_DEADLINE_S = 30.0
#: Most pixels (width x height) an image may have to be decoded. A photo has about 12 million; a PNG of a few
#: kilobytes can declare billions, and decoding (then OCR) allocates for every one of them.
IMAGE_MAX_PIXELS = 40_000_000
_XML_CHUNK = 64 * 1024
#: Archives inside archives are followed this many levels deep.
_ZIP_MAX_DEPTH = 3

_TEXT = (".txt", ".md", ".py", ".html", ".htm", ".xml", ".log")
_IMAGES = (".png", ".jpg", ".jpeg", ".gif", ".bmp", ".webp")
_AUDIO = (".mp3", ".wav", ".m4a", ".flac")
_AUDIO_MESSAGE = "audio transcription needs a local speech model; none is installed"


class UnsupportedFile(ConfigError):
    """The attachment's kind has no reader here (audio, unknown suffix, missing library)."""


class FileReadError(ConfigError):
    """The attachment is missing, or it is corrupt and its library could not parse it."""


@dataclass
class _Budget:
    """What one :func:`read_file` call may still spend; shared by nested archives."""

    zip_bytes_left: int
    deadline: float = math.inf
    """``time.monotonic()`` past which the read stops (checked between chunks, rows, pages and members)."""
    deadline_s: float = READ_DEADLINE_S
    # Things skipped because the output was already past max_chars ("3 more pages").
    not_read: list[str] = field(default_factory=list)

    def check_time(self, name: str) -> None:
        """Raise FileReadError once the deadline has passed: a hostile file must not hold the agent's turn."""
        if time.monotonic() > self.deadline:
            raise FileReadError(f"cannot read {name}: reading took longer than {self.deadline_s:g}s and was stopped")


@dataclass(frozen=True)
class _Context:
    """Per-reader view of the limits: ``max_chars`` shrinks inside archives."""

    max_chars: int
    budget: _Budget
    depth: int = 0


_Reader = Callable[[bytes, str, _Context], str]


def read_file(path: Path, *, max_chars: int = 20_000, deadline_s: float = READ_DEADLINE_S) -> str:
    """Return the attachment at ``path`` rendered as text, cut at ``max_chars``.

    When the text is longer, the first ``max_chars`` characters are kept and a
    note follows, e.g. ``[cut at 100 characters: 2,345 more characters left
    out]``; pages, rows or archive members that were not even read because the
    limit was already reached are named in the same note.

    Raises:
        UnsupportedFile: the suffix has no reader (see :data:`SUPPORTED`), or
            the file is audio.
        FileReadError: the file does not exist or cannot be parsed, an
            office file expands past :data:`OFFICE_MAX_BYTES`, or reading
            took longer than ``deadline_s`` seconds.
        ConfigError: ``max_chars`` is not positive.
    """
    if max_chars < 1:
        raise ConfigError(f"max_chars must be at least 1, got {max_chars}")
    path = Path(path)
    if not path.is_file():
        what = "is not a file" if path.exists() else "does not exist"
        raise FileReadError(f"cannot read attachment {path}: it {what}; check the task's file path")
    reader = _reader_for(path.name)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise FileReadError(f"cannot read attachment {path}: {exc.strerror or exc}") from exc
    budget = _Budget(zip_bytes_left=ZIP_MAX_BYTES, deadline=time.monotonic() + deadline_s, deadline_s=deadline_s)
    ctx = _Context(max_chars=max_chars, budget=budget)
    return _cut(_run(reader, data, path.name, ctx), max_chars, ctx.budget.not_read)


def _suffix(name: str) -> str:
    return PurePosixPath(name).suffix.lower()


def _reader_for(name: str) -> _Reader:
    """Pick the reader for a file name, or raise :class:`UnsupportedFile`."""
    suffix = _suffix(name)
    if suffix in _AUDIO:
        raise UnsupportedFile(f"cannot read {name}: {_AUDIO_MESSAGE}")
    reader = _READERS.get(suffix)
    if reader is None:
        shown = suffix or "(no suffix)"
        raise UnsupportedFile(
            f"cannot read {name}: files ending in {shown} are not supported; supported: {' '.join(SUPPORTED)}"
        )
    return reader


def _run(reader: _Reader, data: bytes, name: str, ctx: _Context) -> str:
    """Call a reader, translating its library's exceptions into :class:`FileReadError`."""
    try:
        # Parser libraries warn about harmless quirks of a file (missing default
        # styles, odd PDF objects); those are not the user's problem, and under
        # pytest's "error" filter they would abort the read.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return reader(data, name, ctx)
    except ConfigError:
        raise
    except Exception as exc:  # the seam: any library failure means "this file is corrupt"
        raise FileReadError(f"cannot read {name}: {type(exc).__name__}: {exc}") from exc


def _cut(text: str, max_chars: int, not_read: list[str]) -> str:
    """Keep the first ``max_chars`` characters and say what was left out."""
    if len(text) <= max_chars and not not_read:
        return text
    parts = []
    if len(text) > max_chars:
        parts.append(f"{len(text) - max_chars:,} more characters left out")
    if not_read:
        parts.append("not read: " + "; ".join(not_read))
    return f"{text[:max_chars]}\n\n[cut at {max_chars:,} characters: {', '.join(parts)}]"


def _require(module: str, package: str, suffix: str) -> ModuleType:
    """Import an optional parser library, or say which package to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise UnsupportedFile(f"reading {suffix} files needs the {package} package: pip install {package}") from exc


# --- plain text -----------------------------------------------------------------------------------


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        # Old exports are often Windows-1252/Latin-1; latin-1 decodes any byte, so this never fails.
        return data.decode("latin-1")


def _read_text(data: bytes, name: str, ctx: _Context) -> str:
    text = _decode(data)
    if _suffix(name) in (".html", ".htm"):
        return _visible_html_text(text)
    return text


_HIDDEN_TAGS = frozenset({"script", "style", "noscript", "template"})
_BLOCK_TAGS = frozenset(
    {
        *("address", "article", "aside", "blockquote", "br", "dd", "div", "dl", "dt", "figcaption"),
        *("footer", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "li", "main", "nav"),
        *("ol", "p", "pre", "section", "table", "td", "th", "title", "tr", "ul"),
    }
)


class _VisibleText(HTMLParser):
    """Collect the text a browser would show: scripts and styles dropped, blocks on their own lines."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.chunks: list[str] = []
        self._hidden = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _HIDDEN_TAGS:
            self._hidden += 1
        elif tag in _BLOCK_TAGS:
            self.chunks.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _HIDDEN_TAGS:
            self._hidden = max(self._hidden - 1, 0)
        elif tag in _BLOCK_TAGS:
            self.chunks.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._hidden:
            self.chunks.append(data)


def _visible_html_text(html: str) -> str:
    parser = _VisibleText()
    parser.feed(html)
    parser.close()
    lines = (re.sub(r"\s+", " ", line).strip() for line in "".join(parser.chunks).splitlines())
    return "\n".join(line for line in lines if line)


# --- structured text ------------------------------------------------------------------------------


def _row_line(number: int, cells: Iterable[Any]) -> str:
    values = [_cell_text(c) for c in cells]
    while values and not values[-1]:  # trailing empty cells carry nothing
        values.pop()
    return f"{number}: {' | '.join(values)}"


def _cell_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


def _read_csv(data: bytes, name: str, ctx: _Context) -> str:
    text = _decode(data)
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel  # the sniffer gives up on one-column files; commas are the common case
    rows = csv.reader(io.StringIO(text, newline=""), dialect)
    return "\n".join(_row_line(i, row) for i, row in enumerate(rows, start=1))


def _read_json(data: bytes, name: str, ctx: _Context) -> str:
    text = _decode(data)
    if _suffix(name) == ".json":
        return _pretty_json(json.loads(text))
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(f"record at line {number}:\n{_pretty_json(json.loads(line))}")
        except json.JSONDecodeError as exc:
            raise FileReadError(f"cannot read {name}: line {number} is not JSON ({exc.msg})") from exc
    return "\n\n".join(records)


def _pretty_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


# --- office documents -----------------------------------------------------------------------------
#
# An office file is a zip of XML parts. The declared sizes of the parts a reader parses are checked against
# OFFICE_MAX_BYTES before anything is read, and the bytes actually inflated are counted while reading. .docx and
# .pptx are parsed as a stream of XML events (expat; DTDs and entity declarations refused, as office files have
# none) that stops once max_chars of text is out; .xlsx goes through openpyxl's read-only (streaming) workbook.

_XML_PART = re.compile(r".*\.(xml|rels)$", re.IGNORECASE)


def _read_xlsx(data: bytes, name: str, ctx: _Context) -> str:
    openpyxl = _require("openpyxl", "openpyxl", ".xlsx")
    # openpyxl reads the parts through zipfile, which never returns more than a member's declared size.
    _check_office_sizes(zipfile.ZipFile(io.BytesIO(data)), name)
    # Two views of one workbook: the values Excel last computed, and the formulas, shown
    # only where no computed value was saved (files written by scripts have none).
    values = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    formulas = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=False)
    try:
        out: list[str] = []
        size = 0
        sheets = list(zip(values.worksheets, formulas.worksheets))
        for index, (sheet, formula_sheet) in enumerate(sheets):
            header = _sheet_header(sheet)
            out.append(header)
            size += len(header) + 1
            rows = _merged_rows(sheet, formula_sheet)
            for number, row in rows:
                ctx.budget.check_time(name)
                line = _row_line(number, row)
                out.append(line)
                size += len(line) + 1
                if size > ctx.max_chars:
                    _note_unread_rows(ctx, sheet.title, number, rows, len(sheets) - index - 1)
                    return "\n".join(out)
        return "\n".join(out)
    finally:
        values.close()  # read-only workbooks keep the archive open until closed
        formulas.close()


def _sheet_header(sheet: Any) -> str:
    utils = importlib.import_module("openpyxl.utils")
    header = f"--- sheet '{sheet.title}' ---"
    width = sheet.max_column or 0
    if width:
        header += "\ncolumns: " + " | ".join(utils.get_column_letter(c) for c in range(1, width + 1))
    return header


def _merged_rows(sheet: Any, formula_sheet: Any) -> Iterator[tuple[int, list[Any]]]:
    """Yield ``(row number, cells)`` for non-blank rows, a formula standing in for a missing value."""
    pairs = zip(sheet.iter_rows(values_only=True), formula_sheet.iter_rows(values_only=True))
    for number, (row, formula_row) in enumerate(pairs, start=1):
        cells = [v if v is not None else f for v, f in zip(row, formula_row)]
        if any(c is not None for c in cells):  # row numbers are kept, so blank rows lose no positions
            yield number, cells


def _note_unread_rows(ctx: _Context, title: str, number: int, rows: Iterator[Any], sheets_left: int) -> None:
    parts = []
    if next(rows, None) is not None:
        parts.append(f"rows after row {number} of sheet '{title}'")
    if sheets_left:
        parts.append(f"{sheets_left} more sheets")
    if parts:
        ctx.budget.not_read.append(" and ".join(parts))



class _Enough(Exception):
    """Raised inside an XML handler: the text wanted is out, stop parsing."""


def _check_office_sizes(archive: zipfile.ZipFile, name: str) -> None:
    declared = sum(info.file_size for info in archive.infolist() if _XML_PART.fullmatch(info.filename))
    if declared > OFFICE_MAX_BYTES:
        raise FileReadError(
            f"cannot read {name}: its XML expands to {declared / 2**20:,.0f} MB, more than the "
            f"{OFFICE_MAX_BYTES / 2**20:g} MB an office file may hold"
        )


def _office_archive(data: bytes, name: str) -> zipfile.ZipFile:
    archive = zipfile.ZipFile(io.BytesIO(data))
    _check_office_sizes(archive, name)
    return archive


class _XmlEvents:
    """What a streaming reader implements: element start and end (local names) and character data."""

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        pass

    def end(self, tag: str) -> None:
        pass

    def text(self, data: str) -> None:
        pass


def _local(name: str) -> str:
    """``namespace local`` (expat's namespace form) to ``local``."""
    return name.rsplit(" ", 1)[-1]


def _attr(attrs: dict[str, str], local: str, namespace_ends: str = "") -> str:
    """The attribute named ``local`` (in a namespace whose URI ends with ``namespace_ends``), or ``""``."""
    for key, value in attrs.items():
        space, _, name = key.rpartition(" ")
        if name == local and space.endswith(namespace_ends):
            return value
    return ""


def _stream_xml(archive: zipfile.ZipFile, part: str, events: _XmlEvents, ctx: _Context, name: str) -> bool:
    """Feed ``part`` of ``archive`` to ``events``; False when the part is missing. Stops quietly on :class:`_Enough`.

    The inflated bytes are counted as they come (the declared sizes were checked already) and the deadline is
    checked between chunks.
    """
    try:
        info = archive.getinfo(part)
    except KeyError:
        return False
    parser = expat.ParserCreate(namespace_separator=" ")
    parser.StartElementHandler = lambda tag, attrs: events.start(_local(tag), attrs)
    parser.EndElementHandler = lambda tag: events.end(_local(tag))
    parser.CharacterDataHandler = events.text

    def refuse(*_: object) -> None:
        raise FileReadError(f"cannot read {name}: {part} declares a DTD or entities, which office files never do")

    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    left = min(info.file_size, OFFICE_MAX_BYTES)
    with archive.open(info) as stream:
        while chunk := stream.read(_XML_CHUNK):
            left -= len(chunk)
            if left < 0:
                raise FileReadError(f"cannot read {name}: {part} expands past its declared size")
            ctx.budget.check_time(name)
            try:
                parser.Parse(chunk, False)
            except _Enough:
                return True
        try:
            parser.Parse(b"", True)
        except _Enough:
            pass
    return True


class _TextOut:
    """Blocks of text with a running size; :class:`_Enough` once past ``max_chars``."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self.blocks: list[str] = []
        self.size = 0

    def add(self, block: str) -> None:
        self.blocks.append(block)
        self.size += len(block) + 1
        if self.size > self.max_chars:
            raise _Enough


class _Tables:
    """Table rows and cells while a part streams by: cells hold paragraphs; nested tables become cell lines."""

    def __init__(self) -> None:
        self.stack: list[list[list[str]]] = []  # per open table: its rows, each a list of cell texts
        self.cells: list[list[str]] = []  # per open cell: its paragraphs

    def start(self, tag: str) -> None:
        if tag == "tbl":
            self.stack.append([])
        elif tag == "tr" and self.stack:
            self.stack[-1].append([])
        elif tag == "tc" and self.stack:
            self.cells.append([])

    def end(self, tag: str) -> str | None:
        """The finished outermost table's text, when ``tag`` closes one."""
        if tag == "tc" and self.cells:
            cell = "\n".join(self.cells.pop())
            if self.stack and self.stack[-1]:
                self.stack[-1][-1].append(cell)
        elif tag == "tbl" and self.stack:
            rows = self.stack.pop()
            lines = [_row_line(i, row) for i, row in enumerate(rows, start=1)]
            if self.cells:  # a table inside a cell: its lines are that cell's text
                self.cells[-1].extend(lines)
                return None
            return "[table]\n" + "\n".join(lines) + "\n[end table]"
        return None

    def paragraph(self, text: str) -> bool:
        """Give a finished paragraph to the innermost open cell; False outside tables."""
        if not self.cells:
            return False
        self.cells[-1].append(text)
        return True


class _DocxEvents(_XmlEvents):
    """word/document.xml: paragraphs (headings as ``#``) and tables, in reading order."""

    def __init__(self, out: _TextOut, style_names: dict[str, str]) -> None:
        self.out = out
        self.style_names = style_names
        self.tables = _Tables()
        self.paragraphs: list[tuple[list[str], str]] = []  # open paragraphs (text boxes nest them): parts, style
        self.in_text = False
        self.fallback = 0  # inside mc:Fallback: the same content again, for old readers

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        if self.fallback or tag == "Fallback":
            self.fallback += 1
        elif tag == "p":
            self.paragraphs.append(([], ""))
        elif tag == "pStyle" and self.paragraphs:
            parts, _ = self.paragraphs[-1]
            self.paragraphs[-1] = (parts, _attr(attrs, "val"))
        elif tag == "t":
            self.in_text = True
        elif tag == "tab" and self.paragraphs and not _attr(attrs, "val"):  # a tab stop definition has a val
            self.paragraphs[-1][0].append("\t")
        elif tag in ("br", "cr") and self.paragraphs:
            self.paragraphs[-1][0].append("\n")
        else:
            self.tables.start(tag)

    def end(self, tag: str) -> None:
        if self.fallback:
            self.fallback -= 1
        elif tag == "t":
            self.in_text = False
        elif tag == "p" and self.paragraphs:
            parts, style = self.paragraphs.pop()
            text = "".join(parts)
            if not self.tables.paragraph(text) and text.strip():
                self.out.add(_heading_prefix(self.style_names.get(style, style)) + text)
        else:
            table = self.tables.end(tag)
            if table is not None:
                self.out.add(table)

    def text(self, data: str) -> None:
        if self.in_text and self.paragraphs and not self.fallback:
            self.paragraphs[-1][0].append(data)


class _StyleNames(_XmlEvents):
    """word/styles.xml: style id to style name (``Heading1`` -> ``heading 1``)."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}
        self._id: str | None = None

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        if tag == "style":
            self._id = _attr(attrs, "styleId") or None
        elif tag == "name" and self._id is not None:
            self.names[self._id] = _attr(attrs, "val")


def _read_docx(data: bytes, name: str, ctx: _Context) -> str:
    with _office_archive(data, name) as archive:
        styles = _StyleNames()
        _stream_xml(archive, "word/styles.xml", styles, ctx, name)
        out = _TextOut(ctx.max_chars)
        if not _stream_xml(archive, "word/document.xml", _DocxEvents(out, styles.names), ctx, name):
            raise FileReadError(f"cannot read {name}: it has no word/document.xml (not a Word document)")
        if out.size > ctx.max_chars:
            ctx.budget.not_read.append("the rest of the document")
        return "\n".join(out.blocks)


def _heading_prefix(style: str) -> str:
    match = re.fullmatch(r"heading ?(\d)", style.strip(), re.IGNORECASE)
    if match:
        return "#" * int(match.group(1)) + " "
    return "# " if style.strip().lower() == "title" else ""


class _SlideEvents(_XmlEvents):
    """A slide (or, with ``only_placeholder="body"``, a notes page): each shape's text and each table."""

    def __init__(self, out: _TextOut, only_placeholder: str | None = None) -> None:
        self.out = out
        self.only = only_placeholder
        self.tables = _Tables()
        self.shapes: list[tuple[list[str], str]] = []  # open shapes: paragraphs, placeholder type
        self.paragraph: list[str] | None = None
        self.in_text = False
        self.fallback = 0

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        if self.fallback or tag == "Fallback":
            self.fallback += 1
        elif tag == "sp":
            self.shapes.append(([], ""))
        elif tag == "ph" and self.shapes:
            self.shapes[-1] = (self.shapes[-1][0], _attr(attrs, "type") or "body")
        elif tag == "p":
            self.paragraph = []
        elif tag == "t":
            self.in_text = True
        elif tag == "br" and self.paragraph is not None:
            self.paragraph.append("\n")
        else:
            self.tables.start(tag)

    def end(self, tag: str) -> None:
        if self.fallback:
            self.fallback -= 1
        elif tag == "t":
            self.in_text = False
        elif tag == "p" and self.paragraph is not None:
            text = "".join(self.paragraph)
            self.paragraph = None
            if not self.tables.paragraph(text) and self.shapes:
                self.shapes[-1][0].append(text)
        elif tag == "sp" and self.shapes:
            paragraphs, placeholder = self.shapes.pop()
            text = "\n".join(paragraphs)
            if text.strip() and (self.only is None or placeholder == self.only):
                self.out.add(text)
        else:
            table = self.tables.end(tag)
            if table is not None and self.only is None:
                self.out.add(table)

    def text(self, data: str) -> None:
        if self.in_text and self.paragraph is not None and not self.fallback:
            self.paragraph.append(data)


class _Relationships(_XmlEvents):
    """A ``.rels`` part: relationship id to (type, target)."""

    def __init__(self) -> None:
        self.targets: dict[str, tuple[str, str]] = {}

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        if tag == "Relationship":
            self.targets[_attr(attrs, "Id")] = (_attr(attrs, "Type"), _attr(attrs, "Target"))


class _SlideList(_XmlEvents):
    """ppt/presentation.xml: the slides' relationship ids, in show order."""

    def __init__(self) -> None:
        self.ids: list[str] = []

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        if tag == "sldId":  # its plain "id" is a number; the relationship id is r:id
            self.ids.append(_attr(attrs, "id", "/relationships"))


def _rels(archive: zipfile.ZipFile, part: str, ctx: _Context, name: str) -> dict[str, tuple[str, str]]:
    folder, _, file = part.rpartition("/")
    rels = _Relationships()
    _stream_xml(archive, f"{folder}/_rels/{file}.rels", rels, ctx, name)
    base = PurePosixPath(folder)
    resolved = {}
    for rid, (kind, target) in rels.targets.items():
        path = PurePosixPath(target.lstrip("/")) if target.startswith("/") else base / target
        parts: list[str] = []
        for piece in path.parts:  # "../notesSlides/x.xml" relative to ppt/slides
            if piece == "..":
                if parts:
                    parts.pop()
            elif piece != ".":
                parts.append(piece)
        resolved[rid] = (kind, "/".join(parts))
    return resolved


def _read_pptx(data: bytes, name: str, ctx: _Context) -> str:
    with _office_archive(data, name) as archive:
        order = _SlideList()
        if not _stream_xml(archive, "ppt/presentation.xml", order, ctx, name):
            raise FileReadError(f"cannot read {name}: it has no ppt/presentation.xml (not a PowerPoint deck)")
        rels = _rels(archive, "ppt/presentation.xml", ctx, name)
        slide_parts = [rels[rid][1] for rid in order.ids if rid in rels]
        slides: list[str] = []
        size = 0
        for number, part in enumerate(slide_parts, start=1):
            out = _TextOut(max(ctx.max_chars - size, 1))
            out.blocks.append(f"--- slide {number} ---")
            _stream_xml(archive, part, _SlideEvents(out), ctx, name)
            if out.size <= out.max_chars:
                notes = _notes_text(archive, part, ctx, name, out.max_chars - out.size)
                if notes:
                    out.blocks.append(f"notes: {notes}")
                    out.size += len(out.blocks[-1]) + 1
            slides.append("\n".join(out.blocks))
            size += out.size + 1
            if size > ctx.max_chars and number < len(slide_parts):
                ctx.budget.not_read.append(f"{len(slide_parts) - number} more slides")
                break
        return "\n\n".join(slides)


def _notes_text(archive: zipfile.ZipFile, slide_part: str, ctx: _Context, name: str, max_chars: int) -> str:
    notes = [target for kind, target in _rels(archive, slide_part, ctx, name).values() if kind.endswith("/notesSlide")]
    if not notes:
        return ""
    out = _TextOut(max(max_chars, 1))
    _stream_xml(archive, notes[0], _SlideEvents(out, only_placeholder="body"), ctx, name)
    return "\n".join(out.blocks)


def _read_pdf(data: bytes, name: str, ctx: _Context) -> str:
    pypdf = _require("pypdf", "pypdf", ".pdf")
    reader = pypdf.PdfReader(io.BytesIO(data))
    if reader.is_encrypted and not reader.decrypt(""):
        raise FileReadError(f"cannot read {name}: the PDF is password-protected")
    pages: list[str] = []
    size = 0
    total = len(reader.pages)
    for number, page in enumerate(reader.pages, start=1):
        ctx.budget.check_time(name)
        text = f"--- page {number} of {total} ---\n{(page.extract_text() or '').strip()}"
        pages.append(text)
        size += len(text) + 2
        if size > ctx.max_chars and number < total:
            ctx.budget.not_read.append(f"{total - number} more pages")
            break
    return "\n\n".join(pages)


# --- images ---------------------------------------------------------------------------------------


def _read_image(data: bytes, name: str, ctx: _Context) -> str:
    image_module = _require("PIL.Image", "pillow", _suffix(name))
    with image_module.open(io.BytesIO(data)) as image:
        # open() read only the header. Pillow's own bomb check merely warns below ~179 million pixels, and _run
        # silences warnings, so the size is checked here, before anything is decoded.
        if image.width * image.height > IMAGE_MAX_PIXELS:
            raise FileReadError(
                f"cannot read {name}: the image is {image.width}x{image.height} pixels, more than the "
                f"{IMAGE_MAX_PIXELS:,} an attachment may have"
            )
        image.load()  # decode now, so a truncated file fails here and not inside OCR
        frames = getattr(image, "n_frames", 1)
        line = f"image: {image.width}x{image.height} pixels, mode {image.mode}, format {image.format}"
        if frames > 1:
            line += f", {frames} frames"
        return f"{line}\n{_ocr(image, ctx.budget.deadline)}"


def _ocr(image: Any, deadline: float) -> str:
    """OCR text of ``image``, or a line saying why there is none; never raises.

    tesseract is killed at ``deadline`` (``time.monotonic()``; at least 1 s is given so a nearly spent read still
    tries), since a hostile image can keep it busy for minutes.
    """
    if shutil.which("tesseract") is None:
        return "OCR unavailable: install tesseract-ocr"
    try:
        pytesseract = importlib.import_module("pytesseract")
    except ImportError:
        return "OCR unavailable: install the pytesseract package"
    try:
        left = deadline - time.monotonic()
        # pytesseract reads timeout=0 as "no limit", which is what an infinite deadline asks for.
        timeout = 0.0 if math.isinf(left) else max(1.0, left)
        text = str(pytesseract.image_to_string(image, timeout=timeout)).strip()
    except Exception as exc:  # noqa: BLE001  (OCR is a bonus: a failing tesseract must not lose the image facts)
        return f"OCR failed: {type(exc).__name__}: {exc}"
    return f"OCR text:\n{text}" if text else "OCR found no text"


# --- archives -------------------------------------------------------------------------------------


def _unsafe_member(name: str) -> bool:
    """True for member names that would land outside an extraction folder."""
    posix = name.replace("\\", "/")
    return posix.startswith("/") or bool(re.match(r"^[A-Za-z]:", posix)) or ".." in posix.split("/")


def _read_zip(data: bytes, name: str, ctx: _Context) -> str:
    if ctx.depth >= _ZIP_MAX_DEPTH:
        return f"[archive nested more than {_ZIP_MAX_DEPTH} levels deep: not opened]"
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = [info for info in archive.infolist() if not info.is_dir()]
        listing = [f"archive {name}: {len(members)} files"]
        listing += [f"  {info.filename} ({info.file_size:,} bytes){_member_flag(info)}" for info in members]
        out = ["\n".join(listing)]
        size = len(out[0])
        readable = [info for info in members if not _member_flag(info)]
        for index, info in enumerate(readable):
            if ctx.budget.zip_bytes_left <= 0 or size > ctx.max_chars:
                _skip(ctx, readable[index:], name)
                break
            inner = replace(ctx, max_chars=max(ctx.max_chars - size, 1), depth=ctx.depth + 1)
            block = f"=== {info.filename} ===\n{_render_member(archive, info, inner)}"
            out.append(block)
            size += len(block) + 2
        return "\n\n".join(out)


def _member_flag(info: zipfile.ZipInfo) -> str:
    """Why a member is not rendered, as a listing suffix; empty when it will be."""
    if _unsafe_member(info.filename):
        return "  [refused: absolute path or '..']"
    if info.flag_bits & 0x1:
        return "  [not read: encrypted]"
    suffix = _suffix(info.filename)
    if suffix in _AUDIO:
        return f"  [not read: {_AUDIO_MESSAGE}]"
    if suffix not in SUPPORTED:
        return f"  [not read: {suffix or 'no suffix'} is not a supported kind]"
    return ""


def _cap_text() -> str:
    mb = ZIP_MAX_BYTES / (1024 * 1024)
    return f"{mb:g} MB" if mb >= 1 else f"{ZIP_MAX_BYTES:,} bytes"


def _skip(ctx: _Context, infos: list[zipfile.ZipInfo], name: str) -> None:
    if ctx.budget.zip_bytes_left <= 0:
        reason = f"archive expands past {_cap_text()}"
    else:
        reason = "output limit reached"
    ctx.budget.not_read.append(f"{len(infos)} members of {name} ({reason})")


def _render_member(archive: zipfile.ZipFile, info: zipfile.ZipInfo, ctx: _Context) -> str:
    """Read one member into memory (within the byte cap) and render it; failures become a note."""
    budget = ctx.budget
    # Read at most one byte past the cap: header sizes can lie, the stream cannot.
    try:
        with archive.open(info) as stream:
            data = stream.read(budget.zip_bytes_left + 1)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, zlib.error) as exc:
        return f"[not read: member is corrupt ({type(exc).__name__}: {exc})]"
    if len(data) > budget.zip_bytes_left:
        budget.zip_bytes_left = 0
        return f"[not read: archive expands past {_cap_text()}]"
    budget.zip_bytes_left -= len(data)
    try:
        return _run(_reader_for(info.filename), data, info.filename, ctx)
    except ConfigError as exc:
        return f"[not read: {exc}]"


_READERS: dict[str, _Reader] = {
    **{suffix: _read_text for suffix in _TEXT},
    ".csv": _read_csv,
    ".json": _read_json,
    ".jsonl": _read_json,
    ".xlsx": _read_xlsx,
    ".docx": _read_docx,
    ".pptx": _read_pptx,
    ".pdf": _read_pdf,
    **{suffix: _read_image for suffix in _IMAGES},
    ".zip": _read_zip,
}

#: Suffixes :func:`read_file` renders (audio is known but refused with :class:`UnsupportedFile`).
SUPPORTED: tuple[str, ...] = tuple(_READERS)
