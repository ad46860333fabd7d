"""Rules for scipy.signal convolution and IIR filtering (filled in below)."""
