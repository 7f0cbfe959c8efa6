"""scikit-learn's estimator contract on NumPy input (sklearn.utils.estimator_checks), run on
every method's estimator (from the specs, `dimred_dask.methods.specs`): each declares the
parameter sets the checks run with (``_check_params``, small-data settings) and the checks
that cannot apply to it with the reason (``_check_exempt``), as scikit-learn lists them for
its own estimators."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from dimred_dask.methods.specs import SPECS

# every method's estimator, from the specs (tests/test_method_defaults.py checks that these
# are all the estimators the package exports)
ESTIMATORS = [spec.estimator for spec in SPECS.values()]


def test_every_estimator_is_checked_or_says_why_not():
    assert len(ESTIMATORS) >= 17, [c.__name__ for c in ESTIMATORS]
    for cls in ESTIMATORS:
        assert cls._check_params or cls._check_not_run, cls.__name__
        assert not (cls._check_params and cls._check_not_run), cls.__name__


@parametrize_with_checks(
    [cls(**params) for cls in ESTIMATORS for params in cls._check_params],
    expected_failed_checks=lambda est: type(est)._check_exempt,
)
def test_sklearn_contract(estimator, check):
    check(estimator)
