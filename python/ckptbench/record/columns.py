"""The names of the result rows' columns that more than one module reads (the row builders in
``metrics``, ``save_columns`` and ``train.rows``, the comparisons in ``compare``, the tables and
the chart); every column is in ``publish/bigquery_schema.json``."""

WORKLOAD_FAMILY = "checkpointing"
# The training benchmark's columns (``ckptbench.train.rows``); null on load and save rows.
TRAIN_COLUMNS = (
    "train_checkpoint_count",
    "train_lost_seconds_per_checkpoint",
    "train_blocked_seconds_per_checkpoint",
    "train_step_inflation_ratio",
    "train_time_to_durable_seconds",
    "train_rss_peak_over_control_bytes",
    "train_client_cpu_seconds_per_gb",
    "train_measures_json",
)
THROUGHPUT_COLUMN = "checkpoint_read_throughput_mean_bytes_per_second"
RATIO_COLUMN = "checkpoint_read_throughput_ratio_to_baseline"
PEER_RATIO_COLUMN = "checkpoint_read_throughput_ratio_to_best_peer"
REFERENCE_RATIO_COLUMN = "checkpoint_read_throughput_ratio_to_reference"
DATA_PHASE_THROUGHPUT_COLUMN = "save_data_phase_throughput_mean_bytes_per_second"
CEILING_COLUMN = "endpoint_ceiling_bytes_per_second"
CEILING_RATIO_COLUMN = "checkpoint_read_throughput_ratio_to_ceiling"
CLIENT_CPU_PER_GB_COLUMN = "client_cpu_seconds_per_gb"
ENDPOINT_CPU_PER_GB_COLUMN = "endpoint_cpu_seconds_per_gb"
STORAGE_RATIO_COLUMN = "storage_bytes_per_checkpoint_byte"
