"""Signing keys that rotate: key-set verification (unit), the agent's settings and `dyncc control
keygen`'s key id, and a rotation end to end with two agents (`dyncc agent --from-file --once` in two
network namespaces) reading the configs the controller's Publisher writes (--publish-dir)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from collector.agent.plan import REFUSE, check_config
from collector.agent.settings import AgentSettings
from controller.rollout.generate import build_config
from controller.rollout.signing import Signer, keygen
from dyncc_common.errors import ConfigError
from schemas.congestion_pb2 import CongestionConfig, PrefixEntry
from schemas.signing import (
    KeySet,
    SignatureError,
    UntrustedKeyError,
    generate_keypair,
    key_id,
    load_private_key,
    load_public_key,
    sign,
    verify,
)
from tests.support.netns_util import namespaces, new_ns_name, ns_sh, require_root, veth_pair
from tests.support.rollout_util import desired, publish_round, publisher, run_control

POP = "lax"


def _config(version: int = 3, key_id_: str = "") -> CongestionConfig:
    config = build_config(POP, version, [PrefixEntry(prefix="192.0.2.0/24", algorithm="bbr")], created_at_ns=1)
    config.key_id = key_id_
    return config


def _pair(tmp: Path, name: str) -> tuple[Signer, Path]:
    private, public = keygen(tmp / "keys", name)
    return Signer.from_file(private), public


# ------------------------------------------------------------------ key-set verification (unit)


def test_key_id_is_sha256_of_the_raw_public_key(tmp_path: Path) -> None:
    kid = generate_keypair(tmp_path / "k", tmp_path / "k.pub")
    public = load_public_key(tmp_path / "k.pub")
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert len(raw) == 32 and kid == key_id(public) == hashlib.sha256(raw).hexdigest()[:16]
    assert re.fullmatch(r"[0-9a-f]{16}", kid)
    assert Signer(load_private_key(tmp_path / "k")).key_id == kid


def test_key_set_verifies_by_key_id_and_refuses_an_untrusted_id(tmp_path: Path) -> None:
    (old, old_pub), (new, new_pub) = _pair(tmp_path, "old"), _pair(tmp_path, "new")
    both = KeySet.load([old_pub, new_pub])
    assert both.ids == sorted([old.key_id, new.key_id]) and old.key_id in both
    for signer in (old, new):
        verify(signer.sign(_config()), both)
        both.verify(CongestionConfig.FromString(signer.sign(_config()).SerializeToString()))
    only_new = KeySet.load([new_pub])
    verify(new.sign(_config()), only_new)
    with pytest.raises(UntrustedKeyError) as refused:
        verify(old.sign(_config()), only_new)
    assert old.key_id in str(refused.value) and new.key_id in str(refused.value)  # the id and what is trusted


def test_key_id_is_covered_by_the_signature(tmp_path: Path) -> None:
    (old, old_pub), (new, new_pub) = _pair(tmp_path, "old"), _pair(tmp_path, "new")
    both = KeySet.load([old_pub, new_pub])
    relabelled = old.sign(_config())
    relabelled.key_id = new.key_id  # claims the other trusted key: the signature no longer matches
    with pytest.raises(SignatureError, match=f"key {new.key_id}"):
        both.verify(relabelled)
    cleared = old.sign(_config())
    cleared.key_id = ""  # the key id is in the signed payload: clearing it breaks the signature
    with pytest.raises(SignatureError, match="any of 2 trusted keys"):
        both.verify(cleared)
    tampered = new.sign(_config())
    tampered.version += 1
    with pytest.raises(SignatureError):
        both.verify(tampered)
    with pytest.raises(SignatureError, match="unsigned"):
        both.verify(_config(key_id_=new.key_id))


def test_config_without_key_id_verifies_against_any_trusted_key(tmp_path: Path) -> None:
    """Configs signed before key ids (stores, recordings) keep verifying."""
    (_old, old_pub), (_new, new_pub) = _pair(tmp_path, "old"), _pair(tmp_path, "new")
    legacy = sign(_config(), load_private_key(tmp_path / "keys" / "old.key"))
    assert legacy.key_id == ""
    verify(legacy, load_public_key(old_pub))  # one key: as before
    verify(legacy, KeySet.load([new_pub, old_pub]))  # any key of the set
    with pytest.raises(SignatureError) as refused:
        verify(legacy, KeySet.load([new_pub]))
    assert not isinstance(refused.value, UntrustedKeyError)


def test_key_set_from_a_directory_and_load_errors(tmp_path: Path) -> None:
    (old, _), (new, _) = _pair(tmp_path, "old"), _pair(tmp_path, "new")
    trusted = tmp_path / "trusted"
    trusted.mkdir()
    shutil.copy(tmp_path / "keys" / "old.pub", trusted / "old.pem")
    shutil.copy(tmp_path / "keys" / "new.pub", trusted / "new.pub")
    (trusted / "README").write_text("not a key\n")
    assert KeySet.load(directory=trusted).ids == sorted([old.key_id, new.key_id])
    assert KeySet.load([trusted / "old.pem"], trusted).ids == sorted([old.key_id, new.key_id])  # no duplicates
    with pytest.raises(ValueError, match="no public key"):
        KeySet([])
    with pytest.raises(ValueError, match=r"no \*\.pem"):
        KeySet.load(directory=tmp_path / "keys" / "..")
    with pytest.raises(ValueError, match="missing"):
        KeySet.load(directory=tmp_path / "missing")
    with pytest.raises(ValueError, match=r"old\.key"):  # a private key given as a public one
        KeySet.load([tmp_path / "keys" / "old.key"])


def test_untrusted_key_refusal_carries_the_key_id(tmp_path: Path) -> None:
    (old, _), (_new, new_pub) = _pair(tmp_path, "old"), _pair(tmp_path, "new")
    config = old.sign(_config(version=9))
    try:
        verify(config, KeySet.load([new_pub]))
        error = None
    except SignatureError as exc:
        error = str(exc)
    verdict = check_config(
        config, pop=POP, host="edge-1", signature_error=error, applied_version=1, applied_signature=b""
    )
    assert verdict.action == REFUSE and verdict.reason == "bad_signature" and old.key_id in verdict.detail


def test_agent_settings_public_keys() -> None:
    base = {"pop": POP, "kafka": "127.0.0.1:19092"}
    one = AgentSettings.from_sources({**base, "public_key": ["/k/a.pem"]})
    assert one.public_key == (Path("/k/a.pem"),) and one.public_key_dir is None
    two = AgentSettings.from_sources({**base, "public_key": ["/k/a.pem", "/k/b.pem"], "public_key_dir": "/k/d"})
    assert two.public_key == (Path("/k/a.pem"), Path("/k/b.pem")) and two.public_key_dir == Path("/k/d")
    assert AgentSettings.from_sources({**base, "public_key_dir": "/k/d"}).public_key == ()
    with pytest.raises(ConfigError, match="--public-key PEM or --public-key-dir DIR"):
        AgentSettings.from_sources(base)


def test_agent_settings_public_keys_toml(tmp_path: Path) -> None:
    toml = tmp_path / "agent.toml"
    toml.write_text('[agent]\npop = "lax"\nkafka = "127.0.0.1:19092"\npublic_keys = ["/k/a.pem", "/k/b.pem"]\n')
    assert AgentSettings.from_sources({}, str(toml)).public_key == (Path("/k/a.pem"), Path("/k/b.pem"))
    toml.write_text('[agent]\npop = "lax"\nkafka = "127.0.0.1:19092"\npublic_key = "/k/a.pem"\n')  # as before
    assert AgentSettings.from_sources({}, str(toml)).public_key == (Path("/k/a.pem"),)


def test_keygen_prints_the_key_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_control(["keygen", "--out-dir", str(tmp_path / "k"), "--name", "next"]) == 0
    printed = re.search(r"key id ([0-9a-f]{16})", capsys.readouterr().out)
    assert printed is not None and printed.group(1) == key_id(load_public_key(tmp_path / "k" / "next.pub"))


# ------------------------------------------------------------- rotation end to end: two agents


class Edge:
    """One edge host: a `drot-*` namespace with a documentation-address default route and its own
    agent state, running `dyncc agent --from-file --once` with the trusted keys it is given."""

    def __init__(self, ns: str, state_dir: Path) -> None:
        self.ns, self.state_dir = ns, state_dir
        veth_pair(ns, "up0", ns, "peer0")
        ns_sh(ns, "ip", "addr", "add", "192.0.2.2/24", "dev", "up0")
        ns_sh(ns, "ip", "addr", "add", "2001:db8:1::2/64", "dev", "up0", "nodad")
        ns_sh(ns, "ip", "route", "add", "default", "via", "192.0.2.1", "dev", "up0")
        ns_sh(ns, "ip", "-6", "route", "add", "default", "via", "2001:db8:1::1", "dev", "up0")

    def apply(self, config_file: Path, keys: list[str]) -> dict:
        done = subprocess.run(
            [
                sys.executable, "-m", "dyncc.cli", "agent", "--from-file", str(config_file), "--once",
                "--pop", POP, "--host", self.ns, "--netns", self.ns, "--state-dir", str(self.state_dir), *keys,
            ],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode in (0, 1) and done.stdout, done.stderr
        status = json.loads(done.stdout)
        assert (done.returncode == 0) == (status["result"] in ("APPLIED", "UNCHANGED")), status
        return dict(status)

    def owned(self) -> list[str]:
        routes = [json.loads(ns_sh(self.ns, "ip", "-j", f, "route", "show", "proto", "250")) for f in ("-4", "-6")]
        return sorted(r["dst"] for family in routes for r in family)


@pytest.fixture
def edges(tmp_path: Path) -> Iterator[list[Edge]]:
    require_root()
    with namespaces([new_ns_name("drot-a"), new_ns_name("drot-b")]) as names:  # deleted on failure too
        yield [Edge(ns, tmp_path / f"state-{i}") for i, ns in enumerate(names)]


@pytest.mark.netns
def test_key_rotation_with_two_agents(edges: list[Edge], chdb_url: str, tmp_path: Path) -> None:
    from controller.store import open_store
    from controller.store.migrate import apply_migrations

    out = tmp_path / "published"
    config_file = out / f"{POP}.cfg"
    old_private, old_public = keygen(tmp_path / "keys", "old")
    old_id = key_id(load_public_key(old_public))
    store = open_store(chdb_url)
    apply_migrations(store)
    results: list[str] = []

    def round_with(private: Path, i: int) -> CongestionConfig:
        """Controller round `i` signed with `private`: the config for the POP on the publish dir."""
        publish_round(publisher(store, ["--publish-dir", str(out), "--key", str(private)]), [
            desired(POP, [f"2001:db8:0:{i}00::/56", ["198.51.100.0/24", "203.0.113.0/24"][i % 2]])
        ])  # fmt: skip
        return CongestionConfig.FromString(config_file.read_bytes())

    def every_edge_applies(config: CongestionConfig, keys: list[str]) -> None:
        for edge in edges:
            status = edge.apply(config_file, keys)
            results.append(status["result"])
            assert status["result"] in ("APPLIED", "UNCHANGED"), status
            assert int(status["applied_version"]) == config.version
            assert edge.owned() == sorted(e.prefix for e in config.entries)

    try:
        # 0. every agent trusts the old key, the controller signs with it
        first = round_with(old_private, 1)
        assert first.key_id == old_id
        every_edge_applies(first, ["--public-key", str(old_public)])

        # 1. a new key (keygen prints its id), added to every agent: the old key's configs still apply
        assert run_control(["keygen", "--out-dir", str(tmp_path / "keys"), "--name", "new"]) == 0
        new_private, new_public = tmp_path / "keys" / "new.key", tmp_path / "keys" / "new.pub"
        new_id = key_id(load_public_key(new_public))
        assert new_id != old_id
        trusted = tmp_path / "trusted"
        trusted.mkdir()
        shutil.copy(old_public, trusted / "old.pem")
        shutil.copy(new_public, trusted / "new.pem")
        both = [["--public-key", str(old_public), "--public-key", str(new_public)], ["--public-key-dir", str(trusted)]]
        every_edge_applies(first, both[0])  # the config in force, re-read: unchanged
        before = round_with(old_private, 2)
        every_edge_applies(before, both[1])

        # 2. the controller switches to the new key: its next round re-signs the config in force even
        #    though nothing changed (else the agents would depend on the old key until the next change)
        switched = round_with(new_private, 2)
        assert switched.key_id == new_id and switched.version == before.version + 1
        assert [e.prefix for e in switched.entries] == [e.prefix for e in before.entries]
        assert round_with(new_private, 2).version == switched.version  # then: unchanged, nothing published
        for keys in both:
            every_edge_applies(switched, keys)

        # 3. the old key is removed from every agent
        (trusted / "old.pem").unlink()
        every_edge_applies(switched, ["--public-key-dir", str(trusted)])  # in force: still verifies
        last = round_with(new_private, 3)
        every_edge_applies(last, ["--public-key", str(new_public)])
        assert set(results) <= {"APPLIED", "UNCHANGED"}  # no refused config during the rotation

        # 4. a config signed by the removed key is refused naming its key id; nothing changes
        stale_controller = round_with(old_private, 4)
        assert stale_controller.key_id == old_id and stale_controller.version > last.version
        for edge in edges:
            status = edge.apply(config_file, ["--public-key-dir", str(trusted)])
            assert status["result"] == "REFUSED" and int(status["applied_version"]) == last.version, status
            assert any(old_id in e and "not trusted" in e for e in status["errors"]), status["errors"]
            assert edge.owned() == sorted(e.prefix for e in last.entries)
    finally:
        store.close()
