"""What a streaming provider hands ``on_text``: the text as the journal keeps it, never the
key a server echoes, however the stream splits it (zagent_core.agent.models.http.TextRelay)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from zagent_core.agent.models.http import TextRelay

KEY = "sk-abab"


def clean(text: str) -> str:
    return text.replace(KEY, "[redacted]")


@given(st.text(alphabet="sk-ab \n", max_size=40), st.lists(st.integers(0, 40), max_size=8))
def test_a_key_the_server_echoes_is_never_handed_on_however_the_stream_splits_it(text: str, cuts: list[int]) -> None:
    given_text: list[str] = []
    relay = TextRelay(given_text.append, clean, KEY)
    bounds = sorted({0, len(text), *(cut for cut in cuts if cut < len(text))})
    for start, end in zip(bounds, bounds[1:]):
        relay.piece(text[start:end])
        assert KEY not in "".join(given_text)
    relay.finish(clean(text))
    assert "".join(given_text) == clean(text) and "" not in given_text


def test_a_reply_asked_again_starts_over_with_an_empty_piece_and_a_whole_answer_comes_at_the_end() -> None:
    given_text: list[str] = []
    relay = TextRelay(given_text.append, clean, KEY)
    relay.restart()  # nothing was handed on yet: nothing to void
    relay.piece("Hel")
    relay.restart()
    relay.finish("Hello")  # the attempt asked again was answered whole (no stream)
    assert given_text == ["Hel", "", "Hello"]
