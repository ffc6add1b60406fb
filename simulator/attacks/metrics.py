"""How close a reconstruction is to the records the silo used: MSE, PSNR, SSIM and label accuracy, per image
after pairing each reconstruction with one original.

Images are compared as pixels in [0, 1] (features mapped back with the dataset's ``pixel_scale`` and clipped).
``PSNR = 10 log10(1 / MSE)`` (peak 1), with the MSE floored at ``MSE_FLOOR`` so that an exact copy reads 100 dB
rather than infinity. SSIM is scikit-image's ``structural_similarity`` (Wang et al. 2004) with data range 1 and
a 7x7 window (smaller on smaller images). Pairing: the assignment of reconstructions to originals of least
total MSE (``scipy.optimize.linear_sum_assignment``, the Hungarian method), so a batch's order does not matter;
with fewer originals than reconstructions (or the reverse) only the paired ones are scored.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linear_sum_assignment

MSE_FLOOR = 1e-10
SSIM_WINDOW = 7


@dataclass(frozen=True)
class ImageScores:
    """Scores of one reconstruction against its paired original."""

    reconstructed: int  # index among the reconstructions
    original: int  # index among the originals
    mse: float
    psnr: float
    ssim: float
    label_correct: bool


def to_pixels(features: np.ndarray, *, pixel_scale: tuple[float, float]) -> np.ndarray:
    """Model inputs ``(pixels - mean) / std`` back to pixels in [0, 1] (clipped)."""
    mean, std = pixel_scale
    return np.clip(np.asarray(features, dtype=np.float64) * std + mean, 0.0, 1.0)


def psnr(mse: float) -> float:
    """Peak signal-to-noise ratio in dB of images in [0, 1]."""
    return 10.0 * math.log10(1.0 / max(mse, MSE_FLOOR))


def ssim(a: np.ndarray, b: np.ndarray) -> float:
    """SSIM of two images shaped (channels, height, width) with pixels in [0, 1]."""
    from skimage.metrics import structural_similarity  # scikit-image loads in about a second: only when scoring

    side = min(a.shape[-2:])
    window = min(SSIM_WINDOW, side if side % 2 else side - 1)
    if a.shape[0] == 1:
        return float(structural_similarity(a[0], b[0], data_range=1.0, win_size=window))
    return float(structural_similarity(a, b, data_range=1.0, win_size=window, channel_axis=0))


def pair(reconstructed: np.ndarray, originals: np.ndarray) -> list[tuple[int, int]]:
    """Pairs ``(i, j)`` of reconstruction i and original j minimising the total MSE (each used at most once)."""
    if len(reconstructed) == 0 or len(originals) == 0:
        return []
    flat_r = reconstructed.reshape(len(reconstructed), -1)
    flat_o = originals.reshape(len(originals), -1)
    cost = ((flat_r[:, None, :] - flat_o[None, :, :]) ** 2).mean(axis=-1)
    rows, cols = linear_sum_assignment(cost)
    return [(int(i), int(j)) for i, j in zip(rows, cols)]


def score_images(
    reconstructed: np.ndarray, labels: np.ndarray, *, originals: np.ndarray, original_labels: np.ndarray
) -> list[ImageScores]:
    """Pair the reconstructions (pixels, labels) with the originals and score every pair."""
    scores = []
    for i, j in pair(reconstructed, originals):
        error = float(np.mean((reconstructed[i] - originals[j]) ** 2))
        scores.append(ImageScores(
            reconstructed=i, original=j, mse=error, psnr=psnr(error), ssim=ssim(reconstructed[i], originals[j]),
            label_correct=bool(labels[i] == original_labels[j]),
        ))
    return scores


def summarise_scores(scores: list[ImageScores], *, success_psnr: float) -> dict[str, float | bool | None]:
    """One attack's figures: means over the paired images (None without any pair); success = mean PSNR at least
    ``success_psnr``."""
    if not scores:
        return {"psnr": None, "ssim": None, "mse": None, "label_accuracy": None, "success": False}
    mean_psnr = float(np.mean([s.psnr for s in scores]))
    return {
        "psnr": mean_psnr,
        "ssim": float(np.mean([s.ssim for s in scores])),
        "mse": float(np.mean([s.mse for s in scores])),
        "label_accuracy": float(np.mean([s.label_correct for s in scores])),
        "success": mean_psnr >= success_psnr,
    }


__all__ = ["ImageScores", "MSE_FLOOR", "pair", "psnr", "score_images", "ssim", "summarise_scores", "to_pixels"]
