"""Swing a torque-limited pendulum up and hold it upright (the baseline policy).

The grader calls `act(obs)` once per 0.05 s step with obs = (cos θ, sin θ, θ̇), θ = 0 upright,
and applies the returned torque clipped to [-2, 2] N·m. Gravity's torque peaks at 5 N·m, so the
motor cannot lift the pendulum directly: it has to pump energy in over a few swings, then catch
it near the top. If the module defines `reset()`, the grader calls it before every episode.
"""

import math

# Energy pumping: torque = SWING_GAIN * (energy missing to reach the top), signed to push along
# the swing. Too low a gain takes many swings; too high overshoots past the top.
SWING_GAIN = 0.5  # eat:knob [0.5, 1.0, 2.0, 4.0, 8.0]
# Within this angle of upright (radians) the balance controller takes over.
SWITCH_ANGLE = 0.8  # eat:knob [0.8, 0.6, 0.4, 0.3, 0.2]
# Balance: a PD controller on the angle and the angular velocity.
KP = 6.0  # eat:knob [6.0, 8.0, 12.0, 16.0, 24.0]
KD = 0.5  # eat:knob [0.5, 1.0, 2.0, 3.0, 4.0]

MAX_TORQUE = 2.0
# The pendulum is a uniform rod (mass 1, length 1, g = 10) about its end: inertia 1/3, and its
# energy with the potential measured from the pivot is 5 when it rests upright.
INERTIA = 1.0 / 3.0
TOP_ENERGY = 5.0


def act(obs: tuple[float, float, float]) -> float:
    cos_th, sin_th, thdot = obs
    theta = math.atan2(sin_th, cos_th)
    if abs(theta) < SWITCH_ANGLE:
        u = -KP * theta - KD * thdot
    else:
        energy = 0.5 * INERTIA * thdot * thdot + TOP_ENERGY * cos_th
        # dE/dt = θ̇·u: a torque with the sign of θ̇ adds energy; at rest, kick to get started.
        direction = math.copysign(1.0, thdot) if thdot != 0.0 else 1.0
        u = SWING_GAIN * (TOP_ENERGY - energy) * direction
    return max(-MAX_TORQUE, min(MAX_TORQUE, u))
