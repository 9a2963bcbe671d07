"""The repository's developer tools; `tools.bench` is the benchmark."""
