"""Test harness parts shared by tests, e2e and benchmarks: API emulator, S3 server, pod runner."""
