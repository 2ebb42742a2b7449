"""results/expect.py: the assertions' grammar and values, against a summary with known counts."""

from __future__ import annotations

import pytest

from espforensics.analysis import summarize
from espforensics.results.expect import ExpectError, evaluate, parse_expect
from espforensics.results.summary import Summary
from espforensics.synth import write_scenario
from tests.support.helpers import scenario


@pytest.fixture(scope="module")
def k6(tmp_path_factory: pytest.TempPathFactory) -> Summary:
    """kernel-gso-v6: 12 misplaced headers to fd00:a::2, 25 ESP packets verified."""
    paths = write_scenario(scenario("kernel-gso-v6"), tmp_path_factory.mktemp("k6"))
    return summarize(paths["capture"], [paths["keys"]])


@pytest.mark.parametrize(
    ("text", "holds"),
    [
        ("esp_misplaced=12", [True]),
        ("esp_misplaced==12, esp_misplaced!=12", [True, False]),
        ("verified>=25,verified>25,verified<26,verified<=24", [True, False, True, False]),
        ("esp_packets=25,proven=25,frames=25", [True, True, True]),
        ("verdicts.esp_misplaced=12,verdicts.ok=13,verdicts.auth_fail=0", [True, True, True]),
        ("XfrmInStateProtoError=12,XfrmInStateProtoError@FD00:A::2=12", [True, True]),
        ("XfrmInStateProtoError@fd00:a::1=0,XfrmInNoStates=0", [True, True]),
        ("receiver.icv_fail=12,receiver.accept=13,receiver.replay=0", [True, True, True]),
    ],
)
def test_values(k6: Summary, text: str, holds: list[bool]) -> None:
    assert [c.holds for c in evaluate(parse_expect(text), k6)] == holds


def test_the_value_is_given(k6: Summary) -> None:
    (checked,) = evaluate(parse_expect("cleartext_leak < 1"), k6)
    assert (checked.assertion.text, checked.value, checked.holds) == (
        "cleartext_leak < 1",
        12,
        False,
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "--expect: '' is not NAME OP NUMBER (OP: = != < <= > >=)"),
        ("verified=>3", "--expect: 'verified=>3' is not NAME OP NUMBER (OP: = != < <= > >=)"),
        ("verdicts.bogus=1", "--expect: 'verdicts.bogus=1': unknown name 'verdicts.bogus'; "
         "known: a finding kind, esp_packets, verified, proven, frames, verdicts.NAME, an "
         "XfrmIn* counter (optionally @HOST) or receiver.NAME"),
        ("XfrmInNoStates@fd00::zz=0", "--expect: 'XfrmInNoStates@fd00::zz=0' is not NAME OP "
         "NUMBER (OP: = != < <= > >=)"),
        ("XfrmInNoStates@1.2.3=0", "--expect: 'XfrmInNoStates@1.2.3=0': '1.2.3' is not an IP "
         "address"),
    ],
)  # fmt: skip
def test_refused(text: str, message: str) -> None:
    with pytest.raises(ExpectError) as info:
        parse_expect(text)
    assert str(info.value) == message
