"""Range-read result rows: ratios to gcsfs and to the ceiling, the Markdown table, JSON."""

import json

from ckptbench.range_read import range_rows
from ckptbench.record.host import HostFacts, host_facts

MB = 10**6


def _row(client, seconds, group="1MiB", concurrency=16, verified=True):
    return range_rows.Row(
        endpoint="plain",
        group=group,
        range_size="1MiB",
        range_bytes=1 << 20,
        ranges=100,
        client=client,
        concurrency=concurrency,
        useful_bytes=100 * MB,
        seconds=[seconds, seconds * 3, seconds / 2],  # median: ``seconds``
        cpu_seconds=[1.0, 2.0, 3.0],
        requests=[200, 200, 200],
        bytes_received=[150 * MB, 150 * MB, 150 * MB],
        verified=verified,
    )


def test_ratios_compare_rows_of_the_same_endpoint_and_group():
    rows = [
        _row("gcsckpt", 0.5),
        _row("gcsfs.cat_ranges", 2.0, concurrency=None),
        _row(range_rows.CEILING_PREFIX + " 8MiB x32", 0.25, concurrency=32),
        _row("gcsckpt", 1.0, group="4KiB"),
    ]
    range_rows.add_ratios(rows)
    assert rows[0].mb_per_s == 200.0 and rows[0].vs_gcsfs == 4.0 and rows[0].vs_ceiling == 0.5
    assert rows[1].vs_gcsfs == 1.0
    assert rows[2].vs_gcsfs is None  # the ceiling reads other ranges
    assert rows[3].vs_gcsfs is None and rows[3].vs_ceiling is None  # nothing to compare in 4KiB
    assert rows[0].req_per_s == 400.0 and rows[0].amplification == 1.5


def test_table_is_markdown_with_one_line_per_row():
    rows = [_row("gcsckpt", 0.5), _row("gcsfs.cat_ranges", 2.0, verified=False)]
    rows[0].params = {"gap": "64KiB"}
    range_rows.add_ratios(rows)
    lines = range_rows.format_table("range reads", rows).splitlines()
    assert lines[0] == "### range reads"
    assert lines[2].startswith("| endpoint | ranges | client | conc | MB/s |")
    # CPU s/GiB: median 2.0 s over 100e6 / 2**30 GiB.
    assert lines[4] == (
        "| plain | 100 x 1MiB | gcsckpt gap=64KiB | 16 | 200 | 400 | 21.47 | 1.50 | 4.00 | - "
        "| yes |"
    )
    assert lines[5].endswith("| 1.00 | - | NO |") and len(lines) == 6


def test_json_document_holds_settings_host_rows_and_tuning(tmp_path):
    path = tmp_path / "range_read.json"
    rows = [_row("gcsckpt", 0.5)]
    range_rows.write_json(path, {"rounds": 3}, {"vcpu_count": 2}, rows, [])
    doc = json.loads(path.read_text())
    assert doc["settings"] == {"rounds": 3} and doc["host"] == {"vcpu_count": 2}
    assert doc["rows"][0]["mb_per_s"] == 200.0 and doc["rows"][0]["client"] == "gcsckpt"
    assert doc["tuning"] == []
    assert [p.name for p in tmp_path.iterdir()] == ["range_read.json"]  # no temporary left


def test_host_facts_are_the_shared_ones_plus_load_and_libcurl():
    facts = host_facts()
    shared = set(HostFacts.__dataclass_fields__)
    assert shared <= set(facts) and set(facts) - shared == {"load_avg_1m", "libcurl"}
    assert facts["vcpu_count"] >= 1 and "libcurl" in facts["libcurl"].lower()
