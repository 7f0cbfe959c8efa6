"""The only place that imports zarr and fsspec: open inputs, write and read run stores."""

from .fingerprint import array_fingerprint, digest_of
from .lease import Lease, LeaseHeldError
from .plot import embedding_png
from .read import InputArray, open_input, open_matrix, plan_row_chunk
from .store import RunStore, open_output, open_run_store, save_array
from .stored_rows import StoredRows
from .uris import Location, check_output_location, parse_store, parse_uri, run_storage_options

__all__ = [
    "InputArray",
    "Location",
    "RunStore",
    "array_fingerprint",
    "check_output_location",
    "digest_of",
    "embedding_png",
    "Lease",
    "LeaseHeldError",
    "open_input",
    "open_matrix",
    "open_output",
    "open_run_store",
    "parse_store",
    "parse_uri",
    "plan_row_chunk",
    "run_storage_options",
    "save_array",
    "StoredRows",
]
