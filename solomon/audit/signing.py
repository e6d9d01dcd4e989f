"""Offline signatures of a run directory with a local elliptic-curve key, in the OpenSSF model-signing format
(a Sigstore bundle whose DSSE payload is an in-toto statement of every file's SHA256), made and checked by the
``model-signing`` library itself (its `model_signing verify key` CLI accepts them when told to ignore the same
two files).

The signature covers every file of the run directory — the manifest (and so, through it, the weights, tokenizer
and data) and the pages that show its digest — except itself and the promotion record (written later).

The promotion record ``promotion.json`` gets its own detached signature with the same key, ``promotion.json.sig``
(ECDSA over SHA256, DER: ``openssl dgst -sha256 -verify signing.pub -signature promotion.json.sig promotion.json``
checks it), made by ``solomon sign`` whenever the run directory holds one.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from model_signing import hashing, signing, verifying

from solomon.errors import SolomonError, first_line
from solomon.records import RunFiles

# Files the run's signature leaves out: itself, and the promotion record and its signature (written after it).
UNSIGNED = (RunFiles.SIGNATURE, RunFiles.PROMOTION, RunFiles.PROMOTION_SIGNATURE)


def _hashing(run_dir: Path) -> hashing.Config:
    run_dir = run_dir.resolve()  # the library resolves ignored paths against the model path
    return hashing.Config().set_ignored_paths(paths=[run_dir / name for name in UNSIGNED])


def sign(run_dir: Path, private_key: Path, password: str | None = None) -> Path:
    """Write ``manifest.sig`` into ``run_dir`` (atomically), and ``promotion.json.sig`` when the run has been
    promoted; return the path of ``manifest.sig``."""
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
    if (run_dir / RunFiles.PROMOTION).is_file():
        _sign_promotion(run_dir, private_key, password)
    return run_dir / RunFiles.SIGNATURE


def _sign_promotion(run_dir: Path, private_key: Path, password: str | None) -> None:
    try:
        key = serialization.load_pem_private_key(private_key.read_bytes(), password.encode() if password else None)
    except (ValueError, TypeError) as exc:
        raise SolomonError(f"cannot sign with {private_key}: {first_line(exc, 240)}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise SolomonError(f"cannot sign with {private_key}: not an elliptic-curve key")
    signature = key.sign((run_dir / RunFiles.PROMOTION).read_bytes(), ec.ECDSA(hashes.SHA256()))
    tmp = run_dir / f".{RunFiles.PROMOTION_SIGNATURE}.{os.getpid()}.tmp"
    tmp.write_bytes(signature)
    os.replace(tmp, run_dir / RunFiles.PROMOTION_SIGNATURE)


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


def check_promotion(run_dir: Path, public_key: Path) -> str | None:
    """None when ``promotion.json.sig`` is the signature of ``promotion.json`` by ``public_key``'s key; otherwise
    the problem, as one line."""
    signature = run_dir / RunFiles.PROMOTION_SIGNATURE
    if not signature.is_file():
        return f"{RunFiles.PROMOTION_SIGNATURE}: missing"
    try:
        key = serialization.load_pem_public_key(public_key.read_bytes())
        if not isinstance(key, ec.EllipticCurvePublicKey):
            return f"{RunFiles.PROMOTION_SIGNATURE}: {public_key} is not an elliptic-curve public key"
        key.verify(signature.read_bytes(), (run_dir / RunFiles.PROMOTION).read_bytes(), ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError) as exc:
        reason = first_line(exc, 120)
        return f"{RunFiles.PROMOTION_SIGNATURE}: does not verify {RunFiles.PROMOTION} with {public_key} ({reason})"
    return None
