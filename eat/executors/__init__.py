"""Executors: where teams' turns run (local threads now; Ray is a later one)."""
