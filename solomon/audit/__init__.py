"""The audit chain: the SHA256 manifest, verify, signatures and the promotion gate. Reads files only."""
