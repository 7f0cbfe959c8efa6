"""What the semidefinite methods share (maximum variance unfolding, `methods.mvu`; action
respecting embedding, `methods.are`; landmark MVU, `methods.landmark_mvu`): the fitted model
`SDPEmbeddingModel` and how it places new rows (`reconstruct`), the estimators' base
`SDPEstimator`, the parameter checks, the kNN graph of a fit (`prepare_graph`) and the steps
every fit takes alike (`SDPFit`: the checks, the graph and its edges, then the model). The
method modules import these from here, never from each other; ``methods.mvu`` re-exports the
names it has always had (a model pickled before names ``methods.mvu.SDPEmbeddingModel``).
The semidefinite program itself and the kernel PCA of its solution are in
``methods._distance_sdp``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._validation import check_flags, is_dask
from ..blocks.neighbors import reconstruction_weights_block
from ..errors import InputError
from ..graphs import (
    KNNGraph,
    check_connected,
    check_n_neighbors,
    check_reg,
    join_components,
)
from ..graphs.sdp import edge_list
from ..linalg.sdp import SDP_FORMULATIONS, solver_options
from ._base import (
    DimredEstimator,
    HasConvergence,
    ModelTransform,
    kept,
    like_input,
    rows_at,
    rowwise,
)
from ._graph_common import built_graph, new_neighbours

MVU_CONSTRAINTS = ("equality", "slack")
EXACT_MAX = 3000  # exact MVU holds K (n x n) and solves an SDP of that size: above, refuse
DEFAULT_TOL = {"clarabel": 1e-7, "scs": 1e-6}
DEFAULT_MAX_ITER = {"clarabel": 200, "scs": 100_000}


@dataclass
class SDPEmbeddingModel(HasConvergence):
    """A fitted MVU / action respecting embedding: the training embedding, the eigenvalues
    of K, the training rows (for ``transform``) and the solver report."""

    method: str
    embedding: np.ndarray  # (n, k)
    eigenvalues: np.ndarray  # (k,) of K
    X_fit: np.ndarray | None  # (n, d) training rows (None when not kept)
    n_neighbors: int
    reg: float = 1e-3
    kernel: np.ndarray | None = None  # (n, n) K, when kept
    info: dict = field(default_factory=dict)

    @property
    def n_components(self) -> int:
        return int(self.eigenvalues.shape[0])

    def transform(self, X):
        """Embed new rows: LLE weights on their k nearest training rows applied to the
        training embedding (NumPy, or lazily blockwise for dask)."""
        if self.X_fit is None:
            raise InputError(
                f"This {self.method} model kept no training rows, so it cannot place new points.",
                "refit with keep_training_rows=True.",
            )
        return reconstruct(X, self.X_fit, self.embedding, self.n_neighbors, self.reg)

    def arrays(self) -> dict:
        out = {"embedding_": self.embedding, "eigenvalues_": self.eigenvalues}
        if self.X_fit is not None:
            out["X_fit_"] = self.X_fit
        if self.kernel is not None:
            out["kernel_"] = self.kernel
        return out

    def scalars(self) -> dict:
        return {
            "method": self.method,
            "n_neighbors": int(self.n_neighbors),
            "reg": float(self.reg),
            **self.info,
        }

    def summary(self) -> dict:
        """What a run's manifest records of the fit: the eigenvalues of K, the solver's
        report (status, objective, the largest relative distance violation) and
        ``convergence`` (every solve's record), the landmark rows left out."""
        values = np.asarray(self.eigenvalues, dtype=np.float64)
        info = {k: v for k, v in self.scalars().items() if k != "landmarks"}
        return {
            "n_components": int(values.size),
            "eigenvalues": values.tolist(),
            **info,
            "convergence": self.convergence,
        }

    @classmethod
    def from_arrays(cls, arrays: dict, scalars: dict) -> "SDPEmbeddingModel":
        info = {k: v for k, v in scalars.items() if k not in ("method", "n_neighbors", "reg")}

        def get(k):  # the rows' arrays may stay in their run store (`_base.kept`)
            return kept(arrays[k]) if k in arrays else None

        return cls(
            scalars["method"],
            get("embedding_"),
            get("eigenvalues_"),
            get("X_fit_"),
            int(scalars["n_neighbors"]),
            float(scalars["reg"]),
            get("kernel_"),
            info,
        )


def reconstruct(X, X_fit: np.ndarray, Y_fit: np.ndarray, k: int, reg: float):
    """sum_j w_j y_j over the k nearest training rows of each row of X (LLE weights); a row
    equal to a training row takes that row's embedding (the regularised weights would not
    put all their mass on it), so transform(X_train) gives the training embedding. The
    training rows and embedding may be left in a run store (`_base.is_stored`): the
    neighbour search then reads its chunks one at a time, and only the neighbours' rows are
    read after it."""
    k = min(int(k), X_fit.shape[0])
    dtype = X.dtype

    def encode(block):
        block = np.asarray(block, dtype=np.float64)
        idx, _ = new_neighbours(block, X_fit, k)
        uniq, at = np.unique(idx, return_inverse=True)
        at = at.reshape(idx.shape)
        Xf = np.asarray(rows_at(X_fit, uniq), np.float64)
        Yf = np.asarray(rows_at(Y_fit, uniq), np.float64)
        w = reconstruction_weights_block(block, Xf[at], reg)
        out = np.einsum("bk,bkc->bc", w, Yf[at])
        same = np.all(block == Xf[at[:, 0]], axis=1)
        out[same] = Yf[at[same, 0]]
        return out.astype(dtype)

    return rowwise(X, encode, Y_fit.shape[1], dtype)


# --------------------------------------------------------------------------- checks


def is_count(value) -> bool:
    """Whether ``value`` is an int (NumPy's too), not a bool."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def is_positive(value):
    """Whether ``value`` is a positive finite int or float, not a bool."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and np.isfinite(value)
        and value > 0
    )


def check_one_of(value, choices: tuple, name: str, fix: str) -> None:
    """`InputError` (with ``fix``) unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise InputError(f"{name} must be one of {', '.join(choices)}; found {value!r}.", fix)


def check_exact_size(n: int, method: str, fix: str) -> None:
    """`InputError` (with ``fix``) when an exact method's n x n SDP has more than
    `EXACT_MAX` rows."""
    if n > EXACT_MAX:
        raise InputError(f"{method} solves an n x n SDP; n = {n} is above {EXACT_MAX}.", fix)


def check_sdp_params(
    n: int,
    *,
    n_components,
    n_neighbors,
    constraints,
    slack_penalty,
    formulation,
    solver,
    tol,
    max_iter,
    method: str,
) -> dict:
    """Every parameter check of the SDP methods, before anything is computed.

    Parameters
    ----------
    n : int
        The number of samples.
    n_components : int
        An int with 1 <= n_components < n.
    n_neighbors : int
        An int with 1 <= n_neighbors < n.
    constraints : {"equality", "slack"}
        The distance constraints.
    slack_penalty : float
        A positive finite number.
    formulation : {"dual", "primal"}
        The SDP formulation.
    solver : {"clarabel", "scs"}
        The SDP solver.
    tol : float or None
        In (0, 1); None for the solver's default (1e-7 Clarabel, 1e-6 SCS).
    max_iter : int or None
        A positive int; None for the solver's default (200 Clarabel, 100 000 SCS).
    method : str
        The method named in error messages.

    Returns
    -------
    dict
        ``{"n_neighbors": int, "tol": float, "max_iter": int}``, the defaults resolved.

    Raises
    ------
    InputError
        Any of the parameters out of range.
    """
    if not is_count(n_components) or not 1 <= n_components < n:
        raise InputError(
            f"{method} needs an int n_components with 1 <= n_components < "
            f"n_samples = {n}; found {n_components!r}.",
            f"pass n_components between 1 and {n - 1} (2 is usual).",
        )
    k = check_n_neighbors(n_neighbors, n, method)
    check_one_of(
        constraints,
        MVU_CONSTRAINTS,
        "constraints",
        "pass constraints='equality' (the exact problem) or "
        "'slack' (penalised violations, for noisy graphs).",
    )
    if not is_positive(slack_penalty):
        raise InputError(
            f"slack_penalty must be a positive number; found {slack_penalty!r}.",
            "pass slack_penalty=10.0 (the default).",
        )
    check_one_of(
        formulation, SDP_FORMULATIONS, "formulation", "pass formulation='dual' (the fast one)."
    )
    tol = DEFAULT_TOL.get(solver, 1e-8) if tol is None else tol
    max_iter = DEFAULT_MAX_ITER.get(solver, 200) if max_iter is None else max_iter
    solver_options(solver, tol, max_iter)  # raises InputError on a bad solver / tol / max_iter
    return {"n_neighbors": k, "tol": float(tol), "max_iter": int(max_iter)}


def check_exact_sdp_params(params: dict, shape: tuple, method: str) -> dict:
    """The parameter checks of the exact SDP methods (`mvu`, `action_respecting_embedding`).

    Parameters
    ----------
    params : dict
        The function's keywords (``n_components``, ``n_neighbors``, ``constraints``,
        ``slack_penalty``, ``face_reduction``, ``formulation``, ``solver``, ``tol``,
        ``max_iter``, ``allow_inaccurate``, ``join_components``, ``reg``; others are not read).
    shape : tuple of int
        The input's ``(n_samples, n_features)``.
    method : str
        The method named in error messages.

    Returns
    -------
    dict
        ``n_neighbors``, ``tol``, ``max_iter`` and ``reg`` with their
        defaults resolved.

    Raises
    ------
    InputError
        A parameter out of range.
    """
    check_flags(params, ("allow_inaccurate", "join_components", "face_reduction"), method)
    p = check_sdp_params(shape[0], **{k: params[k] for k in _SDP_KEYS}, method=method)
    return {**p, "reg": check_reg(params["reg"])}


_SDP_KEYS = (
    "n_components",
    "n_neighbors",
    "constraints",
    "slack_penalty",
    "formulation",
    "solver",
    "tol",
    "max_iter",
)


# --------------------------------------------------------------------------- the fit


def prepare_graph(
    X,
    graph: KNNGraph | None,
    n_neighbors: int,
    *,
    metric: str,
    knn_backend: str,
    join: bool,
    random_state,
    method: str,
) -> KNNGraph:
    """The kNN graph (given or built), connected or refused (or joined)."""
    n = X.shape[0]
    if graph is None:
        graph = built_graph(
            X, n_neighbors, method, metric=metric, backend=knn_backend, random_state=random_state
        )
    elif graph.n_samples != n:
        raise InputError(
            f"The graph has {graph.n_samples} rows; the data have {n}.",
            "pass the kNN graph of these rows.",
        )
    elif graph.n_neighbors > n_neighbors:
        graph = graph.subset(n_neighbors)
    if (graph.indices < 0).any():
        raise InputError(
            f"The kNN graph has rows with fewer than {graph.n_neighbors} neighbours.",
            "rebuild it with knn_backend='exact'.",
        )
    if join and not graph.info.get("extra_edges"):
        graph, _ = join_components(graph, X)
    if not graph.info.get("extra_edges"):
        check_connected(graph, method=method)
    return graph


# the keywords of an exact fit that `distance_sdp` takes as they are given
_SOLVER_KEYS = (
    "constraints",
    "slack_penalty",
    "face_reduction",
    "formulation",
    "solver",
    "allow_inaccurate",
    "verbose",
)


@dataclass
class SDPFit:
    """A fit of the family under way (`start`): the checked input, the function's keywords
    as given (``params``), the checked ones with their defaults resolved (``p``:
    ``n_neighbors``, ``tol``, ``max_iter``, ``reg``), the kNN graph and the method's name in
    messages. The method's function solves the SDP and embeds its kernel itself, between
    `start` and `model`: the warnings of those steps (their ``stacklevel``) point at the
    function's caller."""

    X: object
    params: dict
    p: dict
    graph: KNNGraph
    method: str

    @classmethod
    def start(cls, X, params: dict, check, method: str) -> tuple[SDPFit, tuple]:
        """The first steps of a fit: ``check`` (the method's spec check) of ``params``
        against the shape of ``X``, the kNN graph (`prepare_graph`: ``params["graph"]`` or
        one built), then the fit and the graph's edges (I, J, d) (`graphs.sdp.edge_list`),
        which the fit does not keep."""
        p = check(params, X.shape)
        graph = prepare_graph(
            X,
            params["graph"],
            p["n_neighbors"],
            metric=params["metric"],
            knn_backend=params["knn_backend"],
            join=params["join_components"],
            random_state=params["random_state"],
            method=method,
        )
        return cls(X, params, p, graph, method), edge_list(graph)

    def solver_keywords(self) -> dict:
        """`distance_sdp`'s keywords for an exact fit (`mvu`, `action_respecting_embedding`):
        the solver's settings, the tolerance and iteration limit resolved, the method."""
        return {
            **{k: self.params[k] for k in _SOLVER_KEYS},
            "tol": self.p["tol"],
            "max_iter": self.p["max_iter"],
            "method": self.method,
        }

    def model(self, name: str, Y, lam, info: dict, kernel=None, keep_rows=True):
        """The fitted `SDPEmbeddingModel` (``name`` its method), with the training rows in
        memory when ``keep_rows``."""
        X = self.X
        X_fit = np.asarray(X.compute() if is_dask(X) else X) if keep_rows else None
        return SDPEmbeddingModel(
            name, Y, lam, X_fit, self.p["n_neighbors"], self.p["reg"], kernel, info
        )

    def exact_model(self, name: str, Y, lam, K, info: dict, kinfo: dict, **more):
        """The model of an exact fit: the SDP's ``info`` completed with the kernel PCA's
        (``kinfo``, its convergence record after the solves'), ``more`` and the graph's
        metric; K kept when ``params["keep_kernel"]``."""
        info.update(
            kinfo,
            convergence=info["convergence"] + kinfo["convergence"],
            **more,
            metric=self.graph.metric,
        )
        return self.model(name, Y, lam, info, K if self.params["keep_kernel"] else None)


class SDPEstimator(ModelTransform, DimredEstimator):
    """Shared parameters, fit results and transform of the SDP estimators."""

    def _set(self, model: SDPEmbeddingModel, X):
        self._model = model
        self.embedding_ = like_input(model.embedding, X)
        self.eigenvalues_ = model.eigenvalues
        self.kernel_ = model.kernel
        self.n_features_in_ = X.shape[1]
        self.solver_status_ = model.info.get("status")
        self.objective_ = model.info.get("objective")
        self.max_relative_violation_ = model.info.get("max_relative_violation")
        self.n_iter_ = model.info.get("iterations")  # the SDP solver's iterations
        self.info_ = dict(model.info)
        self.convergence_ = model.convergence
        return self

    def fit_transform(self, X, y=None, **kw):
        return self.fit(X, y, **kw).embedding_
