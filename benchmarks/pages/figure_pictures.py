"""A reported study's figures as PNG pictures, for docs: each plotly figure of its dashboard
folder (`figures/<name>.json`) drawn alone by headless Chromium (1920x1080) and saved.

    .venv/bin/python benchmarks/pages/figure_pictures.py dashboards/paper_data_driven \\
        --figures critical_difference_paper fig2_cumulative_regret_paper --out docs/img/paper_data_driven

A picture is what the page shows, not a second drawing of the data: the JSON is the page's own.
"""

from __future__ import annotations

import argparse
import html
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[2]))  # the repo root, for the tests' helpers

from plotly.offline import get_plotlyjs

from tests.support.chromium_cdp import ensure_chromium, load_page

DRAWN = "!!document.querySelector('.js-plotly-plot svg.main-svg')"


def page_of(figure_json: str, title: str) -> str:
    """One figure, full window, plotly.js inline (no network)."""
    return f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<script>{get_plotlyjs()}</script><style>body{{margin:0;overflow:hidden}} #f{{width:1900px;height:1000px}}</style></head>
<body><div id="f"></div><script>
const fig = {figure_json};
fig.layout = Object.assign({{}}, fig.layout, {{width: 1900, height: 1000}});
fig.layout.margin = Object.assign({{}}, fig.layout.margin, {{b: 190}});  // room for a legend below the plot
Plotly.newPlot('f', fig.data, fig.layout, {{displayModeBar: false, staticPlot: true}});
</script></body></html>"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a study's dashboard folder (what `report` wrote)")
    parser.add_argument("--figures", nargs="+", required=True, help="figure names: figures/<name>.json")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    missing = [name for name in args.figures if not (args.folder / "figures" / f"{name}.json").is_file()]
    if missing:
        print(f"figures: no {', '.join(missing)} in {args.folder / 'figures'}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    chromium = ensure_chromium()
    scratch = Path(tempfile.mkdtemp(prefix="wdrbo-pictures-"))
    try:
        for name in args.figures:
            source = scratch / f"{name}.html"
            source.write_text(page_of((args.folder / "figures" / f"{name}.json").read_text(), name), encoding="utf-8")
            load_page(chromium, source.as_uri(), scratch / f"profile-{name}", {}, DRAWN,
                      screenshot=args.out / f"{name}.png")
            print(f"wrote {args.out / f'{name}.png'}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
