"""Send an image file to the OCR pipeline and print the text it reads.

    python tests/ocr_toy/client.py [IMAGE] [--url localhost:8000] [--model ocr]

IMAGE is a PGM or PPM file (netpbm P2, P5 or P6, 8-bit). Without one, the client draws TEXT (default
"HELLO NEREID\\n2026") with the example's font, saves it with --save if asked, and sends that.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import tritonclient.http as httpclient

sys.path.insert(0, str(Path(__file__).resolve().parent))

import font  # noqa: E402  (beside this script)


def read_text(
    client: httpclient.InferenceServerClient, model: str, image: bytes
) -> tuple[str, float, np.ndarray]:
    """The pipeline's answer for one image file: text, confidence, and the boxes of its characters."""
    tensor = httpclient.InferInput("IMAGE", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([image], dtype=np.object_))
    result = client.infer(model, [tensor])
    text = result.as_numpy("TEXT")[0].decode()
    return text, float(result.as_numpy("CONFIDENCE")[0]), result.as_numpy("BOXES")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("image", nargs="?", type=Path, help="a PGM or PPM file")
    parser.add_argument("--url", default="localhost:8000", help="the server's HTTP address")
    parser.add_argument("--model", default="ocr", help="the pipeline to call")
    parser.add_argument("--text", default="HELLO NEREID\n2026", help="what to draw when no image is given")
    parser.add_argument("--scale", type=int, default=4, help="pixels per font dot when drawing (2 or more)")
    parser.add_argument("--save", type=Path, help="where to save the drawn image")
    args = parser.parse_args()
    if args.image is not None:
        image = args.image.read_bytes()
    else:
        image = font.to_pgm(font.render(args.text.replace("\\n", "\n"), args.scale))
        if args.save is not None:
            args.save.write_bytes(image)
    with httpclient.InferenceServerClient(args.url) as client:
        text, confidence, boxes = read_text(client, args.model, image)
    print(text)
    print(f"({len(boxes)} characters, lowest confidence {confidence:.3f})", file=sys.stderr)


if __name__ == "__main__":
    main()
