"""Devices: a spec (data, YAML) plus a runner that executes the profiling agent there."""
