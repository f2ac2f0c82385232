"""Everything that runs torch on a cluster (installed as ``commsim.calibrate``).

  ``runner``     ``commsim calibrate``: options (``options``), the samples log (``samples``),
                 the measurement ``phases`` on every rank, records to profile (``assemble``);
  ``compute``, ``collectives``, ``corunner``: what the phases time; ``fit``: the fits;
  ``live``       live training, measuring what ``commsim predict`` predicts;
  ``launch``     one process per rank: local, emulated or under torchrun;
  ``cluster``    the emulated cluster (network namespaces, shaped links);
  ``models``, ``cifar``, ``digits``: models and data; ``from_trace``: a profile from a trace.
"""
