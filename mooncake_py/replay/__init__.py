"""Replay of prepared caches: a recording made into a plan, re-run under guards.

``plans.py`` (recording tapes, plans, guards, the replayers of gradient, pullback and HVP caches),
``writes.py`` (writes into arrays replayed), ``forward.py`` (derivative caches), ``source.py``
(plans as generated Python source), ``compiled.py`` (plans as numba kernels) and
``compiling.py`` (the replayer of ``compile=True`` caches, choosing between the two).
"""
