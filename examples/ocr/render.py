"""Draw lines of text into an image file, to try the pipeline with (and what the tests read back).

    python examples/ocr/render.py OUT.png "first line" ["second line" ...] [--font cjk] [--size 40]

Fonts are Debian's: fonts-dejavu-core (`sans`, `serif`) and fonts-wqy-microhei (`cjk`, for Chinese).
The page is white, at least 736 px on each side (the size the detector works at, so nothing is scaled
up), with the lines in black from the top left.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

FONTS = {
    "sans": Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"),
    "serif": Path("/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf"),
    "cjk": Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"),
}
PACKAGES = {"sans": "fonts-dejavu-core", "serif": "fonts-dejavu-core", "cjk": "fonts-wqy-microhei"}
MIN_SIDE = 736


def render(lines: list[str], font: str = "sans", size: int = 40, image_format: str = "PNG") -> bytes:
    """The bytes of an image file showing `lines`."""
    path = FONTS[font]
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: apt-get install {PACKAGES[font]}")
    face = ImageFont.truetype(str(path), size)
    step = int(size * 1.8)
    width = max(MIN_SIDE, max((int(face.getlength(line)) for line in lines), default=0) + 2 * size)
    height = max(MIN_SIDE, len(lines) * step + 2 * size)
    page = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(page)
    for index, line in enumerate(lines):
        draw.text((size, size + index * step), line, font=face, fill="black")
    out = io.BytesIO()
    page.save(out, image_format)
    return out.getvalue()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("out", type=Path, help="the image file to write; its suffix picks the format")
    parser.add_argument("lines", nargs="+")
    parser.add_argument("--font", choices=sorted(FONTS), default="sans")
    parser.add_argument("--size", type=int, default=40, help="font size in pixels")
    args = parser.parse_args()
    image_format = Image.registered_extensions().get(args.out.suffix.lower(), "PNG")
    args.out.write_bytes(render(args.lines, args.font, args.size, image_format))
    return 0


if __name__ == "__main__":
    sys.exit(main())
