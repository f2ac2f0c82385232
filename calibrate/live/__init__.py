"""Live data-parallel training: measure what ``commsim predict`` predicts, on real training.

One process per rank trains VGG-11 (or any model factory) exactly as the seed assignment does, and
reports per-iteration time split into compute and synchronisation, bytes on the rank's interface,
training loss and, with real or learnable synthetic data, test loss/accuracy.  It runs the
simulator's what-ifs with the simulator's semantics (``commsim.spec.RunSpec``): local gradient
aggregation (``sync_every``), averaging within groups (``group_size``), DDP's fp16 compression,
and, for large batches, the linear learning-rate scaling rule with warm-up.

One module per concern:
  ``config``     ``LiveConfig``: what a run is asked to do, and what it refuses;
  ``run``        ``run_live``/``run_live_torchrun``: launch the ranks, aggregate their results;
  ``worker``     ``live_worker``: one rank's run, step by step;
  ``loop``       the timed training cycle, the compute probe, the test evaluation;
  ``workload``   the model, the data set and each rank's share of a batch;
  ``schedule``   the learning rate of every step;
  ``groups``     whom a rank averages with;
  ``hooks``      timing DDP's buckets in flight;
  ``aggregate``  one record from the ranks' results, in ``commsim predict --json``'s terms.
Everything callers use is importable from here, and "commsim.calibrate.live:small_cnn" (and
``small_mlp``, ``live_worker``) still name a factory or worker, as tests and reports spell them.
"""
from commsim.calibrate.live.aggregate import RANK_METRICS, aggregate
from commsim.calibrate.live.config import LiveConfig
from commsim.calibrate.live.groups import Comm, averaging_group
from commsim.calibrate.live.hooks import BucketTimer, comm_hook, timed_hook, union_s
from commsim.calibrate.live.loop import (barrier, evaluate, finite, new_optimizer, probe_compute,
                                         sync_none, train_cycle)
from commsim.calibrate.live.run import WORKER, run_live, run_live_torchrun
from commsim.calibrate.live.schedule import (LR_REFERENCE_BATCH, LR_SCALINGS, LrSchedule,
                                             lr_schedule)
from commsim.calibrate.live.worker import interface_bytes, live_worker, pin_threads, summary
from commsim.calibrate.live.workload import batches, has_test_set, live_model, load_data
from commsim.calibrate.models import small_cnn, small_mlp

__all__ = ["BucketTimer", "Comm", "LR_REFERENCE_BATCH", "LR_SCALINGS", "LiveConfig", "LrSchedule",
           "RANK_METRICS", "WORKER", "aggregate", "averaging_group", "barrier", "batches",
           "comm_hook", "evaluate", "finite", "has_test_set", "interface_bytes", "live_model",
           "live_worker", "load_data", "lr_schedule", "new_optimizer", "pin_threads",
           "probe_compute", "run_live", "run_live_torchrun", "small_cnn", "small_mlp", "summary",
           "sync_none", "timed_hook", "train_cycle", "union_s"]
