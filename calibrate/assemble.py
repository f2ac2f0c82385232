"""A calibration's records -> its profile: each phase fits its own records, in the order they
run, then the model's shapes and the run's metadata complete the schema-v1 ``Profile``.

The same function re-fits a saved profile from the raw samples it keeps (``refit_profile``):
how a change to the fits is checked against measurements already taken (``bench/fidelity.py
--repredict``).
"""
from __future__ import annotations

from commsim.calibrate.models import buffer_specs, build_model, param_specs
from commsim.calibrate.phases import PHASES
from commsim.calibrate.phases.base import ProfileParts
from commsim.errors import RunFailed
from commsim.profile import SCHEMA_VERSION, ComputeTable, Profile


def profile_from_records(records: list[dict], *, model: str, input_shape: tuple[int, ...],
                         world_size: int, metadata: dict) -> Profile:
    """Fit everything measured and build the profile (raw records kept under ``samples``)."""
    parts = ProfileParts(world_size)
    for phase in (phase() for phase in PHASES):
        try:
            phase.add_to_profile([r for r in records if phase.key(r) is not None], parts)
        except ValueError as exc:
            raise RunFailed(f"fitting failed: {exc}") from None
    built = build_model(model)
    return Profile(schema_version=SCHEMA_VERSION, metadata=metadata, model_name=model,
                   input_shape=tuple(input_shape), params=param_specs(built),
                   compute=ComputeTable(**parts.compute),
                   grad_ready_fraction=tuple(parts.grad_ready["grad_ready"]),
                   grad_ready_batch_size=parts.grad_ready["batch_size"], network=parts.network,
                   collectives=parts.collectives,
                   samples={**parts.samples, "compute_fit": parts.compute_fits},
                   buffers=buffer_specs(built))


def refit_profile(profile: Profile) -> Profile:
    """``profile`` fitted again from its own raw samples by this version's fits (the metadata is
    kept): how a change to the fits is checked against measurements already taken."""
    records = [r for phase in PHASES for r in phase().from_samples(profile.samples)]
    return profile_from_records(records, model=profile.model_name,
                                input_shape=profile.input_shape,
                                world_size=int(profile.metadata["nodes"]),
                                metadata=dict(profile.metadata))
