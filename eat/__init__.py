"""eat: Evolving Agent Teams."""

__version__ = "0.1.0"
