"""One module per method: a function core, a scikit-learn style estimator, the model it
returns and its `MethodSpec` (``METHOD_SPECS``). The package exports every method's estimator,
functions and model (found through `SPECS`), and the pieces below that are not methods."""

from .chain import make_chain
from .hsic import HSICResult, hsic
from .mds import check_distance_matrix
from .sparse_support import SPARSE_METHODS, accepts_sparse, check_sparse_input
from .specs import SPECS, MethodSpec, method_exports

globals().update(method_exports())

__all__ = [
    "SPECS",
    "MethodSpec",
    "SPARSE_METHODS",
    "accepts_sparse",
    "check_sparse_input",
    "make_chain",
    "hsic",
    "HSICResult",
    "check_distance_matrix",
    *method_exports(),
]
