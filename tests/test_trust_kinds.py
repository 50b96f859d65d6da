"""The verifier's key decides the signature's algorithm, never the manifest (issue 62, item 1).

The attack: a plugin signed with Ed25519 is altered, re-hashed and re-signed as ``hmac-sha256`` keyed by
the publisher's *public* PEM file (which anyone has). A verifier that takes the kind from the manifest
computes the same HMAC with the same public bytes and accepts it."""

from __future__ import annotations

import hashlib
import hmac
import json
import os

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from autagent.cli import main
from autagent.plugin.manifest import FORMAT, FORMAT_VERSION, read_manifest
from autagent.plugin.trust import PluginError, content_hash, file_digest, key_kind, sign, verify_signature


def _plugin(folder, text="{}"):
    """A minimal plugin folder (one config file) as export writes it: digests, content hash."""
    folder.mkdir(exist_ok=True)
    (folder / "a.json").write_text(text)
    digest, size = file_digest(folder / "a.json")
    manifest = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "files": {"a.json": {"sha256": digest, "size": size}},
    }
    manifest["content_hash"] = content_hash(manifest)
    return manifest


def _write(folder, manifest):
    (folder / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture
def keys(tmp_path):
    private = Ed25519PrivateKey.generate()
    paths = {name: tmp_path / name for name in ("private.pem", "public.pem", "public.der", "public.ssh", "secret")}
    paths["private.pem"].write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    public = private.public_key()
    paths["public.pem"].write_bytes(
        public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    paths["public.der"].write_bytes(
        public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    paths["public.ssh"].write_bytes(
        public.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    )
    paths["secret"].write_bytes(os.urandom(32))
    return paths


def _forged(tmp_path, keys, public_file):
    """The attack: an Ed25519-signed plugin, altered, re-hashed and re-signed with HMAC keyed by the public key."""
    folder = tmp_path / "plugin"
    manifest = _plugin(folder)
    manifest["signature"] = sign(manifest, keys["private.pem"])
    _write(folder, manifest)
    read_manifest(folder, key_file=str(keys["public.pem"]))  # the genuine plugin verifies
    forged = _plugin(folder, '{"altered": true}')
    public_bytes = public_file.read_bytes()
    forged["signature"] = {
        "kind": "hmac-sha256",
        "value": hmac.new(public_bytes, forged["content_hash"].encode(), hashlib.sha256).hexdigest(),
    }
    _write(folder, forged)
    return folder


def test_a_plugin_re_signed_with_hmac_keyed_by_the_public_key_is_refused(tmp_path, keys, monkeypatch):
    folder = _forged(tmp_path, keys, keys["public.pem"])
    with pytest.raises(PluginError, match="is an Ed25519 public key: it verifies ed25519 signatures only"):
        read_manifest(folder, key_file=str(keys["public.pem"]))
    monkeypatch.setenv("AUTAGENT_PLUGIN_KEY", str(keys["public.pem"]))  # every load verifies, as the issue ran it
    with pytest.raises(PluginError, match="verifies ed25519 signatures only"):
        read_manifest(folder)


def test_autagent_plugin_verify_refuses_the_forgery_and_names_the_rule(tmp_path, keys, capsys):
    folder = _forged(tmp_path, keys, keys["public.pem"])
    assert main(["plugin", "verify", str(folder), "--key", str(keys["public.pem"])]) == 1
    report = json.loads(capsys.readouterr().out)
    assert "it verifies ed25519 signatures only" in report["checks"]["files_and_hash"] and not report["ok"]


@pytest.mark.parametrize("encoding", ["public.der", "public.ssh"])
def test_a_public_key_in_any_encoding_is_never_an_hmac_secret(tmp_path, keys, encoding):
    """A publisher may hand out the public key as DER or as an OpenSSH line: either is read as the
    Ed25519 key it is, so an HMAC keyed by its bytes is refused too."""
    folder = _forged(tmp_path, keys, keys[encoding])
    assert key_kind(keys[encoding])[0] == "ed25519"
    with pytest.raises(PluginError, match="verifies ed25519 signatures only"):
        read_manifest(folder, key_file=str(keys[encoding]))


def test_the_genuine_signatures_still_verify_each_with_its_own_kind_of_key(tmp_path, keys, capsys):
    """Ed25519 (signed with the private PEM, verified with the public one in any encoding or the private
    one) and HMAC (one secret file both ways) keep working; an Ed25519 signature given an HMAC secret, an
    HMAC one given a public key, a public key used to sign and a non-Ed25519 key are refused."""
    folder = tmp_path / "signed"
    _write(folder, _plugin(folder))
    assert main(["plugin", "sign", str(folder), "--key", str(keys["private.pem"])]) == 0
    capsys.readouterr()
    for key in ("public.pem", "public.der", "public.ssh", "private.pem"):
        assert read_manifest(folder, key_file=str(keys[key]))["signature"]["kind"] == "ed25519"
    with pytest.raises(PluginError, match="is an HMAC secret: it verifies hmac-sha256 signatures only"):
        read_manifest(folder, key_file=str(keys["secret"]))
    assert main(["plugin", "sign", str(folder), "--key", str(keys["secret"])]) == 0
    assert json.loads(capsys.readouterr().out)["signature"] == "hmac-sha256"
    assert read_manifest(folder, key_file=str(keys["secret"]))["signature"]["kind"] == "hmac-sha256"
    with pytest.raises(PluginError, match="verifies ed25519 signatures only"):
        read_manifest(folder, key_file=str(keys["public.pem"]))
    assert main(["plugin", "sign", str(folder), "--key", str(keys["public.pem"])]) == 2
    assert "a public key cannot sign" in capsys.readouterr().err
    from cryptography.hazmat.primitives.asymmetric import ec

    other = tmp_path / "ec.pem"
    other.write_bytes(
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(PluginError, match="Ed25519 keys only"):
        verify_signature(read_manifest(folder), other)
    broken = tmp_path / "broken.pem"
    broken.write_bytes(b"-----BEGIN PUBLIC KEY-----\nnot base64\n-----END PUBLIC KEY-----\n")
    with pytest.raises(PluginError, match="never used as an HMAC secret"):
        verify_signature(read_manifest(folder), broken)


def test_the_help_says_how_to_give_a_public_key_and_how_an_hmac_secret(capsys):
    for command, key in (("verify", "Ed25519 public key"), ("sign", "Ed25519 private key")):
        with pytest.raises(SystemExit):
            main(["plugin", command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert key in text and "HMAC secret" in text, text
