"""Publishers: results.json/csv, the Markdown tables, the PNG chart and publish_report."""

import csv
import io
import json

import matplotlib.image
import matplotlib.text
import pytest

from ckptbench.publish.plot import (
    build_cpu_figure,
    build_throughput_figure,
    build_training_figure,
    write_throughput_plot,
)
from ckptbench.publish.row_files import read_results_json, write_results
from ckptbench.publish.run_report import PLOT_NAME, publish_report
from ckptbench.publish.schema import RowValidationError, column_names
from ckptbench.publish.table import (
    format_report,
    save_table,
    summary_table,
    throughput_ratio,
)
from ckptbench.publish.train_table import LOST
from ckptbench.record.columns import (
    CLIENT_CPU_PER_GB_COLUMN,
    ENDPOINT_CPU_PER_GB_COLUMN,
    READ,
    WRITE,
)
from ckptbench.record.compare import add_baseline_ratios
from ckptbench.record.metrics import case_row
from tests.bench.publish_fixtures import (
    RUN,
    SAVE_CASE,
    SIZE,
    MiB,
    failed,
    result,
    save_rows,
    two_reader_rows,
)

EP_CASE = "load-olmoe_1b_7b_0924-ep-dp2ep2-ws2"
FSDP_CASE = "load-olmoe_1b_7b_0924-fsdp-ws2"


def test_results_files_round_trip(tmp_path):
    rows = two_reader_rows()
    files = write_results(rows, tmp_path / "out")
    assert read_results_json(files.json_path) == rows
    assert list(json.loads(files.json_path.read_text())[0]) == column_names()  # schema order

    with open(files.csv_path, newline="") as f:
        table = list(csv.DictReader(f))
    assert list(table[0]) == column_names()
    assert len(table) == 4
    gcsckpt_ep = table[0]
    assert gcsckpt_ep["workload_implementation"] == "gcsckpt"
    assert float(gcsckpt_ep[READ.mean]) == rows[0][READ.mean] == SIZE / 1.0
    assert int(gcsckpt_ep["checkpoint_physical_size_bytes"]) == SIZE
    assert gcsckpt_ep["checksums_verified"] == "true"
    assert float(gcsckpt_ep[READ.ratio("baseline")]) == pytest.approx(50.0)
    failed = table[3]
    assert (failed["status"], failed["error_message"]) == ("failed", "endpoint died")
    assert failed[READ.mean] == ""  # null
    assert failed["checksums_verified"] == "false"


def test_invalid_rows_write_nothing(tmp_path):
    rows = two_reader_rows()
    rows[1]["world_size"] = "two"
    rows[2]["surprise"] = 1
    with pytest.raises(RowValidationError) as err:
        write_results(rows, tmp_path)
    text = str(err.value)
    assert "row 1 (case 'load-olmoe_1b_7b_0924-ep-dp2ep2-ws2', reader 'fsspec')" in text
    assert "column 'world_size': expected INTEGER, got str 'two'" in text
    assert "column 'surprise' is not in the schema" in text
    assert list(tmp_path.iterdir()) == []


def test_best_peer_ratio_in_rows_table_and_chart():
    rows = add_baseline_ratios(
        [
            case_row(result("gcsckpt", [1.0]), RUN),
            case_row(result("fsspec", [50.0]), RUN),
            case_row(result("msc", [5.0]), RUN),
            case_row(result("dataflux", [4.0]), RUN),
            case_row(failed("other"), RUN),
        ]
    )
    ours = rows[0]
    assert ours["best_peer_implementation"] == "dataflux"
    assert ours["checkpoint_read_throughput_ratio_to_best_peer"] == pytest.approx(4.0)
    assert ours[READ.ratio("baseline")] == pytest.approx(50.0)
    assert all(r["checkpoint_read_throughput_ratio_to_best_peer"] is None for r in rows[1:])
    lines = summary_table(rows).splitlines()
    assert lines[0] == (
        "| case | gcsckpt MB/s | fsspec MB/s | msc MB/s | dataflux MB/s | other MB/s "
        "| gcsckpt/fsspec | gcsckpt/best peer |"
    )
    assert lines[2].endswith("| failed | 50.0x | 4.0x (dataflux) |")
    axes = build_throughput_figure(rows).axes[0]
    # The ratios live in the tables; the chart's panel carries only names and values.
    assert not any("x fsspec" in t.get_text() for t in axes.texts)


def test_summary_table_shows_each_reader_and_the_ratio():
    rows = two_reader_rows()
    lines = summary_table(rows).splitlines()
    assert lines[0] == "| case | gcsckpt MB/s | fsspec MB/s | gcsckpt/fsspec |"
    assert lines[2] == f"| {EP_CASE} | 1000.0 | 20.0 | 50.0x |"
    assert lines[3] == f"| {FSDP_CASE} | 500.0 | failed | n/a |"
    assert throughput_ratio(rows, EP_CASE, "gcsckpt", "fsspec") == pytest.approx(50.0)
    assert throughput_ratio(rows, FSDP_CASE, "gcsckpt", "fsspec") is None


def test_summary_table_gives_the_candidates_fraction_of_a_given_ceiling():
    rows = two_reader_rows()
    lines = summary_table(rows, ceilings={EP_CASE: 2000e6}).splitlines()
    assert lines[0].endswith("| gcsckpt/fsspec | ceiling MB/s | gcsckpt/ceiling |")
    assert lines[2] == f"| {EP_CASE} | 1000.0 | 20.0 | 50.0x | 2000.0 | 0.50 |"
    assert lines[3] == f"| {FSDP_CASE} | 500.0 | failed | n/a | n/a | n/a |"
    assert "ceiling" not in summary_table(rows)  # no ceiling given: no column


def test_detail_table_rows_and_escaping():
    rows = two_reader_rows()
    rows[3]["error_message"] = "rank 1: bad | range\nsecond line"
    report = format_report(rows)
    detail = report.split("## Details")[1].strip().splitlines()
    assert len(detail) == 2 + 4
    cells = [c.strip() for c in detail[2].strip("|").split(" | ")]
    # case, reader, status, rounds, mean s, p50 s, p99 s, MB/s, items/rank, requests/rank ...
    assert cells[:10] == [
        EP_CASE,
        "gcsckpt",
        "ok",
        "2",
        "1.00",
        "1.00",
        "1.00",
        "1000.0",
        "101",
        "11",
    ]
    assert cells[10:13] == ["1.005", "2", "verified"]
    assert "failed: rank 1: bad \\| range second line" in detail[5]


def _bars(axes) -> dict[str, float]:
    """Tick label (arm) -> bar width of one chart panel."""
    names = [t.get_text() for t in axes.get_yticklabels()]
    return {
        names[round(p.get_y() + p.get_height() / 2)]: round(p.get_width(), 3)
        for container in axes.containers
        if hasattr(container, "patches")
        for p in container.patches
    }


def _overlaps(figure) -> list[tuple[str, str]]:
    """Pairs of drawn texts whose boxes intersect (tick labels, titles, value labels)."""
    renderer = figure.canvas.get_renderer()
    texts = [t for ax in figure.axes for t in ax.findobj(matplotlib.text.Text) if t.get_text()]
    texts += [t for t in figure.texts if t.get_text()]
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in texts if t.get_visible()]
    return [
        (a, b)
        for i, (a, box_a) in enumerate(boxes)
        for b, box_b in boxes[i + 1 :]
        if box_a.overlaps(box_b) and box_a.width > 0 and box_b.width > 0
    ]


def test_plot_bars_match_throughputs(tmp_path):
    rows = two_reader_rows()
    figure = build_throughput_figure(rows)
    ep, fsdp = figure.axes
    assert _bars(ep) == {"gcsckpt": 1000.0, "fsspec": 20.0}
    assert _bars(fsdp) == {"gcsckpt": 500.0}
    assert ep.get_xscale() == "log"  # 50x spread
    assert fsdp.get_xscale() == "linear"
    assert [ax.get_title(loc="left") for ax in figure.axes] == [EP_CASE, FSDP_CASE]
    assert any(text.get_text() == "failed" for text in fsdp.texts)
    values = [t.get_text() for t in ep.texts]
    assert "1000.0" in values and "20.0" in values
    figure.canvas.draw()
    assert _overlaps(figure) == []
    for ax in figure.axes:  # every label inside the figure, none cut
        for t in ax.get_yticklabels():
            assert t.get_window_extent().x0 >= 0

    path = write_throughput_plot(rows, tmp_path / "charts" / "throughput.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    height, width, _ = matplotlib.image.imread(path).shape
    assert width == 900 and height > 300


def test_cpu_chart_stacks_client_and_endpoint_cpu():
    rows = two_reader_rows()
    for row, (client, endpoint) in zip(
        rows, [(2.5, 0.2), (40.0, 3.0), (3.0, None), (None, None)], strict=True
    ):
        row[CLIENT_CPU_PER_GB_COLUMN] = client
        row[ENDPOINT_CPU_PER_GB_COLUMN] = endpoint
    figure = build_cpu_figure(rows)
    ep, fsdp = figure.axes
    client, grey = [c for c in ep.containers if hasattr(c, "patches")]
    assert [round(p.get_width(), 3) for p in client.patches] == [2.5, 40.0]
    assert [round(p.get_width(), 3) for p in grey.patches] == [0.2, 3.0]
    assert [round(p.get_x(), 3) for p in grey.patches] == [2.5, 40.0]  # after the client bar
    assert [t.get_text() for t in ep.texts] == ["2.50 + 0.20", "40.00 + 3.00"]
    fsdp_client = next(c for c in fsdp.containers if hasattr(c, "patches"))
    assert [round(p.get_width(), 3) for p in fsdp_client.patches] == [3.0]
    figure.canvas.draw()
    assert _overlaps(figure) == []
    for row in rows:
        row[CLIENT_CPU_PER_GB_COLUMN] = None
    assert build_cpu_figure(rows) is None


def test_training_chart_draws_lost_time_per_arm_and_the_floor():
    def arm(name, lost, status="ok"):
        return {
            "benchmark_case_id": "train-small-ep-ws2",
            "workload_implementation": name,
            "checkpoint_strategy": "ep",
            "world_size": 2,
            "status": status,
            "train_checkpoint_count": 2,
            LOST: lost,
        }

    rows = [
        arm("none", 0.0),
        arm("localfs", 0.2),
        arm("gcsckpt-sync", 0.3),
        arm("msc-sync", None, "failed"),
    ]
    rows[0]["train_checkpoint_count"] = 0  # the control saves nothing
    figure = build_training_figure(rows)
    (axes,) = figure.axes
    assert axes.get_title(loc="left") == "ep ws2"
    assert _bars(axes) == {"localfs": 0.2, "gcsckpt-sync": 0.3}
    assert [t.get_text() for t in axes.get_yticklabels()] == ["localfs", "gcsckpt-sync", "msc-sync"]
    assert any(t.get_text() == "failed" for t in axes.texts)
    (floor,) = axes.get_lines()
    assert list(floor.get_xdata()) == [0.2, 0.2]
    assert build_training_figure([]) is None


def test_plot_of_nothing_is_an_error():
    with pytest.raises(ValueError, match="no result rows"):
        build_throughput_figure([])


def test_publish_report_writes_everything(tmp_path):
    rows = [case_row(result("gcsckpt", [1.0, 1.0]), RUN), case_row(result("fsspec", [25.0]), RUN)]
    out = io.StringIO()
    report = publish_report(rows, tmp_path, out=out)
    assert report.rows[0][READ.ratio("baseline")] == pytest.approx(25.0)
    assert report.files.json_path.exists() and report.files.csv_path.exists()
    assert report.plot_path == tmp_path / PLOT_NAME and report.plot_path.stat().st_size > 0
    assert report.charts == {PLOT_NAME: report.plot_path}  # no CPU measured, no training rows
    assert f"| {EP_CASE} | 1000.0 | 40.0 | 25.0x |" in out.getvalue()
    assert report.markdown == out.getvalue()
    assert report.bigquery_rows == 0
    with pytest.raises(ValueError, match="no result rows"):
        publish_report([], tmp_path)


SAVE_HEADER = (
    "| case | writer | status | whole dcp.save s | whole dcp.save MB/s | whole / ceiling "
    "| client CPU s/GB | endpoint CPU s/GB | data phase s | data phase MB/s "
    "| data phase / ceiling | outside data phase s "
    "| gcsckpt / this writer | peak RSS MiB (max rank) | bound MiB (that rank) "
    "| every rank within bound | peak - start MiB (max rank) |"
)


def test_save_table_splits_whole_save_and_data_phase_and_gives_memory():
    rows = save_rows()
    lines = save_table(rows, ceilings={SAVE_CASE: 2000e6}).splitlines()
    assert lines[0] == SAVE_HEADER
    # gcsckpt: 2 s save (500 MB/s, 0.25 of the ceiling), data phase 1 s (1000 MB/s, 0.50);
    # peak 300 MiB, bound of rank 0 = 1.1 x 100 MiB + 256 MiB = 366 MiB.
    assert lines[2] == (
        f"| {SAVE_CASE} | gcsckpt | ok | 2.00 | 500.0 | 0.25 | n/a | n/a | 1.00 | 1000.0 | 0.50 "
        "| 1.00 | 1.00x | 300 | 366 | yes | 100 |"
    )
    assert lines[3] == (
        f"| {SAVE_CASE} | msc | ok | 4.00 | 250.0 | 0.12 | n/a | n/a | 3.00 | 333.3 | 0.17 "
        "| 1.00 | 2.00x | 300 | 366 | yes | 100 |"
    )
    # The reference: gcsckpt reaches half its whole-save throughput; rank 1 is over its bound.
    assert lines[4] == (
        f"| {SAVE_CASE} | localfs | ok | 1.00 | 1000.0 | 0.50 | n/a | n/a | 0.25 | 4000.0 | 2.00 "
        "| 0.75 | 0.50x | 600 | 377 | no | 400 |"
    )
    assert len(lines) == 5
    no_ceiling = save_table(rows).splitlines()[2]
    assert "| 500.0 | n/a | n/a | n/a | 1.00 | 1000.0 | n/a |" in no_ceiling
    assert save_table(two_reader_rows()) == ""  # loads only: no save table


def test_report_has_the_save_section_and_the_summary_counts_no_reference_as_peer():
    rows = save_rows()
    text = format_report(rows, ceilings={SAVE_CASE: 2000e6})
    assert "## Saves: whole dcp.save vs data phase, memory per rank" in text
    assert SAVE_HEADER in text
    assert "absolute RSS includes torch itself (~200-400 MiB of libraries)" in text
    summary = summary_table(rows).splitlines()
    assert summary[0] == (
        "| case | gcsckpt MB/s | msc MB/s | localfs MB/s | gcsckpt/fsspec | gcsckpt/best peer |"
    )
    assert summary[2] == f"| {SAVE_CASE} | 500.0 | 250.0 | 1000.0 | n/a | 2.0x (msc) |"
    assert "## Saves" not in format_report(two_reader_rows())
    axes = build_throughput_figure(rows).axes[0]
    assert [t.get_text() for t in axes.texts] == ["500.0", "250.0", "1000.0"]


def test_results_files_carry_the_save_columns(tmp_path):
    rows = save_rows()
    files = write_results(rows, tmp_path)
    assert read_results_json(files.json_path) == rows
    with open(files.csv_path, newline="") as f:
        table = {r["workload_implementation"]: r for r in csv.DictReader(f)}
    ours, local = table["gcsckpt"], table["localfs"]
    assert int(ours["save_rss_peak_bytes_per_rank_max"]) == 300 * MiB
    assert int(ours["save_rss_bound_bytes_at_peak_rank"]) == int(1.1 * 100 * MiB) + 256 * MiB
    assert ours["save_rss_peak_within_bound"] == "true"
    assert local["save_rss_peak_within_bound"] == "false"
    assert float(ours["save_data_phase_throughput_mean_bytes_per_second"]) == SIZE / 1.0
    assert float(ours["save_data_phase_mean_seconds"]) == 1.0
    assert float(ours["checkpoint_write_throughput_ratio_to_reference"]) == 0.5
    assert float(ours["checkpoint_write_throughput_ratio_to_best_peer"]) == 2.0
    assert float(ours[WRITE.mean]) == SIZE / 2.0
    assert ours[READ.mean] == ours["checkpoint_read_throughput_ratio_to_reference"] == ""  # null
    assert json.loads(ours["writer_options_json"]) == {"class": "gcsckpt"}
    assert ours["reader_options_json"] == ""  # null
    assert ours["reference_implementation"] == "localfs"
    assert ours["best_peer_implementation"] == "msc"
    assert len(json.loads(local["rank_saves_json"])) == 2
    assert table["msc"]["reference_implementation"] == ""  # null
