"""The pure model: node facts, image tags and the rules, expectations, the audit, branches, CUDA, the GPU Operator's
configuration. No I/O but reading gpualign's own cache (archive_reading)."""
