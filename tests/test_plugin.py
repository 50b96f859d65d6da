"""Plugins that can be trusted: round trip, confinement to the folder, allowed files only, streamed
hashes, pinned hashes, signatures (ed25519 and HMAC), encoder identity, and `autagent plugin verify`."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from autagent import api
from autagent.plugin.manifest import PluginTarget
from autagent.plugin.trust import PluginError, content_hash
from autagent.policies.router.export import RouterParts, export_router
from autagent.policies.router.features import Featurizer
from autagent.policies.router.model import Router, RouterConfig

TOOLS = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(1)
    featurizer = Featurizer(RouterConfig())
    router = Router(featurizer.dim, RouterConfig(), len(TOOLS))
    with torch.no_grad():
        router.net[-1].bias.copy_(torch.tensor([3.0, -3.0, -3.0, 3.0, -3.0, -3.0]))
    path = export_router(
        PluginTarget(
            tmp_path_factory.mktemp("p") / "plugin", TOOLS, "embedded", {}, 30.0, {"name": "test"}, {"accuracy": 0.5}
        ),
        RouterParts(router, featurizer),
    )
    return path, router, featurizer


def test_the_same_training_gives_the_same_content_hash_whatever_its_timings(exported, tmp_path):
    """Two fresh clones trained the same plugin but hashed it differently: the manifest carried the
    last step's wall-clock time.  Timings are dropped at any depth; every other metric still counts."""
    _, router, featurizer = exported

    def export(name, metrics):
        target = PluginTarget(tmp_path / name, TOOLS, "embedded", {}, 30.0, {"name": "test"}, metrics)
        return json.loads((export_router(target, RouterParts(router, featurizer)) / "manifest.json").read_text())

    slow = export("slow", {"final": {"loss": 0.5, "step_seconds": 0.019, "step_time": 3.0}, "train_seconds": 9})
    fast = export("fast", {"final": {"loss": 0.5, "step_seconds": 0.022, "step_time": 1.0}, "train_seconds": 7})
    other = export("other", {"final": {"loss": 0.4, "step_seconds": 0.019}})
    assert slow["metrics"] == {"final": {"loss": 0.5}}
    assert slow["content_hash"] == fast["content_hash"] != other["content_hash"]


def _copy(src, tmp_path, name="copy"):
    dst = tmp_path / name
    shutil.copytree(src, dst)
    return dst


def _edit_manifest(folder, change, rehash=True):
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    if rehash:
        manifest["content_hash"] = content_hash(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return manifest


def test_round_trip_selects_like_the_trained_router(exported, click_wav):
    path, router, featurizer = exported
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["policy"] == "router" and [t["id"] for t in manifest["tools"]] == list(TOOLS)
    assert manifest["encoders"]["text"]["weights_sha256"] and manifest["files"]["model.safetensors"]["size"] > 0
    loaded = api.load(path, expected_sha256=manifest["content_hash"])
    question, choices = "What is the tempo of this drum beat?", ("90 BPM", "120 BPM")
    assert loaded.select(str(click_wav[0]), question, choices) == ["asr", "tempo"]
    expected = router.select(featurizer([question], [str(click_wav[0])], [choices]))
    assert torch.equal(loaded.router.select(loaded.featurizer([question], [str(click_wav[0])], [choices])), expected)


def test_a_router_with_the_no_tool_action_round_trips(tmp_path, click_wav):
    """The call logit travels in the weights and the flag in the manifest: the loaded plugin abstains
    where the trained router does, and selects where it does."""
    featurizer = Featurizer(RouterConfig(abstain=True))
    router = Router(featurizer.dim, RouterConfig(abstain=True), len(TOOLS))
    question, choices = "What is the tempo of this drum beat?", ("90 BPM", "120 BPM")
    for call, expected in ((-3.0, []), (3.0, ["asr", "tempo"])):
        with torch.no_grad():
            router.net[-1].bias.copy_(torch.tensor([3.0, -3.0, -3.0, 3.0, -3.0, -3.0, call]))
        path = export_router(
            PluginTarget(tmp_path / f"call{call}", TOOLS, "embedded", {}, 30.0, {"name": "test"}, {}),
            RouterParts(router, featurizer),
        )
        loaded = api.load(path)
        assert loaded.manifest["policy_config"]["abstain"] is True
        assert loaded.select(str(click_wav[0]), question, choices) == expected


@pytest.mark.parametrize(
    "name", ["../outside.txt", "/etc/hostname", "a/../../b.json", "weights.pt", "model.pkl", "x\\y.json", ""]
)
def test_manifest_names_outside_the_folder_or_of_refused_kinds_are_refused(exported, tmp_path, name):
    copy = _copy(exported[0], tmp_path)
    _edit_manifest(copy, lambda m: m["files"].update({name: {"sha256": "0" * 64, "size": 1}}))
    with pytest.raises(PluginError) as err:
        api.load(copy)
    assert str(copy) in str(err.value)


def test_links_devices_extra_and_missing_files_are_refused(exported, tmp_path):
    link = _copy(exported[0], tmp_path, "link")
    (link / "model.safetensors").rename(link / "real.safetensors")
    os.symlink(link / "real.safetensors", link / "model.safetensors")
    with pytest.raises(PluginError, match="symbolic link"):
        api.load(link)
    device = _copy(exported[0], tmp_path, "device")
    _edit_manifest(device, lambda m: m["files"].update({"zero.json": {"sha256": "0" * 64, "size": 1}}))
    os.symlink("/dev/zero", device / "zero.json")
    with pytest.raises(PluginError, match="zero.json"):
        api.load(device)
    extra = _copy(exported[0], tmp_path, "extra")
    (extra / "notes.txt").write_text("hello")
    with pytest.raises(PluginError, match="not listed in the manifest: \\['notes.txt'\\]"):
        api.load(extra)
    missing = _copy(exported[0], tmp_path, "missing")
    (missing / "model.safetensors").unlink()
    with pytest.raises(PluginError, match="model.safetensors listed in the manifest is missing"):
        api.load(missing)


def test_flipped_bytes_and_unhashed_edits_are_refused(exported, tmp_path):
    copy = _copy(exported[0], tmp_path)
    data = bytearray((copy / "model.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (copy / "model.safetensors").write_bytes(bytes(data))
    with pytest.raises(PluginError, match="model.safetensors does not match its digest"):
        api.load(copy)
    manifest_edit = _copy(exported[0], tmp_path, "edit")
    _edit_manifest(manifest_edit, lambda m: m["policy_config"].update(hidden=64), rehash=False)
    with pytest.raises(PluginError, match="content hash does not match"):
        api.load(manifest_edit)


def _rehashed_tamper(src, tmp_path):
    """An edit that re-hashes everything: the weights changed, their digest and the content hash updated."""
    copy = _copy(src, tmp_path, "tampered")
    from safetensors.torch import load_file, save_file

    weights = load_file(copy / "model.safetensors")
    weights["net.3.bias"] = torch.full_like(weights["net.3.bias"], 9.0)
    save_file(weights, copy / "model.safetensors")
    from autagent.plugin.trust import file_digest

    digest, size = file_digest(copy / "model.safetensors")
    _edit_manifest(copy, lambda m: m["files"].update({"model.safetensors": {"sha256": digest, "size": size}}))
    return copy


def test_a_rehashed_tampered_plugin_passes_alone_but_not_when_pinned_or_signed(exported, tmp_path, monkeypatch):
    original = json.loads((exported[0] / "manifest.json").read_text())
    tampered = _rehashed_tamper(exported[0], tmp_path)
    api.load(tampered)  # an unkeyed checksum cannot tell: that is what pinning and signing are for
    with pytest.raises(PluginError, match="is not the pinned"):
        api.load(tampered, expected_sha256=original["content_hash"])

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    private = Ed25519PrivateKey.generate()
    (tmp_path / "signing.pem").write_bytes(
        private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (tmp_path / "public.pem").write_bytes(
        private.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    signed = _copy(exported[0], tmp_path, "signed")
    from autagent.cli import main

    assert main(["plugin", "sign", str(signed), "--key", str(tmp_path / "signing.pem")]) == 0
    api.load(signed, key_file=str(tmp_path / "public.pem"))
    resigned = _rehashed_tamper(signed, tmp_path / "t2")  # re-hashed, the old signature kept
    with pytest.raises(PluginError, match="signature does not verify"):
        api.load(resigned, key_file=str(tmp_path / "public.pem"))
    monkeypatch.setenv("AUTAGENT_PLUGIN_KEY", str(tmp_path / "public.pem"))
    with pytest.raises(PluginError, match="not signed"):
        api.load(tampered)  # a key is set: unsigned plugins are refused
    monkeypatch.delenv("AUTAGENT_PLUGIN_KEY")
    (tmp_path / "hmac.key").write_bytes(os.urandom(32))
    assert main(["plugin", "sign", str(tampered), "--key", str(tmp_path / "hmac.key")]) == 0
    api.load(tampered, key_file=str(tmp_path / "hmac.key"))
    (tmp_path / "other.key").write_bytes(os.urandom(32))
    with pytest.raises(PluginError, match="HMAC"):
        api.load(tampered, key_file=str(tmp_path / "other.key"))


def test_other_tools_or_encoders_are_refused(exported, tmp_path):
    versions = _copy(exported[0], tmp_path, "versions")
    _edit_manifest(versions, lambda m: m["tools"][3].update(version="librosa-0.9.0+deadbeef"))
    with pytest.raises(PluginError, match="tool 'tempo': plugin expects librosa-beat-track librosa-0.9.0"):
        api.load(versions)
    assert api.load(versions, check_installed_tools=False).tools[3] == "tempo"
    encoder = _copy(exported[0], tmp_path, "encoder")
    _edit_manifest(encoder, lambda m: m["encoders"]["text"].update(weights_sha256="f" * 64))
    with pytest.raises(PluginError, match="text encoder"):
        api.load(encoder)
    swapped = _copy(exported[0], tmp_path, "swapped")
    _edit_manifest(swapped, lambda m: m["policy_config"].update(text_model="/somewhere/else"))
    assert api.load(swapped).featurizer.text.model_path != "/somewhere/else"  # never loaded from the manifest


def test_cli_select_verify_and_pin(exported, click_wav, tmp_path, capsys):
    """The commands in this process (what a subprocess would add is the interpreter's start)."""
    from autagent.cli import main

    def cli(*args):
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    manifest = json.loads((exported[0] / "manifest.json").read_text())
    select = ["select", "--plugin", str(exported[0]), "--audio", str(click_wav[0])]
    code, out, err = cli(*select, "--question", "What is the tempo?", "--plugin-sha256", manifest["content_hash"])
    assert code == 0, err
    reply = json.loads(out)
    assert reply["tools"] == ["asr", "tempo"] and set(reply["probabilities"]) == set(TOOLS)
    code, out, err = cli(*select, "--question", "q", "--plugin-sha256", "0" * 64)
    assert code == 2 and "is not the pinned" in err and "Traceback" not in err
    code, out, err = cli("plugin", "verify", str(exported[0]))
    report = json.loads(out)
    assert report["ok"] and report["content_hash"] == manifest["content_hash"] and report["checks"]["encoders"] == "ok"
    bad = _copy(exported[0], tmp_path)
    _edit_manifest(bad, lambda m: m["files"].update({"../x.json": {"sha256": "0" * 64, "size": 1}}))
    code, out, err = cli("plugin", "verify", str(bad))
    assert code == 1 and "reaches outside" in json.loads(out)["checks"]["files_and_hash"]
    code, out, err = cli("select", "--plugin", str(tmp_path), "--audio", str(click_wav[0]), "--question", "q")
    assert code == 2 and "not a plugin (no manifest.json)" in err


def test_every_exported_plugin_carries_a_model_card_its_manifest_covers(exported, tmp_path):
    """README.md with the Hub's front matter (library, tags, tools with backends and versions, encoders,
    the training config's digest) and usage; ``plugin verify`` refuses an edited card."""
    import yaml

    from autagent.plugin.card import config_digest

    path = exported[0]
    manifest = json.loads((path / "manifest.json").read_text())
    card = (path / "README.md").read_text()
    front = yaml.safe_load(card.split("---\n")[1])
    assert front["library_name"] == "autagent" and "tool-selection" in front["tags"]
    assert [t["id"] for t in front["autagent"]["tools"]] == list(TOOLS)
    assert front["autagent"]["tools"][0]["version"] == manifest["tools"][0]["version"]
    assert front["autagent"]["encoders"] == manifest["encoders"]
    assert front["autagent"]["training_config_sha256"] == config_digest({"name": "test"})
    assert "autagent serve --plugin" in card and "Plugin.load(" in card and "README.md" in manifest["files"]
    edited = _copy(path, tmp_path)
    (edited / "README.md").write_text(card.replace("AuTAgent plugin", "AuTAgent Plugin"))  # same size
    report = api.verify(edited)
    assert not report["ok"] and "README.md does not match its digest" in report["checks"]["files_and_hash"]


def test_trust_primitives_hold_at_their_edges(tmp_path):
    """Key order never changes the content hash; odd manifest names are refused; a signature without
    a key id verifies (and says its kind); an empty key file is refused."""
    from autagent.plugin.trust import check_name, sign, verify_signature

    manifest = {"format": "autagent-plugin", "files": {"a.json": {"sha256": "0", "size": 1}}, "tools": [1, 2]}
    assert content_hash(manifest) == content_hash(dict(reversed(list(manifest.items()))))
    (tmp_path / "a.json").write_text("{}")
    for name in ("", "a\x00b.json", 5, "a\\b.json"):
        with pytest.raises(PluginError):
            check_name(tmp_path, name)
    assert check_name(tmp_path, "a.json") == tmp_path / "a.json"
    key = tmp_path / "secret"
    key.write_bytes(b"a shared secret")
    manifest["content_hash"] = content_hash(manifest)
    signature = sign(manifest, key)
    manifest["signature"] = {"kind": signature["kind"], "value": signature["value"]}  # no key_id
    assert verify_signature(manifest, key) == "hmac-sha256"
    (tmp_path / "empty").write_bytes(b"  \n")
    with pytest.raises(PluginError, match="key file is empty"):
        verify_signature(manifest, tmp_path / "empty")


def test_folder_listing_and_key_ids_are_stable(tmp_path):
    """A file in a subfolder is a file; a FIFO and a link to a folder are odd entries, and nothing under
    the linked folder is listed.  Key ids are pinned: users pin them, so they must not drift between
    versions (a fixed Ed25519 key and a fixed HMAC secret)."""
    from autagent.plugin.trust import folder_entries, sign

    plugin, outside = tmp_path / "plugin", tmp_path / "outside"
    (plugin / "tokenizer").mkdir(parents=True)
    outside.mkdir()
    (plugin / "tokenizer" / "vocab.json").write_text("{}")
    (outside / "secret.json").write_text("{}")
    os.mkfifo(plugin / "pipe.json")
    os.symlink(outside, plugin / "linked")
    files, odd = folder_entries(plugin)
    assert files == {"tokenizer/vocab.json"}
    assert sorted(odd) == ["linked (symbolic link)", "pipe.json (not a regular file)"]
    pem = tmp_path / "key.pem"
    pem.write_bytes(
        b"-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIAABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhscHR4f\n"
        b"-----END PRIVATE KEY-----\n"
    )
    secret = tmp_path / "secret"
    secret.write_bytes(b"a shared secret")
    assert sign({"content_hash": "abc"}, pem)["key_id"] == "56475aa75463474c"
    assert sign({"content_hash": "abc"}, secret)["key_id"] == "817ee0de22d37b2c"


def test_size_limits_are_the_documented_ones(exported, tmp_path):
    """A manifest one byte over 16 MiB is refused before it is parsed; a file declaring one byte over
    64 GiB is refused before it is read (both checked on the declared or sparse size: nothing is written)."""
    big = _copy(exported[0], tmp_path, "big")
    with open(big / "manifest.json", "r+b") as handle:
        handle.truncate((16 << 20) + 1)
    with pytest.raises(PluginError, match=f"manifest is larger than {16 << 20} bytes"):
        api.load(big)
    huge = _copy(exported[0], tmp_path, "huge")
    _edit_manifest(huge, lambda m: m["files"]["model.safetensors"].update(size=(64 << 30) + 1))
    with pytest.raises(PluginError, match=f"declares {(64 << 30) + 1} bytes; at most {64 << 30}"):
        api.load(huge)
    edge = _copy(exported[0], tmp_path, "edge")
    _edit_manifest(edge, lambda m: m["files"]["model.safetensors"].update(size=64 << 30))
    with pytest.raises(PluginError) as err:  # allowed by the limit, refused for not matching the file
        api.load(edge)
    assert "at most" not in str(err.value)
