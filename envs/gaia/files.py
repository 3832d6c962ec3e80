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
(:data:`ZIP_MAX_BYTES`) against zip bombs, and so are all the parts of an
office file together (:data:`OFFICE_MAX_BYTES`, declared sizes checked before
reading and actual sizes while reading).  ``.docx``, ``.pptx`` and the rows of
``.xlsx`` sheets are stream-parsed, one row in memory at a time (at most
:data:`XLSX_MAX_ROWS` rows a sheet), and stop once ``max_chars`` is reached;
every read has a deadline (:data:`READ_DEADLINE_S`), checked while parsing,
after which it stops with a :class:`FileReadError`.
"""

from __future__ import annotations

import abc
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
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from types import ModuleType
from typing import Any
from xml.parsers import expat

from agentspec.errors import ConfigError

__all__ = ["IMAGE_MAX_PIXELS", "OFFICE_MAX_BYTES", "READ_DEADLINE_S", "SUPPORTED", "XLSX_MAX_ROWS", "ZIP_MAX_BYTES",
           "FileReadError", "UnsupportedFile", "read_file"]

#: Most uncompressed bytes read out of one archive, nested archives included.
ZIP_MAX_BYTES = 50 * 1024 * 1024
#: Most uncompressed bytes one office file (.docx, .xlsx, .pptx) may hold, all its parts together (media too: a reader
#: may be pointed at a part of any name).
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
    if isinstance(getattr(value, "text", None), str):  # an array formula: its text, not the object
        return str(value.text)
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
# An office file is a zip of parts. The declared sizes of all its parts (media included) are checked against
# OFFICE_MAX_BYTES before anything is read, and the bytes actually inflated are counted while reading. .docx and
# .pptx are parsed as a stream of XML events (expat; DTDs and entity declarations refused, as office files have
# none) that stops once max_chars of text is out. .xlsx streams the same way: openpyxl reads the workbook's small
# parts (its sheet list, relationships and styles, each a bounded number of elements), and the shared strings and
# the sheets' rows are streamed here, one row in memory at a time, each row turned into values by openpyxl's own
# cell parser. Every chunk and every row (blank ones too) checks the deadline.

#: Most rows one sheet may hold: Excel's own limit. A few KB of compressed XML can hold millions of empty rows.
XLSX_MAX_ROWS = 1_048_576
#: Most XML elements one row, or one shared string, may hold (Excel's 16,384 columns, a few elements each).
_MAX_SUBTREE_ELEMENTS = 16_384 * 8
#: Most XML elements a part read whole may hold (a workbook's sheet list, relationships, styles): each becomes
#: objects in memory (a styles part at the limit takes about 3 s and 250 MB). Excel allows 64,000 cell formats.
_MAX_WHOLE_PART_ELEMENTS = 200_000
#: Most shared formulas (each a parsed formula kept in memory) one sheet may define.
_MAX_SHARED_FORMULAS = 100_000
#: Deepest nesting of XML elements read (office files nest a few dozen deep); each open element costs memory.
_MAX_XML_DEPTH = 256


class _XmlEvents:
    """What a streaming reader implements: element start and end and character data.

    Names are local (``t``), or qualified (``{namespace}t``) where ``qualified`` is set.
    """

    qualified = False

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        pass

    def end(self, tag: str) -> None:
        pass

    def text(self, data: str) -> None:
        pass


def _read_xlsx(data: bytes, name: str, ctx: _Context) -> str:
    _require("openpyxl", "openpyxl", ".xlsx")
    with _office_archive(data, name) as archive:
        book = _Workbook.read(data, name, ctx)
        strings = _SharedStrings(name)
        if book.strings_part is not None and not _stream_xml(archive, book.strings_part, strings, ctx, name):
            raise FileReadError(f"cannot read {name}: its shared strings part {book.strings_part} is missing")
        out: list[str] = []
        size = 0
        for index, (title, part) in enumerate(book.sheets):
            sheet = _SheetRows(book, strings.values, title, ctx, name, out, size)
            _stream_xml(archive, part, sheet, ctx, name)
            sheet.finish()
            size = sheet.size
            if sheet.full:
                parts = [f"rows after row {sheet.last} of sheet '{title}'"] if sheet.more else []
                if index + 1 < len(book.sheets):
                    parts.append(f"{len(book.sheets) - index - 1} more sheets")
                if parts:
                    ctx.budget.not_read.append(" and ".join(parts))
                break
        return "\n".join(out)


@dataclass
class _Workbook:
    """What a workbook's small parts say: its worksheets (title, part) in order, where its shared strings are, and
    what the cells need to be read as openpyxl reads them (the date styles, the epoch)."""

    sheets: list[tuple[str, str]]
    strings_part: str | None
    epoch: Any
    date_formats: Any
    timedelta_formats: Any

    @classmethod
    def read(cls, data: bytes, name: str, ctx: _Context) -> _Workbook:
        excel = importlib.import_module("openpyxl.reader.excel")
        constants = importlib.import_module("openpyxl.xml.constants")
        stylesheet = importlib.import_module("openpyxl.styles.stylesheet")
        # openpyxl's reader, step by step, minus the steps that read whole sheets or strings (its read-only sheets
        # parse a sheet without a <dimension> to its end when they are made, keeping every row until then).
        reader = excel.ExcelReader(io.BytesIO(data), read_only=True, keep_links=False)
        reader.archive = _WholePartArchive(data, name, ctx)
        reader.read_manifest()
        reader.read_workbook()
        stylesheet.apply_stylesheet(reader.archive, reader.wb)
        sheets = [(sheet.name, rel.target) for sheet, rel in reader.parser.find_sheets()
                  if rel.target in reader.valid_files and "chartsheet" not in rel.Type]  # fmt: skip
        strings = reader.package.find(constants.SHARED_STRINGS)
        return cls(sheets=sheets, strings_part=strings.PartName[1:] if strings is not None else None,
                   epoch=reader.wb.epoch, date_formats=reader.wb._date_formats,
                   timedelta_formats=reader.wb._timedelta_formats)  # fmt: skip


class _WholePartArchive(zipfile.ZipFile):
    """The archive openpyxl reads its parts from (whole, into trees): each read checks the deadline, and a part of
    more than :data:`_MAX_WHOLE_PART_ELEMENTS` elements is refused before its tree is built."""

    def __init__(self, data: bytes, name: str, ctx: _Context) -> None:
        super().__init__(io.BytesIO(data))
        self._name, self._ctx = name, ctx

    def read(self, name: Any, pwd: bytes | None = None) -> bytes:
        part = name.filename if isinstance(name, zipfile.ZipInfo) else str(name)
        chunks, elements = [], 0
        with self.open(name, "r", pwd) as stream:
            while chunk := stream.read(_XML_CHUNK):
                self._ctx.budget.check_time(self._name)
                elements += chunk.count(b"<") - chunk.count(b"</")
                if elements > _MAX_WHOLE_PART_ELEMENTS:
                    raise FileReadError(f"cannot read {self._name}: {part} holds more than "
                                        f"{_MAX_WHOLE_PART_ELEMENTS:,} XML elements")  # fmt: skip
                chunks.append(chunk)
        return b"".join(chunks)


class _Subtrees(_XmlEvents, abc.ABC):
    """Builds each element named ``tag`` whose parent is named ``parent`` (a row of a sheet, a shared string) as an
    ElementTree element, hands it to :meth:`done` and forgets it: one in memory at a time, whatever the part's size.

    Names are qualified (``{namespace}local``), as openpyxl's parsers expect.
    """

    qualified = True
    parent = tag = ""

    def __init__(self, name: str) -> None:
        self.name = name
        self.path: list[str] = []  # the open elements above the subtree being built
        self.open: list[tuple[Any, list[str]]] = []  # the subtree's open elements, and their text so far
        self.elements = 0
        self.etree = importlib.import_module("xml.etree.ElementTree")

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        if self.open:
            self.elements += 1
            if self.elements > _MAX_SUBTREE_ELEMENTS:
                raise FileReadError(f"cannot read {self.name}: one {self.tag.rpartition('}')[2]} element holds more than "
                                    f"{_MAX_SUBTREE_ELEMENTS:,} XML elements")  # fmt: skip
            self.open.append((self.etree.SubElement(self.open[-1][0], tag, attrs), []))
        elif tag == self.tag and self.path and self.path[-1] == self.parent:
            self.elements = 1
            self.open.append((self.etree.Element(tag, attrs), []))
        else:
            self.path.append(tag)

    def end(self, tag: str) -> None:
        if not self.open:
            self.path.pop()
            return
        element, text = self.open.pop()
        if text:
            element.text = "".join(text)
        if not self.open:
            self.done(element)

    def text(self, data: str) -> None:
        if self.open:
            self.open[-1][1].append(data)

    @abc.abstractmethod
    def done(self, element: Any) -> None:
        """Take one whole element (each subclass keeps what it needs of it)."""


def _main(local: str) -> str:
    return "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}" + local


class _SharedStrings(_Subtrees):
    """The shared strings part: each ``<si>``'s text, as openpyxl reads it."""

    parent, tag = _main("sst"), _main("si")

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.values: list[str] = []
        self.from_tree = importlib.import_module("openpyxl.cell.text").Text.from_tree

    def done(self, element: Any) -> None:
        self.values.append(self.from_tree(element).content.replace("x005F_", ""))


class _SheetRows(_Subtrees):
    """One sheet's rows appended to ``out`` as numbered lines (blank rows skipped, their numbers kept), a formula
    standing in for a value Excel did not save, as openpyxl's read-only sheets give them; stops (``full``) once
    the output is past ``max_chars`` and the next non-blank row is seen (``more``)."""

    parent, tag = _main("sheetData"), _main("row")

    def __init__(self, book: _Workbook, strings: list[str], title: str, ctx: _Context, name: str,
                 out: list[str], size: int) -> None:
        super().__init__(name)
        parser = importlib.import_module("openpyxl.worksheet._reader").WorkSheetParser
        common = {"epoch": book.epoch, "date_formats": book.date_formats, "timedelta_formats": book.timedelta_formats}
        # One pass, two readings of each row: the values Excel last computed, and the formulas.
        self.values = parser(None, strings, data_only=True, **common)
        self.formulas = parser(None, strings, data_only=False, **common)
        self.title, self.ctx, self.out, self.size = title, ctx, out, size
        self.dimensions: tuple[int, int, int, int] | None = None
        self.header = False
        self.rows = 0
        self.next_row = 1
        self.last = 0
        self.full = self.more = False

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        if not self.open and self.path == [_main("worksheet")] and tag == _main("dimension") and not self.header:
            utils = importlib.import_module("openpyxl.utils.cell")
            self.dimensions = utils.range_boundaries(attrs.get("ref", ""))
        elif tag == self.parent and not self.open:
            self._header()
        super().start(tag, attrs)

    def finish(self) -> None:
        """At the end of the part (or where reading stopped): the header of a sheet without rows."""
        self._header()

    def _header(self) -> None:
        if self.header:
            return
        self.header = True
        utils = importlib.import_module("openpyxl.utils")
        header = f"--- sheet '{self.title}' ---"
        width = self.dimensions[2] if self.dimensions else 0
        if width:
            header += "\ncolumns: " + " | ".join(utils.get_column_letter(c) for c in range(1, width + 1))
        self.out.append(header)
        self.size += len(header) + 1

    def done(self, element: Any) -> None:
        self.ctx.budget.check_time(self.name)  # every row, blank ones too
        self.rows += 1
        if self.rows > XLSX_MAX_ROWS:
            raise FileReadError(f"cannot read {self.name}: sheet '{self.title}' has more than {XLSX_MAX_ROWS:,} rows, "
                                "more than Excel allows")  # fmt: skip
        number, values = self.values.parse_row(element)
        _, formulas = self.formulas.parse_row(element)
        self.values.row_dimensions.clear()  # row heights and the like, kept per row by openpyxl: not wanted here
        self.formulas.row_dimensions.clear()
        if len(self.formulas.shared_formulae) > _MAX_SHARED_FORMULAS:
            raise FileReadError(f"cannot read {self.name}: sheet '{self.title}' defines more than "
                                f"{_MAX_SHARED_FORMULAS:,} shared formulas")  # fmt: skip
        max_row = self.dimensions[3] if self.dimensions else None
        if max_row is not None and number > max_row:  # openpyxl stops at the sheet's declared last row
            raise _Enough
        if number < self.next_row:  # a row out of order, or repeated: openpyxl skips it
            return
        self.next_row = number + 1
        cells = self._cells(values, formulas)
        if not any(c is not None for c in cells):
            return
        if self.full:
            self.more = True
            raise _Enough
        line = _row_line(number, cells)
        self.out.append(line)
        self.size += len(line) + 1
        self.last = number
        if self.size > self.ctx.max_chars:
            self.full = True

    def _cells(self, values: list[dict[str, Any]], formulas: list[dict[str, Any]]) -> list[Any]:
        """The row's cells from column A (as ``ReadOnlyWorksheet`` pads them), each value or else its formula."""
        if not values:
            return []
        width = self.dimensions[2] if self.dimensions else values[-1]["column"]
        cells: list[Any] = [None] * width
        for value, formula in zip(values, formulas):
            column = value["column"]
            if 1 <= column <= width:
                cells[column - 1] = value["value"] if value["value"] is not None else formula["value"]
        return cells


class _Enough(Exception):
    """Raised inside an XML handler: the text wanted is out, stop parsing."""


def _check_office_sizes(archive: zipfile.ZipFile, name: str) -> None:
    """Refuse an office file whose parts (every one, whatever its name: a reader may be pointed at any) expand past
    :data:`OFFICE_MAX_BYTES` together, as their sizes are declared."""
    declared = sum(info.file_size for info in archive.infolist())
    if declared > OFFICE_MAX_BYTES:
        raise FileReadError(
            f"cannot read {name}: its parts expand to {declared / 2**20:,.0f} MB, more than the "
            f"{OFFICE_MAX_BYTES / 2**20:g} MB an office file may hold"
        )


def _office_archive(data: bytes, name: str) -> zipfile.ZipFile:
    archive = zipfile.ZipFile(io.BytesIO(data))
    _check_office_sizes(archive, name)
    return archive


def _local(name: str) -> str:
    """``namespace local`` (expat's namespace form) to ``local``."""
    return name.rsplit(" ", 1)[-1]


def _qualified(name: str) -> str:
    """``namespace local`` (expat's namespace form) to ``{namespace}local`` (ElementTree's)."""
    space, _, local = name.rpartition(" ")
    return f"{{{space}}}{local}" if space else local


def _attr(attrs: dict[str, str], local: str, namespace_ends: str = "") -> str:
    """The attribute named ``local`` (in a namespace whose URI ends with ``namespace_ends``), or ``""``."""
    for key, value in attrs.items():
        space, _, name = key.rpartition(" ")
        if name == local and space.endswith(namespace_ends):
            return value
    return ""


def _stream_xml(archive: zipfile.ZipFile, part: str, events: _XmlEvents, ctx: _Context, name: str) -> bool:
    """Feed ``part`` of ``archive`` to ``events``; False when the part is missing. Stops quietly on :class:`_Enough`.

    The inflated bytes are counted as they come (the declared sizes were checked already), the deadline is
    checked between chunks, and elements nested deeper than :data:`_MAX_XML_DEPTH` are refused.
    """
    try:
        info = archive.getinfo(part)
    except KeyError:
        return False
    parser = expat.ParserCreate(namespace_separator=" ")
    depth = 0

    convert = _qualified if events.qualified else _local

    def start(tag: str, attrs: dict[str, str]) -> None:
        nonlocal depth
        depth += 1
        if depth > _MAX_XML_DEPTH:
            raise FileReadError(f"cannot read {name}: {part} nests XML elements more than {_MAX_XML_DEPTH} deep")
        if events.qualified:
            attrs = {_qualified(key): value for key, value in attrs.items()}
        events.start(convert(tag), attrs)

    def end(tag: str) -> None:
        nonlocal depth
        depth -= 1
        events.end(convert(tag))

    parser.StartElementHandler = start
    parser.EndElementHandler = end
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
