"""The measurement phases of ``commsim calibrate``, one module each, in the order they run.

  ``alone``           compute alone: the profile's compute table (rank 0, or every host);
  ``contended``       every co-located rank computing at once;
  ``oversubscribed``  the same, with co-runners loading the host past its cores;
  ``reduction``       the local reduction cost γ (rank 0);
  ``collectives``     every Gloo collective over the size sweep: the network;
  ``contention``      a large all-reduce while every rank computes;
  ``host_side``       the large collectives with the emulated links unshaped: the hosts' rate.
Each is a ``base.Phase`` (plan keys, measure one, add its records to the profile); its records
are keyed by ``keys``; ``loop.calibrate_rank`` runs them all, resumably.  The order is also the
order their records are fitted in: the collectives' fits need the reduction cost, the
contention curve the all-reduce's fit.
"""
from commsim.calibrate.phases.alone import Alone
from commsim.calibrate.phases.collectives import Collectives
from commsim.calibrate.phases.contended import Contended
from commsim.calibrate.phases.contention import Contention
from commsim.calibrate.phases.host_side import HostSide
from commsim.calibrate.phases.oversubscribed import Oversubscribed
from commsim.calibrate.phases.reduction import Reduction

PHASES = (Alone, Contended, Oversubscribed, Reduction, Collectives, Contention, HostSide)

__all__ = ["Alone", "Collectives", "Contended", "Contention", "HostSide", "Oversubscribed",
           "PHASES", "Reduction"]
