"""What makes a shared plugin folder safe to load: confined names, bounded streamed hashes, an
allow-list of file kinds, a pinned content hash and optional signatures.

* Every name in the manifest is relative, has no ``..``, is no link and is a regular file inside
  the folder; nothing else may lie in the folder.  Only weights and configuration files load
  (``ALLOWED_SUFFIXES``); pickle-capable formats are refused at export and at load.
* Files are hashed as a stream, each under ``MAX_FILE_BYTES``; a device file or a FIFO is refused
  before it is opened.
* ``content_hash`` is SHA-256 over the manifest (file digests included).  It catches accidents;
  against someone who edits a file *and* re-hashes, pin it (``--plugin-sha256``) or sign it.
* Signatures: ``hmac-sha256`` with a shared secret file, or ``ed25519`` with a key pair (PEM).
  A plugin that is signed is verified whenever a key is given; a key given and no valid
  signature is a refusal.  The verifier's key decides the algorithm, never the manifest
  (:func:`key_kind`): a public key (PEM, DER or OpenSSH) verifies ``ed25519`` signatures only and is
  never used as an HMAC secret, since anyone holding it could otherwise re-sign an altered plugin
  with ``"kind": "hmac-sha256"`` keyed by the public key itself; HMAC needs a file that is no key
  at all, i.e. a secret.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
from pathlib import Path, PurePosixPath

MAX_FILE_BYTES = 64 << 30  # 64 GiB: a 7B policy in bf16 is ~17 GB
MAX_MANIFEST_BYTES = 16 << 20
ALLOWED_SUFFIXES = (".safetensors", ".json", ".txt", ".md", ".jinja", ".model", ".tiktoken")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".npy", ".npz", ".joblib")
SIGNATURE_FIELDS = ("signature",)
OPENSSH_PREFIXES = (b"ssh-", b"ecdsa-", b"sk-")  # how an OpenSSH public key line starts


class PluginError(RuntimeError):
    pass


def canonical(manifest: dict) -> bytes:
    body = {k: v for k, v in manifest.items() if k not in ("content_hash", *SIGNATURE_FIELDS)}
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def content_hash(manifest: dict) -> str:
    return hashlib.sha256(canonical(manifest)).hexdigest()


def check_name(directory: Path, name: str) -> Path:
    """``name`` as a path confined to ``directory``; refuses absolute paths, ``..``, links and odd names."""
    if not isinstance(name, str) or not name or "\\" in name or "\x00" in name:
        raise PluginError(f"{directory}: manifest file name {name!r} is not a plain relative path")
    pure = PurePosixPath(name)
    if pure.is_absolute() or any(part in ("", ".", "..") for part in pure.parts):
        raise PluginError(f"{directory}: manifest file name {name!r} reaches outside the plugin folder")
    if not name.endswith(ALLOWED_SUFFIXES):
        kind = "pickle-capable" if name.endswith(PICKLE_SUFFIXES) else "not a weights or config file"
        raise PluginError(f"{directory}: {name} is {kind}; allowed: {', '.join(ALLOWED_SUFFIXES)}")
    path = directory.joinpath(*pure.parts)
    current = directory
    for part in pure.parts:  # no link anywhere on the way
        current = current / part
        try:
            info = os.lstat(current)
        except FileNotFoundError:
            raise PluginError(f"{directory}: file {name} listed in the manifest is missing") from None
        if stat.S_ISLNK(info.st_mode):
            raise PluginError(f"{directory}: {name} is (or passes through) a symbolic link")
    if not stat.S_ISREG(os.lstat(path).st_mode):
        raise PluginError(f"{directory}: {name} is not a regular file")
    return path


def file_digest(path: Path, limit: int = MAX_FILE_BYTES) -> tuple[str, int]:
    """SHA-256 and size of a regular file, read as a stream; refuses anything larger than ``limit``."""
    info = os.lstat(path)
    if not stat.S_ISREG(info.st_mode):
        raise PluginError(f"{path}: not a regular file")
    if info.st_size > limit:
        raise PluginError(f"{path}: {info.st_size} bytes is over the {limit}-byte limit")
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            size += len(block)
            if size > limit:
                raise PluginError(f"{path}: grew past the {limit}-byte limit while being read")
            digest.update(block)
    return digest.hexdigest(), size


def folder_entries(directory: Path) -> tuple[set[str], list[str]]:
    """Every regular file under ``directory`` (relative names) and every entry that is not one."""
    files, odd = set(), []
    for root, dirs, names in os.walk(directory, followlinks=False):
        for name in dirs + names:
            full = Path(root) / name
            mode = os.lstat(full).st_mode
            rel = str(full.relative_to(directory).as_posix())
            if stat.S_ISLNK(mode):
                odd.append(f"{rel} (symbolic link)")
            elif stat.S_ISREG(mode):
                files.add(rel)
            elif not stat.S_ISDIR(mode):
                odd.append(f"{rel} (not a regular file)")
    return files, odd


# ---- signatures ----------------------------------------------------------------------------------
def _read_key(path: str | Path) -> bytes:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as err:
        raise PluginError(f"{path}: cannot read key file ({err.strerror})") from None
    if not data.strip():
        raise PluginError(f"{path}: key file is empty")
    return data


def _public_key(key: bytes):
    """The public key ``key`` holds in any standard encoding (PEM, DER, OpenSSH; a PEM private key gives
    its public half), or None when it is none of them: then, and only then, it may be an HMAC secret."""
    from cryptography.exceptions import UnsupportedAlgorithm
    from cryptography.hazmat.primitives import serialization

    if b"-----BEGIN" in key:
        loaders = (serialization.load_pem_public_key, serialization.load_pem_private_key)
    elif key.lstrip().startswith(OPENSSH_PREFIXES):
        loaders = (serialization.load_ssh_public_key,)
    else:
        loaders = (serialization.load_der_public_key,)
    for load in loaders:
        try:
            loaded = load(key, password=None) if load is serialization.load_pem_private_key else load(key)
        except (ValueError, TypeError, UnsupportedAlgorithm):
            continue
        return loaded.public_key() if hasattr(loaded, "private_bytes") else loaded
    return None


def key_kind(key_file: str | Path) -> tuple[str, object]:
    """The one signature kind ``key_file`` verifies, and the key: ``("ed25519", public key)`` for an Ed25519
    key (PEM public, or the private PEM it signed with), ``("hmac-sha256", secret bytes)`` for a file that
    is no key in any standard encoding.  Any other key (RSA, a certificate, an unreadable PEM) is refused:
    a key-shaped file is never read as a shared secret."""
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    key = _read_key(key_file)
    public = _public_key(key)
    if public is not None:
        if not isinstance(public, Ed25519PublicKey):
            raise PluginError(f"{key_file}: a {type(public).__name__} key; plugins are verified with Ed25519 keys only")
        return "ed25519", public
    if b"-----BEGIN" in key or key.lstrip().startswith(OPENSSH_PREFIXES):
        raise PluginError(
            f"{key_file}: looks like a key (PEM or OpenSSH) but does not load as one; a key file is never "
            "used as an HMAC secret"
        )
    return "hmac-sha256", key


def sign(manifest: dict, key_file: str | Path) -> dict:
    """A signature over the content hash: ed25519 for a PEM private key, else HMAC-SHA256 with the file as
    secret (a public key is refused: it cannot sign, and as a secret it would be public)."""
    key = _read_key(key_file)
    message = manifest["content_hash"].encode()
    if b"PRIVATE KEY" in key:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        private = serialization.load_pem_private_key(key, password=None)
        if not isinstance(private, Ed25519PrivateKey):
            raise PluginError(f"{key_file}: only Ed25519 private keys can sign plugins")
        public = private.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return {
            "kind": "ed25519",
            "value": private.sign(message).hex(),
            "key_id": hashlib.sha256(public).hexdigest()[:16],
        }
    kind, secret = key_kind(key_file)
    if kind != "hmac-sha256":
        raise PluginError(f"{key_file}: a public key cannot sign; sign with its private key (PEM)")
    return {
        "kind": "hmac-sha256",
        "value": hmac.new(secret, message, hashlib.sha256).hexdigest(),
        "key_id": hashlib.sha256(b"autagent-hmac-id" + secret).hexdigest()[:16],
    }


def verify_signature(manifest: dict, key_file: str | Path) -> str:
    """Check the manifest's signature with ``key_file``; returns the kind.  The key decides the algorithm
    (:func:`key_kind`): a signature of any other kind is refused, whatever the manifest says."""
    signature = manifest.get("signature")
    if not isinstance(signature, dict) or not {"kind", "value"} <= set(signature):
        raise PluginError("plugin is not signed, but a verification key was given")
    kind, key = key_kind(key_file)
    if signature["kind"] != kind:
        what = "an Ed25519 public key" if kind == "ed25519" else "an HMAC secret"
        raise PluginError(
            f"plugin is signed with {signature['kind']!r}, but {key_file} is {what}: it verifies {kind} signatures only"
        )
    message = str(manifest.get("content_hash", "")).encode()
    if kind == "ed25519":
        from cryptography.exceptions import InvalidSignature

        try:
            key.verify(bytes.fromhex(str(signature["value"])), message)
        except (InvalidSignature, ValueError, TypeError):
            raise PluginError("plugin signature does not verify with the given public key") from None
    else:
        expected = hmac.new(key, message, hashlib.sha256).hexdigest()
        if not hmac.compare_digest(expected, str(signature["value"])):
            raise PluginError("plugin signature does not verify with the given HMAC key")
    return kind
