"""The one compiled part: ``fast_queues.simulate``'s event loop (commsim/sim/_replay.c).

Optional: where no C compiler is found, the build goes on without it and the fast engine runs
the same loop in Python (the same answers, about 8 times slower on those replays).
-ffp-contract=off keeps every multiply and add apart, as Python computes them, so the two
loops agree to the bit.
"""
from setuptools import Extension, setup

setup(ext_modules=[Extension("commsim.sim._replay", ["commsim/sim/_replay.c"], optional=True,
                             extra_compile_args=["-O2", "-ffp-contract=off"])])
