"""PCA, then another method, as one estimator: a scikit-learn `Pipeline` of this package's
estimators, named as the flow names chains (``"pca+umap"``).

    from dimred_dask import make_chain
    Y = make_chain("pca+umap", **{"pca.n_components": 50, "umap.n_neighbors": 30}).fit_transform(X)

The pipeline is scikit-learn's own, so it composes with everything that takes one (grid search
over ``umap__n_neighbors``, ``set_params``, pickling). NumPy in gives NumPy out and dask in
gives dask out, step by step, as each estimator does; a sparse input goes through PCA (which
centres it implicitly) and reaches the second method dense.
"""

from __future__ import annotations

from ..errors import InputError
from .specs import SPECS

__all__ = ["make_chain", "CHAIN_ESTIMATORS", "PCA_COMPONENTS"]

PCA_COMPONENTS = 50  # the PCA step's default, as in the flow's chains


# the methods that may follow PCA: those whose spec says ``follows_pca``
CHAIN_ESTIMATORS = tuple(name for name, spec in SPECS.items() if spec.follows_pca)


def make_chain(method: str, **params):
    """A `sklearn.pipeline.Pipeline` of PCA and the method ``method`` names (``"pca+<name>"``).

    Parameters
    ----------
    method : str
        ``"pca+<name>"`` with ``<name>`` one of ``CHAIN_ESTIMATORS`` (the flow's method names,
        e.g. ``"pca+umap"``, ``"pca+landmark-isomap"``).
    **params
        ``"pca.<name>"`` for PCA (``n_components`` defaults to 50), ``"<method>.<name>"`` or a
        bare ``<name>`` for the second step (e.g. ``"umap.n_neighbors"``), passed to the
        estimators' constructors.

    Returns
    -------
    sklearn.pipeline.Pipeline
        Steps ``"pca"`` (`PCA`) and the method's name with "-" as "_" (its estimator).

    Raises
    ------
    InputError
        ``method`` is not PCA then one of ``CHAIN_ESTIMATORS``, or a dotted parameter names no
        step of the chain.
    """
    from sklearn.pipeline import Pipeline

    from .pca import PCA

    first, plus, second = str(method).partition("+")
    estimators = {name: SPECS[name].estimator for name in CHAIN_ESTIMATORS}
    if first != "pca" or not plus or second not in estimators:
        raise InputError(
            f"A chain is PCA then one of {', '.join(CHAIN_ESTIMATORS)}; found {method!r}.",
            "pass e.g. make_chain('pca+umap').",
        )
    steps: dict[str, dict] = {"pca": {"n_components": PCA_COMPONENTS}, second: {}}
    for key, value in params.items():
        head, dot, rest = key.partition(".")
        if dot and head not in steps:
            raise InputError(
                f"The parameter {key!r} names no step of {method!r}.",
                f"address a step as pca.<name> or {second}.<name>.",
            )
        steps[head if dot else second][rest if dot else key] = value
    return Pipeline(
        [
            ("pca", PCA(**steps["pca"])),
            (second.replace("-", "_"), estimators[second](**steps[second])),
        ]
    )
