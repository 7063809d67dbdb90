"""The HTML report: escaping, sections, TRACE peak windows, figure export, CLI and bad input, a real run in Chromium.

Every test but the last reads a synthetic run (fast); the last reads the session's shared real run (`real_run`).
Run directories are read and changed only through `RunStore`.
"""

from __future__ import annotations

import html
import itertools
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from tracecal.cli.report import report_command
from tracecal.evaluation.runstore import TRACES, RunStore
from tracecal.report import PAGE_SIZE, example_payload, load_run, peak_windows, write_report
from tracecal.report.svg import XML_PROLOG
from tracecal.signals.operators import Segments, window_peak
from tracecal.testing import write_synthetic_run

XSS = "<script>alert(1)</script>"
EVIL_EST = 'evil<img src=x onerror="alert(2)">'
SECTIONS = ("overview", "results", "statistics", "reliability", "risk-coverage", "histograms", "examples")


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small synthetic run with markup planted in a question, an answer, a gold, a token and a name."""
    run = tmp_path_factory.mktemp("synth") / "run"
    write_synthetic_run(
        run,
        tasks=("triviaqa", "svamp"),
        n_per_task=30,
        estimators=("trace", "trace_plus", "p_true", EVIL_EST),
        n_seeds=3,
        seed=1,
        overrides={
            ("triviaqa", 0): {
                "question": f"What does {XSS} do? </script><!-- & ",
                "answer": f"It runs {XSS}",
                "golds": [XSS, "gold & co"],
                "tokens": ["It", " runs", " <script>", "alert(1)", "</script>"],
            }
        },
    )
    return run


def _data_blob(page: str) -> dict:  # type: ignore[type-arg]
    m = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', page, re.S)
    assert m, "no #report-data element"
    return json.loads(m.group(1))


def test_report_escapes_text_and_has_every_section(synth: Path, tmp_path: Path) -> None:
    out = write_report(synth, out=tmp_path / "r.html")
    page = out.read_text(encoding="utf-8")
    # no markup from the data survives: the planted strings appear only escaped
    assert XSS not in page and "<img src=x" not in page and "<!-- &" not in page
    assert page.count("<script") == 3  # error recorder, JSON data, main script: nothing injected
    assert html.escape(EVIL_EST) in page  # estimator name escaped in the table and figures
    assert "\\u003cscript\\u003ealert(1)\\u003c/script\\u003e" in page  # JSON blob: < > escaped
    # the JSON round-trips to exactly the original text (the browser renders it with textContent)
    data = _data_blob(page)
    first = data["ex"][0]
    assert first[1] == "triviaqa-0" and first[2] == f"What does {XSS} do? </script><!-- & "
    assert first[5] == f"It runs {XSS}" and first[3][0] == XSS
    assert first[9] == ["It", " runs", " <script>", "alert(1)", "</script>"]
    assert "innerHTML" not in page  # the page only ever uses textContent for data
    # sections, self-containment
    for sec in SECTIONS:
        assert f'<section id="{sec}">' in page
    assert 'http-equiv="Content-Security-Policy"' in page
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page), "external resources referenced"
    # results table: 2 tasks × 4 estimators, with n and base rate columns; 30 answers a task are too few to rank
    # (fewer than 50 correct): no average, no best marked
    table = page[page.index('id="results-table"') :]
    table = table[: table.index("</table>")]
    assert table.count("<tr data-task=") == 2 * 4 and table.count('class="not-ranked"') == 2 * 4
    assert 'class="best"' not in table
    assert "base rate" in table and ">30<" in table
    # one reliability and one histogram panel per estimator and task; one risk-coverage chart per task
    assert page.count('aria-label="reliability ') == 2 * 4
    assert page.count('aria-label="histogram ') == 2 * 4
    assert page.count('aria-label="risk-coverage ') == 2
    assert re.search(r"ECE \d\.\d{3} · n=\d+", page)


def test_payload_aligns_predictions_and_traces_by_id(synth: Path, tmp_path: Path) -> None:
    """Reordered predictions and trace rows still join on (task, id)."""
    run = tmp_path / "run"
    shutil.copytree(synth, run)
    store = RunStore(run)
    base = example_payload(load_run(synth, ["trace"]), ["trace"])
    pred = store.read_table("predictions")
    store.write_table("predictions", pred.take(np.arange(pred.num_rows)[::-1]))
    assert store.shard_count(TRACES, "svamp") == 1
    t = store.read_pass(TRACES, "svamp")
    store.write_shard(TRACES, "svamp", 0, t.take(np.arange(t.num_rows)[::-1]))
    moved = example_payload(load_run(store, ["trace"]), ["trace"])
    assert moved["ex"] == base["ex"]
    assert sum(r[8] == "eval" for r in base["ex"]) > 0
    assert all((r[14][0] is None) == (r[8] == "cal") for r in base["ex"])
    limited = example_payload(load_run(synth, ["trace"]), ["trace"], max_examples=5)
    assert len(limited["ex"]) == 10 and [r[1] for r in limited["ex"][:2]] == ["triviaqa-0", "triviaqa-1"]


def test_synthetic_run_is_written_in_the_format_of_evaluate(synth: Path) -> None:
    store = RunStore(synth)
    doc = store.config()
    assert doc["identity"]["shard_size"] == 64 and doc["config"]["tasks"] == ["triviaqa", "svamp"]
    assert {t.id for t in store.read_traces("svamp")} == {f"svamp-{i}" for i in range(30)}
    assert store.table_columns("rows")[:2] == ["task", "id"] and "n_tokens" in store.table_columns("rows")
    assert {"split", "correct", "raw:trace", "prob:trace"} <= set(store.table_columns("predictions"))
    assert "trace" in store.table_columns("scores")
    res = store.read_results()
    assert set(res) == {"config", "tasks", "metrics", "estimators", "substitutes", "timings"}
    assert set(res["metrics"]) == {"triviaqa", "svamp"}  # 30 answers each: not ranked, so no average over them
    assert {"generate/triviaqa", "generate/svamp"} <= set(res["timings"])


def test_peak_windows_match_window_peak() -> None:
    rng = np.random.default_rng(0)
    lengths = np.array([0, 1, 3, 4, 5, 9, 17, 64, 2, 0, 33])
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    h = rng.exponential(1.0, offsets[-1])
    h[offsets[6] : offsets[6] + 8] = 1.0  # a tie: equal windows everywhere in answer 6 ...
    h[offsets[6] + 8 :] = 0.5  # ... the first of them wins
    start, length = peak_windows(h, offsets, 4)
    peak = window_peak(h, Segments(offsets), 4)
    for i, (a, b) in enumerate(zip(offsets[:-1], offsets[1:], strict=True)):
        T = b - a
        assert length[i] == min(T, 4)
        if T == 0:
            assert np.isnan(peak[i])
            continue
        if T < 4:
            assert start[i] == 0
        assert 0 <= start[i] <= T - length[i]
        assert np.mean(h[a + start[i] : a + start[i] + length[i]]) == pytest.approx(peak[i], rel=1e-12)
    assert start[6] == 0
    h[offsets[7] : offsets[8]] = np.nan  # NaN entropy never yields a window outside the answer
    start, length = peak_windows(h, offsets, 4)
    assert start[7] == 0 and length[7] == 4
    with pytest.raises(ValueError):
        peak_windows(h, offsets, 0)


def test_estimator_selection_and_figure_export(synth: Path, tmp_path: Path) -> None:
    figs = tmp_path / "figs"
    out = write_report(synth, out=tmp_path / "sel.html", figures_dir=figs, estimators="trace,p_true")
    page = out.read_text(encoding="utf-8")
    assert page.count('aria-label="reliability ') == 2 * 2 and "trace_plus" not in page
    names = sorted(p.name for p in figs.iterdir())
    assert names == sorted(
        [f"{kind}_{t}.svg" for kind in ("reliability", "risk_coverage", "histogram") for t in ("triviaqa", "svamp")]
        + ["overview_not_ranked.svg", "where_wrong.svg"]  # both tasks too small to rank: their overview apart
    )
    for p in figs.iterdir():  # one drawing code: each file is the very SVG document the page shows
        svg = p.read_text(encoding="utf-8")
        assert svg.startswith(XML_PROLOG + '<svg xmlns="http://www.w3.org/2000/svg"') and svg.endswith("</svg>")
        assert svg[len(XML_PROLOG) :] in page
        assert "<script" not in svg and "href" not in svg
    assert "p_true" in (figs / "reliability_triviaqa.svg").read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="not in this run"):
        write_report(synth, out=tmp_path / "x.html", estimators="trace,nope")
    with pytest.raises(FileNotFoundError, match="not found"):
        write_report(tmp_path / "missing")


def _cli() -> typer.Typer:
    app = typer.Typer()
    app.command("report")(report_command)
    app.command("noop")(lambda: None)  # two commands: `report` stays a subcommand
    return app


def test_cli_report_command(synth: Path, tmp_path: Path) -> None:
    out = tmp_path / "cli.html"
    res = CliRunner().invoke(
        _cli(), ["report", str(synth), "--out", str(out), "--estimators", "trace,trace_plus", "--max-examples", "3"]
    )
    assert res.exit_code == 0, res.output
    assert out.exists() and len(_data_blob(out.read_text(encoding="utf-8"))["ex"]) == 6


def _damage_results(store: RunStore, text: str) -> None:
    """Overwrite the run's results file with ``text`` (what a hand edit or a full disk leaves behind)."""
    store.write_text("results.json", text)


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing", "run directory not found"),
        ("empty folder", "a scored run directory (tracecal evaluate)?"),
        ("unscored run", "has not been scored yet"),
        ("file", "is a file, not a run directory"),
        ("results not JSON", "not JSON at line"),
        ("results of another shape", "are damaged"),
        ("unknown estimator", "estimator(s) not in this run: nope"),
    ],
)
def test_cli_report_on_bad_input_exits_with_a_message(synth: Path, tmp_path: Path, case: str, message: str) -> None:
    target, args = tmp_path / "run", []
    if case == "empty folder":
        target.mkdir()
    elif case == "unscored run":
        RunStore(target).open({"tasks": ["triviaqa"]}, {"limit": 3})
    elif case == "file":
        target.write_text("not a run", encoding="utf-8")
    elif case in ("results not JSON", "results of another shape"):
        shutil.copytree(synth, target)
        if case == "results not JSON":
            _damage_results(RunStore(target), '{"config": {"tasks": [')
        else:
            RunStore(target).write_results({"metrics": [1, 2]}, "", "")  # type: ignore[arg-type]
    elif case == "unknown estimator":
        target, args = synth, ["--estimators", "trace,nope"]
    res = CliRunner().invoke(_cli(), ["report", str(target), *args, "--out", str(tmp_path / "r.html")])
    assert res.exit_code == 2, res.output
    assert isinstance(res.exception, SystemExit) and "Traceback" not in res.output
    assert "error:" in res.output and message in res.output, res.output
    assert not (tmp_path / "r.html").exists()
    with pytest.raises(ValueError, match=re.escape(message)):  # the API: RunStoreError / NotARunError, ValueError
        write_report(target, out=tmp_path / "r.html", estimators=args[1] if args else None)


# ------------------------------------------------------------------------------------- real run in Chromium
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--enable-logging=stderr",
    "--v=0",
)


def _chromium() -> str:
    path = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if path is None:
        pytest.fail(
            "chromium not found: the report's browser test needs Debian's chromium "
            "(scripts/setup.sh --test installs it: apt-get install -y chromium)"
        )
    return path


def _run_chromium(args: list[str], tmp: Path) -> subprocess.CompletedProcess[str]:
    cmd = [_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp / 'chromium-profile'}", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


class _Tokens(HTMLParser):
    """Collects the text of every ``span.tok`` inside ``article[data-id=...]`` and the ``#js-errors`` items."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.article: str | None = None
        self.depth = 0
        self.in_tok = False
        self.in_err = False
        self.tokens: dict[str, list[str]] = {}
        self.errors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "article":
            self.article = a.get("data-id")
            self.tokens[self.article or ""] = []
        if tag == "span" and "tok" in (a.get("class") or "").split() and self.article is not None:
            self.in_tok = True
            self.tokens[self.article].append("")
        if a.get("id") == "js-errors":
            self.in_err = True
        if tag == "li" and self.in_err:
            self.errors.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "span":
            self.in_tok = False
        if tag == "article":
            self.article = None
        if tag == "ul":
            self.in_err = False

    def handle_data(self, data: str) -> None:
        if self.in_tok and self.article is not None:
            self.tokens[self.article][-1] += data
        if self.in_err and self.errors:
            self.errors[-1] += data


def test_report_of_a_real_run_loads_in_headless_chromium(tmp_path: Path, real_run: Path) -> None:
    _chromium()  # fail early when the browser is missing
    run = tmp_path / "run"
    shutil.copytree(real_run, run)  # the shared run stays as the fixture made it
    store = RunStore(run)
    out = write_report(run)  # (figure export is covered on the synthetic run above)
    assert out == store.artefact_path("report.html") and out.stat().st_size < 20e6
    n = sum(len(store.read_traces(t)) for t in ("triviaqa", "svamp"))
    known = store.read_traces("triviaqa")[0]
    assert n > 0 and known.token_strings, "the known example has tokens"

    res = _run_chromium(["--dump-dom", out.resolve().as_uri()], tmp_path)
    dom = res.stdout
    assert res.returncode == 0 and "</html>" in dom, res.stderr[-2000:]
    console = [ln for ln in res.stderr.splitlines() if ":CONSOLE" in ln]
    assert not console, f"console messages: {console}"
    assert 'data-ready="1"' in dom, "the page's script did not finish"
    parsed = _Tokens()
    parsed.feed(dom)
    assert parsed.errors == [], f"JavaScript errors recorded in #js-errors: {parsed.errors}"
    for sec in SECTIONS:
        assert f'id="{sec}"' in dom
    assert dom.count("<article") == min(n, PAGE_SIZE)  # the example browser rendered the first page
    assert dom.count('<mark class="risk r1"') == min(n, PAGE_SIZE)  # each answer's riskiest span highlighted
    unmarked = re.sub(r'<mark class="risk[^"]*"[^>]*>|</mark>', "", dom)
    assert html.escape(known.text, quote=False) in unmarked
    assert parsed.tokens[known.id] == [t.replace("\n", "\u21b5\n") for t in known.token_strings]
    assert dom.count('class="tok pk"') > 0  # TRACE peak windows are marked
    for est in ("trace", "p_true", "verbalized"):
        assert f'aria-label="reliability {est}"' in dom

    shot = tmp_path / "report-screenshot.png"
    res = _run_chromium([f"--screenshot={shot}", "--window-size=1400,2000", out.resolve().as_uri()], tmp_path)
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", res.stderr[-2000:]


# ------------------------------------------------------------ a task of few positives, in Chromium (synthetic run)
PROBE = """<script>
window.addEventListener("load", function () {
  "use strict";
  var nav = document.querySelector("nav"), out = {anchors: [], ticks: [], hidden: {}};
  out.height = document.documentElement.scrollHeight;
  out.viewport = window.innerHeight;
  out.verdictTop = document.getElementById("verdict").getBoundingClientRect().top;
  Array.prototype.forEach.call(document.querySelectorAll("#fig-overview text.tick"), function (t) {
    var b = t.getBBox();
    out.ticks.push([b.x, b.y, b.width, t.textContent]);
  });
  ["overview-not-ranked", "reliability-mlqa", "risk-coverage-mlqa", "histogram-mlqa"].forEach(function (id) {
    var f = document.getElementById("fig-" + id), d = f.closest("details");
    out.hidden[id] = [d !== null && !d.open, f.checkVisibility()];
  });
  out.summaries = Array.prototype.map.call(document.querySelectorAll("details.not-ranked > summary"),
    function (s) { return [s.textContent, s.getBoundingClientRect().height]; });
  Array.prototype.forEach.call(document.querySelectorAll("nav a"), function (a) {
    a.click();
    var h = document.querySelector(a.getAttribute("href") + " > h2");
    out.anchors.push([a.getAttribute("href"), h.getBoundingClientRect().top, nav.getBoundingClientRect().bottom]);
  });
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""
MAX_PAGE_HEIGHT = 12_000
"""px at 1400 × 1000 for the run below, 3 tasks × 24 estimators: 10,551 measured (21,526 with every reliability and
histogram panel shown and 50 examples a page)."""


def test_a_task_of_few_positives_in_chromium(tmp_path: Path) -> None:
    """One task of few positives (mlqa, ≈ 6 correct of 300): collapsed with its reason; the overview's tick labels
    apart (their getBBox boxes); every in-page link lands its heading below the sticky bar; the page under a bound;
    the verdict on the first screen (a screenshot, kept in tmp_path)."""
    acc = {"triviaqa": 0.5, "svamp": 0.4, "mlqa": 0.02}
    run = write_synthetic_run(tmp_path / "run", tuple(acc), n_per_task=300, n_seeds=3, seed=2, accuracy=acc)
    store = RunStore(run)
    doc = store.read_results()  # one AUROC far below the rest: the overview's axis spans 0–1, as on a real run
    doc["metrics"]["triviaqa"]["mars"]["auroc"]["mean"] = 0.05
    store.write_text("results.json", json.dumps(doc))
    verdict = {"headline": "Use trace_plus on this model", "lines": ["ECE 0.03"], "table": []}
    out = write_report(run, out=tmp_path / "report.html", verdict=verdict)
    probed = tmp_path / "probed.html"
    probed.write_text(out.read_text(encoding="utf-8").replace("</body>", PROBE + "</body>"), encoding="utf-8")
    size = "--window-size=1400,1000"
    res = _run_chromium([size, "--virtual-time-budget=5000", "--dump-dom", probed.resolve().as_uri()], tmp_path)
    m = re.search(r'<pre id="probe">(.*?)</pre>', res.stdout, re.S)
    assert m, res.stderr[-2000:]
    probe = json.loads(html.unescape(m.group(1)))
    # the task apart: its figures in closed <details> (not rendered), the reason in each summary, which is visible
    assert all(closed and not visible for closed, visible in probe["hidden"].values()), probe["hidden"]
    assert len(probe["summaries"]) >= 5
    assert all("mlqa" in s and "too few to rank" in s and h > 0 for s, h in probe["summaries"])
    # tick labels: per axis (one baseline y), left to right, at least 4 px between boxes (before: every 0.1 on
    # 0–1, 1.5 px apart, read as "0.00.10.20.3…")
    axes: dict[float, list[tuple[float, float, str]]] = {}
    for x, y, w, label in probe["ticks"]:
        axes.setdefault(round(y, 1), []).append((x, x + w, label))
    assert len(axes) == 1 and len(probe["ticks"]) >= 3 * 3, probe["ticks"]  # one row, ≥ 3 ticks a panel
    for boxes in axes.values():
        boxes.sort()
        gaps = [b[0] - a[1] for a, b in itertools.pairwise(boxes)]
        assert min(gaps) >= 4, boxes
    # anchors: each section's heading below the sticky bar, on screen
    assert len(probe["anchors"]) == 9  # with "Where answers go wrong"
    for href, top, bar in probe["anchors"]:
        assert bar <= top < probe["viewport"] / 2, (href, top, bar)
    assert probe["height"] < MAX_PAGE_HEIGHT, probe["height"]
    assert 0 <= probe["verdictTop"] < probe["viewport"] / 2
    shot = tmp_path / "first-screen.png"
    res = _run_chromium([f"--screenshot={shot}", size, out.resolve().as_uri()], tmp_path)
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", res.stderr[-2000:]


# ------------------------------------------------------------ a risky span highlighted in the answer, in Chromium
SPAN_PROBE = """<script>
window.addEventListener("load", function () {
  "use strict";
  /* the examples first on screen (a headless screenshot does not follow a scroll): the other sections hidden */
  Array.prototype.forEach.call(document.querySelectorAll("header.top, main > section:not(#examples)"),
    function (s) { s.hidden = true; });
  var marks = document.querySelectorAll("article.ex dd.answer mark.risk"), m = marks[0], out = {n: marks.length};
  var r = m.getBoundingClientRect(), hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  out.id = m.closest("article").getAttribute("data-id");
  out.text = m.textContent;
  out.title = m.title;
  out.rank = m.getAttribute("data-rank");
  out.answer = m.parentNode.textContent;
  out.box = [r.left, r.top, r.width, r.height, window.innerWidth, window.innerHeight];
  out.shown = hit === m || m.contains(hit);
  out.background = getComputedStyle(m).backgroundColor;
  out.errors = Array.prototype.map.call(document.querySelectorAll("#js-errors li"), function (li) {
    return li.textContent; });
  var pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def test_a_risky_span_highlighted_in_chromium(tmp_path: Path) -> None:
    """The first example's answer (CJK, an emoji with a modifier) with its riskiest span highlighted: the marked
    characters are `tracecal.risk_spans`' (code points, not UTF-16 units), on screen and on top, its hover title
    naming the risk in nats and the operator; a screenshot of it, the other sections hidden (kept in tmp_path)."""
    from tracecal.signals.spans import risk_spans

    tokens = ["Pek", "ing", " 北", "京", " ", "👍🏽", " is", " 3", "€", " ok"]
    run = write_synthetic_run(
        tmp_path / "run", ("triviaqa",), n_per_task=20, seed=4, overrides={("triviaqa", 0): {"tokens": tokens}}
    )
    trace = RunStore(run).read_traces("triviaqa")[0]
    want = risk_spans([trace], k=3)[0]
    out = write_report(run, out=tmp_path / "report.html")
    probed = tmp_path / "probed.html"
    probed.write_text(out.read_text(encoding="utf-8").replace("</body>", SPAN_PROBE + "</body>"), encoding="utf-8")
    size = "--window-size=1200,800"
    res = _run_chromium([size, "--virtual-time-budget=5000", "--dump-dom", probed.resolve().as_uri()], tmp_path)
    m = re.search(r'<pre id="probe">(.*?)</pre>', res.stdout, re.S)
    assert m, res.stderr[-2000:]
    probe = json.loads(html.unescape(m.group(1)))
    first = min((x for x in want if x.text), key=lambda x: x.char_start)  # the page marks spans in text order
    assert probe["errors"] == [] and probe["id"] == trace.id and probe["answer"] == trace.text
    assert probe["text"] == first.text and probe["rank"] == str(want.index(first) + 1)
    assert probe["n"] >= len(want)  # every span of the first answer, and those of the other answers on the page
    risk = f"{np.rint(first.risk * 100) / 100:.2f}"
    assert probe["title"].startswith(f"risky span {want.index(first) + 1} of {len(want)}: risk {risk} nats")
    assert f"flagged by {first.operator}: " in probe["title"]
    left, top, width, height, vw, vh = probe["box"]
    assert width > 0 and height > 0 and 0 <= left < vw and 0 <= top < vh and probe["shown"], probe
    assert probe["background"] not in ("rgba(0, 0, 0, 0)", "transparent")
    shot = tmp_path / "risky-span.png"
    res = _run_chromium(
        [f"--screenshot={shot}", size, "--virtual-time-budget=5000", probed.resolve().as_uri()], tmp_path
    )
    assert shot.exists() and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", res.stderr[-2000:]
