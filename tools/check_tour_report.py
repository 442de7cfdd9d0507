#!/usr/bin/env python3
"""Checks the tour's report: report.html parses as XML (well-formed XHTML),
every section of the tour is there and ran (a section may be skipped for a
missing adapter feature, never for a failure), each section with a figure
holds an SVG with drawn marks, and report.json agrees with the page.

Usage: python3 tools/check_tour_report.py DIR   (DIR holds report.html and report.json)
Standard library only.
"""

import json
import sys
import xml.etree.ElementTree as ET

XHTML = "{http://www.w3.org/1999/xhtml}"
SVG = "{http://www.w3.org/2000/svg}"

# The tour's sections and the figures each must hold.
SECTIONS = {
    "tiling": [],
    "low-precision": ["low-precision-figure"],
    "padding": ["padding-sweep"],
    "gemv": [],
    "fusion": [],
    "rows": [],
    "divergence": ["divergence-figure"],
    "recompute": ["recompute-figure"],
    "coalescing": ["coalescing-figure"],
    "attention": ["attention-figure"],
    "fewer-bits": ["bytes-per-weight"],
    "roofline": ["roofline-figure"],
}


def fail(message):
    print(f"check_tour_report: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) != 2:
        fail("usage: check_tour_report.py DIR")
    folder = sys.argv[1]
    try:
        root = ET.parse(f"{folder}/report.html").getroot()
    except (OSError, ET.ParseError) as err:
        fail(f"report.html is missing or not well-formed: {err}")
    with open(f"{folder}/report.json", encoding="utf-8") as f:
        report = json.load(f)
    sections = {s.get("id"): s for s in root.iter(f"{XHTML}section")}
    for sid, figures in SECTIONS.items():
        if sid not in sections:
            fail(f"section {sid} is missing from report.html")
        text = "".join(sections[sid].itertext())
        if "Skipped on this adapter: failed" in text:
            fail(f"section {sid} failed: {text.strip()[:300]}")
        for fid in figures:
            fig = [f for f in sections[sid].iter(f"{XHTML}figure") if f.get("id") == fid]
            if not fig:
                fail(f"section {sid} has no figure {fid}")
            svgs = list(fig[0].iter(f"{SVG}svg"))
            marks = [e for svg in svgs for e in svg.iter() if e.tag in (f"{SVG}circle", f"{SVG}rect", f"{SVG}polyline", f"{SVG}path")]
            if not svgs or not marks:
                fail(f"figure {fid} of section {sid} has no SVG with drawn marks")
    json_ids = [s["id"] for s in report["sections"]]
    if json_ids != list(sections):
        fail(f"report.json's sections {json_ids} differ from the page's {list(sections)}")
    rows = sum(len(s["rows"]) for s in report["sections"])
    for s in report["sections"]:
        for r in s["rows"]:
            if not (r["seconds"] > 0):
                fail(f"section {s['id']}: row {r['variant']} has no time")
    print(f"check_tour_report: {len(sections)} sections, {rows} measured rows, every figure present")


if __name__ == "__main__":
    main()
