"""Offline signatures of a run directory with a local elliptic-curve key, in the OpenSSF model-signing format
(a Sigstore bundle whose DSSE payload is an in-toto statement of every file's SHA256), made and checked by the
``model-signing`` library itself (its `model_signing verify key` CLI accepts them when told to ignore the same
two files).

The signature covers every file of the run directory — the manifest (and so, through it, the weights, tokenizer
and data) and the pages that show its digest — except itself and ``promotion.json`` (written later).
"""

from __future__ import annotations

import os
from pathlib import Path

from model_signing import hashing, signing, verifying

from solomon.errors import SolomonError, first_line
from solomon.records import RunFiles


def _hashing(run_dir: Path) -> hashing.Config:
    run_dir = run_dir.resolve()  # the library resolves ignored paths against the model path
    return hashing.Config().set_ignored_paths(paths=[run_dir / RunFiles.SIGNATURE, run_dir / RunFiles.PROMOTION])


def sign(run_dir: Path, private_key: Path, password: str | None = None) -> Path:
    """Write ``manifest.sig`` into ``run_dir`` (atomically); return its path."""
    if not (run_dir / RunFiles.MANIFEST).is_file():
        raise SolomonError(f"{run_dir} has no {RunFiles.MANIFEST}: sign a run directory made by the report stage")
    if not private_key.is_file():
        raise SolomonError(f"{private_key} not found: give a PEM EC private key (see docs/audit.md)")
    tmp = run_dir.parent / f".{run_dir.name}.{os.getpid()}.sig.tmp"
    try:
        config = signing.Config().use_elliptic_key_signer(private_key=private_key, password=password)
        config.set_hashing_config(_hashing(run_dir)).sign(run_dir.resolve(), tmp)
    except (ValueError, TypeError) as exc:
        tmp.unlink(missing_ok=True)
        raise SolomonError(f"cannot sign with {private_key}: {first_line(exc, 240)}") from None
    os.replace(tmp, run_dir / RunFiles.SIGNATURE)
    return run_dir / RunFiles.SIGNATURE


def check(run_dir: Path, public_key: Path) -> str | None:
    """None when ``manifest.sig`` verifies with ``public_key``; otherwise the problem, as one line."""
    if not public_key.is_file():
        raise SolomonError(f"{public_key} not found: give the PEM public key of the signing key")
    if not (run_dir / RunFiles.SIGNATURE).is_file():
        return f"{RunFiles.SIGNATURE}: missing (sign the run with `solomon sign`)"
    try:
        config = verifying.Config().use_elliptic_key_verifier(public_key=public_key)
        config.set_hashing_config(_hashing(run_dir)).verify(run_dir.resolve(), run_dir / RunFiles.SIGNATURE)
    except Exception as exc:  # the library raises ValueError and others for a bad signature or bundle
        return f"{RunFiles.SIGNATURE}: does not verify with {public_key} ({first_line(exc, 240)})"
    return None
