"""Hostile office attachments are bounded: decompressed size capped, parsing streamed and stopped, reads timed.

Every hostile file is built here, in tmp_path.  Also: a stateless tool that hangs gives the agent an error
observation at its deadline instead of holding the episode.
"""

from __future__ import annotations

import io
import struct
import threading
import time
import zipfile
from collections.abc import Iterable
from pathlib import Path

import anyio
import pytest

from agentspec.env import ToolkitEnvironment
from agentspec.snapshot import InProcessBackend
from agentspec.tools import Toolkit, tool
from agentspec.types import Effect, ToolCall
from agentspec.wrapped_backend import WithTools
from envs.gaia import files
from envs.gaia.bench import GaiaTools
from envs.gaia.dataset import GaiaTask
from envs.gaia.files import FileReadError, read_file

W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def write_docx(path: Path, body: Iterable[bytes], *, level: int = 6) -> Path:
    """A Word document (python-docx's blank one) whose word/document.xml is ``body`` in <w:document><w:body>."""
    docx = pytest.importorskip("docx")
    blank = io.BytesIO()
    docx.Document().save(blank)
    with zipfile.ZipFile(blank) as template, \
            zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=level) as archive:  # fmt: skip
        for info in template.infolist():
            if info.filename != "word/document.xml":
                archive.writestr(info.filename, template.read(info))
        with archive.open("word/document.xml", "w", force_zip64=True) as part:
            part.write(f'<?xml version="1.0"?><w:document {W}><w:body>'.encode())
            for chunk in body:
                part.write(chunk)
            part.write(b"</w:body></w:document>")
    return path


def paragraphs(count: int) -> Iterable[bytes]:
    batch = 10_000
    for start in range(0, count, batch):
        yield b"".join(b"<w:p><w:r><w:t>line %d of the minutes</w:t></w:r></w:p>" % i
                       for i in range(start, min(start + batch, count)))  # fmt: skip


def test_a_long_docx_is_streamed_and_stops_at_max_chars(tmp_path: Path) -> None:
    path = write_docx(tmp_path / "long.docx", paragraphs(300_000))  # 13 MB of XML
    started = time.monotonic()
    text = read_file(path, max_chars=2_000)
    elapsed = time.monotonic() - started
    assert text.startswith("line 0 of the minutes\nline 1 of the minutes")
    assert text.endswith("more characters left out, not read: the rest of the document]")
    assert elapsed < 1.0, f"reading the first 2,000 characters took {elapsed:.1f}s"


def test_a_docx_whose_xml_expands_past_the_cap_is_refused_before_parsing(tmp_path: Path) -> None:
    empty = b"<w:p/>" * 100_000
    path = write_docx(tmp_path / "bomb.docx", (empty for _ in range(90)), level=9)  # 54 MB of XML
    assert path.stat().st_size < 200_000
    started = time.monotonic()
    with pytest.raises(FileReadError, match=r"bomb.docx: its parts expand to 5\d MB, more than the 50 MB"):
        read_file(path)
    assert time.monotonic() - started < 1.0


def test_a_member_that_inflates_past_its_declared_size_is_refused(tmp_path: Path) -> None:
    path = write_docx(tmp_path / "liar.docx", paragraphs(20_000))
    # Rewrite word/document.xml's uncompressed size, in its local header and the central directory, to 1 KB.
    data = bytearray(path.read_bytes())
    info = zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo("word/document.xml")
    for offset in (info.header_offset + 22, _central_entry(data, "word/document.xml") + 24):
        struct.pack_into("<I", data, offset, 1024)
    path.write_bytes(bytes(data))
    with pytest.raises(FileReadError, match="liar.docx"):
        read_file(path)


def _central_entry(data: bytearray, name: str) -> int:
    """Offset of ``name``'s central directory entry."""
    at = data.index(b"PK\x01\x02")
    while True:
        name_length, extra_length, comment_length = struct.unpack_from("<HHH", data, at + 28)
        if data[at + 46: at + 46 + name_length].decode() == name:
            return at
        at += 46 + name_length + extra_length + comment_length


def test_a_docx_with_a_dtd_is_refused(tmp_path: Path) -> None:
    laughs = (b'<!DOCTYPE d [<!ENTITY a "ha"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
              b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]>')  # fmt: skip
    path = tmp_path / "laughs.docx"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("word/document.xml", b'<?xml version="1.0"?>' + laughs +
                         f"<w:document {W}><w:body><w:p><w:r><w:t>&c;</w:t></w:r></w:p></w:body></w:document>".encode())
    with pytest.raises(FileReadError, match="DTD or entities"):
        read_file(path)


def test_a_slow_read_stops_at_its_deadline(tmp_path: Path) -> None:
    path = write_docx(tmp_path / "long.docx", paragraphs(50_000))
    with pytest.raises(FileReadError, match=r"long.docx: reading took longer than 0s and was stopped"):
        read_file(path, deadline_s=0)


def test_the_office_cap_holds_for_xlsx_and_pptx_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    openpyxl = pytest.importorskip("openpyxl")
    pptx = pytest.importorskip("pptx")
    book = openpyxl.Workbook()
    book.active.append(["apples", 3])
    book.save(tmp_path / "book.xlsx")
    deck = pptx.Presentation()
    deck.slides.add_slide(deck.slide_layouts[5]).shapes.title.text = "Flurbs"
    deck.save(tmp_path / "deck.pptx")
    assert "apples | 3" in read_file(tmp_path / "book.xlsx") and "Flurbs" in read_file(tmp_path / "deck.pptx")
    monkeypatch.setattr(files, "OFFICE_MAX_BYTES", 1_000)
    for name in ("book.xlsx", "deck.pptx"):
        with pytest.raises(FileReadError, match=f"{name}: its parts expand to .* more than"):
            read_file(tmp_path / name)


def test_a_huge_slide_is_streamed_and_stops_at_max_chars(tmp_path: Path) -> None:
    pptx = pytest.importorskip("pptx")
    deck = pptx.Presentation()
    for title in ("Huge", "Never reached"):
        deck.slides.add_slide(deck.slide_layouts[5]).shapes.title.text = title
    deck.save(tmp_path / "small.pptx")
    shape = ('<p:sp><p:txBody><a:p><a:r><a:t>bullet {}</a:t></a:r></a:p></p:txBody></p:sp>')
    slide = ('<p:sld xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main" '
             'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main"><p:cSld><p:spTree>'
             + "".join(shape.format(i) for i in range(200_000)) + "</p:spTree></p:cSld></p:sld>")  # fmt: skip
    with zipfile.ZipFile(tmp_path / "small.pptx") as source, \
            zipfile.ZipFile(tmp_path / "huge.pptx", "w", zipfile.ZIP_DEFLATED) as target:  # fmt: skip
        for info in source.infolist():
            body = slide.encode() if info.filename == "ppt/slides/slide1.xml" else source.read(info)
            target.writestr(info.filename, body)
    started = time.monotonic()
    text = read_file(tmp_path / "huge.pptx", max_chars=500)
    assert time.monotonic() - started < 1.0
    assert text.startswith("--- slide 1 ---\nbullet 0\nbullet 1\n") and "Never reached" not in text
    assert text.endswith("not read: 1 more slides]")


# --------------------------------------------------------------------------- a deadline for every stateless tool


class Slow(Toolkit):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.release = threading.Event()

    @tool(Effect.READ_ONLY)
    def wait(self) -> str:
        """Wait a while."""
        self.release.wait(self.seconds)
        return "finished"


def backend_with(tools: Toolkit, deadline_s: float) -> WithTools:
    task = GaiaTask(id="t", question="?", level=1, answer="x", file_name=None, file_path=None)
    return WithTools(InProcessBackend(ToolkitEnvironment(GaiaTools(task, None), shared=True)), tools, deadline_s=deadline_s)


@pytest.mark.parametrize("backend_name", ["asyncio", "trio"])
def test_a_hanging_stateless_tool_becomes_an_error_observation_at_its_deadline(backend_name: str) -> None:
    slow = Slow(30)
    backend = backend_with(slow, deadline_s=0.3)

    async def call() -> tuple[str, bool, float]:
        started = time.monotonic()
        observation = await backend.execute(ToolCall(name="wait"))
        return observation.content, observation.error, time.monotonic() - started

    try:
        content, error, elapsed = anyio.run(call, backend=backend_name)
    finally:
        slow.release.set()
    assert error and content == "Error: the tool 'wait' took longer than 0.3s and was stopped"
    assert elapsed < 2.0


def test_on_the_virtual_clock_the_deadline_is_counted_in_real_time() -> None:
    """The mock clock jumps while every task waits: without care the deadline would fire before the tool ends."""
    from trio.testing import MockClock

    backend = backend_with(Slow(0.2), deadline_s=5)

    async def call() -> str:
        return (await backend.execute(ToolCall(name="wait"))).content

    assert anyio.run(call, backend="trio", backend_options={"clock": MockClock(autojump_threshold=0)}) == "finished"


def test_the_attachment_reader_is_a_bounded_tool(tmp_path: Path) -> None:
    path = write_docx(tmp_path / "minutes.docx", paragraphs(300_000))
    task = GaiaTask(id="t", question="?", level=1, answer="x", file_name="minutes.docx", file_path=path)
    observation = GaiaTools(task, None).run(ToolCall(name="read_attachment"))
    assert not observation.error and "not read: the rest of the document" in observation.content


# --- images -----------------------------------------------------------------------------------------------------------


def test_an_image_with_too_many_pixels_is_refused_before_decoding(tmp_path: Path) -> None:
    # 108 million blank pixels fit in a ~13 kB PNG; Pillow only *warns* below ~179 million, and the reader silences
    # warnings, so without a cap of its own the whole image would be decoded (and handed to OCR).
    image_module = pytest.importorskip("PIL.Image")
    path = tmp_path / "bomb.png"
    image_module.new("1", (12_000, 9_000)).save(path)
    assert path.stat().st_size < 100_000
    started = time.monotonic()
    with pytest.raises(FileReadError, match=r"12000x9000 pixels, more than the 40,000,000"):
        read_file(path)
    assert time.monotonic() - started < 2.0


def test_an_image_at_the_pixel_cap_is_still_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    image_module = pytest.importorskip("PIL.Image")
    monkeypatch.setattr(files.shutil, "which", lambda _: None)  # OCR of blank pixels is not what is under test
    path = tmp_path / "scan.png"
    image_module.new("1", (8_000, 5_000)).save(path)  # exactly 40 million pixels
    assert read_file(path).startswith("image: 8000x5000 pixels, mode 1, format PNG")


@pytest.mark.skipif(files.shutil.which("tesseract") is None, reason="needs the tesseract-ocr binary")
def test_ocr_is_stopped_at_the_read_deadline(tmp_path: Path) -> None:
    # A page of small dense text keeps tesseract busy for minutes on a slow machine.
    pytest.importorskip("pytesseract")
    image_module = pytest.importorskip("PIL.Image")
    draw_module = pytest.importorskip("PIL.ImageDraw")
    image = image_module.new("L", (3_000, 3_000), 255)
    draw = draw_module.Draw(image)
    for y in range(0, 3_000, 14):
        draw.text((0, y), "the quick brown fox jumps over 1234567890 " * 10, fill=0)
    path = tmp_path / "page.png"
    image.save(path)
    started = time.monotonic()
    text = read_file(path, deadline_s=0.5)  # tesseract still gets its 1 s minimum
    elapsed = time.monotonic() - started
    assert text.startswith("image: 3000x3000 pixels")  # the image facts survive a stopped OCR
    assert "OCR failed" in text and "timeout" in text
    assert elapsed < 5.0, f"a 0.5 s read took {elapsed:.1f}s"
