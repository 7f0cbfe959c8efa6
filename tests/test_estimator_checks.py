"""scikit-learn's estimator contract on NumPy input (sklearn.utils.estimator_checks)."""
from sklearn.utils.estimator_checks import parametrize_with_checks

from dimred_dask import PCA


@parametrize_with_checks([PCA(), PCA(n_components=1, solver="randomized", random_state=0),
                          PCA(solver="tsqr"), PCA(solver="dual", whiten=True)])
def test_sklearn_contract(estimator, check):
    check(estimator)
