"""A batched torch rasteriser for the planar scenes: discs and capsules (thick segments).

Every shape carries one position per sub-env, so ``N`` scenes are drawn at once into uint8
``[N, H, W, 3]`` images on any device. Edges are anti-aliased from the signed distance, which keeps
sub-pixel positions visible in a 64 × 64 observation.

World frame: the image covers the square ``[-extent, extent]²`` centred on ``center``, x to the
right and y up (row 0 is the top of the image).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

Color = tuple[int, int, int]


@dataclass
class Disc:
    """A filled disc: ``center`` ``[N, 2]`` (m), ``radius`` (m), RGB ``color``."""

    center: torch.Tensor
    radius: float
    color: Color


@dataclass
class Capsule:
    """A segment ``start`` → ``end`` (each ``[N, 2]``) thickened by ``radius`` (m) on every side."""

    start: torch.Tensor
    end: torch.Tensor
    radius: float
    color: Color


Shape = Disc | Capsule


def _signed_distance(shape: Shape, px: torch.Tensor, py: torch.Tensor) -> torch.Tensor:
    """Signed distance ``[n, H, W]`` from each pixel centre to ``shape`` (negative inside)."""
    if isinstance(shape, Disc):
        dx = px - shape.center[:, 0, None, None]
        dy = py - shape.center[:, 1, None, None]
        return torch.sqrt(dx * dx + dy * dy) - shape.radius
    # Closest point on the segment: a + t (b - a), t = clamp(<p - a, b - a> / |b - a|², 0, 1).
    ax, ay = shape.start[:, 0, None, None], shape.start[:, 1, None, None]
    abx = shape.end[:, 0, None, None] - ax
    aby = shape.end[:, 1, None, None] - ay
    denom = (abx * abx + aby * aby).clamp_min(1e-12)
    t = (((px - ax) * abx + (py - ay) * aby) / denom).clamp(0.0, 1.0)
    dx = px - (ax + t * abx)
    dy = py - (ay + t * aby)
    return torch.sqrt(dx * dx + dy * dy) - shape.radius


def _slice(shape: Shape, rows: slice) -> Shape:
    if isinstance(shape, Disc):
        return Disc(shape.center[rows], shape.radius, shape.color)
    return Capsule(shape.start[rows], shape.end[rows], shape.radius, shape.color)


def rasterize(
    shapes: Sequence[Shape],
    size: int,
    extent: float,
    background: Color = (235, 235, 235),
    center: tuple[float, float] = (0.0, 0.0),
    chunk: int = 512,
) -> torch.Tensor:
    """Draw ``shapes`` (later ones on top) for every sub-env; return uint8 ``[N, size, size, 3]``.

    ``chunk`` bounds memory: the float canvas of ``chunk`` scenes exists at a time (the loop runs
    over chunks of sub-envs, never over single sub-envs).
    """
    if not shapes:
        raise ValueError("rasterize needs at least one shape (it takes N and the device from them)")
    first = shapes[0]
    ref = first.center if isinstance(first, Disc) else first.start
    n, device = ref.shape[0], ref.device
    pixel = 2.0 * extent / size
    # Pixel centres in world coordinates; px is [1, 1, W], py is [1, H, 1] so they broadcast.
    coords = (torch.arange(size, device=device, dtype=torch.float32) + 0.5) * pixel - extent
    px = (coords + center[0]).view(1, 1, size)
    py = (center[1] - coords).view(1, size, 1)
    bg = torch.tensor(background, device=device, dtype=torch.float32)
    out = torch.empty(n, size, size, 3, dtype=torch.uint8, device=device)
    for lo in range(0, n, chunk):
        rows = slice(lo, min(lo + chunk, n))
        canvas = bg.expand(rows.stop - lo, size, size, 3).clone()
        for shape in shapes:
            part = _slice(shape, rows)
            # Coverage of a pixel by the shape, linear across one pixel width of the edge.
            alpha = (0.5 - _signed_distance(part, px, py) / pixel).clamp(0.0, 1.0).unsqueeze(-1)
            color = torch.tensor(shape.color, device=device, dtype=torch.float32).expand_as(canvas)
            canvas.lerp_(color, alpha)  # canvas + alpha (color - canvas), in one pass
        out[rows] = canvas.round().clamp(0, 255).to(torch.uint8)
    return out
