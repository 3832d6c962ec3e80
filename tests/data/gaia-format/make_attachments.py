"""Write the binary attachments of our GAIA-format fixtures (docx, pptx, pdf, png, zip, xlsx) from their text.

Every word in them is made up for agentspec's tests (see README.md).  Run it from anywhere with the venv that has
the ``gaia`` extra: ``.venv/bin/python tests/data/gaia-format/make_attachments.py``; the files are committed, so
the tests never need to run it.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
FIXED_TIME = (2026, 1, 1, 0, 0, 0)  # zip members with a fixed date: the archive is the same on every run


def write_docx(path: Path) -> None:
    import docx

    document = docx.Document()
    document.add_heading("Harbour society: minutes of the winter meeting", level=1)
    document.add_paragraph("The spring meeting was moved to the Lantern Room because the hall is being repainted.")
    table = document.add_table(rows=3, cols=2)
    for row, (season, room) in zip(table.rows, [("Season", "Room"), ("Winter", "Main Hall"), ("Spring", "Lantern Room")]):
        row.cells[0].text, row.cells[1].text = season, room
    document.save(path)


def write_pptx(path: Path) -> None:
    from pptx import Presentation
    from pptx.util import Inches

    deck = Presentation()
    slides = [
        ("Beach clean-up", "Saturday, nine o'clock, by the old pier."),
        ("Equipment", "Gloves, bags and litter pickers are provided."),
        ("Volunteers", "We need 17 volunteers for the north beach."),
    ]
    for title, body in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[5])  # title only
        slide.shapes.title.text = title
        box = slide.shapes.add_textbox(Inches(1), Inches(2), Inches(8), Inches(1))
        box.text_frame.text = body
    deck.save(path)


def write_pdf(path: Path) -> None:
    """A one-page PDF written by hand (Helvetica text), so no PDF writer is needed."""
    lines = ["Invoice from Gull Point Chandlery", "Reference code: KV-2291", "Total due: 312.40 EUR"]
    text = "BT /F1 14 Tf 72 720 Td 18 TL " + " ".join(f"({line}) '" for line in lines) + " ET"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(text), text.encode("latin-1")),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.write_bytes(bytes(out))


def write_png(path: Path) -> None:
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (700, 160), "white")
    ImageDraw.Draw(image).text((40, 40), "LIGHTHOUSE", fill="black", font=ImageFont.load_default(size=64))
    image.save(path, optimize=True)


def write_zip(path: Path) -> None:
    tables = {
        "tides/monday.csv": "time,height_m\n06:10,4.2\n18:35,3.9\n",
        "tides/tuesday.csv": "time,height_m\n06:55,4.7\n19:20,4.1\n",
    }
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in tables.items():
            archive.writestr(zipfile.ZipInfo(name, FIXED_TIME), text)


def main() -> None:
    write_docx(HERE / "minutes.docx")
    write_pptx(HERE / "cleanup.pptx")
    write_pdf(HERE / "invoice.pdf")
    write_png(HERE / "sign.png")
    write_zip(HERE / "tides.zip")
    (HERE / "numbers.txt").write_text(" ".join(str(n) for n in (3, 14, 15, 92, 65, 35, 89, 79)) + "\n")


if __name__ == "__main__":
    main()
