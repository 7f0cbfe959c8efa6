"""scikit-learn's estimator contract on NumPy input (sklearn.utils.estimator_checks)."""
from sklearn.utils.estimator_checks import parametrize_with_checks

from dimred_dask import PCA, KernelPCA


@parametrize_with_checks([PCA(), PCA(n_components=1, solver="randomized", random_state=0),
                          PCA(solver="tsqr"), PCA(solver="dual", whiten=True),
                          KernelPCA(), KernelPCA(2, solver="nystrom", n_landmarks=10),
                          KernelPCA(1, solver="randomized", kernel="polynomial")])
def test_sklearn_contract(estimator, check):
    check(estimator)
