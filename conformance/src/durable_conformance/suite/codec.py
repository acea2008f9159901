"""The codec: every value crosses it both ways, in every store, the in-memory one included.

A store that kept values as they came would hand a step's result back by identity on the
pass that wrote it and through a round trip on the pass that replays it, so every property
that depends on the round trip would pass once and fail one crash later. And what the
codec cannot encode must be refused before anything is written, naming the workflow and
key, rather than failing somewhere deep in a driver.

An encoding may be bytes as well as text (``CheckpointCodec[Encoded]`` allows either). A
store that holds only text must say so by refusing a bytes encoding, not by turning it into
text: ``str(b)`` or a UTF-8 decode that replaces what is not UTF-8 gives back something the
codec cannot decode, and makes two different encodings compare equal, so ``record`` would
call a losing write the winner.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from durable.interfaces import Durable, Pass

from durable_conformance import requirement
from durable_conformance.subject import StoreUnderTest
from durable_conformance.suite._support import claimed, delivered_during, raised


class TaggingCodec:
    """A codec unlike JsonCodec in ways a store cannot fake: tuples survive the round trip,
    every encoding carries a prefix, it counts its calls, and it refuses strings that start
    with "forbidden"."""

    PREFIX = "tagged:"

    def __init__(self) -> None:
        self.encodes = 0
        self.decodes = 0

    def encode(self, value: object) -> str:
        self.encodes += 1
        return self.PREFIX + json.dumps(self._tag(value), sort_keys=True, separators=(",", ":"))

    def decode(self, encoded: str) -> object:
        self.decodes += 1
        if not isinstance(encoded, str) or not encoded.startswith(self.PREFIX):
            raise AssertionError(f"the store handed the codec {encoded!r}, not its own encoding")
        return self._untag(json.loads(encoded[len(self.PREFIX) :]))

    def _tag(self, value: object) -> object:
        if isinstance(value, str) and value.startswith("forbidden"):
            raise TypeError(f"the suite's codec refuses {value!r}")
        if isinstance(value, tuple):
            return {"tuple": [self._tag(v) for v in value]}
        if isinstance(value, list):
            return {"list": [self._tag(v) for v in value]}
        if isinstance(value, dict):
            return {"dict": {str(k): self._tag(v) for k, v in value.items()}}
        if value is None or isinstance(value, bool | int | float | str):
            return {"scalar": value}
        raise TypeError(f"the suite's codec cannot encode {type(value).__name__}")

    def _untag(self, tagged: object) -> object:
        assert isinstance(tagged, dict)
        assert len(tagged) == 1
        ((kind, inner),) = tagged.items()
        if kind == "tuple":
            return tuple(self._untag(v) for v in inner)
        if kind == "list":
            return [self._untag(v) for v in inner]
        if kind == "dict":
            return {k: self._untag(v) for k, v in inner.items()}
        return inner

    def __repr__(self) -> str:
        return "TaggingCodec()"


class BytesCodec:
    """A codec encoding to bytes that no text column holds: every encoding opens with a NUL
    and bytes that are not UTF-8, and its JSON is UTF-16 (a NUL after every ASCII letter;
    ``"ÿ"`` and ``"þ"`` differ only in one byte that is not UTF-8). ``decode`` takes back
    exactly such bytes and nothing else."""

    MARK = b"\x00\xff\xfebytes:"

    def __init__(self) -> None:
        self.encodes = 0
        self.decodes = 0

    def encode(self, value: object) -> bytes:
        self.encodes += 1
        text = json.dumps(value, ensure_ascii=False, sort_keys=True, allow_nan=False)
        return self.MARK + text.encode("utf-16-le")

    def decode(self, encoded: bytes) -> object:
        self.decodes += 1
        if not isinstance(encoded, bytes) or not encoded.startswith(self.MARK):
            raise AssertionError(
                f"the store handed the codec {encoded!r}, not the bytes it encoded: a bytes "
                "encoding must be held exactly, or refused"
            )
        return json.loads(encoded[len(self.MARK) :].decode("utf-16-le"))

    def __repr__(self) -> str:
        return "BytesCodec()"


def _unencodable() -> list[object]:
    return [object(), float("nan"), {1, 2}]


@requirement("codec.round-trip-on-the-writing-pass")
async def test_codec_a_value_comes_back_through_the_codec_on_the_pass_that_wrote_it(
    store: StoreUnderTest,
) -> None:
    """What record, supply and load hand back went through the codec: a tuple is a list
    under JsonCodec on the very pass that wrote it, and changing the object written
    afterwards changes nothing stored."""
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)
    written_value: dict[str, object] = {"items": ["piano"], "pair": (1, 2)}
    written = await cp.record(holder, "order", written_value)
    assert written.value == {"items": ["piano"], "pair": [1, 2]}, (
        f"record handed back {written.value!r}: it did not cross the codec"
    )
    assert written.value is not written_value
    written_value["items"].append("drum")  # type: ignore[attr-defined]
    assert await cp.supply(wf, "pair", (3, 4)) == [3, 4]
    key = await cp.append(wf, ("a", "b"))
    loaded = await cp.load(wf)
    assert loaded == {
        "order": {"items": ["piano"], "pair": [1, 2]},
        "pair": [3, 4],
        key: ["a", "b"],
    }
    assert [type(v) for v in loaded.values()] == [dict, list, list]


@requirement("codec.custom-codec-end-to-end")
async def test_codec_a_custom_codec_is_honoured_by_every_read_and_write(
    store: StoreUnderTest,
) -> None:
    """A store opened with a codec of the application's uses it for record, supply,
    append, arrive, send, load and history: a tuple survives, which no other codec does."""
    codec = TaggingCodec()
    async with store.with_options(codec=codec) as opened:
        cp = opened.checkpointer
        wf = store.workflow()
        holder = await claimed(cp, wf)
        written = await cp.record(holder, "pair", (1, 2))
        assert (written.value, written.first) == ((1, 2), True), (
            f"record with a custom codec returned {written}"
        )
        assert await cp.supply(wf, "supplied", ("x", [1, (2, 3)])) == ("x", [1, (2, 3)])
        inbox = await cp.append(wf, (7,))
        assert await opened.arrive(wf, "arrived", (True, None)) == (True, None)
        sent = await opened.send(wf, ("sent",))
        expected = {
            "pair": (1, 2),
            "supplied": ("x", [1, (2, 3)]),
            inbox: (7,),
            "arrived": (True, None),
            sent: ("sent",),
        }
        assert await cp.load(wf) == expected
        assert [(e.key, e.value) for e in await cp.history(wf)] == list(expected.items())
    assert codec.encodes >= 5, f"the codec encoded {codec.encodes} values of the 5 written"
    assert codec.decodes >= 5, f"the codec decoded {codec.decodes} values"


@requirement("codec.refused-values-write-nothing")
async def test_codec_a_value_the_codec_refuses_writes_nothing(store: StoreUnderTest) -> None:
    """record, supply, append, arrive and send of a value the codec cannot encode raise an
    error naming the workflow and key, and leave nothing written or scheduled."""
    d = store.durable
    cp = store.checkpointer
    wf = store.workflow()
    holder = await claimed(cp, wf)

    def writes(value: object) -> dict[str, Callable[[], Awaitable[object]]]:
        return {
            "record": lambda: cp.record(holder, "step", value),
            "supply": lambda: cp.supply(wf, "step", value),
            "append": lambda: cp.append(wf, value),
            "arrive": lambda: d.arrive(wf, "step", value),
            "send": lambda: d.send(wf, value),
        }

    for value in _unencodable():
        for name, write in writes(value).items():
            refused = await raised(write, f"{name} of the unencodable {value!r}")
            assert wf in str(refused), f"{name} of {value!r} refused without naming {wf!r}"
            if name in ("record", "supply", "arrive"):
                assert "step" in str(refused), f"{name} refused without naming the key"
    assert await cp.load(wf) == {}, "a refused value left a record behind"
    assert await delivered_during(store.scheduler, 0.3) == [], "a refused arrive or send queued"


@requirement("codec.custom-refusal-writes-nothing")
async def test_codec_a_custom_codecs_refusal_writes_nothing(store: StoreUnderTest) -> None:
    """A refusal by the application's own codec is honoured like JsonCodec's: an error,
    and nothing written."""
    async with store.with_options(codec=TaggingCodec()) as opened:
        cp = opened.checkpointer
        wf = store.workflow()
        holder = await claimed(cp, wf)
        writes: list[Callable[[], Awaitable[object]]] = [
            lambda: cp.record(holder, "step", "forbidden value"),
            lambda: cp.supply(wf, "step", ("forbidden value",)),
            lambda: cp.append(wf, "forbidden value"),
        ]
        for write in writes:
            await raised(write, "a value the custom codec refuses")
        assert await cp.load(wf) == {}


@requirement("codec.bytes-held-or-refused")
async def test_codec_a_bytes_encoding_is_held_exactly_or_refused(store: StoreUnderTest) -> None:
    """A codec that encodes to bytes (NUL and bytes that are not UTF-8 among them) has every
    write either held exactly, compared byte for byte and handed back to the codec as the
    very bytes it gave, or refused with an error naming the workflow and key and nothing
    written; never turned into text."""
    codec = BytesCodec()
    async with store.with_options(codec=codec) as opened:
        cp = opened.checkpointer
        wf = store.workflow()
        holder = await claimed(cp, wf)
        try:
            written = await cp.record(holder, "step", "\u00ff")
        except (TypeError, ValueError) as refused:
            await _refuses_bytes_everywhere(opened, wf, holder, refused)
            return
        assert (written.value, written.first) == ("\u00ff", True), (
            f"record of a bytes encoding returned {written}"
        )
        # The two encodings differ in one byte that is not UTF-8, and nowhere else.
        losing = await cp.record(holder, "step", "\u00fe")
        assert (losing.value, losing.first) == ("\u00ff", False), (
            f"a second record of another bytes encoding returned {losing}: two encodings "
            "that differ only where they are not UTF-8 compared equal"
        )
        assert (await cp.record(holder, "step", "\u00ff")).first is True
        assert await cp.supply(wf, "supplied", ["\x00", "\u00fe"]) == ["\x00", "\u00fe"]
        inbox = await cp.append(wf, {"\u00ff": 1})
        assert await opened.arrive(wf, "arrived", "\u00fe\u00ff") == "\u00fe\u00ff"
        sent = await opened.send(wf, ["\u00ff\x00"])
        expected = {
            "step": "\u00ff",
            "supplied": ["\x00", "\u00fe"],
            inbox: {"\u00ff": 1},
            "arrived": "\u00fe\u00ff",
            sent: ["\u00ff\x00"],
        }
        assert await cp.load(wf) == expected
        assert [(e.key, e.value) for e in await cp.history(wf)] == list(expected.items())
    assert codec.decodes >= 5, f"the codec decoded {codec.decodes} values"


async def _refuses_bytes_everywhere(
    opened: Durable[Any], wf: str, holder: Pass, first: BaseException
) -> None:
    """A store that holds only text: every write of a bytes encoding is refused as record's
    was, naming the workflow and key, and nothing is written or scheduled."""
    assert all(name in str(first) for name in (wf, "step")), (
        f"record of a bytes encoding was refused without naming {wf!r} and 'step': {first}"
    )
    cp = opened.checkpointer
    writes: dict[str, Callable[[], Awaitable[object]]] = {
        "supply": lambda: cp.supply(wf, "step", "x"),
        "append": lambda: cp.append(wf, "x"),
        "arrive": lambda: opened.arrive(wf, "step", "x"),
        "send": lambda: opened.send(wf, "x"),
    }
    for name, write in writes.items():
        refused = await raised(write, f"{name} of a bytes encoding, which record refused")
        assert wf in str(refused), f"{name} of a bytes encoding refused without naming {wf!r}"
    assert await cp.load(wf) == {}, "a refused bytes encoding left a record behind"
    assert await delivered_during(opened.scheduler, 0.2) == [], "a refused arrive or send queued"
