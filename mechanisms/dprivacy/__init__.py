"""d-privacy (metric privacy) for personalised FL: Galli et al., "Group Privacy for Personalized Federated
Learning" (ICISSP 2023). The Euclidean Laplace sampler, IFCA with k-means at the server, and the per-client
leakage accountant. Importing the package loads neither torch nor Ray."""
from __future__ import annotations

from privsilo.mechanisms.dprivacy.laplace import euclidean_laplace

__all__ = ["euclidean_laplace"]
