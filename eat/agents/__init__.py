"""Agents that propose candidates: offline (knob search), llm (litellm), external (CLIs)."""
