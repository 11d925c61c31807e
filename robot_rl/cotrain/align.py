"""Observation alignment between simulated and real data: same keys, cameras, image sizes, actions.

Co-training mixes real and simulated rows in one batch and runs one policy on both, so every array
must mean the same thing on both sides. :func:`alignment_problems` lists *every* difference (not just
the first), and :func:`assert_aligned` raises :class:`AlignmentError` with the whole list and a hint
for each kind (rename cameras with ``cotrain.camera_map``, resize images when recording, ...).
"""

from __future__ import annotations

from robot_rl.core.specs import ArraySpec, EnvSpec, SpecMismatchError
from robot_rl.data.episode import Episode


class AlignmentError(SpecMismatchError):
    """Sim and real observations/actions differ; the message lists every difference."""


def _cameras(spec: EnvSpec) -> dict[str, ArraySpec]:
    return {k[len("image."):]: v for k, v in spec.observation.items() if k.startswith("image.")}


def alignment_problems(sim: EnvSpec, real: EnvSpec) -> list[str]:
    """Every difference between the sim spec and the real data's spec, one readable line each."""
    problems: list[str] = []
    sim_cams, real_cams = _cameras(sim), _cameras(real)
    if set(sim_cams) != set(real_cams):
        only_sim, only_real = sorted(set(sim_cams) - set(real_cams)), sorted(set(real_cams) - set(sim_cams))
        problems.append(f"camera names differ: sim has {sorted(sim_cams)}, real has {sorted(real_cams)}"
                        + (f" (only in sim: {only_sim}" if only_sim else " (")
                        + (f"; only in real: {only_real})" if only_real else ")")
                        + " — map them with cotrain.camera_map={real_name: sim_name}")
    for cam in sorted(set(sim_cams) & set(real_cams)):
        a, b = sim_cams[cam], real_cams[cam]
        if a.shape != b.shape:
            problems.append(f"camera {cam!r}: image size sim {_hwc(a)} vs real {_hwc(b)} — record or resize "
                            "the real images to the sim's size (or set task.image_size)")
        if a.dtype != b.dtype:
            problems.append(f"camera {cam!r}: dtype sim {a.dtype} vs real {b.dtype}")
    for key in sorted((set(sim.observation) | set(real.observation)) - {f"image.{c}" for c in sim_cams | real_cams}):
        a_spec, b_spec = sim.observation.get(key), real.observation.get(key)
        if a_spec is None or b_spec is None:
            side = "sim" if b_spec is None else "real"
            problems.append(f"observation {key!r} is only in the {side} data")
        elif (a_spec.shape, a_spec.dtype) != (b_spec.shape, b_spec.dtype):
            problems.append(f"observation {key!r}: sim {a_spec.dtype}{list(a_spec.shape)} vs real "
                            f"{b_spec.dtype}{list(b_spec.shape)}")
    sa, ra = sim.action, real.action
    if sa.dtype != ra.dtype or sa.shape[-1] != ra.shape[-1] or (len(ra.shape) == 2 and sa.shape != ra.shape):
        problems.append(f"action: sim {sa.dtype}{list(sa.shape)} vs real {ra.dtype}{list(ra.shape)}")
    for name in ("low", "high"):
        s_b, r_b = getattr(sa, name), getattr(ra, name)
        if s_b is not None and r_b is not None and s_b != r_b:
            problems.append(f"action bound {name}: sim {s_b} vs real {r_b} — rescale the real actions")
    return problems


def _hwc(spec: ArraySpec) -> str:
    return "×".join(str(d) for d in spec.shape)


def assert_aligned(sim: EnvSpec, real: EnvSpec, what: str = "the real demonstrations") -> None:
    """Raise :class:`AlignmentError` listing every difference between ``sim`` and ``real``."""
    problems = alignment_problems(sim, real)
    if problems:
        lines = "\n".join(f"  - {p}" for p in problems)
        raise AlignmentError(f"{what} do not align with the simulated task ({len(problems)} difference"
                             f"{'s' if len(problems) > 1 else ''}):\n{lines}")


def rename_cameras(spec: EnvSpec, episodes: list[Episode], camera_map: dict[str, str]
                   ) -> tuple[EnvSpec, list[Episode]]:
    """Apply ``camera_map`` (real name → sim name) to a spec and its episodes' observation keys."""
    if not camera_map:
        return spec, episodes
    unknown = sorted(set(camera_map) - set(_cameras(spec)))
    if unknown:
        raise AlignmentError(f"cotrain.camera_map names cameras {unknown} that the real data does not have; "
                             f"it has {sorted(_cameras(spec))}")

    def key(k: str) -> str:
        return f"image.{camera_map[k[6:]]}" if k.startswith("image.") and k[6:] in camera_map else k

    new_spec = EnvSpec({key(k): v for k, v in spec.observation.items()}, spec.action, dict(spec.extras))
    for ep in episodes:
        ep.obs = {key(k): v for k, v in ep.obs.items()}
        if ep.final_obs is not None:
            ep.final_obs = {key(k): v for k, v in ep.final_obs.items()}
    return new_spec, episodes
