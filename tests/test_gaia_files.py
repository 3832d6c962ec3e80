"""GAIA attachment readers: each kind renders its content, limits and refusals hold.

Every fixture file is made here, from made-up content, with the same libraries the readers use.
"""

from __future__ import annotations

import io
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from agentspec.errors import ConfigError
from envs.gaia import files
from envs.gaia.files import SUPPORTED, FileReadError, UnsupportedFile, read_file


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _minimal_pdf(lines_per_page: list[str]) -> bytes:
    """A valid PDF with one line of Helvetica text per page, written by hand (pypdf cannot add text)."""
    n = len(lines_per_page)
    font_id = 3 + 2 * n
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids ["
        + b" ".join(f"{3 + 2 * i} 0 R".encode() for i in range(n))
        + f"] /Count {n} >>".encode(),
    ]
    for i, line in enumerate(lines_per_page):
        stream = f"BT /F1 18 Tf 72 720 Td ({line}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font_id} 0 R >> >> >>".encode()
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n".encode() + stream + b"\nendstream")
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{off:010d} 00000 n \n".encode() for off in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    return bytes(out)


def _png_bytes(size: tuple[int, int] = (40, 20)) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", size, (200, 10, 10)).save(buffer, format="PNG")
    return buffer.getvalue()


# --- text kinds -------------------------------------------------------------------------------------


def test_plain_text_and_markdown_come_back_verbatim(tmp_path: Path) -> None:
    assert read_file(_write(tmp_path / "notes.TXT", "Zorblax owes 17 coins.\n")) == "Zorblax owes 17 coins.\n"
    assert "# Heading\n- item" in read_file(_write(tmp_path / "a.md", "# Heading\n- item\n"))


def test_non_utf8_text_still_reads(tmp_path: Path) -> None:
    path = tmp_path / "legacy.log"
    path.write_bytes("caf\u00e9 opened".encode("latin-1"))
    assert read_file(path) == "caf\u00e9 opened"


def test_html_keeps_visible_text_and_drops_scripts_and_styles(tmp_path: Path) -> None:
    html = (
        "<html><head><title>Quux report</title><style>p {color: red}</style>"
        "<script>var secret = 'hidden-token';</script></head>"
        "<body><h1>Totals</h1><p>Plinth count: <b>42</b> &amp; rising</p></body></html>"
    )
    text = read_file(_write(tmp_path / "page.html", html))
    assert "Quux report" in text
    assert "Totals" in text
    assert "Plinth count: 42 & rising" in text
    assert "hidden-token" not in text
    assert "color: red" not in text


def test_csv_renders_numbered_rows(tmp_path: Path) -> None:
    path = _write(tmp_path / "stock.csv", 'fruit,qty\nglimberry,3\n"snap, pea",11\n')
    assert read_file(path).splitlines() == ["1: fruit | qty", "2: glimberry | 3", "3: snap, pea | 11"]


def test_json_and_jsonl_are_pretty_printed(tmp_path: Path) -> None:
    text = read_file(_write(tmp_path / "d.json", json.dumps({"planet": "Vormix", "moons": [1, 2]})))
    assert text == json.dumps({"planet": "Vormix", "moons": [1, 2]}, indent=2)
    lines = read_file(_write(tmp_path / "d.jsonl", '{"id": 1}\n\n{"id": 2}\n'))
    assert '"id": 1' in lines and '"id": 2' in lines


def test_bad_json_is_a_read_error_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(FileReadError, match="broken.json"):
        read_file(_write(tmp_path / "broken.json", "{not json"))
    with pytest.raises(FileReadError, match="line 2"):
        read_file(_write(tmp_path / "broken.jsonl", '{"a": 1}\n{oops\n'))


# --- office and pdf ---------------------------------------------------------------------------------


def test_xlsx_renders_every_sheet_with_row_numbers(tmp_path: Path) -> None:
    openpyxl = pytest.importorskip("openpyxl")
    book = openpyxl.Workbook()
    first = book.active
    first.title = "Sales"
    first.append(["item", "units"])
    first.append(["wobble", 7])
    first["A5"] = "far row"
    first["B6"] = "=SUM(B2:B2)"  # no cached value: openpyxl does not compute formulas
    second = book.create_sheet("Costs")
    second.append(["rent", 1200.0])
    path = tmp_path / "book.xlsx"
    book.save(path)

    text = read_file(path)
    assert "--- sheet 'Sales' ---" in text and "--- sheet 'Costs' ---" in text
    assert "columns: A | B" in text
    assert "1: item | units" in text
    assert "2: wobble | 7" in text
    assert "5: far row" in text  # blank rows are skipped but positions are kept
    assert "6:  | =SUM(B2:B2)" in text
    assert "1: rent | 1200" in text


def test_big_xlsx_stops_reading_rows_past_the_limit(tmp_path: Path) -> None:
    openpyxl = pytest.importorskip("openpyxl")
    book = openpyxl.Workbook()
    for i in range(1, 501):
        book.active.append([f"row{i}", i])
    book.create_sheet("Other").append(["unseen"])
    path = tmp_path / "big.xlsx"
    book.save(path)
    text = read_file(path, max_chars=200)
    assert "1: row1 | 1" in text
    assert "row500" not in text and "unseen" not in text
    assert "1 more sheets" in text.splitlines()[-1]


def test_corrupt_xlsx_is_a_read_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.xlsx"
    path.write_bytes(b"PK\x03\x04 this is not really a workbook")
    with pytest.raises(FileReadError, match="bad.xlsx"):
        read_file(path)


def test_docx_renders_paragraphs_and_tables_in_order(tmp_path: Path) -> None:
    docx = pytest.importorskip("docx")
    document = docx.Document()
    document.add_heading("Expedition log", level=1)
    document.add_paragraph("Day one: the yak named Brindle ate the map.")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "camp"
    table.cell(0, 1).text = "altitude"
    table.cell(1, 0).text = "Kestrel Ridge"
    table.cell(1, 1).text = "4100"
    document.add_paragraph("Day two: rain.")
    path = tmp_path / "log.docx"
    document.save(str(path))

    text = read_file(path)
    assert "# Expedition log" in text
    assert "Brindle ate the map" in text
    assert "2: Kestrel Ridge | 4100" in text
    assert text.index("Brindle") < text.index("Kestrel Ridge") < text.index("Day two")


def test_pptx_renders_slide_by_slide(tmp_path: Path) -> None:
    pptx = pytest.importorskip("pptx")
    deck = pptx.Presentation()
    for title, body in [("Quarterly flurbs", "Up 12 percent"), ("Next steps", "Hire a zookeeper")]:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
    deck.slides[1].notes_slide.notes_text_frame.text = "speaker aside"
    path = tmp_path / "deck.pptx"
    deck.save(str(path))

    text = read_file(path)
    assert "--- slide 1 ---" in text and "--- slide 2 ---" in text
    assert text.index("Quarterly flurbs") < text.index("Up 12 percent") < text.index("--- slide 2 ---")
    assert text.index("--- slide 2 ---") < text.index("Hire a zookeeper")
    assert "notes: speaker aside" in text


def test_pdf_renders_text_page_by_page(tmp_path: Path) -> None:
    pytest.importorskip("pypdf")
    path = tmp_path / "memo.pdf"
    path.write_bytes(_minimal_pdf(["Gribble count is 93", "Second page here"]))
    text = read_file(path)
    assert "--- page 1 of 2 ---" in text and "--- page 2 of 2 ---" in text
    assert "Gribble count is 93" in text
    assert text.index("Gribble") < text.index("Second page here")


def test_blank_pdf_written_by_pypdf_reports_its_pages(tmp_path: Path) -> None:
    pypdf = pytest.importorskip("pypdf")
    writer = pypdf.PdfWriter()
    for _ in range(3):
        writer.add_blank_page(width=200, height=200)
    path = tmp_path / "blank.pdf"
    with path.open("wb") as handle:
        writer.write(handle)
    assert "--- page 3 of 3 ---" in read_file(path)


def test_long_pdf_stops_reading_pages_past_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "long.pdf"
    path.write_bytes(_minimal_pdf([f"Page text number {i} " + "x" * 40 for i in range(1, 21)]))
    text = read_file(path, max_chars=150)
    assert "Page text number 1" in text
    assert "Page text number 20" not in text
    assert "more pages" in text.splitlines()[-1]


# --- images -----------------------------------------------------------------------------------------


def test_image_reports_size_and_mode_and_says_when_ocr_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files.shutil, "which", lambda name: None)
    path = tmp_path / "photo.PNG"
    path.write_bytes(_png_bytes((40, 20)))
    text = read_file(path)
    assert "40x20 pixels" in text
    assert "mode RGB" in text
    assert "OCR unavailable: install tesseract-ocr" in text


def test_truncated_image_is_a_read_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.png"
    path.write_bytes(_png_bytes()[:30])
    with pytest.raises(FileReadError, match="cut.png"):
        read_file(path)


@pytest.mark.skipif(shutil.which("tesseract") is None, reason="the tesseract binary is not installed")
def test_ocr_reads_text_when_tesseract_is_installed(tmp_path: Path) -> None:
    pytest.importorskip("pytesseract")
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (900, 160), "white")
    ImageDraw.Draw(image).text((20, 40), "HELLO 4821", fill="black", font=ImageFont.load_default(size=72))
    path = tmp_path / "sign.png"
    image.save(path)
    assert "4821" in read_file(path)


# --- refusals and errors ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["talk.mp3", "talk.WAV", "talk.m4a", "talk.flac"])
def test_audio_is_unsupported_with_the_reason(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"\x00" * 16)
    with pytest.raises(UnsupportedFile, match="audio transcription needs a local speech model"):
        read_file(path)


def test_unknown_suffix_is_unsupported_and_lists_supported_ones(tmp_path: Path) -> None:
    path = _write(tmp_path / "model.blend", "?")
    with pytest.raises(UnsupportedFile, match=r"\.blend") as caught:
        read_file(path)
    assert ".xlsx" in str(caught.value) and ".pdf" in str(caught.value)
    assert isinstance(caught.value, ConfigError)


def test_missing_file_is_a_read_error(tmp_path: Path) -> None:
    with pytest.raises(FileReadError, match="does not exist"):
        read_file(tmp_path / "nowhere.txt")


def test_supported_lists_the_brief_kinds() -> None:
    for suffix in (".txt", ".csv", ".json", ".jsonl", ".xlsx", ".docx", ".pptx", ".pdf", ".png", ".zip"):
        assert suffix in SUPPORTED
    assert ".mp3" not in SUPPORTED


# --- the cut ----------------------------------------------------------------------------------------


def test_long_text_is_cut_with_a_note_saying_how_much_was_left_out(tmp_path: Path) -> None:
    path = _write(tmp_path / "big.txt", "a" * 100 + "b" * 250)
    text = read_file(path, max_chars=100)
    assert text.startswith("a" * 100)
    assert "b" not in text.split("\n\n[")[0]
    assert text.endswith("[cut at 100 characters: 250 more characters left out]")


def test_text_within_the_limit_has_no_note(tmp_path: Path) -> None:
    assert read_file(_write(tmp_path / "s.txt", "short"), max_chars=5) == "short"


def test_non_positive_max_chars_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="max_chars"):
        read_file(_write(tmp_path / "s.txt", "x"), max_chars=0)


# --- zip --------------------------------------------------------------------------------------------


def _zip(path: Path, members: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def test_zip_lists_members_and_renders_supported_ones(tmp_path: Path) -> None:
    inner = io.BytesIO()
    with zipfile.ZipFile(inner, "w") as nested:
        nested.writestr("deep/note.md", "nested marmot fact")
    path = _zip(
        tmp_path / "bundle.zip",
        {
            "docs/readme.txt": b"the vault code is 5150",
            "data/table.csv": b"k,v\nzeta,9\n",
            "media/clip.mp3": b"\x00" * 8,
            "bin/tool.exe": b"MZ",
            "inner.zip": inner.getvalue(),
        },
    )
    text = read_file(path)
    for name in ("docs/readme.txt", "data/table.csv", "media/clip.mp3", "bin/tool.exe", "inner.zip"):
        assert name in text
    assert "the vault code is 5150" in text
    assert "2: zeta | 9" in text
    assert "nested marmot fact" in text
    assert "audio transcription needs a local speech model" in text
    assert "MZ" not in text


def test_zip_refuses_members_that_escape_and_writes_nothing(tmp_path: Path) -> None:
    path = _zip(
        tmp_path / "evil.zip",
        {"../escape.txt": b"ESCAPED-CONTENT", "/etc/abs.txt": b"ABSOLUTE-CONTENT", "ok.txt": b"fine content"},
    )
    text = read_file(path)
    assert "../escape.txt" in text and "refused" in text
    assert "ESCAPED-CONTENT" not in text and "ABSOLUTE-CONTENT" not in text
    assert "fine content" in text
    assert not (tmp_path.parent / "escape.txt").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["evil.zip"]


def test_zip_stops_reading_at_the_byte_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files, "ZIP_MAX_BYTES", 1000)
    path = _zip(tmp_path / "bomb.zip", {"a.txt": b"A" * 600, "b.txt": b"B" * 600, "c.txt": b"C" * 10})
    text = read_file(path)
    assert "A" * 600 in text
    assert "B" * 600 not in text
    assert "not read" in text
    assert "C" * 10 not in text


def test_zip_output_is_cut_at_max_chars_and_names_unread_members(tmp_path: Path) -> None:
    path = _zip(tmp_path / "many.zip", {f"part{i}.txt": f"part {i} ".encode() * 30 for i in range(10)})
    text = read_file(path, max_chars=400)
    assert "part9.txt" in text  # the listing comes first and names every member
    note = text.splitlines()[-1]
    assert note.startswith("[cut at 400 characters:")
    assert "members of many.zip" in note
    assert len(text) < 400 + len(note) + 5


def test_corrupt_zip_is_a_read_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.zip"
    path.write_bytes(b"not a zip at all")
    with pytest.raises(FileReadError, match="junk.zip"):
        read_file(path)
