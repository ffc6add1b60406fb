"""The warm pool: the lease interface runs use, the cluster registry actor, the local head."""
