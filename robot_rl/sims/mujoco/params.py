"""The physical parameters a domain-randomisation wrapper may set, per world.

=================  ======================  ==================================================
name               shape per world         MjModel field
=================  ======================  ==================================================
``body_mass``      ``[nbody]``             ``body_mass`` (kg; inertia is not rescaled)
``geom_friction``  ``[ngeom, 3]``          ``geom_friction`` (sliding, torsional, rolling)
``dof_damping``    ``[nv]``                ``dof_damping`` (N·m·s/rad or N·s/m)
``actuator_gain``  ``[nu]``                ``actuator_gainprm[:, 0]``: a position servo's kp;
                                           its bias ``actuator_biasprm[:, 1] = -kp`` follows
=================  ======================  ==================================================

Derived constants (subtree masses, ``dof_invweight0``) are not recomputed, as in MJX practice;
they only scale the constraint solver's regularisation. Element names come from
:func:`param_labels` (``"cube"``, ``"finger_left"``, ...; unnamed elements get ``"<kind> <id>"``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from robot_rl.core.config import ConfigError

PARAM_NAMES = ("body_mass", "geom_friction", "dof_damping", "actuator_gain")


def param_view(model: Any, name: str) -> np.ndarray:
    """A writable numpy view of parameter ``name`` in an ``MjModel``."""
    if name == "body_mass":
        return model.body_mass  # type: ignore[no-any-return]
    if name == "geom_friction":
        return model.geom_friction  # type: ignore[no-any-return]
    if name == "dof_damping":
        return model.dof_damping  # type: ignore[no-any-return]
    if name == "actuator_gain":
        return model.actuator_gainprm[:, 0]  # type: ignore[no-any-return]
    raise KeyError(f"unknown parameter {name!r}; valid: {', '.join(PARAM_NAMES)}")


def param_labels(model: Any, name: str) -> list[str]:
    """Names of the elements along the first axis of parameter ``name`` (bodies, geoms, dofs, actuators)."""
    if name not in PARAM_NAMES:
        raise KeyError(f"unknown parameter {name!r}; valid: {', '.join(PARAM_NAMES)}")
    if name == "body_mass":
        return [model.body(i).name or f"body {i}" for i in range(model.nbody)]
    if name == "geom_friction":
        return [model.geom(i).name or f"geom {i} of {model.body(model.geom_bodyid[i]).name}"
                for i in range(model.ngeom)]
    if name == "dof_damping":
        return [model.joint(model.dof_jntid[i]).name or f"dof {i}" for i in range(model.nv)]
    return [model.actuator(i).name or f"actuator {i}" for i in range(model.nu)]


def check_param_values(name: str, values: torch.Tensor | np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``values`` as float64 numpy of ``shape``; raise ``ValueError`` if non-finite or negative."""
    if name not in PARAM_NAMES:
        raise KeyError(f"unknown parameter {name!r}; valid: {', '.join(PARAM_NAMES)}")
    v = values.detach().to("cpu", torch.float64).numpy() if isinstance(values, torch.Tensor) else np.asarray(
        values, np.float64)
    if v.shape != shape:
        raise ConfigError(f"{name}: values of shape {list(v.shape)}, expected {list(shape)} ([worlds, ...])")
    if not np.isfinite(v).all():
        raise ConfigError(f"{name}: values contain NaN or inf")
    if (v < 0).any():
        raise ConfigError(f"{name}: values must be >= 0")
    return v
