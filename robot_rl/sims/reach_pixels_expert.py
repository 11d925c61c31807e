"""A scripted expert for ``reach_pixels`` that sees only what a learned policy sees: the image and the joints.

It finds the goal in ``image.top`` as the centroid of its green pixels (the goal disc is drawn last, so the arm
never hides it; anti-aliased edges give sub-pixel precision), gets the end-effector from ``state``'s
``cos q, sin q`` through the nominal forward kinematics, and steers straight at the goal as the ``ee`` controller
of :mod:`robot_rl.sims.reach` expects, squashed like a SAC actor::

    w(i, j)  = max(0, G − max(R, B))                         greenness of each pixel
    goal     = Σ w·xy(i, j) / Σ w                           pixel centres in world coordinates
    u        = (goal − ee(q)) / action_scale                  the pre-squash action
    a        = tanh(u)

On the default task it succeeds in every episode (200 of 200 at 64 × 64 and at 32 × 32, 17 steps on average). It
is a :class:`~robot_rl.core.algorithm.Policy` and a :class:`~robot_rl.core.algorithm.SquashedActor`, so anything
that takes a policy (evaluation, distillation) takes it: it is the known-good teacher of the distillation tests
and example (docs/distill.md). ``u`` keeps the distance to the goal where ``a`` saturates, which is what a student
learns the goal's position from.
"""

from __future__ import annotations

import torch

from robot_rl.core.algorithm import Policy
from robot_rl.core.transition import Obs
from robot_rl.sims.reach import forward_kinematics
from robot_rl.sims.reach_pixels import ReachPixelsConfig


class ReachPixelsExpert(Policy):
    """Scripted ``reach_pixels`` policy from the observation alone (goal from the image, arm from the joints)."""

    def __init__(self, cfg: ReachPixelsConfig | None = None) -> None:
        super().__init__()
        self.cfg = cfg or ReachPixelsConfig()
        if self.cfg.control != "ee":
            raise ValueError(f"ReachPixelsExpert steers the end-effector: needs control='ee', got {self.cfg.control!r}")

    def goal_from_image(self, image: torch.Tensor) -> torch.Tensor:
        """Goal positions ``[N, 2]`` (m) from uint8 images ``[N, S, S, 3]``: the centroid of the green pixels."""
        img = image.float()
        weight = (img[..., 1] - torch.maximum(img[..., 0], img[..., 2])).clamp_min(0.0)
        size = img.shape[1]
        extent = 1.1 * (self.cfg.link1 + self.cfg.link2)  # the task's render_extent
        centres = (torch.arange(size, device=img.device, dtype=torch.float32) + 0.5) * (2.0 * extent / size) - extent
        total = weight.sum(dim=(1, 2)).clamp_min(1e-6)
        x = (weight * centres.view(1, 1, size)).sum(dim=(1, 2)) / total
        y = (weight * -centres.view(1, size, 1)).sum(dim=(1, 2)) / total  # row 0 is the top (largest y)
        return torch.stack([x, y], dim=-1)

    def pre_squash_action(self, obs: Obs) -> torch.Tensor:
        """``u = (goal − ee) / action_scale`` ``[N, 2]`` (the action is ``tanh(u)``)."""
        state = obs["state"].float()
        q = torch.atan2(state[:, 2:4], state[:, 0:2])
        ee = forward_kinematics(q, self.cfg.link1, self.cfg.link2)[1]
        return (self.goal_from_image(obs["image.top"]) - ee) / self.cfg.action_scale

    def deterministic_action(self, obs: Obs) -> torch.Tensor:
        """``tanh(u)`` ``[N, 2]``: the end-effector command in ``[-1, 1]`` (see the module docstring)."""
        return torch.tanh(self.pre_squash_action(obs))

    @torch.no_grad()
    def act(self, obs: Obs, deterministic: bool = True) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The same action whether or not ``deterministic`` (a scripted policy has no noise); no extras."""
        return self.deterministic_action(obs), {}
