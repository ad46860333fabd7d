"""Rules for scipy.special functions that are not ufuncs (logsumexp, softmax, log_softmax).

The scipy.special *ufuncs* (expit, logit, erf, erfc, gammaln, digamma, xlogy, ndtr, log_ndtr)
dispatch through ``__array_ufunc__`` and get their rules from the derivative table. The
functions here do not dispatch (scipy converts its inputs with ``np.asarray``), so they are
wrapped as primitives and exposed as ``mooncake_py.special.*``.
"""
