"""Grader of pendulum_policy: the mean return of a policy over a few swing-up episodes.

The dynamics, cost and limits are gymnasium's Pendulum-v1 (g = 10, a 1 kg, 1 m rod, dt 0.05 s,
torque clipped to ±2, θ̇ clipped to ±8, 200 steps; each step costs θ² + 0.1 θ̇² + 0.001 u², θ
wrapped to [-π, π)), rewritten here in plain Python so that grading needs no gymnasium.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
from types import ModuleType

import numpy as np

EPISODES = 8
STEPS = 200
DT = 0.05
G, MASS, LENGTH = 10.0, 1.0, 1.0
MAX_TORQUE = 2.0
MAX_SPEED = 8.0
# An episode counts as a success when the pendulum stays this close to upright (radians) for
# its last SETTLED steps (2.5 s): swung up and held, not merely passing the top.
UPRIGHT = 0.2
SETTLED = 50

# Read while the module is imported: private/ is closed to the grader once the candidate runs,
# and the held-out initial states are not derivable from the train seeds.
HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "private", "held_out_seeds.json")) as f:
    HELD_OUT_SEEDS: list[int] = json.load(f)


def initial_states(split: str, seed: int) -> np.ndarray:
    """(EPISODES, 2) initial (θ, θ̇), uniform in [-π, π] × [-1, 1] as in Pendulum-v1."""
    if split == "train":
        rng = np.random.default_rng(seed)
    elif split == "held_out":
        n = len(HELD_OUT_SEEDS)
        rng = np.random.default_rng([HELD_OUT_SEEDS[seed % n], seed // n])
    else:
        raise ValueError(f"unknown split {split!r} (train or held_out)")
    high = np.array([math.pi, 1.0])
    return rng.uniform(-high, high, size=(EPISODES, 2))


def load_policy(folder: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location("policy", os.path.join(folder, "policy.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wrap(theta: float) -> float:
    return (theta + math.pi) % (2 * math.pi) - math.pi


def episode(policy: ModuleType, theta: float, thdot: float) -> tuple[float, bool]:
    """One episode's return and whether it ended balanced upright."""
    if hasattr(policy, "reset"):
        policy.reset()
    total = 0.0
    upright_steps = 0
    for step in range(STEPS):
        action = policy.act((math.cos(theta), math.sin(theta), thdot))
        try:
            u = float(action)
        except (TypeError, ValueError):
            raise AssertionError(f"act returned {action!r} at step {step}, not a number") from None
        if not math.isfinite(u):
            raise AssertionError(f"act returned {u} at step {step}, not a finite torque")
        u = min(max(u, -MAX_TORQUE), MAX_TORQUE)
        total -= wrap(theta) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
        # Semi-implicit Euler, as Pendulum-v1: the new velocity moves the angle.
        thdot += (3 * G / (2 * LENGTH) * math.sin(theta) + 3.0 / (MASS * LENGTH**2) * u) * DT
        thdot = min(max(thdot, -MAX_SPEED), MAX_SPEED)
        theta += thdot * DT
        upright_steps = upright_steps + 1 if abs(wrap(theta)) < UPRIGHT else 0
    return total, upright_steps >= SETTLED


def grade(folder: str, split: str, seed: int) -> dict[str, float]:
    policy = load_policy(folder)
    results = [episode(policy, float(th), float(w)) for th, w in initial_states(split, seed)]
    returns = [r for r, _ in results]
    return {
        "return": sum(returns) / len(returns),
        "worst_return": min(returns),
        "success_rate": sum(ok for _, ok in results) / len(results),
    }
