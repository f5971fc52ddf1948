"""Team presets, shipped as package data of eat (eat.teams)."""
