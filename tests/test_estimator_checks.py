"""scikit-learn's estimator contract on NumPy input (sklearn.utils.estimator_checks)."""
from sklearn.utils.estimator_checks import parametrize_with_checks

from dimred_dask import PCA, KernelPCA, LandmarkMVU, MaximumVarianceUnfolding


@parametrize_with_checks([PCA(), PCA(n_components=1, solver="randomized", random_state=0),
                          PCA(solver="tsqr"), PCA(solver="dual", whiten=True),
                          KernelPCA(), KernelPCA(2, solver="nystrom", n_landmarks=10),
                          KernelPCA(1, solver="randomized", kernel="polynomial"),
                          # the checks' random data make disconnected kNN graphs: join them
                          MaximumVarianceUnfolding(join_components=True),
                          LandmarkMVU(n_landmarks=5, join_components=True)])
def test_sklearn_contract(estimator, check):
    check(estimator)
