"""Values of both modes at once: a tape recording dual numbers (forward-over-reverse).

``dual_scalars.py``: the short paths of tracked dual scalars (scalar loops under ``hvp``);
``tracking.py``: a reverse-mode call's arguments made tracked values (duals included) and its
output checked. Imports tape/ and dual/, which do not import each other.
"""
