"""attr_cong: xtcp2's INET_DIAG_CONG captures decode to the names xtcp2 asserts; any payload,
short, long or garbled, gives a name table entry or a counted `bad_cc_name`, never a crash."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from collector.netlink import attr_cong
from collector.netlink.attr_cong import INET_DIAG_CONG, TCA_CC_MAX
from collector.netlink.sockdiag_parse import ErrorCounts
from tests.support.netlink_attrs import attribute_files, expected, key, layout, read_attr, require_xtcp2

NAME_CHARS = st.sampled_from("abcdefghijklmnopqrstuvwxyz0123456789_-")


def decode(payloads: list[bytes | None]) -> tuple[list[str], ErrorCounts]:
    errors = ErrorCounts()
    index, names = attr_cong.decode(*layout(payloads), errors)
    assert names[0] == ""
    assert len(set(names)) == len(names)
    return [names[i] for i in index.tolist()], errors


def test_xtcp2_cong_attributes() -> None:
    require_xtcp2()
    files = attribute_files("attribute_cong")
    assert len(files) >= 5
    checked = 0
    for path in files:
        rta_type, payload = read_attr(path)
        assert rta_type == INET_DIAG_CONG
        [name], errors = decode([payload])
        assert not errors
        assert payload == name.encode() + b"\0"  # nla_put_string: the name and its NUL
        if path.name.startswith("attribute_cong_"):
            assert name == path.name.removeprefix("attribute_cong_")
        want = expected().get(key(path), {}).get("cong")
        if want is not None:
            checked += 1
            assert name == want, key(path)
    assert checked >= 4


def test_one_table_entry_per_name() -> None:
    index, names = attr_cong.decode(*layout([b"bbr\0", b"cubic\0", None, b"bbr\0", b"cubic\0"]), ErrorCounts())
    assert names == ["", "bbr", "cubic"]
    assert index.tolist() == [1, 2, 0, 1, 2]


@given(st.lists(st.text(NAME_CHARS, min_size=1, max_size=TCA_CC_MAX - 1), min_size=1, max_size=6))
def test_kernel_names(names: list[str]) -> None:
    got, errors = decode([n.encode() + b"\0" for n in names])
    assert got == names and not errors


@given(st.text(NAME_CHARS, min_size=TCA_CC_MAX, max_size=40))
def test_long_name_is_cut_at_tca_cc_max(name: str) -> None:
    got, errors = decode([name.encode() + b"\0"])
    assert got == [name[:TCA_CC_MAX]] and not errors


@given(st.text(NAME_CHARS, min_size=1, max_size=TCA_CC_MAX))
def test_name_without_nul_ends_with_the_payload(name: str) -> None:
    got, errors = decode([name.encode()])  # the 0xab filler and next bytes are never read as name
    assert got == [name] and not errors


@given(st.lists(st.one_of(st.none(), st.binary(max_size=24)), min_size=1, max_size=8))
def test_garbled_payloads(payloads: list[bytes | None]) -> None:
    got, errors = decode(payloads)
    bad = 0
    for p, name in zip(payloads, got, strict=True):
        if p is None:
            assert name == ""
            continue
        text = p[:TCA_CC_MAX].split(b"\0", 1)[0]
        ok = text.isascii() and text.decode("ascii").isprintable() and b" " not in text and len(text) > 0
        assert name == (text.decode("ascii") if ok else "")
        bad += not ok
    assert errors["bad_cc_name"] == bad and sum(errors.values()) == bad
