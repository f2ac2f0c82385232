"""commsim report: the tables hold together, the PDF has its pages and headings, every page
renders, outputs are byte-identical across runs, and bad input gets one line and exit code 2."""
import json
import shutil
import subprocess
from dataclasses import replace

import pytest

from commsim.analysis import compare, fits, tables, timeline
from commsim.api import Scenario
from commsim.cli import main
from commsim.errors import UserError
from commsim.profile import save
from profiles import make_profile

pypdf = pytest.importorskip("pypdf")

NODES = "1,2,4"
SMALL = ["--nodes", NODES, "--batch-sizes", "16,32", "--global-batch", "64", "--weak-batch", "16"]


def samples_profile():
    """The toy profile with raw collective samples, as calibrate stores them."""
    recs = [{"op": "all_reduce", "bytes": n, "count": n // 4, "world_size": 2,
             "times_s": [1e-4 + n / 1e6, 1.1e-4 + n / 1e6]} for n in (16, 1024, 65536)]
    return replace(make_profile(), samples={"collectives": recs})


def validation_rows():
    return [{"strategy": s, "nodes": n, "predicted_s": 0.3, "measured_s": 0.33,
             "measured_spread_s": 0.01, "error_pct": -9.1, "extra": "kept"}
            for s in ("ring", "ddp") for n in (2, 4)]


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    """One full report (with validation and raw samples) shared by the PDF tests."""
    d = tmp_path_factory.mktemp("report")
    save(samples_profile(), d / "toy.json")
    (d / "validation.json").write_text(json.dumps(validation_rows()))
    code = main(["report", "--profile", str(d / "toy.json"), "--validation",
                 str(d / "validation.json"), "--out", str(d / "report.pdf"),
                 "--csv-dir", str(d / "csv"), "--json-dir", str(d / "json"), *SMALL])
    assert code == 0
    return d


def page_texts(path):
    return [" ".join(p.extract_text().split()) for p in pypdf.PdfReader(str(path)).pages]


# ----------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------

def test_union_and_intersection():
    assert tables.union([(3, 4), (0, 1), (0.5, 2), (5, 5)]) == [(0, 2), (3, 4)]
    assert tables.length([(0, 1), (0.5, 2)]) == 2
    assert tables.intersection_length([(0, 2), (3, 5)], [(1, 4)]) == 2


def test_rank_breakdown_adds_up_to_the_iteration():
    runs = tables.Runs(make_profile(), global_batch=64)
    for strategy, timeline_ in (("ps", False), ("ring", True), ("ddp", False), ("ddp", True)):
        r = runs.get(strategy, 3, timeline=timeline_)
        for row in tables.rank_breakdown(r):
            total = (row["compute_s"] - row["overlapped_comm_s"] + row["overlapped_comm_s"]
                     + row["exposed_comm_s"] + row["idle_s"])
            assert total == pytest.approx(r.iteration_s, rel=1e-9), (strategy, row)
            assert row["overlapped_comm_s"] >= 0 and row["exposed_comm_s"] >= -1e-12
        crit = [row for row in tables.rank_breakdown(r) if row["critical"]]
        assert len(crit) == 1 and crit[0]["compute_s"] == pytest.approx(r.compute_s)


@pytest.mark.parametrize("strategy", ["ps", "ring", "ddp"])
@pytest.mark.parametrize("nodes, batch, rph", [(2, 16, 1), (3, 32, 1), (4, 64, 1), (2, 16, 2)])
def test_breakdown_from_totals_equals_the_one_from_intervals(strategy, nodes, batch, rph):
    """Where the fast engine runs, the per-rank totals give the intervals' exact breakdown."""
    prof = make_profile(param_bytes=(300_000, 2_000_000, 700_000), bandwidth_Bps=1e8,
                        threads=1)
    base = Scenario(bucket_bytes=1_500_000, ranks_per_host=rph, cores_per_host=8)
    fast = tables.Runs(prof, base=base).get(strategy, nodes, batch_per_rank=batch)
    des = tables.Runs(prof, base=base).get(strategy, nodes, batch_per_rank=batch, timeline=True)
    assert fast.engine == "fast" and not fast.intervals and des.intervals
    for a, b in zip(tables.rank_breakdown(fast), tables.rank_breakdown(des)):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], abs=1e-9), (key, a, b)


def test_uneven_clusters_use_the_des_intervals():
    runs = tables.Runs(make_profile(), base=Scenario(stragglers={1: 3.0}))
    r, rows = tables.breakdown(runs, "ring", 2, 16)
    assert r.engine == "des" and r.intervals
    total = rows[0]["compute_s"] + rows[0]["exposed_comm_s"] + rows[0]["idle_s"]
    assert total == pytest.approx(r.iteration_s)


def test_ddp_hides_communication_and_ring_does_not():
    prof = make_profile(param_bytes=(2_000_000,) * 4, bandwidth_Bps=1e8)  # a bucket each
    runs = tables.Runs(prof, base=Scenario(bucket_bytes=2_000_000), global_batch=64)
    ddp = tables.rank_breakdown(runs.get("ddp", 2))[0]
    ring = tables.rank_breakdown(runs.get("ring", 2))[0]
    assert ddp["overlapped_comm_s"] > 0
    assert ring["overlapped_comm_s"] == 0


def test_scaling_table_strong_and_weak():
    runs = tables.Runs(make_profile(), global_batch=64, weak_batch=16)
    strong = tables.scaling_table(runs, ["single", "ring"], [1, 2, 4])
    assert [(r["strategy"], r["nodes"]) for r in strong] == [("single", 1), ("ring", 1),
                                                             ("ring", 2), ("ring", 4)]
    assert all(r["global_batch"] == 64 for r in strong)
    assert strong[0]["speedup"] == 1.0
    for r in strong:
        assert r["efficiency"] == pytest.approx(r["speedup"] / r["world_size"])
    weak = tables.scaling_table(runs, ["ring"], [1, 2, 4], mode="weak")
    assert [r["batch_per_rank"] for r in weak] == [16, 16, 16]
    # Strong scaling on 4 nodes is the same run as 16 samples per rank: shared, not re-run.
    assert runs.get("ring", 4) is runs.get("ring", 4, batch_per_rank=16)
    with pytest.raises(ValueError):
        tables.scaling_table(runs, ["ring"], [1], mode="diagonal")


def test_bandwidth_fraction_is_busbw_over_link():
    runs = tables.Runs(make_profile())
    rows = tables.bandwidth_table(runs, ["ring", "ddp"], [1, 2, 4], [16, 32])
    assert {r["nodes"] for r in rows} == {2, 4}        # one node moves no bytes
    for r in rows:
        assert r["busbw_fraction"] == pytest.approx(r["busbw_Bps"] / r["link_bandwidth_Bps"])
        assert 0 < r["busbw_fraction"] <= 1.0 + 1e-9
        assert r["bytes_synced"] == 12000


def test_timeline_segments_tile_each_rank():
    """Compute, comm lane 0 and idle cover [0, iteration] for every rank with no gap."""
    runs = tables.Runs(make_profile(), global_batch=64)
    r = runs.get("ps", 2, batch_per_rank=16, timeline=True)
    segs = timeline.segments(r)
    for rank in range(r.world_size):
        mine = [g for g in segs if g.rank == rank]
        assert tables.length([(g.start_s, g.end_s) for g in mine]) == \
            pytest.approx(r.iteration_s)
        assert {g.kind for g in mine} <= {"compute", "comm", "idle"}


def test_assign_lanes_never_overlaps():
    spans = [(0, 3), (1, 2), (2, 4), (3, 5), (0.5, 1)]
    lanes = timeline.assign_lanes(spans)
    for lane in set(lanes):
        mine = sorted(s for s, l in zip(spans, lanes) if l == lane)
        assert all(a[1] <= b[0] for a, b in zip(mine, mine[1:]))
    assert max(lanes) == 1     # never more than two spans at once: two lanes


def test_fit_views_with_and_without_samples():
    with_samples = fits.fit_views(samples_profile())
    ar = next(v for v in with_samples if v.op == "all_reduce")
    assert len(ar.points) == 6 and ar.line
    assert ar.line[0][0] == 16 and ar.line[-1][0] == pytest.approx(65536)
    without = fits.fit_views(make_profile())
    assert all(not v.points and v.line for v in without)
    # samples by op, and junk ignored
    prof = replace(make_profile(), samples={"collectives": {"gather": [
        {"bytes": 64, "time_s": 1e-3}, {"bytes": "x", "times_s": [1]}]}})
    assert fits.sample_points(prof) == {"gather": [(64.0, 1e-3)]}


def test_validation_rows_are_checked(tmp_path):
    path = tmp_path / "v.json"
    path.write_text(json.dumps({"rows": validation_rows()}))
    rows = compare.load_validation(path)
    assert rows[0]["strategy"] == "ddp" and rows[0]["extra"] == "kept"
    bad = validation_rows()
    del bad[1]["measured_spread_s"]
    path.write_text(json.dumps(bad))
    with pytest.raises(UserError, match="row 1 has no 'measured_spread_s'"):
        compare.load_validation(path)
    path.write_text(json.dumps([dict(validation_rows()[0], nodes="4")]))
    with pytest.raises(UserError, match="'nodes'"):
        compare.load_validation(path)
    path.write_text("[]")
    with pytest.raises(UserError, match="non-empty"):
        compare.load_validation(path)


# ----------------------------------------------------------------------------------------------
# The PDF
# ----------------------------------------------------------------------------------------------

HEADINGS = [
    "commsim report: communication cost of data-parallel training",
    "Time per iteration vs nodes",
    "Speedup and efficiency per strategy and node count (strong scaling)",
    "Speedup and efficiency per strategy and node count (weak scaling)",
    "Computation vs communication per batch size and node count",
    "Computation vs communication per rank (4 nodes)",
    "Bandwidth utilisation per node count and batch size",
    "One iteration: single node on 1 node",
    "One iteration: gather/scatter (ps) on 4 nodes",
    "One iteration: all-reduce (ring) on 4 nodes",
    "One iteration: DDP (buckets) on 4 nodes",
    "Calibration fits per collective",
    "Calibration fit numbers",
    "Compute time vs batch size",
    "Predicted vs measured",
    "Predicted vs measured, every cell",
    "Prediction error per strategy and node count",
]


def test_pdf_has_the_pages_and_headings_in_order(report_dir):
    texts = page_texts(report_dir / "report.pdf")
    assert len(texts) == len(HEADINGS)
    for text, heading in zip(texts, HEADINGS):
        assert heading in text, (heading, text[:200])
    assert "Calibration" in texts[0] and "toy" in texts[0] and "validation.json" in texts[0]
    assert "time per iteration (s)" in texts[1] and "nodes" in texts[1]
    assert "measured" in texts[11] and "no raw samples in this profile" not in texts[11]
    assert "ring" in texts[-1] and "-9.1" in texts[-1]


def test_every_figure_has_labelled_axes_and_a_caption():
    import matplotlib.pyplot as plt
    from commsim.analysis.report import ReportOptions, build_report, page_builders
    data = build_report(samples_profile(), ReportOptions(nodes=(1, 2), batch_sizes=(16,),
                                                         weak_batch=16), validation_rows())
    for build in page_builders(data):
        figs = build()
        for fig in figs if isinstance(figs, list) else [figs]:
            captions = [t.get_text() for t in fig.texts if t.get_style() == "italic"]
            assert len(captions) == 1 and captions[0].endswith("."), captions
            assert len(captions[0].split()) >= 8
            for ax in fig.axes:
                if ax.axison and ax.has_data():
                    assert "(" in ax.get_xlabel() or ax.get_xlabel() in ("nodes", "rank"), \
                        (fig._suptitle.get_text(), ax.get_xlabel())
                    assert ax.get_ylabel() == "" or "(" in ax.get_ylabel()
            plt.close(fig)


def test_pdf_metadata_is_fixed(report_dir):
    meta = pypdf.PdfReader(str(report_dir / "report.pdf")).metadata
    assert meta.get("/Creator") == "commsim report"
    assert "/ModDate" not in meta


def test_every_page_renders(report_dir, tmp_path):
    if shutil.which("pdftoppm") is None:
        pytest.skip("pdftoppm (poppler-utils) is not installed")
    subprocess.run(["pdftoppm", "-r", "20", "-png", str(report_dir / "report.pdf"),
                    str(tmp_path / "p")], check=True, capture_output=True, timeout=120)
    pngs = sorted(tmp_path.glob("p-*.png"))
    assert len(pngs) == len(HEADINGS)
    assert all(p.stat().st_size > 1000 for p in pngs)


def test_tables_are_written_as_csv_and_json(report_dir):
    names = {"scaling", "compute_comm", "compute_comm_ranks", "bandwidth", "timeline",
             "compute", "compute_curve", "fits", "fit_samples", "validation"}
    assert {p.stem for p in (report_dir / "csv").glob("*.csv")} == names
    assert {p.stem for p in (report_dir / "json").glob("*.json")} == names
    scaling = json.loads((report_dir / "json" / "scaling.json").read_text())
    assert {r["scaling"] for r in scaling} == {"strong", "weak"}
    header = (report_dir / "csv" / "bandwidth.csv").read_text().splitlines()[0]
    for key in ("algbw_Bps", "busbw_Bps", "busbw_fraction", "batch_per_rank", "nodes"):
        assert key in header


def test_without_samples_the_fits_page_says_so(tmp_path):
    from commsim.analysis import plots
    from commsim.analysis.pdf import render_pdf
    views = fits.fit_views(make_profile())
    (tmp_path / "f.pdf").write_bytes(render_pdf(
        [lambda: plots.fits_figure(views, fits.fit_rows(views))], title="t"))
    text = page_texts(tmp_path / "f.pdf")[0]
    assert "Calibration fits" in text and "no raw samples in this profile" in text


def test_two_runs_give_identical_bytes(tmp_path, monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    save(make_profile(), tmp_path / "toy.json")
    for name in ("a", "b"):
        assert main(["report", "--profile", str(tmp_path / "toy.json"), "--out",
                     str(tmp_path / name / "r.pdf"), "--csv-dir", str(tmp_path / name / "csv"),
                     "--json-dir", str(tmp_path / name / "json"), "--nodes", "1,2",
                     "--batch-sizes", "16", "--global-batch", "32", "--weak-batch",
                     "16"]) == 0
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*")
                   if p.is_file())
    assert len(files) == 1 + 2 * 9
    for rel in files:
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel
    meta = pypdf.PdfReader(str(tmp_path / "a" / "r.pdf")).metadata
    assert meta.get("/CreationDate", "").startswith("D:20231114")


# ----------------------------------------------------------------------------------------------
# CLI errors
# ----------------------------------------------------------------------------------------------

def test_no_overwrite_without_force(tmp_path, capsys):
    save(make_profile(), tmp_path / "toy.json")
    out = tmp_path / "r.pdf"
    out.write_bytes(b"keep me")
    args = ["report", "--profile", str(tmp_path / "toy.json"), "--out", str(out), "--nodes",
            "1,2", "--batch-sizes", "16", "--global-batch", "32"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "exists" in err and "--force" in err and len(err.strip().splitlines()) == 1
    assert out.read_bytes() == b"keep me"
    # a table file that exists also stops the run before anything is written
    (tmp_path / "csv").mkdir()
    (tmp_path / "csv" / "fits.csv").write_text("keep")
    out.unlink()
    assert main(args + ["--csv-dir", str(tmp_path / "csv")]) == 2
    assert not out.exists()
    assert main(args + ["--csv-dir", str(tmp_path / "csv"), "--force"]) == 0
    assert out.read_bytes().startswith(b"%PDF")


@pytest.mark.parametrize("extra, message", [
    (["--validation", "MISSING"], "does not exist"),
    (["--batch-sizes", "16,x"], "--batch-sizes"),
    (["--nodes", "0"], "--nodes"),
    (["--strategies", "allgather"], "allgather"),
])
def test_bad_input_is_one_line(tmp_path, capsys, extra, message):
    save(make_profile(), tmp_path / "toy.json")
    code = main(["report", "--profile", str(tmp_path / "toy.json"), "--out",
                 str(tmp_path / "r.pdf"), *[e.replace("MISSING", str(tmp_path / "nope.json"))
                                            for e in extra]])
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.pdf").exists()


def test_validation_missing_key_is_a_user_error(tmp_path, capsys):
    save(make_profile(), tmp_path / "toy.json")
    (tmp_path / "v.json").write_text(json.dumps([{"strategy": "ddp", "nodes": 2}]))
    code = main(["report", "--profile", str(tmp_path / "toy.json"), "--validation",
                 str(tmp_path / "v.json"), "--out", str(tmp_path / "r.pdf")])
    err = capsys.readouterr().err
    assert code == 2 and "predicted_s" in err and len(err.strip().splitlines()) == 1


def test_report_options_default_timeline_nodes():
    from commsim.analysis.report import ReportOptions
    assert ReportOptions().gantt_nodes == 4
    assert ReportOptions(nodes=(1, 2, 8)).gantt_nodes == 8
    assert ReportOptions(timeline_nodes=3).gantt_nodes == 3
    assert Scenario().bucket_bytes > 0


def test_one_node_report_has_no_communication_pages():
    import matplotlib.pyplot as plt
    from commsim.analysis.report import ReportOptions, build_report, page_builders
    data = build_report(make_profile(), ReportOptions(nodes=(1,), batch_sizes=(16,)))
    assert not data.tables["compute_comm"] and not data.tables["bandwidth"]
    headings = []
    for build in page_builders(data):
        figs = build()
        for fig in figs if isinstance(figs, list) else [figs]:
            headings.append(fig._suptitle.get_text())
            plt.close(fig)
    assert not any(h.startswith(("Computation vs", "Bandwidth")) for h in headings)
    assert "One iteration: DDP (buckets) on 1 node" in headings


def traffic_rows():
    """Two worker counts of bench/traffic_accuracy's summary rows, made up for the page."""
    rows = []
    for w in (2, 3):
        for k, long_run, acc in ((1, False, 0.95), (2, False, 0.94), (1, True, 0.97)):
            rows.append({"workers": w, "long": long_run, "sync_every": k, "group_size": None,
                         "epochs": 12 * (2 if long_run else 1), "iterations": 100,
                         "seeds": 3, "measured_bytes": 1e6 * w / k,
                         "predicted_bytes": 1.01e6 * w / k, "payload_bytes": 9e5 * w / k,
                         "bytes_error_pct": 1.0, "accuracy_mean": acc,
                         "accuracy_min": acc - 0.01, "accuracy_max": acc + 0.01})
    return rows


def test_traffic_accuracy_page_from_the_bench_json(tmp_path):
    """--traffic-accuracy adds the trade-off figure (a panel per worker count) and its table."""
    import matplotlib.pyplot as plt

    from commsim.analysis.report import ReportOptions, build_report, page_builders
    path = tmp_path / "ta.json"
    path.write_text(json.dumps({"rows": traffic_rows()}))
    rows = compare.load_traffic_accuracy(path)
    opts = ReportOptions(nodes=(1, 2), batch_sizes=(16,), weak_batch=16)
    plain = page_builders(build_report(samples_profile(), opts))
    pages = page_builders(build_report(samples_profile(), opts, traffic_accuracy=rows))
    assert len(pages) == len(plain) + 2
    fig = pages[-2]()
    assert fig._suptitle.get_text() == "Network traffic vs accuracy"
    panels = [ax for ax in fig.axes if ax.has_data()]
    assert [ax.get_title() for ax in panels] == ["2 workers", "3 workers"]
    assert panels[0].get_xlabel() == "traffic (MiB)"
    plt.close(fig)
    path.write_text(json.dumps({"rows": [{**traffic_rows()[0], "measured_bytes": "lots"}]}))
    with pytest.raises(UserError, match="measured_bytes"):
        compare.load_traffic_accuracy(path)
