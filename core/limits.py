"""Numeric bounds on accepted input.

Upstream takes ``usize`` byte counts and ``f64`` cores. crs-bridge bounds both so that every
load, every square of a load and every sum of those stays finite (product decision 4: no NaN,
no overflow), and so that integer byte arithmetic fits NumPy's int64.
"""

#: Largest accepted byte count (mem, maxmem), also for sums over a node or a bundle: 4 EiB,
#: so that two of them still add up within int64.
MAX_BYTES = 2**62 - 1

#: Largest accepted core count (cpu, maxcpu): 2**53, the last integer a float holds exactly.
MAX_CORES = float(2**53)
