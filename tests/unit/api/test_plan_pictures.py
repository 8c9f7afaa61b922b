"""The planner's pictures: the PNG is a valid 640 × 400 image that draws what the SVG draws
(one coloured line per λ, the band when simulated), and ``Accept`` chooses among JSON, SVG and
PNG. No browser: the PNG is decoded with Pillow."""

from __future__ import annotations

import io
import struct
import zlib
from typing import Any

import numpy as np
import pytest
from PIL import Image

from service.api.negotiation import choose_media_type
from service.api.plan_png import plan_png
from service.api.plan_svg import COLOURS, HEIGHT, WIDTH, plan_curves, plan_svg

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _noise_plan() -> dict[str, Any]:
    return {
        "mechanism": "output_perturbation",
        "n": 200,
        "d": 4,
        "points": [
            {"epsilon": e, "regularization": lam, "expected_noise_norm": 8 / (200 * lam * e)}
            for e in (0.1, 0.5, 1.0)
            for lam in (0.01, 0.1)
        ],
    }


def _simulated_plan() -> dict[str, Any]:
    points = []
    for e in (0.05, 0.5, 5.0):
        mean = 0.6 + 0.05 * np.log10(e / 0.05)
        points.append(
            {
                "epsilon": e,
                "regularization": 0.01,
                "expected_noise_norm": 1.0,
                "simulated_accuracy": {"mean": mean, "p10": mean - 0.05, "p90": mean + 0.05},
            }
        )
    return {"mechanism": "objective_perturbation", "n": 600, "d": 4, "points": points}


def _chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    """The PNG's chunks (type, payload), each CRC checked."""
    assert data[:8] == PNG_SIGNATURE
    out, at = [], 8
    while at < len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind, payload = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
        assert zlib.crc32(kind + payload) == crc
        out.append((kind, payload))
        at += 12 + length
    return out


def _pixels_near(image: Image.Image, colour: str, tol: int = 40) -> int:
    rgb = np.asarray(image.convert("RGB"), dtype=np.int64)
    target = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
    return int(np.sum(np.all(np.abs(rgb - target) <= tol, axis=-1)))


@pytest.mark.parametrize("plan", [_noise_plan(), _simulated_plan()])
def test_the_png_is_a_valid_image_of_the_svgs_size(plan: dict[str, Any]) -> None:
    data = plan_png(plan)
    chunks = _chunks(data)
    assert chunks[0][0] == b"IHDR"
    assert chunks[-1][0] == b"IEND"
    width, height = struct.unpack(">II", chunks[0][1][:8])
    assert (width, height) == (WIDTH, HEIGHT)
    svg = plan_svg(plan)
    assert f'width="{WIDTH}" height="{HEIGHT}"' in svg
    image = Image.open(io.BytesIO(data))
    image.verify()  # a complete, uncorrupted PNG
    assert Image.open(io.BytesIO(data)).size == (WIDTH, HEIGHT)


def test_the_png_draws_one_line_per_lambda_in_the_svgs_colours() -> None:
    plan = _noise_plan()
    curves = plan_curves(plan)
    assert [c.regularization for c in curves.curves] == [0.01, 0.1]
    image = Image.open(io.BytesIO(plan_png(plan)))
    svg = plan_svg(plan)
    for curve, colour in zip(curves.curves, COLOURS, strict=False):
        assert curve.colour == colour
        assert f'stroke="{colour}"' in svg
        # a 2-pixel line across the plot: hundreds of pixels of the λ's colour
        assert _pixels_near(image, colour, tol=10) > 300
    # colours of λs the plan does not have are absent
    assert _pixels_near(image, COLOURS[2], tol=10) == 0


def test_the_simulated_png_shades_the_band() -> None:
    image = Image.open(io.BytesIO(plan_png(_simulated_plan())))
    # the 10–90 % band is the line colour at 15 % opacity on white
    band = "#" + "".join(
        f"{round(255 - 0.15 * (255 - int(COLOURS[0][i : i + 2], 16))):02x}" for i in (1, 3, 5)
    )
    assert _pixels_near(image, band, tol=6) > 2000


def test_an_empty_plan_still_renders() -> None:
    data = plan_png({"mechanism": "output_perturbation", "n": 1, "d": 1, "points": []})
    assert data.startswith(PNG_SIGNATURE)


OFFERS = ("application/json", "image/svg+xml", "image/png")


@pytest.mark.parametrize(
    ("accept", "chosen"),
    [
        (None, "application/json"),
        ("", "application/json"),
        ("*/*", "application/json"),
        ("application/json", "application/json"),
        ("image/svg+xml", "image/svg+xml"),
        ("image/png", "image/png"),
        ("image/svg+xml, */*", "image/svg+xml"),
        ("image/png, */*;q=0.8", "image/png"),
        ("image/png, image/svg+xml", "image/svg+xml"),
        ("image/png, image/svg+xml;q=0.5", "image/png"),
        ("image/svg+xml, application/json", "application/json"),
        ("application/json;q=0.1, image/png", "image/png"),
        ("image/*", "image/svg+xml"),
        ("image/*, image/svg+xml;q=0", "image/png"),
        ("text/csv", "application/json"),
        ("image/png;q=x", "application/json"),
    ],
)
def test_accept_negotiation(accept: str | None, chosen: str) -> None:
    assert choose_media_type(accept, OFFERS) == chosen
