"""Read the text in an image through the OCR pipeline of a running Nereid (or Triton).

    python examples/ocr/client.py IMAGE [-u HOST:PORT] [-m ocr|ocr_bls] [-i http|grpc] [--json]

Prints one line per text region in reading order, and nothing else; with --json, one JSON object with
each region's text, box (four corners, clockwise from top left, in the image's pixels) and score.
IMAGE is any image file Pillow reads (PNG, JPEG, ...); the server decodes it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np


def read_text(client: Any, model: str, image: bytes, protocol: str = "http") -> list[tuple[str, list, float]]:
    """[(text, box, score)] for each region, through a tritonclient client of either protocol."""
    if protocol == "grpc":
        import tritonclient.grpc as module
    else:
        import tritonclient.http as module  # type: ignore[no-redef]
    tensor = module.InferInput("IMAGE", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([image], dtype=np.object_))
    outputs = [module.InferRequestedOutput(name) for name in ("TEXT", "BOXES", "SCORES")]
    result = client.infer(model, [tensor], outputs=outputs)
    texts = [t.decode("utf-8") for t in result.as_numpy("TEXT").reshape(-1)]
    boxes = result.as_numpy("BOXES").reshape(-1, 4, 2).tolist()
    scores = result.as_numpy("SCORES").reshape(-1).tolist()
    return list(zip(texts, boxes, scores, strict=True))


def connect(url: str, protocol: str) -> Any:
    if protocol == "grpc":
        import tritonclient.grpc as grpcclient

        return grpcclient.InferenceServerClient(url)
    import tritonclient.http as httpclient

    return httpclient.InferenceServerClient(url)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("image", type=Path, help="an image file (PNG, JPEG, any format Pillow reads)")
    parser.add_argument("-u", "--url", help="server address (default localhost:8000, gRPC localhost:8001)")
    parser.add_argument("-m", "--model", default="ocr", choices=["ocr", "ocr_bls"], help="the pipeline")
    parser.add_argument("-i", "--protocol", default="http", choices=["http", "grpc"])
    parser.add_argument("--json", action="store_true", help="print boxes and scores too, as JSON")
    args = parser.parse_args(argv)
    url = args.url or ("localhost:8001" if args.protocol == "grpc" else "localhost:8000")
    from tritonclient.utils import InferenceServerException

    try:
        with connect(url, args.protocol) as client:
            regions = read_text(client, args.model, args.image.read_bytes(), args.protocol)
    except (OSError, InferenceServerException) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        found = [{"text": t, "box": b, "score": round(s, 4)} for t, b, s in regions]
        print(json.dumps({"regions": found}, ensure_ascii=False))
    else:
        for text, _, _ in regions:
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
