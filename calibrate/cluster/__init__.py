"""An emulated cluster of N nodes on this machine: network namespaces, veth links, a bridge, tc.

Rank r of an emulated run runs in node r (``exec_argv``); the host's own network is never
touched.  One module per concern:
  ``spec``        names, addresses and ``plan`` (the ``ClusterInfo`` to build);
  ``shaping``     tbf burst, queue and GSO cap of every link end, and why;
  ``commands``    running ``ip``/``tc``, and ``check_prereqs``;
  ``status``      the recorded spec, checked against the kernel; the lock;
  ``namespaces``  ``up``, ``ensure``, ``down``;
  ``links``       using the nodes: ``exec_argv``, counters, ``set_link``, ``measure_throughput``;
  ``throughput``  the two ends of the throughput test, run in the nodes.
Everything callers use is importable from here (``from commsim.calibrate import cluster``).
"""
from commsim.calibrate.cluster.commands import check_prereqs
from commsim.calibrate.cluster.links import (exec_argv, interface_counters, link_states,
                                             measure_throughput, set_link)
from commsim.calibrate.cluster.namespaces import down, ensure, shape, unshaped, up
from commsim.calibrate.cluster.shaping import (BURST_TIME_S, FRAME_BYTES, GSO_DEFAULT_BYTES,
                                               MIN_BURST_FRAMES, QUEUE_MIN_BYTES, QUEUE_TIME_S,
                                               shaping)
from commsim.calibrate.cluster.spec import (BRIDGE, DEFAULT_TCP_CONGESTION, INTERFACE, MAX_NODES,
                                            PREFIX_LEN, QDISC, SUBNET, ClusterInfo, address,
                                            bridge_namespace, namespace, plan)
from commsim.calibrate.cluster.status import NETNS_DIR, STATE_DIR, status

__all__ = ["BRIDGE", "BURST_TIME_S", "ClusterInfo", "DEFAULT_TCP_CONGESTION", "FRAME_BYTES",
           "GSO_DEFAULT_BYTES", "INTERFACE", "MAX_NODES", "MIN_BURST_FRAMES", "NETNS_DIR",
           "PREFIX_LEN", "QDISC", "QUEUE_MIN_BYTES", "QUEUE_TIME_S", "STATE_DIR", "SUBNET",
           "address", "bridge_namespace", "check_prereqs", "down", "ensure", "exec_argv",
           "interface_counters", "link_states", "measure_throughput", "namespace", "plan", "shape",
           "unshaped",
           "set_link", "shaping", "status", "up"]
