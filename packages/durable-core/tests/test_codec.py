"""JsonCodec: deterministic, a faithful round trip, and a clear refusal otherwise.

Determinism is what lets a store decide a race by comparing encodings; the round trip is
what makes a resumed pass see what the first one saw.
"""

from __future__ import annotations

import itertools
import math

import pytest
from durable.codec import CheckpointCodec, JsonCodec, UnencodableValue, encode_value

ROUND_TRIPS: dict[str, object] = {
    "none": None,
    "true": True,
    "false": False,
    "zero": 0,
    "big-int": 2**70,
    "negative": -17,
    "float": 1.25,
    "tiny-float": 5e-324,
    "empty-string": "",
    "unicode": "zürich ☃ 東京",
    "escapes": 'quote " backslash \\ newline \n',
    "list": [1, "two", None, [3.5]],
    "nested": {"order": {"items": [{"sku": "piano", "qty": 1}], "paid": False}, "n": 3},
    "empty": {"list": [], "dict": {}},
}


def test_json_codec_is_a_checkpoint_codec_of_text() -> None:
    codec: CheckpointCodec[str] = JsonCodec()
    assert isinstance(codec.encode({"a": 1}), str)
    assert repr(codec) == "JsonCodec()"


@pytest.mark.parametrize("value", ROUND_TRIPS.values(), ids=ROUND_TRIPS.keys())
def test_decode_inverts_encode(value: object) -> None:
    codec = JsonCodec()
    decoded = codec.decode(codec.encode(value))
    assert decoded == value
    assert type(decoded) is type(value)


def test_a_tuple_comes_back_a_list() -> None:
    codec = JsonCodec()
    assert codec.decode(codec.encode((1, (2, 3)))) == [1, [2, 3]]


def test_dict_key_order_does_not_change_the_encoding() -> None:
    codec = JsonCodec()
    pairs = [("sku", "piano"), ("qty", 1), ("gift", True), ("note", None)]
    encodings = {
        codec.encode({"order": dict(order), "meta": {"b": 1, "a": 2}})
        for order in itertools.permutations(pairs)
    }
    encodings.add(codec.encode({"meta": {"a": 2, "b": 1}, "order": dict(reversed(pairs))}))
    assert len(encodings) == 1


def test_equal_values_encode_alike_every_time() -> None:
    codec = JsonCodec()
    value = {"b": [1, 2, {"y": 1, "x": 2}], "a": "é"}
    first = codec.encode(value)
    assert all(codec.encode(value) == first for _ in range(5))
    assert codec.encode(JsonCodec().decode(first)) == first
    assert first == '{"a":"é","b":[1,2,{"x":2,"y":1}]}', "compact, sorted and unescaped"


def test_unequal_values_encode_differently() -> None:
    codec = JsonCodec()
    assert codec.encode({"a": 1}) != codec.encode({"a": 2})
    assert codec.encode([1, 2]) != codec.encode([2, 1])


REFUSED: dict[str, object] = {
    "nan": math.nan,
    "infinity": math.inf,
    "minus-infinity": -math.inf,
    "nan-in-a-dict": {"total": {"amount": math.nan}},
    "nan-in-a-tuple": (1.0, math.nan),
    "object": object(),
    "set": {1, 2},
    "bytes": b"raw",
    "int-key": {1: "one"},
    "mixed-keys": {1: "one", "two": 2},
    "tuple-key": {(1, 2): "pair"},
}


@pytest.mark.parametrize("value", REFUSED.values(), ids=REFUSED.keys())
def test_what_json_cannot_carry_faithfully_is_refused_with_a_type_error(value: object) -> None:
    with pytest.raises(TypeError):
        JsonCodec().encode(value)


def test_non_finite_floats_are_refused_by_name() -> None:
    with pytest.raises(TypeError, match="NaN and infinite floats"):
        JsonCodec().encode({"amount": [math.inf]})


def test_a_non_string_key_is_refused_rather_than_turned_into_a_string() -> None:
    """``json`` would write ``{1: "a"}`` as ``{"1": "a"}``: a different value on the way
    back, and one that collides with ``{"1": "a"}`` in a race decided by encodings."""
    with pytest.raises(TypeError, match=r"keys must be strings.*1"):
        JsonCodec().encode({"fine": {1: "a"}})


def test_a_value_that_contains_itself_is_refused_as_circular() -> None:
    looped: list[object] = []
    looped.append(looped)
    with pytest.raises(TypeError, match="circular"):
        JsonCodec().encode({"items": looped})


def test_the_same_value_twice_is_not_circular() -> None:
    shared = {"sku": "piano"}
    codec = JsonCodec()
    assert codec.decode(codec.encode([shared, shared, {"again": shared}])) == [
        shared,
        shared,
        {"again": shared},
    ]


def test_encode_value_names_the_workflow_and_key_and_keeps_the_cause() -> None:
    with pytest.raises(UnencodableValue) as refused:
        encode_value(JsonCodec(), {"amount": math.nan}, workflow="order-7", key="charged")
    error = refused.value
    assert isinstance(error, TypeError)
    assert (error.workflow, error.key) == ("order-7", "charged")
    assert str(error).startswith("workflow 'order-7', key 'charged': ")
    assert "NaN" in str(error)
    assert isinstance(error.__cause__, TypeError)


def test_encode_value_shortens_a_huge_value_in_its_message() -> None:
    huge = ["x" * 100] * 100 + [object()]
    with pytest.raises(UnencodableValue) as refused:
        encode_value(JsonCodec(), huge, workflow="wf", key="k")
    assert len(str(refused.value)) < 800
    assert refused.value.value is huge


def test_encode_value_turns_any_codecs_refusal_into_one_error() -> None:
    class Picky:
        def encode(self, value: object) -> bytes:
            raise ValueError("only bytes-like values")

        def decode(self, encoded: bytes) -> object:
            return encoded

    with pytest.raises(UnencodableValue, match=r"'wf', key 'k'.*only bytes-like values"):
        encode_value(Picky(), "text", workflow="wf", key="k")


def test_encode_value_passes_an_accepted_value_through() -> None:
    assert encode_value(JsonCodec(), {"b": 1, "a": 2}, workflow="wf", key="k") == '{"a":2,"b":1}'


class _Level(int):
    """An int subclass (as an IntEnum is): not one of the exact types encoded in one call."""

    def __repr__(self) -> str:
        return f"Level({int(self)})"


EXACT_SCALARS: list[object] = [
    None,
    True,
    False,
    0,
    -17,
    2**70,
    "",
    "plain",
    'quote " backslash \\ newline \n nul \x00 del \x7f',
    "zürich ☃ 東京 \u2028 \ud800",
]


@pytest.mark.parametrize("value", EXACT_SCALARS, ids=repr)
def test_a_scalar_encodes_exactly_as_the_full_encoder_writes_it(value: object) -> None:
    """None, bool, int and str skip the walk and the encoder's dispatch; what they encode
    to must not move, or a record written before this release would lose a race it tied."""
    from durable.codec import _ENCODER

    codec = JsonCodec()
    assert codec.encode(value) == _ENCODER.encode(value)
    assert codec.decode(codec.encode(value)) == value


def test_a_subclass_of_a_scalar_takes_the_full_path() -> None:
    # json writes an int subclass through int's repr, never the subclass's own.
    assert JsonCodec().encode(_Level(3)) == "3"
    assert JsonCodec().encode({"level": _Level(3)}) == '{"level":3}'


def test_an_int_too_long_to_write_is_refused_as_a_type_error() -> None:
    with pytest.raises(TypeError, match="digits"):
        JsonCodec().encode(10**5000)


@pytest.mark.parametrize(
    "text", [" 1", "1 ", " [1, 2] ", "\n{}\t", "[1", "x", "", "1 2", "{} []", '"\\u"']
)
def test_decode_reads_or_refuses_as_the_full_decoder_does(text: str) -> None:
    """The fast read (the scanner alone) falls back to the full decoder for anything it
    does not consume exactly, blanks and malformed text alike."""
    import json

    full = json.JSONDecoder()
    try:
        expected: object = ("value", full.decode(text))
    except json.JSONDecodeError as error:
        expected = ("error", str(error))
    try:
        got: object = ("value", JsonCodec().decode(text))
    except json.JSONDecodeError as error:
        got = ("error", str(error))
    assert got == expected
