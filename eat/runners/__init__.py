"""Hardware runners: build, verify and time candidates."""
