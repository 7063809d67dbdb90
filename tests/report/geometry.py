"""Where an SVG figure draws: every coordinate of every element must lie on its canvas (0 ≤ x ≤ width,
0 ≤ y ≤ height), and every data mark (a ``circle`` with a tooltip) inside a plot frame (a ``rect`` of class ``frame``).

A figure whose scale is applied twice, or not at all, draws outside its canvas; these checks find it whatever the
data (used by the figure tests and on every SVG committed under docs/)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

COORDS = {"x": 0, "x1": 0, "x2": 0, "cx": 0, "y": 1, "y1": 1, "y2": 1, "cy": 1}
TOLERANCE = 1.0  # px: a stroke on the edge


def _size(root: ET.Element) -> tuple[float, float]:
    if "viewBox" in root.attrib:
        _, _, w, h = (float(v) for v in root.attrib["viewBox"].split())
        return w, h
    return float(root.attrib["width"]), float(root.attrib["height"])


def outside_canvas(svg: str) -> list[str]:
    """The elements (tag and attribute) with a coordinate off the canvas."""
    root = ET.fromstring(svg)
    size = _size(root)
    bad = []
    for el in root.iter():
        if el.get("transform"):  # a rotated label: its coordinates are in another frame
            continue
        tag = el.tag.rsplit("}", 1)[-1]
        for name, axis in COORDS.items():
            v = el.get(name)
            if v is not None and re.fullmatch(r"-?[\d.]+", v) and not -TOLERANCE <= float(v) <= size[axis] + TOLERANCE:
                bad.append(f"{tag} {name}={v} (canvas {size[0]:g}×{size[1]:g})")
        for pair in (el.get("points") or "").split():
            x, y = (float(c) for c in pair.split(","))
            if not (-TOLERANCE <= x <= size[0] + TOLERANCE and -TOLERANCE <= y <= size[1] + TOLERANCE):
                bad.append(f"{tag} point {pair} (canvas {size[0]:g}×{size[1]:g})")
    return bad


def marks_outside_frames(svg: str) -> list[str]:
    """The data marks (circles with a tooltip ``title``; a legend's have none) inside no plot frame, where the figure
    has frames."""
    root = ET.fromstring(svg)
    frames = [
        tuple(float(r.get(k, 0)) for k in ("x", "y", "width", "height"))
        for r in root.iter()
        if r.tag.endswith("rect") and "frame" in (r.get("class") or "").split()
    ]
    if not frames:
        return []
    bad = []
    marks = [e for e in root.iter() if e.tag.endswith("circle") and any(t.tag.endswith("title") for t in e)]
    for c in marks:
        x, y = float(c.get("cx", 0)), float(c.get("cy", 0))
        if not any(
            fx - TOLERANCE <= x <= fx + fw + TOLERANCE and fy - TOLERANCE <= y <= fy + fh + TOLERANCE
            for fx, fy, fw, fh in frames
        ):
            bad.append(f"circle at ({x:g}, {y:g})")
    return bad
